"""Effective context length of one task's pivot: the longest measured length up to which a
method still works on that task (the per-task effective length ``report`` and ``compare`` show).

This is ctxbench's per-task rule, not RULER's effective length: RULER's is taken on the average
over its 13 tasks against the fixed score 85.6 (Llama-2-7B's at 4k), which
:mod:`ctxbench.report.rulerscore` computes for ``report``'s "RULER suite score" table.

For each pivot (task, variant, model, factor) and method label, over its measured lengths
``n_1 < n_2 < ...``:

- score tasks (higher is better): the longest ``n_k`` such that the score at every measured
  length up to ``n_k`` is at or above a threshold. By default the threshold is *relative*: 85%
  of the same method's score at the shortest measured length (after NoLiMa's 85%-of-a-short-
  context-base-score criterion, with the shortest measured length as the base; a method that
  cannot do the task at all has no effective length worth reporting, so a score of 0 at the
  shortest length gives none). ``threshold=0.8`` (``--threshold``) makes it absolute: the same
  fixed score for every method, on this one task's accuracy as a fraction.
- perplexity (lower is better): the longest ``n_k`` such that no measured length up to it is
  *worse beyond noise* than the best shorter one: ``ppl(n) > (1 + tol) * min(ppl at the shorter
  lengths)``, ``tol = 0.10``, and, where both cells carry their 95% interval, the two intervals do
  not overlap (``compare``'s rule for a worse cell). Perplexity normally falls as context grows, and
  a method past its limit turns that around sharply (plain RoPE at 2L: 6.7 -> 21.7, intervals
  5.5-8.1 and 13-37); but the first ``n`` tokens of one document are not equally hard for every
  ``n`` (on the committed 1k-32k document every method, plain RoPE included, is worse at 4k than at
  2k: docs/statistics.md quotes by how much), which the interval absorbs and a bare 10% rule would
  call a failure.

``None`` when even the shortest length fails. A method measured at one length only, in a table of
several, gets none either (``report`` shows ``—``): with one length there is no shorter base for the
relative rule, and no measured length below it to say the method worked up to there; a yarn cell of
70% at 16k alone would otherwise read as an effective length of 16k.
"""

from __future__ import annotations

import math

from ctxbench.errors import UserError
from ctxbench.report.paired import units_of

RELATIVE = 0.85
PPL_TOL = 0.10
REPS = 500  # bootstrap resamples of an effective length (a few discrete lengths: 500 settle its 2.5% and 97.5% points)


def effective_length(values: dict[int, float], higher_is_better: bool, threshold: float | None = None,
                     ppl_tol: float = PPL_TOL, intervals: dict[int, tuple] | None = None) -> int | None:  # fmt: skip
    """``values``: length -> headline value; ``intervals``: length -> (lo, hi) where known."""
    intervals = intervals or {}
    lengths = sorted(n for n, v in values.items() if v is not None and not math.isnan(v))
    if not lengths:
        return None
    best = None
    if higher_is_better:
        first = values[lengths[0]]
        bar = threshold if threshold is not None else RELATIVE * first
        if threshold is None and first <= 0:
            return None
        for n in lengths:
            if values[n] < bar:
                break
            best = n
        return best
    low, low_at = math.inf, None
    for n in lengths:
        if n != lengths[0] and values[n] > (1 + ppl_tol) * low:
            mine, theirs = intervals.get(n), (intervals.get(low_at) if low_at is not None else None)
            overlap = mine is not None and theirs is not None and None not in (*mine, *theirs) and mine[0] <= theirs[1]
            if not overlap:
                break
        best = n
        if values[n] < low:
            low, low_at = values[n], n
    return best


def check_threshold(threshold: float | None) -> None:

    if threshold is not None and not 0 < threshold <= 1:
        raise UserError(f"--threshold {threshold} is outside (0, 1]", "give an absolute score such as 0.8, or omit it for 85% of the shortest length's score")


def annotate(pivots, threshold: float | None = None, ppl_tol: float = PPL_TOL, reps: int = REPS) -> None:
    """Fill ``pivot.effective[label]`` for every pivot with at least two lengths, and
    ``pivot.effective_ci[label]`` where its cells hold the trials or documents to resample."""
    for p in pivots:
        if len(p.lengths) < 2 or not p.headline:  # a proxy's table: no effective length
            continue
        for label, cells in p.rows.items():
            if sum(not math.isnan(c.value) for c in cells.values()) < 2:  # one length: no effective length to claim
                continue
            intervals = {n: (c.lo, c.hi) for n, c in cells.items()}
            p.effective[label] = effective_length({n: c.value for n, c in cells.items()}, p.higher_is_better, threshold, ppl_tol, intervals)
            ci = effective_interval(cells, p.higher_is_better, threshold, ppl_tol, reps)
            if ci is not None:
                p.effective_ci[label] = ci



def effective_interval(cells: dict, higher_is_better: bool, threshold: float | None = None, ppl_tol: float = PPL_TOL,
                       reps: int = REPS, seed: int = 0, level: float = 0.95) -> tuple[int | None, int | None] | None:  # fmt: skip
    """The 95% percentile bootstrap interval of the effective length (Efron & Tibshirani 1993,
    ch. 13): each length's units — its trials, or its documents (a single document's
    loss-by-position blocks) — are resampled with replacement, independently per length (each
    length has trials of its own), the cell values recomputed (a mean score, or the perplexity of
    the summed NLL over the summed tokens) and the effective length taken again by the same rule,
    each cell keeping its measured 95% interval for the perplexity rule. ``None`` for a length
    counts as shorter than any. ``None`` when a cell holds no units (summary rows only)."""
    import numpy as np  # start-up: numpy only where it runs


    units = {n: units_of(c.source) for n, c in cells.items()}
    if not units or any(not u for u in units.values()):
        return None
    rng = np.random.default_rng(seed)
    draws = {}
    for n, u in units.items():
        sums, weights = np.array([x for x, _ in u]), np.array([w for _, w in u])
        idx = rng.integers(0, len(u), size=(reps, len(u)))  # (reps, units)
        totals, mass = sums[idx].sum(axis=1), weights[idx].sum(axis=1)
        draws[n] = totals / mass if higher_is_better else np.exp(totals / mass)
    intervals = {n: (c.lo, c.hi) for n, c in cells.items()}
    found = sorted(
        (effective_length({n: float(draws[n][i]) for n in cells}, higher_is_better, threshold, ppl_tol, intervals) or 0)
        for i in range(reps)
    )  # fmt: skip
    tail = (1 - level) / 2
    lo, hi = found[int(math.floor(tail * (reps - 1)))], found[int(math.ceil((1 - tail) * (reps - 1)))]
    return (lo or None, hi or None)
