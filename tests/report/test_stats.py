"""ctxbench.stats: Wilson and bootstrap intervals against hand-computed values, position buckets, compare rule."""

from __future__ import annotations

import ast
import math
import sys
import time

import numpy as np
import pytest

from ctxbench import stats
from ctxbench.stats import (
    beyond_mean,
    block_size,
    bootstrap_ppl,
    bootstrap_ppl_blocks,
    bucket_means,
    changed_beyond_noise,
    position_buckets,
    ppl_interval,
    wilson,
)


def test_imports_numpy_and_stdlib_only():
    tree = ast.parse(open(stats.__file__).read())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "math", "collections", "numpy"}, names


# --------------------------------------------------------------------------- Wilson


def test_wilson_7_of_10():
    lo, hi = wilson(7, 10)
    assert lo == pytest.approx(0.3968, abs=5e-5)
    assert hi == pytest.approx(0.8922, abs=5e-5)


def test_wilson_edges():
    z2 = 1.959964**2
    # 0/n: lower bound exactly 0, upper z^2/(n+z^2); n/n mirrors it.
    assert wilson(0, 3) == (0.0, pytest.approx(z2 / (3 + z2)))
    assert wilson(3, 3) == (pytest.approx(3 / (3 + z2)), 1.0)
    assert wilson(0, 3)[1] == pytest.approx(0.5615, abs=5e-5)
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(5, 10)
    assert lo + hi == pytest.approx(1.0)  # symmetric at p = 1/2
    with pytest.raises(ValueError):
        wilson(4, 3)


# --------------------------------------------------------------------------- bootstrap


def test_identical_docs_zero_width():
    lo, hi = bootstrap_ppl([6.0] * 5, [3] * 5)
    assert lo == pytest.approx(math.exp(2.0)) and hi == pytest.approx(math.exp(2.0))


def test_two_doc_hand_case_is_token_weighted():
    # doc A: 1 token, nll 1; doc B: 3 tokens summing to 9. Resamples of 2 docs:
    # AA (1/4) -> mean nll 1, AB/BA (1/2) -> 10/4 = 2.5, BB (1/4) -> 3.
    lo, hi = bootstrap_ppl([1.0, 9.0], [1, 3], n_boot=2000, seed=1)
    assert (lo, hi) == (pytest.approx(math.exp(1.0)), pytest.approx(math.exp(3.0)))
    # the middle 40% lies inside the AB mass: exactly exp(2.5) (an unweighted mean would give 2)
    lo, hi = bootstrap_ppl([1.0, 9.0], [1, 3], n_boot=2000, seed=1, level=0.4)
    assert (lo, hi) == (pytest.approx(math.exp(2.5)), pytest.approx(math.exp(2.5)))


def test_bootstrap_deterministic_and_brackets_point():
    rng = np.random.default_rng(3)
    docs = [rng.gamma(2.0, 1.5, size=int(n)) for n in rng.integers(200, 800, size=12)]
    a = ppl_interval(docs, seed=7)
    b = ppl_interval(docs, seed=7)
    c = ppl_interval(docs, seed=8)
    assert a == b and a != c and a[2] == "docs"
    point = math.exp(sum(d.sum() for d in docs) / sum(d.size for d in docs))
    assert a[0] < point < a[1]
    wide = ppl_interval(docs, seed=7, level=0.99)
    assert wide[0] <= a[0] and wide[1] >= a[1]


def test_blocks_keep_neighbours_together():
    # alternating 1, 3: every contiguous pair sums to 4, so resampling 2-token blocks has no spread
    nll = np.tile([1.0, 3.0], 64)
    lo, hi = bootstrap_ppl_blocks(nll, block=2)
    assert lo == pytest.approx(math.exp(2.0)) and hi == pytest.approx(math.exp(2.0))
    lo, hi = bootstrap_ppl_blocks(nll, block=3)  # odd blocks are not all alike
    assert lo < math.exp(2.0) < hi


