"""Plans: the grid of every job and a rough cost, printed before any model loads.

The time is the FLOP count of the model's forwards and decoding steps (:mod:`ctxbench.runner.costmodel`:
from the model's config, its size and its attention's quadratic term, suffixes attending to what
is cached before them) at the device's measured throughput for each. Each line says where the
throughput came from; the token counts hold for any model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ctxbench.model.size import Flops, model_size
from ctxbench.parsing import expand_path
from ctxbench.runner.costmodel import factors_for_plan, item_work, plan_device, planned_dtype, rate_for_plan

if TYPE_CHECKING:
    # (jobs are ctxbench.runner.grid.Job, which imports this module: Any here)
    from collections.abc import Sequence

    from rich.console import Console

    from ctxbench.methods.setting import MethodSetting
    from ctxbench.model.size import ModelSize
    from ctxbench.runner.costmodel import Throughput
    from ctxbench.tasks.base import Cell, CostItem

DEFAULT_TRAINED = 8192  # SmolLM2-135M's trained context, for plans made before the model loads
LONG_RUN = 15 * 60  # seconds: above this a plan says how to make the run smaller


@dataclass(frozen=True)
class JobPlan:
    task: str
    cells: int
    forwards: int
    tokens: int
    seconds: float
    rows: tuple[tuple[str, int, int, float], ...]  # (what, cells, tokens, seconds) per method entry
    trials: int | None = None  # trials per accuracy cell (None: the task does not count trials)
    auto: bool = False  # --trials auto: ``trials`` is the most a cell can run, and the plan counts them all
    items: dict[str, int] | None = None  # --trials all: {variant: items}, every one a trial of each of its cells
    work: Flops = Flops()  # FLOPs of every forward and decoding step of the job, by part
    done: int = 0  # cells the results file already holds: a run skips them, and the plan does not count them
    options: tuple[str, ...] = ()  # the task's option names: advice names only knobs the command has

    @property
    def flops(self) -> float:
        return self.work.total

    @property
    def decode_flops(self) -> float:
        """The decoding steps' share of :attr:`flops`."""
        return self.work.decode


@dataclass(frozen=True)
class Plan:
    model: str
    jobs: tuple[JobPlan, ...]
    basis: str = "default model, 2-core CPU"  # where the time comes from
    timed: bool = True  # False: no throughput known for the device, only tokens
    measured: bool = False  # the throughput was measured on this machine (else a default or none)
    dtype: str = ""  # the dtype the run uses (``auto`` resolved)
    dtype_note: str = ""  # why, when it was ``auto`` (ctxbench.model.autodtype)
    # (attention path, its cost factor or None when not measured yet, the method labels taking it),
    # per attention-level path in the plan (ctxbench.runner.costmodel: its attention priced at factor x plain)
    paths: tuple[tuple[str, float | None, tuple[str, ...]], ...] = ()

    @property
    def seconds(self) -> float:
        return sum(j.seconds for j in self.jobs)

    @property
    def flops(self) -> float:
        return sum(j.flops for j in self.jobs)

    def seconds_at(self, rate: Throughput) -> float:
        """The whole plan's time at throughput ``rate`` (a :class:`~ctxbench.runner.costmodel.Throughput`)."""
        return rate.seconds(sum((j.work for j in self.jobs), Flops()))


