"""ctxbench.report.paired and the paired primitives of ctxbench.stats: McNemar and the sign-flip test
against scipy, Holm and the letter display against hand-computed cases, paired against unpaired
intervals on synthetic rows and on the committed perplexity file, bad input."""

from __future__ import annotations

import ast
import itertools
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT
from scipy import stats as sps

from ctxbench.errors import UserError
from ctxbench.report import paired as paired_mod
from ctxbench.report.paired import compare_labels, paired_ppl, paired_retrieval, rank
from ctxbench.stats import (
    bootstrap_ppl,
    compact_letters,
    holm,
    mcnemar_exact,
    paired_bootstrap,
    sign_flip_test,
)

ROOT = ROOT

# --------------------------------------------------------------------------- synthetic rows

BASE = {
    "run_id": "r", "time": "t", "model": "m", "model_digest": "sha256:m", "dataset": "d", "data_digest": "sha256:d",
    "method_params": "{}", "variant": "", "stride": "", "depth": "", "trial": "", "doc": "", "tokens": "", "seconds": "",
    "status": "ok", "device": "cpu", "dtype": "float32", "seed": "0", "options": "{}", "extra": "", "pos_start": "", "pos_end": "",
}  # fmt: skip


def row(**kw) -> dict[str, str]:
    out = dict(BASE)
    out.update({k: str(v) for k, v in kw.items()})
    out.setdefault("label", out.get("method", ""))
    return out


def ppl_rows(label, docs, *, method=None, factor="", length=2048, buckets=None, seed=0):
    """Rows of one ppl cell: per-document nll rows ``docs = {name: (nll, tokens)}``, the aggregate,
    and optionally ``buckets = [(start, end, nll, tokens)]`` loss-by-position rows."""
    common = dict(task="ppl", method=method or label, label=label, factor=factor, length=length, stride=length, seed=seed)
    rows = [row(**common, doc=name, metric="nll", value=nll, tokens=tokens) for name, (nll, tokens) in docs.items()]
    total = sum(n * t for n, t in docs.values())
    count = sum(t for _, t in docs.values())
    rows.append(row(**common, doc="all", metric="ppl", value=math.exp(total / count), tokens=count))
    for start, end, nll, tokens in buckets or []:
        rows.append(row(**common, doc="all", metric="nll_pos", value=nll, tokens=tokens, pos_start=start, pos_end=end))
    return rows


def trial_rows(label, outcomes, *, method=None, factor="", length=2048, depth=0.5, task="passkey", metric="correct", seed=0):
    common = dict(task=task, method=method or label, label=label, factor=factor, length=length, depth=depth, seed=seed)
    rows = [row(**common, trial=i, metric=metric, value=v) for i, v in enumerate(outcomes)]
    rows.append(row(**common, trial="all", metric="accuracy", value=sum(outcomes) / len(outcomes)))
    return rows


# --------------------------------------------------------------------------- McNemar


@pytest.mark.parametrize("b,c", [(0, 0), (4, 0), (0, 7), (3, 3), (2, 9), (10, 4), (1, 30), (25, 17)])
def test_mcnemar_matches_scipy_binomtest(b, c):
    expected = 1.0 if b + c == 0 else sps.binomtest(b, b + c, 0.5).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_hand_computed():
    # 4 discordant all one way: 2 * (1/2)^4; 1 against 5: 2 * (1 + 6) / 64
    assert mcnemar_exact(4, 0) == 0.125
    assert mcnemar_exact(1, 5) == pytest.approx(14 / 64)


# --------------------------------------------------------------------------- sign-flip test


def test_sign_flip_hand_computed():
    # T = 5; the 8 sign vectors give 5, 3, 3, 1, -1, -3, -3, -5: |T*| >= 5 twice
    assert sign_flip_test([3.0, 1.0, 1.0]) == (0.25, True)


