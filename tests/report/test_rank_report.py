"""`report --baseline` and `rank` show the paired comparisons (issue 22) in every format."""

from __future__ import annotations

import csv
import io
import json
import subprocess

import pytest
from helpers import ROOT

pytestmark = pytest.mark.integration  # runs the CLI or Python in a subprocess

NIAH = ROOT / "results" / "niah-smollm2-x2.csv"


def _ctxbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ctxbench", *args], capture_output=True, text=True, timeout=120)


def test_report_with_a_baseline_adds_the_paired_difference_to_every_cell_in_csv():
    proc = _ctxbench("report", str(NIAH), "--baseline", "yarn", "--len", "16k", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    rows = {r["method"]: r for r in csv.DictReader(io.StringIO(proc.stdout))}
    assert rows["yarn"]["delta"] == ""  # the baseline itself
    rerope = rows["rerope"]
    assert float(rerope["delta"]) == 0.4 and float(rerope["paired_n"]) == 10
    assert float(rerope["delta_lo"]) <= 0.4 <= float(rerope["delta_hi"])
    assert float(rerope["p_value"]) == 0.125  # 4 discordant trials, all one way: exact McNemar
    assert float(rerope["p_holm"]) >= float(rerope["p_value"])


def test_report_with_a_baseline_shows_the_paired_difference_in_json_and_markdown():
    proc = _ctxbench("report", str(NIAH), "--baseline", "yarn", "--len", "16k", "--format", "json")
    cells = {row["method"]: row["cells"]["16384"] for row in json.loads(proc.stdout)[0]["rows"]}
    assert cells["none"]["delta"] == -0.6 and cells["none"]["paired_n"] == 10
    md = _ctxbench("report", str(NIAH), "--baseline", "yarn", "--len", "16k", "--format", "markdown").stdout
    assert "| rerope | 100% [72%–100%] n=10 (Δ +40 pts [" in md and "p=0.12, Holm 0.5)" in md


def test_report_prints_the_raw_p_beside_the_holm_adjusted_one():
    """The raw p is the pair's own, the same in any report; the adjusted one depends on the family."""
    rows = json.loads(_ctxbench("report", str(NIAH), "--baseline", "yarn", "--len", "16k", "--format", "json").stdout)[0]["rows"]
    rerope = next(r for r in rows if r["method"] == "rerope")["cells"]["16384"]
    md = _ctxbench("report", str(NIAH), "--baseline", "yarn", "--len", "16k", "--format", "markdown").stdout
    assert f"p={rerope['p_value']:.2g}, Holm {rerope['p_holm']:.2g})" in md
    alone = _ctxbench("report", str(NIAH), "--baseline", "yarn", "--method", "yarn,rerope", "--len", "16k", "--format", "markdown").stdout
    assert f"p={rerope['p_value']:.2g}, Holm {rerope['p_value']:.2g})" in alone  # a family of one: adjusted = raw


def test_rank_prints_each_pairs_raw_p_beside_its_adjusted_one():
    (r,) = json.loads(_ctxbench("rank", str(NIAH), "--len", "16k", "--format", "json").stdout)
    i, j = r["labels"].index("rerope"), r["labels"].index("none")
    assert r["p_value"][i][j] == 0.001953125 and r["p_holm"][i][j] > r["p_value"][i][j]  # 10 trials, all one-way discordant: 2/2^10
    md = _ctxbench("rank", str(NIAH), "--len", "16k", "--format", "markdown").stdout
    assert f"≠ {r['p_holm'][i][j]:.2g} ({r['p_value'][i][j]:.2g})" in md


def test_rank_orders_the_methods_and_separates_only_what_the_paired_tests_separate():
    proc = _ctxbench("rank", str(NIAH), "--len", "16k", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    (r,) = json.loads(proc.stdout)
    assert r["labels"][:2] == ["rerope", "self-extend"] and r["labels"][-1] == "none"
    i, j = r["labels"].index("rerope"), r["labels"].index("none")
    assert r["separated"][i][j] and not r["separated"][i][r["labels"].index("yarn")]
    assert r["letters"][i] == "a" and r["letters"][j] == "b"


def test_rank_at_a_length_without_cells_names_the_lengths_there_are():
    proc = _ctxbench("rank", str(NIAH), "--len", "3k")
    assert proc.returncode == 2 and "no cell at length 3072" in proc.stderr and "16k" in proc.stderr