def plan_table(jobs: Sequence[Any], model: str, trained_len: int | None = None, device: str = "cpu", dtype: str = "float32",
               size: ModelSize | None = None, pending: Sequence[Todo | None] | None = None, dtype_note: str = "") -> Plan:  # fmt: skip
    """Cells, forwards, tokens and seconds per job, at the throughput known for ``model`` on
    ``device`` and ``dtype`` (``auto``: what a run will choose, :func:`planned_dtype`; a loaded
    model's choice comes resolved, with ``dtype_note`` saying why). ``size`` (a
    :class:`~ctxbench.runner.costmodel.ModelSize`) defaults to ``model``'s. ``pending`` (one list of
    cells per job, or ``None`` for the whole grid): plan only those cells, the ones the results file
    does not hold yet (:func:`pending_items`)."""

    if dtype == "auto":
        dtype, dtype_note = planned_dtype(plan_device(device), dtype, model)
    trained = trained_len or DEFAULT_TRAINED
    size = size or model_size(model)
    rate, basis, measured = rate_for_plan(device, dtype, model)
    caveat = {"config": "", "name": " (size from its name)", "assumed": " (size unknown: the default model's assumed)"}[size.source]
    basis = f"{size.name}, {basis}{caveat}"
    out = []
    job_items = []
    for i, job in enumerate(jobs):
        todo = None if pending is None else pending[i]
        job_items.append(job.task.cost(job.settings, trained) if todo is None else pending_items(job, todo, trained))
    priced = {item.path for items in job_items for item in items if item.path}
    paths: dict[str, list[str]] = {}  # attention path -> the methods taking it, in the plan's order
    for m in (m for job in jobs for m in getattr(job.settings, "methods", ()) if m.attention_path in priced):
        if m.label not in paths.setdefault(m.attention_path, []):
            paths[m.attention_path].append(m.label)
    factors = factors_for_plan(device, dtype, model, paths) if rate else {}
    for i, job in enumerate(jobs):
        todo = None if pending is None else pending[i]
        items = job_items[i]
        rows, total = [], Flops()
        for item in items:  # each distinct forward once, times its count: O(cells), never O(trials)
            work = item_work(item, size, factors)
            seconds = rate.seconds(work) if rate else float("nan")
            rows.append((item.what, item.cells, item.tokens, seconds))
            total = total + work
        trials = getattr(job.settings, "trials", None) if job.task.fraction else None  # a fraction of trials: its interval
        auto = trials == "auto"
        if auto:  # the most it can take
            trials = job.settings.max_trials
        every = job.task.items(job.settings) if trials == "all" and job.task.items is not None else None
        if every is not None:  # every item of the data: the fewest a cell holds, for its interval
            trials = min(every.values(), default=0) or None
        out.append(JobPlan(job.task.name, sum(r[1] for r in rows), sum(i.forward_count for i in items),
                           sum(r[2] for r in rows), sum(r[3] for r in rows), tuple(rows), trials=trials, auto=auto,
                           work=total, options=tuple(job.task.option_names()), items=every))  # fmt: skip
        if todo is not None:
            out[-1] = replace(out[-1], done=len(todo.grid) - len(todo.cells))
    return Plan(model, tuple(out), basis, rate is not None, measured, dtype, dtype_note,
                tuple((path, factors.get(path), tuple(labels)) for path, labels in paths.items()))


@dataclass(frozen=True)
class Todo:
    """The cells of a job's grid still to run (``cells``) out of all of them (``grid``)."""

    grid: tuple[Cell, ...]
    cells: tuple[Cell, ...]


