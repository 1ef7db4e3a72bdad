"""Uncertainty and loss-by-position statistics (issue 14): pure functions, numpy and stdlib only.

Intervals
    * Passkey accuracy: :func:`wilson`, the Wilson score interval (good at 0/n and n/n, where the
      normal approximation collapses to zero width).
    * Perplexity: a percentile bootstrap of the token-weighted perplexity
      ``exp(sum nll / sum tokens)``. With two or more documents the *documents* are resampled with
      replacement (:func:`bootstrap_ppl`); with one document its tokens are cut into contiguous
      blocks (default 256 tokens, at least :data:`MIN_BLOCKS` blocks) and the blocks are resampled
      (:func:`bootstrap_ppl_blocks`), so neighbouring tokens, whose losses are correlated, stay
      together. :func:`ppl_interval` picks between the two and says which it used.

Loss by position
    A sequence of ``n`` tokens has ``n - 1`` scored targets; ``token_nll[j]`` is the loss of
    predicting the token at (0-based) position ``p = j + 1`` from the ``p`` tokens before it.
    Buckets are fixed, ``size``-token ranges of that target position aligned to multiples of
    ``size``: ``[1, 512), [512, 1024), ...`` (the first holds 511 targets, the last may be short).
    Aligned buckets line up with any trained length that is a multiple of ``size`` (so no bucket
    straddles ``L``), read as plain positions, and carry their token count, so the token-weighted
    mean of the bucket means is exactly the overall mean NLL.

Comparison
    :func:`changed_beyond_noise`: a cell is worse (or better) only when the change exceeds
    ``rtol`` *and* the two intervals do not overlap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Z95 = 1.959964  # two-sided 95% normal quantile
MIN_BLOCKS = 8  # a single document is cut into at least this many blocks for the block bootstrap
_CHUNK = 1 << 22  # resampled indices held in memory at once (bounds memory for tiny blocks)


# --------------------------------------------------------------------------- accuracy


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n`` (default 95%).

    ``(0.0, 1.0)`` when ``n == 0``; the bound at 0 successes is exactly 0 and at ``n`` exactly 1.
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return lo, hi


# --------------------------------------------------------------------------- perplexity


def _percentiles(values: np.ndarray, level: float) -> tuple[float, float]:
    if not 0 < level < 1:
        raise ValueError(f"level {level} must be between 0 and 1")
    tail = (1 - level) / 2
    lo, hi = np.quantile(values, [tail, 1 - tail])
    return float(lo), float(hi)


def bootstrap_ppl(
    doc_nll_sums: Sequence[float] | np.ndarray,
    doc_counts: Sequence[int] | np.ndarray,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``exp(sum nll / sum count)``, resampling units with replacement.

    Each unit (a document, or a block of one document) contributes its summed NLL and its token
    count, so a resample is token-weighted exactly as the point estimate is. Units with no tokens
    are dropped. Deterministic for a given ``seed``.
    """
    return _percentiles(np.exp(_resampled_means(doc_nll_sums, doc_counts, n_boot, seed)), level)