def test_block_size_and_method_choice():
    assert block_size(16384, 256) == 256
    assert block_size(1000, 256) == 125  # at least MIN_BLOCKS = 8 blocks
    assert block_size(3, 256) == 1
    one = [np.linspace(0.5, 4.0, 2000)]
    lo, hi, method = ppl_interval(one + [[]])  # empty documents are dropped
    assert method == "blocks" and lo < hi
    assert ppl_interval([[2.0, 2.0], [2.0]])[2] == "docs"
    with pytest.raises(ValueError):
        ppl_interval([[], []])


def test_bootstrap_is_fast():
    rng = np.random.default_rng(0)
    nll = rng.gamma(2.0, 1.5, size=16384)
    t0 = time.perf_counter()
    bootstrap_ppl_blocks(nll, block=1, n_boot=1000)  # worst case: 16k units per resample
    bootstrap_ppl_blocks(nll, n_boot=1000)
    ppl_interval(np.array_split(nll, 64), n_boot=1000)
    elapsed = time.perf_counter() - t0
    print(f"bootstrap timings: {elapsed:.3f}s", file=sys.stderr)
    assert elapsed < 3.0  # ~0.3 s on one core; generous for a shared machine


# --------------------------------------------------------------------------- buckets


def test_position_buckets():
    assert position_buckets(1200, 512) == [(1, 512), (512, 1024), (1024, 1200)]
    assert position_buckets(512, 512) == [(1, 512)]
    assert position_buckets(513, 512) == [(1, 512), (512, 513)]
    assert position_buckets(1, 512) == []
    assert position_buckets(5, 2) == [(1, 2), (2, 4), (4, 5)]


def test_bucket_means_hand_case():
    nll = np.arange(1.0, 10.0)  # 10 tokens: targets 1..9 with nll equal to their position
    rows = bucket_means(nll, size=4)
    assert [(r["start"], r["end"], r["tokens"]) for r in rows] == [(1, 4, 3), (4, 8, 4), (8, 10, 2)]
    assert [r["nll"] for r in rows] == [2.0, 5.5, 8.5]
    assert rows[1]["ppl"] == pytest.approx(math.exp(5.5))


def test_bucket_means_average_back_token_weighted():
    rng = np.random.default_rng(5)
    docs = [rng.gamma(2.0, 1.0, size=n) for n in (1500, 700, 2049)]
    rows = bucket_means(docs, size=512)
    assert sum(r["tokens"] for r in rows) == sum(d.size for d in docs)
    weighted = sum(r["tokens"] * r["nll"] for r in rows) / sum(r["tokens"] for r in rows)
    assert weighted == pytest.approx(np.concatenate(docs).mean(), rel=1e-12)
    # pooling: a bucket only the longest document reaches has only its tokens
    assert rows[-1]["start"] == 2048 and rows[-1]["tokens"] == 2 and rows[-1]["nll"] == pytest.approx(docs[2][2047:].mean())


def test_beyond_mean():
    nll = np.arange(1.0, 10.0)  # targets 1..9
    assert beyond_mean(nll, 4) == pytest.approx(np.mean([4, 5, 6, 7, 8, 9]))
    assert beyond_mean(nll, 9) == 9.0
    assert beyond_mean(nll, 10) is None
    assert beyond_mean([[1.0, 2.0, 3.0], [10.0, 20.0]], 2) == pytest.approx((2 + 3 + 20) / 3)


# --------------------------------------------------------------------------- compare rule