def test_sign_flip_matches_scipy_permutation_test():
    rng = np.random.default_rng(7)
    d = rng.normal(0.3, 1.0, size=11)
    ref = sps.permutation_test((d,), np.sum, permutation_type="samples", n_resamples=np.inf, alternative="two-sided")
    p, exact = sign_flip_test(d)
    assert exact
    assert p == pytest.approx(ref.pvalue, rel=1e-9)


def test_sign_flip_on_binary_differences_is_mcnemar():
    d = [1] * 6 + [-1] * 2 + [0] * 5
    assert sign_flip_test(d)[0] == pytest.approx(mcnemar_exact(2, 6))


def test_sign_flip_monte_carlo_never_zero():
    p, exact = sign_flip_test([0.1] * 30, n_perm=999, seed=1)  # exact p would be 2^-29
    assert not exact
    assert p == pytest.approx(1 / 1000)


# --------------------------------------------------------------------------- Holm


def test_holm_hand_computed():
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, max(.03, 2*0.03), max(.06, 0.04)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_monotone_and_capped():
    # sorted 0.2, 0.6, 0.7 -> 3*0.2, min(1, 2*0.6), max(1, 0.7)
    assert holm([0.6, 0.7, 0.2]) == pytest.approx([1.0, 1.0, 0.6])


def test_holm_leaves_nan_out_of_the_family():
    out = holm([0.01, math.nan, 0.02])
    assert out[0] == pytest.approx(0.02) and out[2] == pytest.approx(0.02) and math.isnan(out[1])


# --------------------------------------------------------------------------- compact letter display


def test_letters_hand_computed():
    # a and c separated, b with neither
    sep = [[False, False, True], [False, False, False], [True, False, False]]
    assert compact_letters(sep) == ["a", "ab", "b"]


def test_letters_absorb_redundant_columns():
    # 0 separated from 2 and 3: the column {1, 3} left by the second split lies inside {1, 2, 3}
    sep = [[False, False, True, True], [False, False, False, False], [True, False, False, False], [True, False, False, False]]
    assert compact_letters(sep) == ["a", "ab", "b", "b"]


def test_letters_share_exactly_when_not_separated():
    rng = np.random.default_rng(3)
    for _ in range(50):
        k = int(rng.integers(2, 8))
        upper = np.triu(rng.random((k, k)) < 0.4, 1)
        sep = (upper | upper.T).tolist()
        letters = compact_letters(sep)
        for i, j in itertools.combinations(range(k), 2):
            assert bool(set(letters[i]) & set(letters[j])) == (not sep[i][j]), (sep, letters)


# --------------------------------------------------------------------------- paired bootstrap


def test_paired_bootstrap_matches_scipy_percentile():
    rng = np.random.default_rng(11)
    w = rng.integers(200, 2000, size=12).astype(float)
    d = rng.normal(0.05, 0.04, size=12) * w  # summed differences per unit
    lo, hi = paired_bootstrap(d, w, n_boot=20000, seed=0)
    ref = sps.bootstrap((d, w), lambda d, w, axis=-1: d.sum(axis=axis) / w.sum(axis=axis), paired=True, vectorized=True,
                        n_resamples=20000, method="percentile", random_state=1).confidence_interval  # fmt: skip
    width = ref.high - ref.low
    assert lo == pytest.approx(ref.low, abs=0.05 * width)
    assert hi == pytest.approx(ref.high, abs=0.05 * width)


def test_constant_shift_paired_interval_excludes_zero_while_unpaired_overlap():
    base = ppl_rows("none", {"a": (1.5, 1000), "b": (2.3, 1000)})
    new = ppl_rows("yarn", {"a": (1.53, 1000), "b": (2.33, 1000)}, factor=4)
    lo_b, hi_b = bootstrap_ppl([1500, 2300], [1000, 1000])
    lo_n, hi_n = bootstrap_ppl([1530, 2330], [1000, 1000])
    assert lo_n <= hi_b and lo_b <= hi_n  # the per-method intervals overlap
    p = paired_ppl(base, new)
    assert (p.n, p.unit) == (2, "docs")
    assert p.delta == pytest.approx(0.03)
    assert p.delta_lo == pytest.approx(0.03) and p.delta_hi == pytest.approx(0.03)  # excludes 0
    assert p.ratio == pytest.approx(math.exp(0.03))
    assert p.p_value == p.p_min == 0.5  # both documents one way: the floor; two can never reach p < 0.5