def bootstrap_mean(
    unit_sums: Sequence[float],
    unit_counts: Sequence[float],
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the weighted mean ``sum(sums) / sum(counts)``, resampling
    units with replacement (the resamples of :func:`bootstrap_ppl`, without the ``exp``): a mean
    KL divergence per position over documents, or a mean answer NLL over trials (counts of 1)."""
    return _percentiles(_resampled_means(unit_sums, unit_counts, n_boot, seed), level)


def _resampled_means(sums, counts, n_boot: int, seed: int) -> np.ndarray:
    """``n_boot`` resampled weighted means ``sum(sums[idx]) / sum(counts[idx])``."""
    sums = np.asarray(sums, dtype=np.float64).ravel()
    counts = np.asarray(counts, dtype=np.float64).ravel()
    if sums.shape != counts.shape:
        raise ValueError(f"{sums.size} nll sums but {counts.size} counts")
    if (counts < 0).any():
        raise ValueError("token counts must be >= 0")
    keep = counts > 0
    sums, counts = sums[keep], counts[keep]
    if sums.size == 0:
        raise ValueError("no scored tokens")
    if n_boot < 1:
        raise ValueError(f"n_boot {n_boot} must be >= 1")
    rng = np.random.default_rng(seed)
    k = sums.size
    means = np.empty(n_boot)
    step = max(1, _CHUNK // k)
    for start in range(0, n_boot, step):
        stop = min(n_boot, start + step)
        idx = rng.integers(0, k, size=(stop - start, k))
        means[start:stop] = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    return means


def _blocks(token_nll: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(nll sum, token count) of contiguous blocks; the last block may be short."""
    n = token_nll.size
    starts = np.arange(0, n, block)
    sums = np.add.reduceat(token_nll, starts)
    counts = np.diff(np.append(starts, n))
    return sums, counts


def block_size(n_tokens: int, block: int = 256) -> int:
    """The block length actually used: ``block``, shrunk so that there are at least
    :data:`MIN_BLOCKS` blocks (``ceil(n / MIN_BLOCKS)``), and at least 1."""
    if block < 1:
        raise ValueError(f"block {block} must be >= 1")
    return max(1, min(block, math.ceil(n_tokens / MIN_BLOCKS)))


def bootstrap_ppl_blocks(
    token_nll: Sequence[float],
    block: int = 256,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Block bootstrap interval of one document's perplexity: its per-token NLLs are cut into
    contiguous, non-overlapping blocks of :func:`block_size` tokens, which are resampled with
    replacement (token-weighted, as :func:`bootstrap_ppl`)."""
    nll = np.asarray(token_nll, dtype=np.float64).ravel()
    if nll.size == 0:
        raise ValueError("no scored tokens")
    sums, counts = _blocks(nll, block_size(nll.size, block))
    return bootstrap_ppl(sums, counts, n_boot=n_boot, seed=seed, level=level)


def ppl_interval(
    per_doc: Sequence[Sequence[float]],
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    block: int = 256,
) -> tuple[float, float, str]:
    """``(lo, hi, method)`` for the token-weighted perplexity of these documents' per-token NLLs.

    ``method`` is ``"docs"`` (two or more documents with scored tokens: documents resampled) or
    ``"blocks"`` (one document: blocks of its tokens resampled).
    """
    return _interval(per_doc, bootstrap_ppl, n_boot, seed, level, block)


def mean_interval(
    per_doc: Sequence[Sequence[float]],
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    block: int = 256,
) -> tuple[float, float, str]:
    """``(lo, hi, method)`` for the mean of per-position values pooled over documents (KL divergence
    per position), resampled as :func:`ppl_interval` resamples: documents, or one document's blocks."""
    return _interval(per_doc, bootstrap_mean, n_boot, seed, level, block)


def _interval(per_doc, boot, n_boot: int, seed: int, level: float, block: int) -> tuple[float, float, str]:
    docs = [np.asarray(d, dtype=np.float64).ravel() for d in per_doc]
    docs = [d for d in docs if d.size]
    if not docs:
        raise ValueError("no scored tokens")
    if len(docs) == 1:
        sums, counts = _blocks(docs[0], block_size(docs[0].size, block))
        lo, hi = boot(sums, counts, n_boot=n_boot, seed=seed, level=level)
        return lo, hi, "blocks"
    lo, hi = boot([d.sum() for d in docs], [d.size for d in docs], n_boot=n_boot, seed=seed, level=level)
    return lo, hi, "docs"


def mean_stderr(values: Sequence[float] | np.ndarray) -> float:
    """llama.cpp's ``±`` of a mean (``tools/perplexity/perplexity.cpp``, ``mean_and_uncertainty``):
    ``sqrt((E[x^2] - E[x]^2) / (n - 1))``, and 0 for 10 values or fewer."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size <= 10:
        return 0.0
    var = float((x * x).mean() - x.mean() ** 2)
    return math.sqrt(var / (x.size - 1)) if var > 0 else 0.0


# --------------------------------------------------------------------------- loss by position


def position_buckets(length: int, size: int = 512) -> list[tuple[int, int]]:
    """Half-open ``[start, end)`` target-position buckets for a sequence of ``length`` tokens.

    Targets are positions ``1 .. length-1``; buckets are aligned to multiples of ``size``:
    ``[(1, 512), (512, 1024), ..., (k*512, length)]``. Empty when ``length < 2``.
    """
    if size < 1:
        raise ValueError(f"bucket size {size} must be >= 1")
    edges = list(range(size, length, size))
    starts = [1] + edges
    ends = edges + [length]
    return [(s, e) for s, e in zip(starts, ends, strict=True) if e > s]


def _docs(token_nll) -> list[np.ndarray]:
    """One 1-D array per document: accepts one sequence of floats or a list of them."""
    if isinstance(token_nll, np.ndarray) and token_nll.ndim == 1:
        return [token_nll.astype(np.float64)]
    if isinstance(token_nll, np.ndarray):
        return [np.asarray(row, dtype=np.float64) for row in token_nll]
    items = list(token_nll)
    if items and np.ndim(items[0]) > 0:
        return [np.asarray(d, dtype=np.float64).ravel() for d in items]
    return [np.asarray(items, dtype=np.float64)]


def bucket_means(token_nll, size: int = 512) -> list[dict]:
    """Mean NLL per target-position bucket (see :func:`position_buckets`).

    ``token_nll`` is one document's per-token NLLs (``token_nll[j]`` scores position ``j + 1``)
    or a list of documents, pooled token-weighted. Returns rows
    ``{"start", "end", "tokens", "nll", "ppl"}`` in position order; the ``tokens``-weighted
    mean of ``nll`` is the overall mean NLL. Buckets no document reaches are left out.
    """
    docs = _docs(token_nll)
    longest = max((d.size for d in docs), default=0)
    rows = []
    for start, end in position_buckets(longest + 1, size):
        total, count = 0.0, 0
        for d in docs:
            part = d[start - 1 : end - 1]
            total += float(part.sum())
            count += part.size
        if count:
            mean = total / count
            rows.append({"start": start, "end": end, "tokens": count, "nll": mean, "ppl": math.exp(mean)})
    return rows


def beyond_mean(token_nll, trained_len: int) -> float | None:
    """Mean NLL over target positions ``>= trained_len`` (pooled over documents), or ``None`` if
    no document is that long."""
    total, count = 0.0, 0
    for d in _docs(token_nll):
        part = d[max(trained_len, 1) - 1 :]
        total += float(part.sum())
        count += part.size
    return total / count if count else None


# --------------------------------------------------------------------------- comparison


def changed_beyond_noise(
    base: float,
    base_lo: float | None,
    base_hi: float | None,
    new: float,
    new_lo: float | None,
    new_hi: float | None,
    rtol: float,
    higher_is_worse: bool,
    relative: bool | None = None,
) -> tuple[str, str]:
    """``(verdict, reason)`` with verdict ``"worse"``, ``"better"`` or ``"ok"``.

    Rule: a change counts only when BOTH tests pass:

    1. size: it exceeds ``rtol`` -- relative (``|new-base| > rtol*|base|``) by default when
       ``higher_is_worse`` (perplexity), absolute (``|new-base| > rtol``) otherwise (accuracy),
       as ``ctxbench compare`` does; ``relative`` overrides;
    2. noise: the two intervals do not overlap (``new_lo > base_hi`` or ``new_hi < base_lo``).
       Non-overlapping 95% intervals is a conservative test (about p < 0.01 for similar widths).

    If either interval is missing (``None`` or NaN) only the size test is applied, and the reason
    says so. The reason names the test that decided an ``"ok"``.
    """
    if relative is None:
        relative = higher_is_worse
    delta = new - base
    if relative:
        size = abs(delta) / abs(base) if base else (math.inf if delta else 0.0)
        size_text = f"{delta / abs(base):+.2%}" if base else f"{delta:+.4g}"
        tol_text = f"rtol {rtol:.2%}"
    else:
        size = abs(delta)
        size_text = f"{delta:+.4g}"
        tol_text = f"rtol {rtol:g}"
    direction = "worse" if (delta > 0) == higher_is_worse else "better"
    if delta == 0 or size <= rtol:
        return "ok", f"change {size_text} within {tol_text}"

    if base_lo is None or base_hi is None or new_lo is None or new_hi is None or any(
        math.isnan(x) for x in (base_lo, base_hi, new_lo, new_hi)
    ):
        return direction, f"change {size_text} exceeds {tol_text} (no interval to test noise)"
    base_iv, new_iv = f"[{base_lo:.4g}, {base_hi:.4g}]", f"[{new_lo:.4g}, {new_hi:.4g}]"
    if new_lo <= base_hi and base_lo <= new_hi:
        return "ok", f"change {size_text} exceeds {tol_text} but intervals {base_iv} and {new_iv} overlap (within noise)"
    return direction, f"change {size_text} exceeds {tol_text} and intervals {base_iv} and {new_iv} do not overlap"


# --------------------------------------------------------------------------- paired comparison (issue 22)
#
# Pure primitives for comparing two methods on the *same* units (documents, blocks of positions,
# trials); :mod:`ctxbench.report.paired` reads result rows into units and calls these.

EXACT_FLIPS = 16  # up to this many nonzero paired differences the sign-flip test enumerates every sign


def paired_bootstrap(
    diff_sums: Sequence[float] | np.ndarray,
    weights: Sequence[float] | np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile interval of the weighted mean paired difference ``sum(d) / sum(w)`` under a
    paired bootstrap: units are resampled with replacement and each resampled unit brings *both*
    methods' values, so whatever the methods share (a document's difficulty) cancels in every
    resample (Efron & Tibshirani 1993, *An Introduction to the Bootstrap*, ch. 13, percentile
    interval; Koehn 2004, "Statistical significance tests for machine translation evaluation",
    paired bootstrap resampling).

    ``diff_sums[i]`` is unit ``i``'s summed difference (new minus base; for perplexity the summed
    NLL difference over its tokens) and ``weights[i]`` its size (tokens; 1 per trial). Units of
    weight 0 are dropped. ``(nan, nan)`` with fewer than two units, where resampling says nothing.
    Deterministic for a given ``seed``.
    """
    d = np.asarray(diff_sums, dtype=np.float64).ravel()
    w = np.asarray(weights, dtype=np.float64).ravel()
    if d.shape != w.shape:
        raise ValueError(f"{d.size} differences but {w.size} weights")
    if (w < 0).any():
        raise ValueError("weights must be >= 0")
    if n_boot < 1:
        raise ValueError(f"n_boot {n_boot} must be >= 1")
    keep = w > 0
    d, w = d[keep], w[keep]
    if d.size < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    k = d.size
    stat = np.empty(n_boot)
    step = max(1, _CHUNK // k)
    for start in range(0, n_boot, step):
        stop = min(n_boot, start + step)
        idx = rng.integers(0, k, size=(stop - start, k))
        stat[start:stop] = d[idx].sum(axis=1) / w[idx].sum(axis=1)
    return _percentiles(stat, level)


def sign_flip_test(diff_sums: Sequence[float], n_perm: int = 9999, seed: int = 0) -> tuple[float, bool]:
    """Two-sided paired permutation (sign-flip) test of "the two methods are exchangeable within
    every unit": ``(p, exact)``.

    Statistic ``T = sum(diff_sums)`` (the weighted mean difference times the fixed total weight).
    Under the null hypothesis each unit's difference is as likely to have the opposite sign, so
    ``T`` is compared with ``sum(s_i * diff_sums[i])`` over sign vectors ``s`` (Fisher 1935, *The
    Design of Experiments*, section 21; Good 2005, *Permutation, Parametric and Bootstrap Tests of
    Hypotheses*, ch. 3). Units with a zero difference never change ``T`` and are left out. With at
    most :data:`EXACT_FLIPS` nonzero units every one of the ``2^m`` sign vectors is enumerated
    (``exact`` is True) and ``p = #{|T*| >= |T|} / 2^m``; otherwise ``n_perm`` random sign vectors
    and ``p = (1 + #{|T*| >= |T|}) / (1 + n_perm)`` (Phipson & Smyth 2010, "Permutation p-values
    should never be zero"). On 0/1 outcomes this is exactly the two-sided exact McNemar test.
    ``p`` is 1 when every difference is 0.
    """
    v = np.asarray(diff_sums, dtype=np.float64).ravel()
    v = v[v != 0]
    m = v.size
    if m == 0:
        return 1.0, True
    observed = abs(float(v.sum()))
    tol = 1e-9 * float(np.abs(v).sum())  # sums of the same terms in another order: float ties
    if m <= EXACT_FLIPS:
        bits = np.arange(m)
        total = 1 << m
        step = max(1, min(total, _CHUNK // m))
        hits = 0
        for start in range(0, total, step):
            k = np.arange(start, min(total, start + step), dtype=np.int64)
            signs = 1.0 - 2.0 * ((k[:, None] >> bits) & 1)
            hits += int((np.abs(signs @ v) >= observed - tol).sum())
        return hits / total, True
    if n_perm < 1:
        raise ValueError(f"n_perm {n_perm} must be >= 1")
    rng = np.random.default_rng(seed)
    hits = 0
    step = max(1, _CHUNK // m)
    for start in range(0, n_perm, step):
        rows = min(n_perm, start + step) - start
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(rows, m))
        hits += int((np.abs(signs @ v) >= observed - tol).sum())
    return (1 + hits) / (1 + n_perm), False


def mcnemar_exact(right_to_wrong: int, wrong_to_right: int) -> float:
    """Two-sided exact McNemar test of paired 0/1 outcomes: a binomial test of the discordant
    pairs, ``min(1, 2 * P(X <= min(b, c)))`` with ``X ~ Binomial(b + c, 1/2)`` (McNemar 1947,
    Psychometrika 12:153-157; the exact form: Fagerland, Lydersen & Laake 2013, BMC Med Res
    Methodol 13:91). Concordant pairs carry no information. 1 when there is no discordant pair."""
    b, c = int(right_to_wrong), int(wrong_to_right)
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got {b} and {c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni step-down adjusted p-values, in the order given (Holm 1979, "A simple
    sequentially rejective multiple test procedure", Scand. J. Statist. 6:65-70).

    With the ``m`` p-values sorted ``p_(1) <= ... <= p_(m)``: ``adj_(i) = max_{j <= i} min(1,
    (m - j + 1) p_(j))``: monotone in the raw p-values, capped at 1. Rejecting ``adj < alpha``
    controls the family-wise error rate at ``alpha`` under any dependence. NaN entries (no test)
    stay NaN and do not count in ``m``.
    """
    p = [float(x) for x in p_values]
    if any(x < 0 or x > 1 for x in p if not math.isnan(x)):
        raise ValueError("p-values must be in [0, 1]")
    order = sorted((i for i, x in enumerate(p) if not math.isnan(x)), key=lambda i: p[i])
    m = len(order)
    out = [math.nan] * len(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def compact_letters(separated: Sequence[Sequence[bool]]) -> list[str]:
    """A compact letter display of all-pairwise comparisons: two items share a letter exactly
    when they are *not* separated (Piepho 2004, "An algorithm for a letter-based representation
    of all-pairwise comparisons", J. Comput. Graph. Statist. 13:456-466, insert-and-absorb).

    ``separated`` is a symmetric boolean matrix; items are taken to be in display order (best
    first), and letters are handed out in that order (``a`` to the column holding the first item).
    """
    k = len(separated)
    if any(len(row) != k for row in separated):
        raise ValueError("separated must be a square matrix")
    columns: list[set[int]] = [set(range(k))] if k else []
    for i in range(k):
        for j in range(i + 1, k):
            if not (separated[i][j] or separated[j][i]):
                continue
            # insert: split every column that holds both i and j
            split = []
            for col in columns:
                if i in col and j in col:
                    split += [col - {i}, col - {j}]
                else:
                    split.append(col)
            # absorb: drop columns contained in another one (and duplicates)
            columns = []
            for col in sorted(split, key=len, reverse=True):
                if col and not any(col <= other for other in columns):
                    columns.append(col)
    columns.sort(key=lambda col: sorted(col))
    names = _letter_names(len(columns))
    return ["".join(names[c] for c, col in enumerate(columns) if i in col) for i in range(k)]


def _letter_names(n: int) -> list[str]:
    """``a .. z, A .. Z``, then ``a1 .. z1, A1 ..`` (more columns than that are rare)."""
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return [alphabet[i % 52] + (str(i // 52) if i >= 52 else "") for i in range(n)]


# --------------------------------------------------------------------------- rank correlation


def midranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks with ties given the mean of the ranks they span (0.0, 5.0, 5.0 -> 1, 2.5, 2.5)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    order = np.argsort(v, kind="mergesort")
    ranks = np.empty(v.size)
    i = 0
    while i < v.size:
        j = i
        while j + 1 < v.size and v[order[j + 1]] == v[order[i]]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: the Pearson correlation of the two midrank vectors, which is
    the tie-corrected form (Spearman 1904, Am. J. Psychol. 15:72-101; Kendall & Gibbons 1990,
    *Rank Correlation Methods*, ch. 3; what ``scipy.stats.spearmanr`` returns). NaN with fewer than
    two pairs or when either side is constant (no ordering to agree with)."""
    rx, ry = midranks(x), midranks(y)
    if rx.size != ry.size:
        raise ValueError(f"{rx.size} x values but {ry.size} y values")
    if rx.size < 2:
        return math.nan
    dx, dy = rx - rx.mean(), ry - ry.mean()
    denom = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    return float((dx * dy).sum()) / denom if denom > 0 else math.nan


def spearman_interval(rho: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Interval of a Spearman correlation of ``n`` pairs: Fisher's z with Bonett & Wright's variance
    ``(1 + rho^2 / 2) / (n - 3)`` (Bonett & Wright 2000, "Sample size requirements for estimating
    Pearson, Kendall and Spearman correlations", Psychometrika 65:23-28), back-transformed:
    ``tanh(atanh(rho) -+ z sqrt(var))``, 95% by default. NaN with ``n <= 3`` or an undefined ``rho``; ``(1, 1)``
    (or ``(-1, -1)``) at a perfect correlation, where the transform has no spread left."""
    if n <= 3 or math.isnan(rho):
        return math.nan, math.nan
    if abs(rho) >= 1:
        return float(rho), float(rho)
    half = z * math.sqrt((1 + rho * rho / 2) / (n - 3))
    centre = math.atanh(rho)
    return math.tanh(centre - half), math.tanh(centre + half)
