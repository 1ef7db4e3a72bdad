"""Many writers, one results CSV: no finished cell lost, none written twice (issue 15)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
from helpers import ROOT

from ctxbench.errors import UserError
from ctxbench.results import store as results_module
from ctxbench.results.identity import cell_key, row_key
from ctxbench.results.store import COLUMNS, ResultsFile, lock_path, read_records

WORKERS, CELLS, ROWS = 6, 15, 3  # per worker: cells; per cell: rows


def _rows(method: str, length: int, status: str = "ok", value: float = 1.0) -> list[dict]:
    base = dict.fromkeys(COLUMNS, "")
    base.update(model_digest="m", data_digest="d", task="ppl", method=method, label=method, method_params="{}", options="{}", factor="2",
                length=str(length), seed="0", status=status, run_id=method, extra=f'{{"cell_rows": {ROWS}}}')  # fmt: skip
    return [{**base, "doc": f"doc{i}", "metric": "ppl", "value": repr(value + i)} for i in range(ROWS)]


def _check_complete(path: Path, methods: list[str], cells: int = CELLS) -> None:
    records = read_records(path)
    keys = [row_key(r) for r in records]
    assert len(keys) == len(set(keys)), "a row was written twice"
    have = {(r["method"], int(r["length"])) for r in records}
    want = {(m, n) for m in methods for n in range(cells)}
    assert have == want, f"lost cells: {sorted(want - have)[:5]}"
    assert len(records) == len(want) * ROWS
    assert not list(path.parent.glob(f".{path.name}.*.tmp"))


def _writer(path: str, method: str, barrier) -> None:
    results = ResultsFile(path)  # made before the others write: its copy goes stale at once
    barrier.wait()
    for n in range(CELLS):
        results.add(_rows(method, n))


def test_many_processes_calling_add_lose_no_cell(tmp_path):
    path = tmp_path / "out.csv"
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(WORKERS)
    procs = [ctx.Process(target=_writer, args=(str(path), f"w{i}", barrier)) for i in range(WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * WORKERS
    _check_complete(path, [f"w{i}" for i in range(WORKERS)])
    assert lock_path(path).exists() and lock_path(path).name == ".out.csv.lock"


def test_many_threads_calling_add_lose_no_cell(tmp_path):
    path = tmp_path / "out.csv"
    shared = ResultsFile(path)
    barrier = threading.Barrier(WORKERS)
    errors = []

    def work(i: int) -> None:
        try:
            results = shared if i % 2 else ResultsFile(path)  # one object shared by threads, and one each
            barrier.wait()
            for n in range(CELLS):
                results.add(_rows(f"t{i}", n))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    _check_complete(path, [f"t{i}" for i in range(WORKERS)])


def test_second_writer_sees_and_keeps_the_first_ones_cells(tmp_path):
    path = tmp_path / "out.csv"
    a, b = ResultsFile(path), ResultsFile(path)
    a.add(_rows("a", 0))
    assert cell_key(_rows("a", 0)[0]) in b.done_cells()  # re-read: b skips a's cell
    b.add(_rows("b", 0, status="oom"))
    a.add(_rows("b", 0, value=5.0))  # a retries b's failed cell: replaced, not duplicated
    b.add(_rows("b", 1))
    records = read_records(path)
    assert sorted((r["method"], r["length"], r["status"]) for r in records) == sorted(
        [("a", "0", "ok")] * ROWS + [("b", "0", "ok")] * ROWS + [("b", "1", "ok")] * ROWS
    )
    assert {r["value"] for r in records if r["length"] == "0" and r["method"] == "b"} == {"5.0", "6.0", "7.0"}
    assert len(a.records) == len(b.records) == len(records)


def test_no_resume_starts_afresh_once_and_keeps_later_writers_rows(tmp_path):
    path = tmp_path / "out.csv"
    ResultsFile(path).add(_rows("old", 0))
    fresh = ResultsFile(path, resume=False)
    assert fresh.done_cells() == {} and fresh.records == []
    other = ResultsFile(path)
    other.add(_rows("other", 0))  # written after `fresh` started: must survive its first write
    fresh.add(_rows("fresh", 0))
    other.add(_rows("other", 1))
    fresh.add(_rows("fresh", 1))
    methods = sorted({(r["method"], r["length"]) for r in read_records(path)})
    assert methods == [("fresh", "0"), ("fresh", "1"), ("other", "0"), ("other", "1")]


def test_no_resume_replaces_a_damaged_file(tmp_path):
    path = tmp_path / "out.csv"
    path.write_text(",".join(COLUMNS) + "\nonly,three,fields\n")
    with pytest.raises(UserError):
        ResultsFile(path)
    fresh = ResultsFile(path, resume=False)
    assert fresh.done_cells() == {}
    fresh.add(_rows("fresh", 0))
    assert {r["method"] for r in read_records(path)} == {"fresh"}


def test_add_does_not_reread_an_unchanged_file(tmp_path, monkeypatch):
    path = tmp_path / "out.csv"
    results = ResultsFile(path)
    results.add(_rows("a", 0))
    calls = []
    real_parse, real_rows = results_module._parse, results_module._parse_rows
    monkeypatch.setattr(results_module, "_parse", lambda *a, **k: calls.append("whole") or real_parse(*a, **k))
    monkeypatch.setattr(results_module, "_parse_rows", lambda *a, **k: calls.append("rows") or real_rows(*a, **k))
    for n in range(1, 5):
        results.add(_rows("a", n))
    results.done_cells()
    assert calls == []  # only our own writes: nothing read back
    ResultsFile(path).add(_rows("b", 0))  # another writer appends
    results.add(_rows("a", 5))
    assert calls[-1] == "rows"  # only the appended tail was parsed
    assert len(read_records(path)) == 7 * ROWS


def test_a_damaged_row_names_file_line_and_fix(tmp_path):
    path = tmp_path / "out.csv"
    good = [{"length": "64", "seed": "0", "factor": "", "stride": "", "depth": ""}.get(c, "x") for c in COLUMNS]  # typed key columns
    quoted = list(good)
    quoted[-1] = '"two\nlines"'  # a quoted field spanning two physical lines
    path.write_text("\n".join([",".join(COLUMNS), ",".join(quoted), ",".join(good[:5]), ",".join(good)]) + "\n")
    with pytest.raises(UserError) as info:
        read_records(path)
    message = str(info.value)
    assert str(path) in message and "line 4 has 5 fields" in message and "delete line 4" in message


def _cli(model, corpus, out, methods):
    return [sys.executable, "-m", "ctxbench", "ppl", "--model", str(model), "--dataset", str(corpus), "--method", methods,
            "--factor", "1,2,3,4,6,8", "--len", "32,64,100,200", "--docs", "3", "--out", str(out), "--device", "cpu"]  # fmt: skip


METHODS = {"A": "none,linear,ntk,yarn", "B": "ntk-by-parts,llama3,dynamic-ntk,dynamic-yarn"}


@pytest.mark.integration
def test_two_processes_with_the_same_out_keep_both_grids(saved_model, corpus_dir, tmp_path):
    out = tmp_path / "out.csv"
    env = {**os.environ, "CTXBENCH_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    procs = {k: subprocess.Popen(_cli(saved_model, corpus_dir, out, m), env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True) for k, m in METHODS.items()}  # fmt: skip
    for k, proc in procs.items():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{k}: {err[-1000:]}"
    records = read_records(out)
    keys = [row_key(r) for r in records]
    assert len(keys) == len(set(keys)), "a row was written twice"
    summary = [r for r in records if r["doc"] == "all" and r["metric"] == "docs"]  # one per cell
    cells = {cell_key(r) for r in summary}
    # none and dynamic-yarn ignore the factor: they run once per length, the other six at every factor
    assert len(cells) == len(summary) == 6 * 6 * 4 + 2 * 4, "a cell is missing or written twice"
    for m in ",".join(METHODS.values()).split(","):
        assert sum(r["method"] == m for r in summary) == (4 if m in ("none", "dynamic-yarn") else 6 * 4), m
    per_cell = Counter(cell_key(r) for r in records)
    # per document nll and ppl; nll, ppl, ppl_lo, ppl_hi, docs, tokens_per_s, peak_mem_mb and one
    # nll_pos bucket per cell; nll_beyond_L where the length passes the trained 64
    assert all(per_cell[cell_key(r)] == 2 * int(float(r["value"])) + 8 + (int(r["length"]) > 64) for r in summary), "a cell lost rows"
    runs = [r["run_id"] for r in records]
    switches = sum(a != b for a, b in zip(runs, runs[1:], strict=False))
    print(f"writers interleaved: {switches} switches between the two runs' rows")