def test_ppl_delta_is_token_weighted():
    base = ppl_rows("none", {"a": (2.0, 100), "b": (3.0, 300)})
    new = ppl_rows("yarn", {"a": (2.4, 100), "b": (3.0, 300)}, factor=4)
    p = paired_ppl(base, new)
    assert p.delta == pytest.approx(0.4 * 100 / 400)
    assert p.base == pytest.approx((200 + 900) / 400)


def test_single_document_uses_position_blocks():
    buckets_b = [(1, 512, 2.6, 511), (512, 1024, 1.4, 512), (1024, 1536, 2.3, 512), (1536, 2048, 1.6, 512)]
    shift = [0.09, 0.16, 0.11, 0.07]
    buckets_n = [(s, e, v + d, t) for (s, e, v, t), d in zip(buckets_b, shift, strict=True)]
    mean_b = sum(v * t for *_, v, t in buckets_b) / 2047
    mean_n = sum(v * t for *_, v, t in buckets_n) / 2047
    base = ppl_rows("none", {"doc": (mean_b, 2047)}, buckets=buckets_b)
    new = ppl_rows("yarn", {"doc": (mean_n, 2047)}, factor=4, buckets=buckets_n)
    p = paired_ppl(base, new)
    assert (p.n, p.unit) == (4, "blocks")
    assert p.delta == pytest.approx(sum(d * t for d, (*_, t) in zip(shift, buckets_b, strict=True)) / 2047)
    assert min(shift) - 1e-12 <= p.delta_lo < p.delta < p.delta_hi <= max(shift) + 1e-12
    assert p.p_value == pytest.approx(2 / 16)  # all four blocks one way: the exact floor


def test_old_files_read_buckets_from_extra():
    rows = ppl_rows("none", {"doc": (2.0, 1023)}, length=1024)
    for start, end, v, t in [(1, 512, 2.5, 511), (512, 1024, 1.5, 512)]:
        rows.append(row(task="ppl", method="none", label="none", factor="", length=1024, stride=1024, doc="all", metric="nll_pos",
                        value=v, tokens=t, extra=json.dumps({"pos": [start, end]})))  # fmt: skip
    assert paired_mod._block_units(rows) == {("1024", 1, 512): (2.5 * 511, 511), ("1024", 512, 1024): (1.5 * 512, 512)}


def test_deterministic_under_a_seed():
    rng = np.random.default_rng(5)
    docs_b = {f"d{i}": (float(rng.uniform(1, 3)), int(rng.integers(500, 3000))) for i in range(8)}
    docs_n = {k: (v + float(rng.normal(0.02, 0.05)), t) for k, (v, t) in docs_b.items()}
    base, new = ppl_rows("none", docs_b), ppl_rows("yarn", docs_n, factor=4)
    assert paired_ppl(base, new, seed=3) == paired_ppl(base, new, seed=3)
    assert paired_ppl(base, new, seed=3).delta_lo != paired_ppl(base, new, seed=4).delta_lo


# --------------------------------------------------------------------------- retrieval


def test_retrieval_four_discordant_one_way_gives_exact_p():
    base = trial_rows("none", [1, 1, 0, 0, 0, 0, 1, 1, 1, 0])
    new = trial_rows("yarn", [1, 1, 1, 1, 1, 1, 1, 1, 1, 0], factor=4)
    p = paired_retrieval(base, new)
    assert p.p_value == pytest.approx(0.125)
    assert p.test == "exact McNemar"
    assert (p.n, p.unit) == (10, "trials")
    assert p.delta == pytest.approx(0.4)
    assert p.wrong_to_right == ((2048, 0.5, 2), (2048, 0.5, 3), (2048, 0.5, 4), (2048, 0.5, 5))
    assert p.right_to_wrong == ()


