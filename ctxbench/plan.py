"""Plans: the grid of every job and a rough cost, printed before any model loads.

The time is a rough estimate for the default model (SmolLM2-135M) on a 2-core CPU: a forward of
``n`` tokens costs ``1.87e-3 n + 2.58e-7 n^2`` seconds (fitted to 12 s at 4k and ~100 s at 16k,
linear plus quadratic attention cost) and a decoding step at context ``n`` the derivative of
that. Other models and devices scale differently; the token counts hold for any model.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TRAINED = 8192  # SmolLM2-135M's trained context, for plans made before the model loads
LONG_RUN = 15 * 60  # seconds: above this a plan says how to make the run smaller


def forward_seconds(n: int) -> float:
    return 1.87e-3 * n + 2.58e-7 * n * n


def step_seconds(context: int) -> float:
    return 1.87e-3 + 2 * 2.58e-7 * context


@dataclass(frozen=True)
class JobPlan:
    task: str
    cells: int
    forwards: int
    tokens: int
    seconds: float
    rows: tuple  # (what, cells, tokens, seconds) per method entry
    trials: int | None = None  # trials per accuracy cell (None: the task does not count trials)


@dataclass(frozen=True)
class Plan:
    model: str
    jobs: tuple[JobPlan, ...]

    @property
    def seconds(self) -> float:
        return sum(j.seconds for j in self.jobs)


def plan_table(jobs, model: str, trained_len: int | None = None) -> Plan:
    trained = trained_len or DEFAULT_TRAINED
    out = []
    for job in jobs:
        items = job.task.cost(job.settings, trained)
        rows = []
        for item in items:
            longest = max(item.forwards, default=0)
            seconds = sum(forward_seconds(n) for n in item.forwards) + item.decode_steps * step_seconds(longest)
            rows.append((item.what, item.cells, item.tokens, seconds))
        trials = getattr(job.settings, "trials", None) if job.task.metric == "accuracy" else None
        out.append(JobPlan(job.task.name, sum(r[1] for r in rows), sum(len(i.forwards) for i in items),
                           sum(r[2] for r in rows), sum(r[3] for r in rows), tuple(rows), trials))  # fmt: skip
    return Plan(model, tuple(out))


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def interval_note(trials: int) -> str:
    """How sure an accuracy cell of ``trials`` trials can be: its 95% Wilson interval at half and
    at all trials right (the widest and a typical published case)."""
    from .stats import wilson

    half_lo, half_hi = wilson(trials // 2, trials)
    all_lo, _ = wilson(trials, trials)
    return (
        f"{trials} trials per cell: 95% interval {half_lo:.0%}-{half_hi:.0%} at {trials // 2}/{trials} right, "
        f"{all_lo:.0%}-100% at {trials}/{trials} (more --trials narrow it)"
    )


def print_plan(console, plan: Plan, out=None) -> None:
    """One line per job (with the interval width its trial count gives), and advice when the whole
    run is long."""
    for j in plan.jobs:
        console.print(
            f"[bold]plan[/] {j.task}: {j.cells} cell(s), {j.forwards} forward(s), {j.tokens:,} tokens through the model, "
            f"about {_minutes(j.seconds)} (rough: default model, 2-core CPU)"
        )
        if j.trials:
            console.print(f"  [dim]{interval_note(j.trials)}[/]")
    if plan.seconds > LONG_RUN:
        console.print(
            f"[yellow]this run is estimated at {_minutes(plan.seconds)} on a 2-core CPU: for a first look use fewer or shorter "
            "lengths (--len 2k,4k), fewer documents (--docs 1) or trials (--trials 2); --dry-run shows the plan only[/]"
        )
    if out is not None:
        console.print(f"[dim]results -> {out} (finished cells are kept; rerun to resume)[/]")
