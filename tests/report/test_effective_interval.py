"""The effective length with its uncertainty (issue 22): a percentile bootstrap over each length's
trials or documents, shown beside it in every report format."""

from __future__ import annotations

import csv
import io
import math
import subprocess

import pytest
from helpers import ROOT

from ctxbench.report.effective import effective_interval, effective_length
from ctxbench.report.pivot import PivotCell


def _trials(length: int, correct: int, n: int = 10) -> PivotCell:
    rows = tuple({"length": str(length), "depth": "0.5", "trial": str(t), "metric": "correct", "value": str(int(t < correct)), "doc": ""}
                 for t in range(n))  # fmt: skip
    return PivotCell(correct / n, source=rows)


def test_a_method_right_every_time_has_no_uncertainty_in_its_effective_length():
    cells = {1024: _trials(1024, 10), 2048: _trials(2048, 10), 4096: _trials(4096, 10)}
    assert effective_interval(cells, True) == (4096, 4096)


def test_a_borderline_length_makes_the_interval_reach_back_to_the_last_sure_one():
    # 9/10 at 2k passes the 85% rule, but a resample with 8 or fewer right (p ~ 0.26) fails it
    cells = {1024: _trials(1024, 10), 2048: _trials(2048, 9), 4096: _trials(4096, 2)}
    assert effective_length({n: c.value for n, c in cells.items()}, True) == 2048
    assert effective_interval(cells, True) == (1024, 2048)


def test_the_interval_matches_a_plain_resampling_loop():
    import random

    cells = {1024: _trials(1024, 10), 2048: _trials(2048, 9), 4096: _trials(4096, 9)}
    rng = random.Random(1)
    found = []
    for _ in range(4000):  # the obviously-correct reference: resample each length's trials, apply the rule
        values = {}
        for n, c in cells.items():
            outcomes = [int(r["value"]) for r in c.source]
            values[n] = sum(rng.choice(outcomes) for _ in outcomes) / len(outcomes)
        found.append(effective_length(values, True) or 0)
    found.sort()
    reference = (found[int(0.025 * 3999)], found[math.ceil(0.975 * 3999)])
    assert effective_interval(cells, True, reps=4000) == reference


def test_cells_without_units_get_no_interval():
    assert effective_interval({1024: PivotCell(1.0), 2048: PivotCell(0.5)}, True) is None


@pytest.mark.integration
def test_report_shows_the_interval_beside_the_effective_length_in_every_format():
    path = str(ROOT / "results" / "niah-smollm2-x2.csv")
    md = subprocess.run(["ctxbench", "report", path, "--format", "markdown"], capture_output=True, text=True, timeout=60).stdout
    assert "| yarn |" in md and md.split("| yarn |", 1)[1].split("\n", 1)[0].rstrip().endswith("| 8k [4k–16k] |")
    rows = list(csv.DictReader(io.StringIO(subprocess.run(["ctxbench", "report", path, "--format", "csv"], capture_output=True,
                                                          text=True, timeout=60).stdout)))  # fmt: skip
    yarn = next(r for r in rows if r["method"] == "yarn")
    assert (yarn["effective_length"], yarn["effective_lo"], yarn["effective_hi"]) == ("8192", "4096", "16384")


def test_a_method_measured_at_one_length_has_no_effective_length(tmp_path):
    """In a table of 2k and 16k, a label with only its 16k cell (70%) gets none: not 16k."""
    from ctxbench.report.effective import annotate
    from ctxbench.report.pivot import Pivot

    p = Pivot("m", "niah", "single_1", "2", "accuracy", True, [2048, 16384], fraction=True)
    p.rows = {"yarn": {2048: _trials(2048, 10), 16384: _trials(16384, 9)}, "yarn+ssmax": {16384: _trials(16384, 7)}}
    annotate([p])
    assert p.effective["yarn"] == 16384
    assert p.effective.get("yarn+ssmax") is None and "yarn+ssmax" not in p.effective_ci


def _two_methods():
    from ctxbench.report.effective import annotate
    from ctxbench.report.pivot import Pivot

    p = Pivot("m", "niah", "single_1", "2", "accuracy", True, [2048, 4096, 8192], fraction=True)
    p.rows = {"passes": {n: _trials(n, 10) for n in p.lengths}, "breaks": {2048: _trials(2048, 10), 4096: _trials(4096, 10),
                                                                            8192: _trials(8192, 2)}}  # fmt: skip
    annotate([p])
    return p


def test_an_effective_length_at_the_longest_length_measured_reads_as_at_least_that_length():
    """Every length passed: 8k is only the longest tested, so it reads ≥8k, not as a limit; a method
    that broke at 8k has a limit, 4k, shown bare."""
    from ctxbench.report.pivot import fmt_effective

    p = _two_methods()
    assert (p.effective["passes"], p.effective["breaks"]) == (8192, 4096)
    assert (fmt_effective(p, "passes"), fmt_effective(p, "breaks")) == ("≥8k", "4k")


def test_the_at_least_flag_is_in_the_csv_and_json_reports():
    import json

    from ctxbench.report.formats import to_csv, to_json

    p = _two_methods()
    rows = {r["method"]: r["effective_all_pass"] for r in csv.DictReader(io.StringIO(to_csv([p])))}
    assert rows == {"passes": "True", "breaks": "False"}
    pivot = json.loads(to_json([p]))[0]  # then RULER's suite score (niah is a RULER task)
    assert {r["method"]: r["effective_all_pass"] for r in pivot["rows"]} == {"passes": True, "breaks": False}