def test_retrieval_fractional_scores_use_sign_flip():
    base_scores = [1.0, 0.5, 0.0, 0.5, 1.0, 0.25, 0.75, 0.0]
    new_scores = [1.0, 1.0, 0.5, 0.25, 1.0, 0.75, 1.0, 0.5]
    base = trial_rows("none", base_scores, task="niah", metric="score")
    new = trial_rows("yarn", new_scores, factor=4, task="niah", metric="score")
    p = paired_retrieval(base, new)
    d = np.subtract(new_scores, base_scores)
    ref = sps.permutation_test((d,), np.sum, permutation_type="samples", n_resamples=np.inf).pvalue
    assert p.test.startswith("sign-flip") and p.p_value == pytest.approx(ref)
    assert p.right_to_wrong == ((2048, 0.5, 3),)


def test_retrieval_pools_depths_matching_each_trial():
    base = trial_rows("none", [1, 0], depth=0.1) + trial_rows("none", [0, 0], depth=0.9)
    new = trial_rows("yarn", [1, 1], factor=4, depth=0.1) + trial_rows("yarn", [0, 1], factor=4, depth=0.9)
    p = paired_retrieval(base, new)
    assert p.n == 4 and p.wrong_to_right == ((2048, 0.1, 1), (2048, 0.9, 1))


# --------------------------------------------------------------------------- bad input


def test_mismatched_documents_raise():
    base = ppl_rows("none", {"a": (1.5, 1000), "b": (2.3, 1000)})
    new = ppl_rows("yarn", {"a": (1.53, 1000), "c": (2.33, 1000)}, factor=4)
    with pytest.raises(UserError, match=r"did not see the same documents: 1 only in 'none' \(e.g. 'b' at length 2048\); 1 only in 'yarn' x4"):
        paired_ppl(base, new)


def test_different_token_counts_raise():
    base = ppl_rows("none", {"a": (1.5, 1000), "b": (2.3, 1000)})
    new = ppl_rows("yarn", {"a": (1.53, 1000), "b": (2.33, 999)}, factor=4)
    with pytest.raises(UserError, match="1000 scored tokens in 'none' but 999"):
        paired_ppl(base, new)


def test_mismatched_trials_raise():
    base = trial_rows("none", [1, 0, 1]) + trial_rows("none", [1], depth=0.9)
    new = trial_rows("yarn", [1, 0], factor=4) + trial_rows("yarn", [1, 1], factor=4, depth=0.1)
    with pytest.raises(UserError, match=r"did not see the same trials: 2 only in 'none' \(e.g. trial 2 at length 2048 depth 0.5\); 2 only in 'yarn' x4"):
        paired_retrieval(base, new)


def test_a_cell_with_more_trials_pairs_on_the_trials_both_hold():
    # --trials auto gives some cells more batches: trial t is the same prompt in both cells
    more = paired_retrieval(trial_rows("none", [1, 0, 1, 1, 0, 1]), trial_rows("yarn", [0, 0, 1], factor=4))
    same = paired_retrieval(trial_rows("none", [1, 0, 1]), trial_rows("yarn", [0, 0, 1], factor=4))
    assert (more.n, more.delta, more.p_value) == (same.n, same.delta, same.p_value) == (3, pytest.approx(-1 / 3), 1.0)


def test_different_seeds_raise():
    with pytest.raises(UserError, match="differ in seed"):
        paired_retrieval(trial_rows("none", [1, 0], seed=0), trial_rows("yarn", [1, 0], factor=4, seed=1))


def test_duplicate_trial_raises():
    with pytest.raises(UserError, match="two rows for trial 0"):
        paired_retrieval(trial_rows("none", [1, 0]) + trial_rows("none", [1]), trial_rows("yarn", [1, 0], factor=4))


# --------------------------------------------------------------------------- many cells


