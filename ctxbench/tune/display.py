"""The rich summary of a finished search: the best trials, the held-out verdict, the winner's command."""

from __future__ import annotations

import math

from ctxbench.parsing import len_label


def _num(x: float, digits: int = 4) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def show_outcome(console, outcome, top: int = 8) -> None:
    from rich.table import Table  # start-up: rich only where it runs

    space, verdict, winner = outcome.space, outcome.verdict, outcome.winner
    table = Table(title=f"{space.method} at {len_label(space.target)}: {len(outcome.trials)} trial(s), "
                        f"best {min(top, len(outcome.trials))} by objective (mean NLL past L on the tuning instances)")  # fmt: skip
    for col in ("trial", "setting", "objective", "NLL at L/2", "instances", "status"):
        table.add_column(col, justify="right" if col in ("trial", "objective", "NLL at L/2", "instances") else "left")
    ranked = sorted((t for t in outcome.trials if t.values), key=lambda t: (t.status != "complete", t.objective))
    for t in ranked[:top]:
        table.add_row(str(t.number), t.label, _num(t.objective), _num(t.guard_value) if t.values[0].guard else "—",
                      str(len(t.values)), t.status + (f": {t.reason}" if t.reason else ""))  # fmt: skip
    console.print(table)
    vt = Table(title=f"held-out verdict on {len(verdict.held_out)} instance(s): paired, Holm-adjusted over the six")
    for col in ("new", "base", "at", "Δ NLL (nats/token)", "95% interval", "p", "Holm p", "units"):
        vt.add_column(col, justify="left" if col in ("new", "base", "at") else "right")
    for c in verdict.comparisons:
        vt.add_row(c.new, c.base, c.where, f"{c.delta:+.4f}" if math.isfinite(c.delta) else "—",
                   f"[{c.lo:+.4f}, {c.hi:+.4f}]" if math.isfinite(c.lo) else "—", f"{c.p:.3g}", f"{c.p_adjusted:.3g}", str(c.n))  # fmt: skip
    console.print(vt)
    colour = "green" if verdict.deploy else "yellow"
    console.print(f"[{colour}]verdict: {verdict.text}[/]", highlight=False)
    console.print(f"winner: {winner.label}  ->  ctxbench <task> {space.command(winner.candidate)}", highlight=False, markup=False)
    pruned = sum(1 for t in outcome.trials if t.status == "pruned")
    console.print(f"[dim]{outcome.evaluations} evaluation(s) computed, {outcome.taken} taken from the trials file; "
                  f"{pruned} trial(s) pruned; {outcome.seconds / 60:.1f} min searching and judging, {outcome.loading / 60:.1f} min loading before[/]", highlight=False)  # fmt: skip
    if outcome.niah_command:
        console.print(f"niah at {len_label(space.target)} (winner vs defaults, paired; not run by tune): {outcome.niah_command}",
                      highlight=False, markup=False)  # fmt: skip
    else:
        console.print(f"niah at {len_label(space.target)}: the winner is the defaults' setting, so its niah accuracy is theirs "
                      "(nothing to compare)", highlight=False, markup=False)  # fmt: skip
    for f in outcome.files:
        console.print(f"[dim]wrote {f}[/]", highlight=False)
    if outcome.export_text:
        console.print(outcome.export_text, highlight=False, markup=False)
