"""Trials until separated (``--trials auto``): spend trials only where they decide something.

A retrieval cell's trial ``t`` is the same prompt for every method (drawn from seed, length,
depth and ``t`` alone), so two methods' trials pair up and a paired test decides between them
with far fewer trials than two unpaired intervals. ``--trials auto`` runs every cell with one
batch of trials, then, at each (variant, factor, length), compares every method with the
reference — ``--baseline`` or the best method there — by :func:`ctxbench.report.paired.paired_retrieval`
(exact McNemar for 0/1 scores, a sign-flip test for RULER's fractional ones), Holm-adjusting the
p-values of one length's comparisons together. A pair is decided when it is *separated* (adjusted
p < 0.05) or *equivalent* (its 95% paired bootstrap interval of the score difference lies within
±10 points); both cells of an undecided pair get another batch, up to ``--max-trials``, until no
pair is open or the ``--budget`` (minutes) has run out. The trials a cell already holds are kept
and reused (:func:`ctxbench.tasks.common.trial_cells`): a batch costs only its new trials.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ctxbench.report.paired import holm, paired_retrieval

if TYPE_CHECKING:
    # (run is ctxbench.runner.grid.run_task, job a grid.Job and results a grid.Results: grid imports this module)
    from ctxbench.backends.base import Engine
    from ctxbench.results.identity import Record
    from ctxbench.tasks.base import Cell

ALPHA = 0.05  # separated: Holm-adjusted p below this
MARGIN = 0.10  # equivalent: the paired 95% interval of the difference within +-10 points
# (variant, factor, length, method label) of a cell in a pair not yet decided
Slot = tuple[str, "float | None", int, str]


@dataclass(frozen=True)
class Verdict:
    """One comparison at one (variant, factor, length): ``new`` against ``ref``."""

    variant: str
    factor: float | None
    length: int
    ref: str
    new: str
    delta: float
    delta_lo: float
    delta_hi: float
    p_holm: float
    n: int

    @property
    def separated(self) -> bool:
        return self.p_holm < ALPHA

    @property
    def equivalent(self) -> bool:
        return -MARGIN <= self.delta_lo and self.delta_hi <= MARGIN

    @property
    def decided(self) -> bool:
        return self.separated or self.equivalent


def _factor(text: str | float) -> float | None:
    return None if str(text).strip() == "" else float(text)


def verdicts(records: Iterable[Record], baseline: str | None = None, *, reps: int = 2000, seed: int = 0) -> list[Verdict]:
    """Every method against the reference at each (variant, factor, length) of ``records`` (one
    run's rows of one task). Factor-free methods (``none``, ``rerope``) join every factor."""

    by_slot: dict[tuple[str, float | None, int], dict[str, list[Record]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("status", "ok") != "ok":
            continue
        by_slot[(r.get("variant", ""), _factor(r.get("factor", "")), int(float(r["length"])))][r["label"]].append(r)
    factors = {f for (_, f, _) in by_slot if f is not None}
    tables: dict[tuple[str, float | None, int], dict[str, list[Record]]] = defaultdict(dict)
    for (variant, factor, length), labels in by_slot.items():
        joins: list[float | None] = [factor] if factor is not None else [*sorted(factors)] or [None]
        for f in joins:
            tables[(variant, f, length)].update(labels)
    out = []
    for (variant, factor, length), table in sorted(tables.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0, kv[0][2])):
        if len(table) < 2:
            continue
        ref = baseline if baseline in table else max(sorted(table), key=lambda label: _accuracy(table[label]))
        pairs = [(label, paired_retrieval(table[ref], table[label], reps=reps, seed=seed)) for label in sorted(table) if label != ref]
        adjusted = holm([pr.p_value for _, pr in pairs])
        out += [Verdict(variant, factor, length, ref, label, pr.delta, pr.delta_lo, pr.delta_hi, p, pr.n)
                for (label, pr), p in zip(pairs, adjusted, strict=True)]  # fmt: skip
    return out


def _accuracy(rows: list[Record]) -> float:
    values = [float(r["value"]) for r in rows if r.get("metric") in ("score", "correct") and str(r.get("trial", "")).isdigit()]
    return sum(values) / len(values) if values else 0.0


def open_slots(found: list[Verdict]) -> set[Slot]:
    """(variant, factor, length, label) of every cell in an undecided pair."""
    slots = set()
    for v in found:
        if not v.decided:
            slots |= {(v.variant, v.factor, v.length, v.ref), (v.variant, v.factor, v.length, v.new)}
    return slots


def in_slots(cell: Cell, slots: set[Slot]) -> bool:
    """Whether a cell belongs to an open slot (a factor-free cell to any factor's)."""
    return any(
        (cell.variant, cell.length, cell.method.label) == (v, n, label) and (cell.factor is None or cell.factor == f)
        for v, f, n, label in slots
    )


def run_adaptive(run: Callable[..., Any], lm: Engine, job: Any, results: Any, **kw: Any) -> Any:
    """``run(lm, job, results, select=..., **kw)`` (the runner's ``run_task``) in batches: every
    cell first, then only the cells of open pairs, each batch TRIAL_BATCH trials more, until none
    is open, ``max_trials`` is reached or the budget is spent. Returns the last batch's Outcome
    with the counts of all of them, and notes saying how it stopped."""
    from ctxbench.tasks.common import TRIAL_BATCH  # start-up: loads numpy

    settings = job.settings
    deadline = None if settings.budget is None else time.monotonic() + 60 * settings.budget
    trials, select, ran, failed = min(TRIAL_BATCH, settings.max_trials), None, 0, 0
    while True:
        part = run(lm, replace(job, settings=replace(settings, trials=trials)), results, select=select, **kw)
        ran, failed = ran + part.ran, failed + part.failed
        found = verdicts(part.records, settings.baseline)
        slots = open_slots(found)
        stop = ("every pair decided" if not slots else f"--max-trials {settings.max_trials} reached" if trials >= settings.max_trials
                else "--budget spent" if deadline is not None and time.monotonic() >= deadline else None)  # fmt: skip
        if stop:
            break
        trials = min(trials + TRIAL_BATCH, settings.max_trials)
        select = (lambda s: lambda cell: in_slots(cell, s))(slots)
    decided = sum(v.decided for v in found)
    part.notes = [n for n in part.notes if "fewer than --trials" not in n] + [
        f"--trials auto: {stop} at {trials} trials; {decided} of {len(found)} comparisons decided "
        f"(separated at 5% after Holm, or within ±{MARGIN:.0%} points)"
    ]
    part.ran, part.failed = ran, failed
    return part