def _file() -> list[dict]:
    rows = []
    rows += trial_rows("none", [1, 1, 0, 0, 0, 0])  # ignores the factor: one cell per length
    rows += trial_rows("yarn", [1, 1, 1, 1, 1, 1], factor=2)
    rows += trial_rows("yarn", [1, 0, 0, 0, 0, 0], factor=4)
    rows += trial_rows("dynamic-yarn", [1, 1, 1, 0, 0, 0])  # ignores the factor too
    return rows


def test_compare_labels_pairs_factor_free_cells_with_every_factor():
    out = compare_labels(_file(), "none")
    got = {(c.label, c.factor, c.base_factor, c.new_factor): round(c.delta, 6) for c in out}
    assert got == {("dynamic-yarn", "", "", ""): round(1 / 6, 6), ("yarn", "2", "", "2"): round(4 / 6, 6),
                   ("yarn", "4", "", "4"): round(-1 / 6, 6)}  # fmt: skip
    assert [c.p_holm for c in out] == pytest.approx(holm([c.p for c in out]))


def test_compare_labels_factored_baseline_meets_factor_free_label_at_each_factor():
    out = compare_labels(_file(), "yarn")
    got = sorted((c.label, c.factor) for c in out)
    assert got == [("dynamic-yarn", "2"), ("dynamic-yarn", "4"), ("none", "2"), ("none", "4")]


def test_a_factor_free_method_is_compared_with_the_baseline_at_each_tables_own_factor():
    # none (factor-free) appears in the factor-2 and the factor-4 table: each shows its paired
    # difference against that table's yarn, not the last factor's (4/6 worse at 2, 1/6 better at 4)
    from ctxbench.report.formats import pivots

    tables = {p.factor: p for p in pivots(_file(), baseline="yarn") if p.headline}
    assert tables["2"].rows["none"][2048].delta == pytest.approx(-4 / 6)
    assert tables["4"].rows["none"][2048].delta == pytest.approx(1 / 6)


def test_compare_labels_unknown_baseline_suggests_a_label():
    with pytest.raises(UserError, match="did you mean 'yarn'"):
        compare_labels(_file(), "yarm")


def test_compare_labels_skips_failed_cells():
    rows = _file()
    for r in rows:
        if r["label"] == "dynamic-yarn" and r["trial"] == "1":
            r["status"] = "error"
    assert {c.label for c in compare_labels(rows, "none")} == {"yarn"}


def test_compare_labels_names_the_cell_on_mismatch():
    rows = _file() + trial_rows("ntk", [1, 1, 1], method="ntk", factor=2, depth=0.25)
    with pytest.raises(UserError, match="passkey m length 2048 factor 2: .*'ntk' x2 and 'none' did not see the same trials"):
        compare_labels(rows, "none")


def test_rank_orders_by_headline_and_letters_follow_holm():
    rows = trial_rows("A", [1] * 20, method="none")
    rows += trial_rows("B", [1] * 14 + [0] * 6, method="dynamic-yarn")
    rows += trial_rows("C", [1] * 8 + [0] * 12, method="dynamic-ntk")  # uses the factor: give it one
    for r in rows:
        if r["label"] == "C":
            r["factor"] = "2"
    (r,) = rank(rows, 2048)
    assert r.labels == ("A", "B", "C") and r.values == pytest.approx((1.0, 0.7, 0.4))
    # raw exact McNemar: A-B 6 discordant (2/64), B-C 6 (2/64), A-C 12 (2/4096); Holm over 3
    assert r.p_holm[0][2] == pytest.approx(3 * 2 / 4096)
    assert r.p_holm[0][1] == pytest.approx(2 * 2 / 64) and r.p_holm[1][2] == pytest.approx(2 * 2 / 64)
    assert r.separated[0][2] and not r.separated[0][1] and not r.separated[1][2]
    assert r.letters == ("a", "ab", "b")
    assert r.delta[0][2] == pytest.approx(-0.6)  # C minus A


# --------------------------------------------------------------------------- the committed file


