"""Benchmark: the per-cell cost of saving to a results CSV that already holds N rows, in one run.

Naive: every cell re-reads and re-parses the whole file, merges, and rewrites it (what a
many-writer-safe file costs without the shortcuts). ctxbench (``ResultsFile.add``): takes the
lock, sees from (device, inode, size, mtime) that the file is the version it wrote last and
skips the re-read, appends the cell's rows to the bytes it holds, writes temp + fsync + rename.
"other wrote" is the same with a second writer adding a cell before every one of ours, so each
add re-reads, but only the appended rows (the file's start is the bytes it knows).

    python scripts/bench_results.py                    # 1k, 10k, 100k rows, 11-row cells
    python scripts/bench_results.py --rows 1000,100000 --cells 10
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from ctxbench.results.identity import cell_key
from ctxbench.results.store import ResultsFile, Row, read_records, write_records

ROWS_PER_CELL = 11  # a ppl cell with 3 documents: nll+ppl per doc and overall, docs, tokens/s, memory


def _cell(i: int, writer: str = "a") -> list[Row]:
    return [
        Row(run_id=f"20261123T000000-{writer}", time="2026-11-23T00:00:00+00:00", model="smollm2-135m",
            model_digest="sha256:55a445f529f49b1c", dataset="pg19", data_digest="sha256:48b04f7137915ce3", task="ppl",
            method=f"yarn-{writer}", factor=float(1 + i % 8), length=1024 * (1 + i // 8), stride=1024, depth="", trial="",
            doc=f"doc{j}", metric="ppl" if j % 2 else "nll", value=3.14159 * (i + j), tokens=1023, seconds=0.5,
            status="ok", device="cuda", dtype="bfloat16", seed=0,
            method_params=json.dumps({"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True, "attention_factor": None}),
            ctxbench_version="0.1.0", torch_version="2.13.0", transformers_version="5.23.0", mode="truncate",
            extra=json.dumps({"trained_len": 8192}))
        for j in range(ROWS_PER_CELL)
    ]  # fmt: skip


def _naive_add(path: Path, rows: list[Row]) -> None:
    new = [r.as_strings() for r in rows]
    keys = {cell_key(r) for r in new}
    records = [r for r in read_records(path) if cell_key(r) not in keys] + new
    write_records(path, records)


def bench(n_rows: int, cells: int) -> dict[str, float]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.csv"
        write_records(path, [r.as_strings() for i in range(n_rows // ROWS_PER_CELL) for r in _cell(i, "old")])
        out["MB"] = path.stat().st_size / 1e6
        start = n_rows  # cell indices not in the file yet

        t = time.perf_counter()
        for i in range(cells):
            _naive_add(path, _cell(start + i, "naive"))
        out["naive"] = (time.perf_counter() - t) / cells

        results = ResultsFile(path)
        results.add(_cell(start, "a"))  # the first add after a foreign write re-reads; time the steady state
        t = time.perf_counter()
        for i in range(1, cells + 1):
            results.add(_cell(start + i, "a"))
        out["ctxbench"] = (time.perf_counter() - t) / cells

        other = ResultsFile(path)
        t = time.perf_counter()
        for i in range(cells):
            other.add(_cell(start + i, "b"))
            t0 = time.perf_counter()
            results.add(_cell(start + cells + 1 + i, "a"))
            out["other wrote"] = out.get("other wrote", 0.0) + time.perf_counter() - t0
        out["other wrote"] /= cells
        assert len(read_records(path)) == (n_rows // ROWS_PER_CELL + 4 * cells + 1) * ROWS_PER_CELL
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1000,10000,100000", help="comma list of rows already in the file")
    ap.add_argument("--cells", type=int, default=10, help="cells added per measurement")
    args = ap.parse_args()
    print(f"per-cell add() of {ROWS_PER_CELL} rows, mean of {args.cells} cells")
    print(f"{'rows':>8} {'MB':>6} {'naive ms':>9} {'ctxbench ms':>12} {'ratio':>6} {'other wrote ms':>15} {'ratio':>6}")
    for n in (int(x) for x in args.rows.split(",")):
        r = bench(n, args.cells)
        print(f"{n:>8} {r['MB']:>6.1f} {r['naive'] * 1e3:>9.1f} {r['ctxbench'] * 1e3:>12.1f} "
              f"{r['naive'] / r['ctxbench']:>6.1f} {r['other wrote'] * 1e3:>15.1f} {r['naive'] / r['other wrote']:>6.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
