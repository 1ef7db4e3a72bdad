"""The nightly gate on the committed baseline (issues 22 and 23): a rerun on the same weights and
data has no run-to-run noise, so a regression the old interval rule waved through fails, a
flipped retrieval trial is named, a tiny change is reported, and a NaN never passes."""

from __future__ import annotations

import csv
import math
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT

pytestmark = pytest.mark.integration  # runs the CLI or Python in a subprocess

BASELINE = ROOT / "results" / "baseline-nightly.csv"


def _rows() -> tuple[list[str], list[dict]]:
    with BASELINE.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames), list(reader)


def _write(path: Path, header: list[str], rows: list[dict]) -> str:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def _compare(base: str, new: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ctxbench", "compare", base, new, "--format", "markdown", *args], capture_output=True, text=True, timeout=120)


def _ppl_cell(row: dict) -> bool:
    return row["task"] == "ppl" and row["label"] == "yarn" and row["length"] == "8192"


def _worse_ppl(rows: list[dict], factor: float) -> list[dict]:
    """One perplexity cell made worse the way a real regression would be: ppl and its interval
    times ``factor``, every NLL plus log(factor)."""
    out = []
    for r in rows:
        r = dict(r)
        if _ppl_cell(r):
            if r["metric"] in ("ppl", "ppl_lo", "ppl_hi"):
                r["value"] = repr(float(r["value"]) * factor)
            elif r["metric"].startswith("nll"):
                r["value"] = repr(float(r["value"]) + math.log(factor))
        out.append(r)
    return out


def _passkey_cell(row: dict) -> bool:
    return row["task"] == "passkey" and row["label"] == "yarn" and row["length"] == "4096"


def _halved_passkey(rows: list[dict]) -> list[dict]:
    """The yarn passkey cell at 4k with half its trials now wrong (accuracy 1.0 -> 0.5), with the
    Wilson interval a run writes for 2 of 4 (a value outside its own interval is refused)."""
    from ctxbench.stats import wilson

    lo, hi = wilson(2, 4)
    out = []
    for r in rows:
        r = dict(r)
        if _passkey_cell(r):
            if r["metric"] == "correct" and r["trial"] in ("0", "1"):
                r["value"], r["answer"] = "0", "12345"
            elif r["metric"] in ("accuracy", "accuracy_lo", "accuracy_hi"):
                r["value"] = repr({"accuracy": 0.5, "accuracy_lo": lo, "accuracy_hi": hi}[r["metric"]])
        out.append(r)
    return out


def test_the_baseline_compared_with_itself_is_clean():
    proc = _compare(str(BASELINE), str(BASELINE), "--strict")
    assert proc.returncode == 0, proc.stdout
    assert "changed" not in proc.stdout.split("\n", 1)[0]


@pytest.mark.parametrize("factor", [1.10, 1.50])
def test_a_whole_perplexity_cell_made_worse_fails_the_gate(tmp_path, factor):
    header, rows = _rows()
    assert sum(_ppl_cell(r) for r in rows) > 3
    proc = _compare(str(BASELINE), _write(tmp_path / "new.csv", header, _worse_ppl(rows, factor)))
    assert proc.returncode == 1, proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| ppl | yarn | 2 | 8192 |"))
    assert "**worse**" in line and "rerun on the same weights and data" in line


def test_a_retrieval_cell_whose_accuracy_halves_fails_and_names_the_flipped_trials(tmp_path):
    header, rows = _rows()
    assert any(_passkey_cell(r) and r["metric"] == "accuracy" and float(r["value"]) == 1.0 for r in rows)
    proc = _compare(str(BASELINE), _write(tmp_path / "new.csv", header, _halved_passkey(rows)))
    assert proc.returncode == 1, proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| passkey | yarn | 2 | 4096 |") and "accuracy" in ln)
    assert "**worse**" in line and "right -> wrong: depth 0.5 trial 0, depth 0.5 trial 1" in line


def test_a_change_of_one_part_in_a_million_is_reported_and_fails_only_when_strict(tmp_path):
    header, rows = _rows()
    moved = [{**r, "value": repr(float(r["value"]) * (1 + 1e-6))} if _ppl_cell(r) and r["metric"] == "ppl" else r for r in rows]
    new = _write(tmp_path / "new.csv", header, moved)
    proc = _compare(str(BASELINE), new)
    assert proc.returncode == 0, proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| ppl | yarn | 2 | 8192 |"))
    assert "| changed |" in line and "+1.00e-06 relative" in line
    assert _compare(str(BASELINE), new, "--strict").returncode == 1


@pytest.mark.parametrize("bad", ["nan", "inf", "oops", ""])
def test_a_value_that_is_no_longer_a_number_fails_and_names_its_cell(tmp_path, bad):
    header, rows = _rows()
    broken = [{**r, "value": bad} if _ppl_cell(r) and r["metric"] == "ppl" and r["doc"] == "all" else r for r in rows]
    proc = _compare(str(BASELINE), _write(tmp_path / "new.csv", header, broken))
    assert proc.returncode == 1, proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| ppl | yarn | 2 | 8192 |"))
    assert "**failed**" in line and "in NEW where BASE had" in line


def test_a_minus_infinite_perplexity_is_refused_as_out_of_its_domain(tmp_path):
    header, rows = _rows()
    broken = [{**r, "value": "-inf"} if _ppl_cell(r) and r["metric"] == "ppl" and r["doc"] == "all" else r for r in rows]
    proc = _compare(str(BASELINE), _write(tmp_path / "new.csv", header, broken))
    assert proc.returncode == 2, proc.stdout  # no run can produce it: bad input, not a regression
    assert proc.stderr.count("\n") == 1 and "yarn x2.0 at length 8192" in proc.stderr and "delete every row of that cell" in proc.stderr


def test_other_data_is_judged_beyond_noise_not_as_a_rerun(tmp_path):
    header, rows = _rows()
    other = [{**r, "data_digest": "sha256:0000000000000000"} for r in _worse_ppl(rows, 1.10)]
    proc = _compare(str(BASELINE), _write(tmp_path / "new.csv", header, other))
    assert "digests differ" in proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| ppl | yarn | 2 | 8192 |"))
    assert "rerun" not in line


def _as_bf16(rows: list[dict], scale: float = 1.0) -> list[dict]:
    """The baseline as a bfloat16 run would write it: every row's dtype, and perplexity values
    (and their intervals) times ``scale``, as rounding would move them."""
    out = []
    for r in rows:
        r = {**r, "dtype": "bfloat16"}
        if r["task"] == "ppl" and r["metric"] in ("ppl", "ppl_lo", "ppl_hi"):
            r["value"] = repr(float(r["value"]) * scale)
        out.append(r)
    return out


def test_bf16_rows_are_not_gated_against_float32_rows_unless_asked(tmp_path):
    header, rows = _rows()
    assert {r["dtype"] for r in rows} == {"float32"}
    proc = _compare(str(BASELINE), _write(tmp_path / "bf16.csv", header, _as_bf16(rows)))
    assert proc.returncode == 1, proc.stdout  # every cell is missing from NEW: no silent pass
    assert "cells of different dtypes are not compared" in proc.stdout and "--across-dtypes" in proc.stdout
    assert "| effective_length |" not in proc.stdout  # effective lengths are not matched across dtypes either


def test_across_dtypes_matches_the_cells_and_judges_them_beyond_noise_never_as_reruns(tmp_path):
    header, rows = _rows()
    new = _write(tmp_path / "bf16.csv", header, _as_bf16(rows, scale=1 + 1e-6))
    proc = _compare(str(BASELINE), new, "--across-dtypes", "--strict")
    assert proc.returncode == 0, proc.stdout  # a rounding-sized move is no failure, even with --strict
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| ppl | yarn | 2 | 8192 |"))
    assert "| ok |" in line and "rerun" not in line
    assert "float32 cells in BASE are compared with bfloat16 cells in NEW" in proc.stdout


def test_across_dtypes_still_fails_a_cell_that_got_worse_beyond_noise(tmp_path):
    header, rows = _rows()
    new = _write(tmp_path / "bf16.csv", header, _as_bf16(_worse_ppl(rows, 3.0)))
    proc = _compare(str(BASELINE), new, "--across-dtypes")
    assert proc.returncode == 1, proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| ppl | yarn | 2 | 8192 |"))
    assert "**worse**" in line


def _niah_cell(row: dict) -> bool:
    return row["task"] == "niah" and row["label"] == "yarn" and row["length"] == "12288"


def test_a_needle_whose_answer_nll_grew_fails_the_gate_though_every_trial_still_passes(tmp_path):
    """The nightly niah cells carry ``--metrics answer_nll``: the needle's NLL 10% higher (each
    trial's, the cell's and its interval) fails a rerun while the accuracy is unchanged."""
    header, rows = _rows()
    assert any(_niah_cell(r) and r["metric"] == "answer_nll" for r in rows)
    worse = [{**r, "value": repr(float(r["value"]) * 1.1)} if _niah_cell(r) and r["metric"].startswith("answer_nll") else r
             for r in rows]  # fmt: skip
    proc = _compare(str(BASELINE), _write(tmp_path / "new.csv", header, worse))
    assert proc.returncode == 1, proc.stdout
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("| niah single_1 | yarn | 2 | 12288 |")]
    assert any("| answer_nll |" in ln and "**worse**" in ln and "+10.00%, beyond rtol" in ln for ln in lines), lines
    assert any("| accuracy |" in ln and "| ok |" in ln for ln in lines), lines