def test_changed_beyond_noise_perplexity():
    # +10% and separated intervals: worse
    v, why = changed_beyond_noise(10.0, 9.8, 10.2, 11.0, 10.8, 11.2, rtol=0.02, higher_is_worse=True)
    assert v == "worse" and "do not overlap" in why
    # +10% but overlapping intervals: within noise
    v, why = changed_beyond_noise(10.0, 9.0, 11.0, 11.0, 10.5, 11.5, rtol=0.02, higher_is_worse=True)
    assert v == "ok" and "overlap" in why and "exceeds" in why
    # separated intervals but a change under rtol: ok by the size test
    v, why = changed_beyond_noise(10.0, 9.99, 10.01, 10.1, 10.09, 10.11, rtol=0.02, higher_is_worse=True)
    assert v == "ok" and "within rtol" in why
    # lower perplexity beyond noise: better
    v, _ = changed_beyond_noise(10.0, 9.8, 10.2, 9.0, 8.8, 9.2, rtol=0.02, higher_is_worse=True)
    assert v == "better"
    # no intervals: size test alone
    v, why = changed_beyond_noise(10.0, None, None, 11.0, float("nan"), None, rtol=0.02, higher_is_worse=True)
    assert v == "worse" and "no interval" in why


def test_changed_beyond_noise_accuracy_absolute():
    lo_b, hi_b = wilson(95, 100)
    lo_n, hi_n = wilson(40, 100)
    v, why = changed_beyond_noise(0.95, lo_b, hi_b, 0.40, lo_n, hi_n, rtol=0.05, higher_is_worse=False)
    assert v == "worse" and "do not overlap" in why
    lo_n, hi_n = wilson(8, 10)  # -15 points on 10 trials: within noise
    v, why = changed_beyond_noise(0.95, lo_b, hi_b, 0.80, lo_n, hi_n, rtol=0.05, higher_is_worse=False)
    assert v == "ok" and "overlap" in why
    # accuracy is absolute by default: a 0.03 drop is under rtol 0.05 (though 6% of 0.5 relative)
    assert changed_beyond_noise(0.5, 0.49, 0.51, 0.47, 0.46, 0.48, rtol=0.05, higher_is_worse=False)[0] == "ok"
    assert changed_beyond_noise(0.5, 0.49, 0.51, 0.47, 0.46, 0.48, rtol=0.05, higher_is_worse=False, relative=True)[0] == "worse"


def test_plans_state_the_interval_width_a_trial_count_gives():
    from ctxbench.runner.plan import interval_note

    # Wilson by hand: 2/4 -> 0.5 -/+ 1.96*sqrt(1/16 + 0.9604/64)/1.9604 -> 15.0%..85.0%; 4/4 -> 4/(4+3.8416) = 51.0%
    assert "95% interval 15%-85% at 2/4 right, 51%-100% at 4/4" in interval_note(4)
    assert "72%-100% at 10/10" in interval_note(10)


def test_midranks_average_tied_ranks():
    assert stats.midranks([0.0, 5.0, 5.0, 1.0]).tolist() == [1.0, 3.5, 3.5, 2.0]


def test_spearman_equals_scipy_with_ties():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    for _ in range(50):
        x = rng.integers(0, 5, size=12).astype(float)  # ties, as 0%/100% accuracies have
        y = x * rng.normal(1, 0.5, size=12) + rng.normal(0, 1, size=12)
        if len(set(x)) < 2:
            continue
        assert stats.spearman(x, y) == pytest.approx(scipy_stats.spearmanr(x, y).statistic, abs=1e-12)


def test_spearman_hand_case_and_undefined():
    # d = rank differences (0, 0, 1, -1): 1 - 6 * 2 / (4 * 15) = 0.8
    assert stats.spearman([1, 2, 3, 4], [10, 20, 40, 30]) == pytest.approx(0.8)
    assert math.isnan(stats.spearman([1, 1, 1], [1, 2, 3]))


def test_spearman_interval_is_bonett_wright_fisher_z():
    # rho 0.8, n 12: var = (1 + 0.32) / 9, atanh(0.8) = 1.0986123 +- 1.959964 * 0.382971
    lo, hi = stats.spearman_interval(0.8, 12)
    assert lo == pytest.approx(math.tanh(1.0986123 - 0.750610), abs=1e-5)
    assert hi == pytest.approx(math.tanh(1.0986123 + 0.750610), abs=1e-5)
    assert lo == pytest.approx(0.3346, abs=1e-4) and hi == pytest.approx(0.9517, abs=1e-4)
    assert all(math.isnan(v) for v in stats.spearman_interval(0.5, 3))