def test_committed_ppl_file_paired_interval_at_least_5x_narrower():
    """One document per length in this file: units are its 512-position buckets (blocks)."""
    from ctxbench.results.store import read_records

    records = read_records(ROOT / "results" / "ppl-smollm2-x4-1k-32k.csv")

    def cell(label, n):
        return [r for r in records if r["label"] == label and r["length"] == str(n)]

    def log_width(label, n):
        value = {r["metric"]: float(r["value"]) for r in cell(label, n) if r["doc"] == "all"}
        return math.log(value["ppl_hi"] / value["ppl_lo"])

    for n in (2048, 4096):
        p = paired_ppl(cell("none", n), cell("yarn", n))
        assert p.unit == "blocks" and p.n == n // 512
        paired_width = math.log(p.ratio_hi / p.ratio_lo)
        assert min(log_width("none", n), log_width("yarn", n)) >= 5 * paired_width


@pytest.mark.integration
def test_paired_module_imports_no_numpy_at_load():
    tree = ast.parse((ROOT / "ctxbench" / "report" / "paired.py").read_text())
    top = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    top |= {(n.module or "").split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom) if n.level == 0}
    assert top <= {"__future__", "json", "math", "collections", "dataclasses", "typing", "ctxbench"}, top  # ctxbench: its own light modules
    code = "import sys, ctxbench.report.paired; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_a_baseline_in_a_table_set_apart_by_options_is_named_with_the_fix():
    """yarn run with --chat, ntk without: two tables; --baseline yarn on ntk's says where yarn is."""
    from ctxbench.report.formats import pivots

    yarn = [{**r, "options": '{"chat": true}'} for r in trial_rows("yarn", [1, 0, 1, 1])]
    ntk = trial_rows("ntk", [1, 1, 1, 1])
    with pytest.raises(UserError) as info:
        pivots(yarn + ntk, baseline="yarn")
    line = info.value.line()
    assert "--baseline 'yarn' is not in" in line and "a table of its own" in line and "the same --chat" in line, line


def test_metrics_only_add_rows_so_a_run_with_them_pairs_with_a_run_without():
    """--metrics answer_nll adds rows and changes no accuracy: ntk run with it and yarn run without
    it share one table, and the paired comparison pairs their trials (the passkey task declares
    its --metrics as adding rows)."""
    from ctxbench.report.formats import pivots
    from ctxbench.tasks import registry

    yarn = trial_rows("yarn", [1, 0, 1, 0])
    ntk = [{**r, "options": '{"metrics": ["answer_nll"]}'} for r in trial_rows("ntk", [1, 1, 1, 1])]
    headline = [p for p in pivots(yarn + ntk, registry(), baseline="yarn") if p.headline]
    assert len(headline) == 1 and set(headline[0].rows) == {"yarn", "ntk"}
    cell = headline[0].rows["ntk"][2048]
    assert cell.paired_n == 4 and cell.delta == pytest.approx(0.5)


def test_a_cell_run_with_and_without_metrics_counts_each_trial_once():
    """The same yarn cell in a file twice, once with --metrics: one table cell of 4 trials, its
    latest run's rows, and a paired comparison on 4 trials (not 8, and no "two rows" error). No
    task is installed here: --metrics is known to add rows all the same."""
    from ctxbench.report.formats import pivots
    from ctxbench.report.paired import compare_labels

    first = trial_rows("yarn", [1, 0, 1, 0])
    again = [{**r, "options": '{"metrics": ["answer_nll"]}'} for r in trial_rows("yarn", [1, 0, 1, 0])]
    ntk = trial_rows("ntk", [1, 1, 1, 1])
    [table] = [p for p in pivots(first + again + ntk) if p.headline]
    cell = table.rows["yarn"][2048]
    assert cell.value == 0.5 and len([r for r in cell.source if r["trial"] != "all"]) == 4
    assert all(r["options"] == again[0]["options"] for r in cell.source)
    [c] = compare_labels(first + again + ntk, "yarn")
    assert c.n == 4 and c.delta == pytest.approx(0.5)
