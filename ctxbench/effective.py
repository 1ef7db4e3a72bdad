"""Effective context length: the longest measured length up to which a method still works.

For each pivot (task, variant, model, factor) and method label, over its measured lengths
``n_1 < n_2 < ...``:

- score tasks (higher is better): the longest ``n_k`` such that the score at every measured
  length up to ``n_k`` is at or above a threshold. By default the threshold is *relative*: 85%
  of the same method's score at the shortest measured length (NoLiMa's convention; a method that
  cannot do the task at all has no effective length worth reporting, so a score of 0 at the
  shortest length gives none). ``threshold=0.8`` makes it absolute (RULER's convention compares
  with a fixed score).
- perplexity (lower is better): the longest ``n_k`` such that no measured length up to it is
  *worse beyond noise* than the best shorter one: ``ppl(n) > (1 + tol) * min(ppl at the shorter
  lengths)``, ``tol = 0.10``, and, where both cells carry their 95% interval, the two intervals do
  not overlap (``compare``'s rule for a worse cell). Perplexity normally falls as context grows, and
  a method past its limit turns that around sharply (plain RoPE at 2L: 6.7 -> 21.7, intervals
  5.5-8.1 and 13-37); but the first ``n`` tokens of one document are not equally hard for every
  ``n`` (on the committed 1k-32k document every method, plain RoPE included, is 8-17% worse at 4k
  than at 2k), which the interval absorbs and a bare 10% rule would call a failure.

``None`` when even the shortest length fails.
"""

from __future__ import annotations

import math

RELATIVE = 0.85
PPL_TOL = 0.10


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
            mine, theirs = intervals.get(n), intervals.get(low_at)
            overlap = mine is not None and theirs is not None and None not in (*mine, *theirs) and mine[0] <= theirs[1]
            if not overlap:
                break
        best = n
        if values[n] < low:
            low, low_at = values[n], n
    return best


def check_threshold(threshold: float | None) -> None:
    from .errors import UserError

    if threshold is not None and not 0 < threshold <= 1:
        raise UserError(f"--threshold {threshold} is outside (0, 1]", "give an absolute score such as 0.8, or omit it for 85% of the shortest length's score")


def annotate(pivots, threshold: float | None = None, ppl_tol: float = PPL_TOL) -> None:
    """Fill ``pivot.effective[label]`` for every pivot with at least two lengths."""
    for p in pivots:
        if len(p.lengths) < 2:
            continue
        p.effective = {label: effective_length({n: c.value for n, c in cells.items()}, p.higher_is_better, threshold, ppl_tol,
                                               {n: (c.lo, c.hi) for n, c in cells.items()})
                       for label, cells in p.rows.items()}  # fmt: skip
