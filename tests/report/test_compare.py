"""`ctxbench compare`: exit codes on crafted files and markdown for a CI summary."""

from __future__ import annotations

import subprocess

import pytest

from ctxbench.results.store import COLUMNS, write_records

pytestmark = pytest.mark.integration  # runs the CLI or Python in a subprocess


def _row(task="ppl", method="yarn", length=4096, value=10.0, metric=None, status="ok", depth=""):
    metric = metric or ("ppl" if task == "ppl" else "accuracy")
    row = {c: "" for c in COLUMNS}
    row.update(
        run_id="r", time="t", model="m", model_digest="md", dataset="d", data_digest="dd", task=task, method=method,
        factor=2.0, length=length, stride=length if task == "ppl" else "", depth=depth, metric=metric, value=value,
        status=status, seed=0, method_params="{}", doc="all" if task == "ppl" else "", trial="all" if task == "passkey" else "",
    )
    return row


def _files(tmp_path, base_rows, new_rows):
    base, new = tmp_path / "base.csv", tmp_path / "new.csv"
    write_records(base, base_rows)
    write_records(new, new_rows)
    return str(base), str(new)


def _compare(*args):
    return subprocess.run(["ctxbench", "compare", *args], capture_output=True, text=True, timeout=120)


BASE = [_row(), _row(length=8192, value=20.0), _row(task="passkey", value=1.0, depth=0.5)]


@pytest.mark.parametrize(
    "new,code",
    [
        (BASE, 0),
        ([_row(value=10.5), *BASE[1:]], 1),  # ppl up 5% > 2%
        ([_row(value=10.1), *BASE[1:]], 0),  # ppl up 1%: within tolerance
        ([_row(value=9.0), *BASE[1:]], 0),  # better
        ([*BASE[:2], _row(task="passkey", value=0.5, depth=0.5)], 1),  # accuracy down
        (BASE[:2], 1),  # a baseline cell is missing
        ([_row(metric="error", value="", status="oom"), *BASE[1:]], 1),  # failed in NEW
        ([*BASE, _row(method="ntk")], 0),  # a new cell is not a regression
    ],
)
def test_exit_code_says_whether_anything_got_worse(tmp_path, new, code):
    proc = _compare(*_files(tmp_path, BASE, new))
    assert proc.returncode == code, proc.stdout + proc.stderr


def test_rtol_widens_the_tolerance(tmp_path):
    base, new = _files(tmp_path, BASE, [_row(value=10.5), *BASE[1:]])
    assert _compare(base, new, "--rtol", "0.1").returncode == 0


def test_markdown_is_a_table_for_the_job_summary(tmp_path):
    proc = _compare(*_files(tmp_path, BASE, [_row(value=11.0), *BASE[1:]]), "--format", "markdown")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("### ctxbench compare: FAIL")
    assert any(line.startswith("| ppl | yarn | 2 | 4096 |") and "+10.00%" in line and "**worse**" in line for line in lines)


@pytest.mark.parametrize("kind", ["truncated", "foreign", "missing"])
def test_bad_files_exit_2_and_stay_untouched(tmp_path, kind):
    base, _ = _files(tmp_path, BASE, BASE)
    bad = tmp_path / "bad.csv"
    if kind == "truncated":
        bad.write_text(",".join(COLUMNS) + "\n" + "x," * 5)
    elif kind == "foreign":
        bad.write_text("a,b\n1,2\n")
    before = bad.read_bytes() if bad.exists() else None
    proc = _compare(base, str(bad))
    assert proc.returncode == 2 and proc.stderr.startswith("error: ")
    assert (bad.read_bytes() if bad.exists() else None) == before


def _with_interval(value, lo, hi, length=4096, data_digest="dd"):
    rows = [_row(value=value, length=length), _row(value=lo, metric="ppl_lo", length=length), _row(value=hi, metric="ppl_hi", length=length)]
    return [{**r, "data_digest": data_digest} for r in rows]


def test_on_other_data_a_move_within_its_noise_passes_and_a_10_percent_regression_fails(tmp_path):
    base = _with_interval(10.0, 9.0, 11.2)
    noisy = _with_interval(10.6, 9.5, 11.8, data_digest="other")  # +6% > rtol, but the intervals overlap
    assert _compare(*_files(tmp_path, base, noisy)).returncode == 0
    worse = _with_interval(11.0, 10.9, 11.1, data_digest="other")  # +10%, intervals apart
    proc = _compare(*_files(tmp_path, _with_interval(10.0, 9.9, 10.1), worse), "--format", "markdown")
    assert proc.returncode == 1 and "do not overlap" in proc.stdout


def test_a_rerun_on_the_same_weights_and_data_has_no_noise_to_hide_in(tmp_path):
    base = _with_interval(10.0, 9.0, 11.2)
    moved = _with_interval(10.6, 9.5, 11.8)  # +6% with overlapping intervals, but the same digests: real
    proc = _compare(*_files(tmp_path, base, moved), "--format", "markdown")
    assert proc.returncode == 1 and "rerun on the same weights and data" in proc.stdout


def test_a_shrinking_effective_length_is_worse(tmp_path):
    base = [_row(task="passkey", value=1.0, length=n) for n in (1024, 2048, 4096)]
    new = [_row(task="passkey", value=v, length=n) for n, v in ((1024, 1.0), (2048, 1.0), (4096, 0.5))]
    proc = _compare(*_files(tmp_path, base, new), "--rtol", "0.9", "--format", "markdown")
    assert proc.returncode == 1 and "effective length shrank from 4096 to 2048" in proc.stdout


PASSKEY = {**BASE[2], "options": '{"chat": false, "digits": 5}'}  # as passkey writes them


def _passkey_with_answer_nll(nll: float) -> list[dict]:
    """The passkey cell of BASE run with ``--metrics answer_nll``: its accuracy and the proxy's rows."""
    cell = {**PASSKEY, "options": '{"chat": false, "digits": 5, "metrics": ["answer_nll"]}'}
    return [cell, *({**cell, "metric": "answer_nll" + s, "value": nll * k} for s, k in (("", 1.0), ("_lo", 0.9), ("_hi", 1.1)))]


def test_a_cell_run_with_metrics_meets_the_same_cell_run_without(tmp_path):
    proc = _compare(*_files(tmp_path, [*BASE[:2], PASSKEY], [*BASE[:2], *_passkey_with_answer_nll(0.1)]), "--format", "markdown")
    assert proc.returncode == 0, proc.stdout
    assert "| passkey | yarn | 2 | 4096 | 0.5 | accuracy | 1 | 1 | +0 | ok |" in proc.stdout  # one cell, not missing + new
    assert "answer_nll: measured in one file only for 1 cell(s), not compared" in proc.stdout


@pytest.mark.parametrize("nll,code,status", [(0.12, 1, "**worse**"), (0.08, 0, "better"), (0.1, 0, "ok")])
def test_a_proxy_metric_in_both_files_is_gated_lower_being_better(tmp_path, nll, code, status):
    base, new = _files(tmp_path, [*BASE[:2], *_passkey_with_answer_nll(0.1)], [*BASE[:2], *_passkey_with_answer_nll(nll)])
    proc = _compare(base, new, "--format", "markdown")
    assert proc.returncode == code, proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| passkey | yarn |") and "| answer_nll |" in ln)
    assert f"| {status} |" in line

