"""``ctxbench compare``: the per-cell change between two results files, the CI gate (exit 1 when
anything got worse); with ``--across-backends``, the parity of one grid on two backends."""

from __future__ import annotations

import sys

import typer
from rich.table import Table

from ctxbench.cli.console import console
from ctxbench.errors import UserError


def compare(
    base: str = typer.Argument(..., help="baseline results CSV"),
    new: str = typer.Argument(..., help="new results CSV"),
    rtol: float | None = typer.Option(None, "--rtol", help="tolerance: relative for ppl, absolute for accuracy (default 0.02; with --across-backends: one tolerance for ppl and answer NLL instead of 1% and 5%)"),
    threshold: float | None = typer.Option(None, "--threshold", help="absolute score threshold for effective length (default: 85% of the shortest length's score)"),
    fmt: str = typer.Option("table", "--format", help="table | markdown"),
    strict: bool = typer.Option(False, "--strict", help="also fail on any change of a rerun (same weights and data) beyond float tolerance"),
    across_dtypes: bool = typer.Option(False, "--across-dtypes", help="also match cells that differ only in dtype (bf16 NEW against a float32 BASE), judged beyond noise, never as reruns"),
    across_backends: bool = typer.Option(False, "--across-backends", help="parity of the same grid on two backends (hf BASE, vllm NEW): same answers per trial with McNemar's test, ppl and answer NLL within a bf16 tolerance; exit 1 if a cell differs"),
) -> None:
    """Per-cell change between two results files; exit 1 if anything got worse (a rerun on the same
    weights and data: beyond --rtol; otherwise also beyond noise), failed, went NaN or is missing."""
    from ctxbench.report.compare import RTOL, check_mode, failed, pct, to_markdown  # start-up: loads filelock
    from ctxbench.report.compare import compare as run_compare  # start-up: loads filelock
    from ctxbench.report.compare import fmt as show  # start-up: loads filelock

    if fmt not in ("table", "markdown"):
        raise UserError(f"unknown --format '{fmt}'", "use table or markdown")
    check_mode(across_backends, rtol, threshold, strict, across_dtypes)  # every option applies in the mode, or is refused
    if across_backends:
        _parity(base, new, fmt, rtol, strict)
        return
    rtol = RTOL if rtol is None else rtol
    changes, notes = run_compare(base, new, rtol, threshold, across_dtypes)
    if fmt == "markdown":
        sys.stdout.write(to_markdown(changes, notes, rtol, strict))
    else:
        colour = {"worse": "red", "missing": "red", "failed": "red", "better": "green", "new": "cyan", "ok": "",
                  "changed": "red" if strict else "yellow"}  # fmt: skip
        table = Table(title=f"{base} -> {new} (rtol {rtol:g})")
        for col in ("task", "method", "factor", "length", "depth", "metric", "base", "new", "change", "status", "why"):
            table.add_column(col)
        for c in changes:
            k = c.key
            style = colour[c.status]
            status = f"[{style}]{c.status}[/]" if style else c.status
            task = k["task"] + (f" {k['variant']}" if k.get("variant") else "")
            table.add_row(task, k["label"], k["factor"] or "any", k["length"], k["depth"] or "—", k["metric"],
                          show(c.base, c.base_ci, c.key["metric"], c.base_all_pass), show(c.new, c.new_ci, c.key["metric"], c.new_all_pass), pct(c), status, c.reason)  # fmt: skip
        console.print(table)
        for note in notes:
            console.print(f"[yellow]note:[/] {note}")
    if failed(changes, strict):
        raise typer.Exit(1)


def _parity(base: str, new: str, fmt: str, rtol: float | None, strict: bool) -> None:
    """``compare --across-backends``: the parity table (ctxbench.report.parity); exit 1 if a cell
    differs or failed, or nothing was paired (saying why)."""
    from ctxbench.report import parity  # start-up: loads filelock

    pairs, notes = parity.parity(base, new, rtol=rtol, strict=strict)
    if fmt == "markdown":
        sys.stdout.write(parity.to_markdown(pairs, notes))
    else:
        table = Table(title=f"{base} -> {new}: parity across backends")
        for col in ("task", "method", "factor", "length", "depth", "metric", "base", "new", "verdict", "detail"):
            table.add_column(col)
        colour = {"same": "green", "differs": "red", "failed": "red", "unpaired": "dim"}
        for p in pairs:
            table.add_row(p.task, p.label, p.factor or "-", p.length, p.depth or "-", p.metric, parity.value_text(p.a, p.metric), parity.value_text(p.b, p.metric),
                          f"[{colour[p.verdict]}]{p.verdict}[/]", p.detail)  # fmt: skip
        console.print(table)
        for note in notes:
            console.print(f"[yellow]note: {note}[/]")
        console.print(parity.summary(pairs) + (" (--strict: unpaired cells fail)" if strict and len(parity.judged(pairs)) < len(pairs) else ""),
                      highlight=False)  # fmt: skip
    for line in parity.unpaired_lines(pairs):
        print(line, file=sys.stderr)
    if not parity.judged(pairs):
        print(f"FAIL: nothing paired: {parity.nothing_paired(base, new)}", file=sys.stderr)
    if parity.differs(pairs, strict):
        raise typer.Exit(1)