def pending_items(job: Any, todo: Todo, trained_len: int) -> list[CostItem]:
    """The job's cost items for the cells still to run: its task's ``cost`` of the job's settings
    narrowed to each method entry and factor with its own lengths still to run. A task whose
    settings have no ``methods``/``factors``/``lengths`` to narrow is costed whole (the most it can
    cost). An item shared by the method entries (ppl's unscaled references) is counted once."""
    if len(todo.cells) == len(todo.grid):
        whole: list[CostItem] = job.task.cost(job.settings, trained_len)
        return whole
    lengths: dict[tuple[MethodSetting, float | None], set[int]] = {}  # (method entry, factor) -> its lengths still to run
    for c in todo.cells:
        lengths.setdefault((c.method, c.factor), set()).add(c.length)
    items: dict[str, CostItem] = {}
    for (method, factor), ns in lengths.items():
        try:
            settings = replace(job.settings, methods=(method,), lengths=tuple(sorted(ns)),
                               factors=(factor,) if factor is not None else job.settings.factors)  # fmt: skip
        except TypeError:  # a plug-in's settings: no narrowing
            whole = job.task.cost(job.settings, trained_len)
            return whole
        for item in job.task.cost(settings, trained_len):
            if item.what not in items or item.tokens > items[item.what].tokens:
                items[item.what] = item
    return list(items.values())


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def interval_note(trials: int) -> str:
    """How sure an accuracy cell of ``trials`` trials can be: its 95% Wilson interval at half and
    at all trials right (the widest and a typical published case)."""
    from ctxbench.stats import wilson  # start-up: loads numpy

    half_lo, half_hi = wilson(trials // 2, trials)
    all_lo, _ = wilson(trials, trials)
    return (
        f"{trials} trials per cell: 95% interval {half_lo:.0%}-{half_hi:.0%} at {trials // 2}/{trials} right, "
        f"{all_lo:.0%}-100% at {trials}/{trials} (more --trials narrow it)"
    )


# What makes a run smaller, for the knobs a task has: (option, advice, flag and value, suite key and value)
SMALLER = (
    ("docs", "fewer documents", "--docs 1", "docs = 1"),
    ("trials", "fewer trials", "--trials 2", "trials = 2"),
)


def smaller(plan: Plan) -> str:
    """How to make ``plan`` smaller, naming only options its tasks have (ppl has no --trials,
    passkey no --docs), each as the command line and a suite section say it."""
    have = {o for j in plan.jobs for o in j.options}
    tips = [("fewer or shorter lengths", "--len 2k,4k", 'lengths = ["2k", "4k"]')]
    tips += [(what, flag, key) for option, what, flag, key in SMALLER if option in have]
    return ", ".join(f"{what} ({flag}; in a suite {key})" for what, flag, key in tips)


def print_plan(console: Console, plan: Plan, out: str | os.PathLike[str] | None = None) -> None:
    """One line per job (with the interval width its trial count gives), the dtype and why when it
    was ``auto``, and advice when the whole run is long."""
    for j in plan.jobs:
        when = f"about {_minutes(j.seconds)}" if plan.timed else f"{j.flops:.2g} FLOPs, time unknown"
        done = f" ({j.done} more already in the results file: skipped, not counted)" if j.done else ""
        console.print(
            f"[bold]plan[/] {j.task}: {j.cells} cell(s){done}, {j.forwards} forward(s), {j.tokens:,} tokens through the model, "
            f"{when} (rough: {plan.basis})"
        )
        if j.auto:
            console.print(f"  [dim]--trials auto: batches of 10 until decided, at most {j.trials} trials per cell (the most it can cost, as above)[/]")
        if j.items is not None:
            each = ", ".join(f"{v} {n:,}" for v, n in j.items.items())
            console.print(f"  [dim]--trials all: every item of the data, {sum(j.items.values()):,} in all ({each}), each a trial of every cell of its variant[/]")
        if j.trials and not j.auto:
            console.print(f"  [dim]{interval_note(j.trials)}[/]")
    for path, factor, labels in plan.paths if plan.timed else ():
        how = (f"priced at {factor:.2f}x a plain forward's (measured on this machine)" if factor is not None else
               "priced as a plain forward's (its cost factor is not measured yet: a run long enough to measure the "
               "throughput measures it too)")  # fmt: skip
        console.print(f"[dim]attention of {', '.join(labels)} ({path} path) {how}[/]", highlight=False)
    if plan.dtype_note:
        console.print(f"[dim]dtype {plan.dtype} ({plan.dtype_note})[/]", highlight=False)
    if plan.timed and plan.seconds > LONG_RUN:
        console.print(f"[yellow]this run is estimated at {_minutes(plan.seconds)}: for a first look use {smaller(plan)}; "
                      "--dry-run shows the plan only[/]", highlight=False)  # fmt: skip
    if out is not None:  # where the rows go, as the filesystem names it (~ expanded)
        console.print(f"[dim]results -> {expand_path(out)} (finished cells are kept; rerun to resume)[/]", highlight=False)
