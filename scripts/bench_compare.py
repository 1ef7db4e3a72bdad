"""Benchmark: ``ctxbench compare A A`` against ``ctxbench report A`` on one synthetic results file.

A nightly gate over a real grid must stay interactive (issue 37: about 100k rows, 9,003 cells,
took 74 s in ``compare``). This builds one file of that size in a temporary folder -- passkey
cells of 8 trials plus ``accuracy`` and its interval (11 rows each) over 29 method cells
(``none`` and 14 yarn labels at factors 2 and 4), 10 lengths and 31 depths -- and runs both
commands in this process, each as the CLI runs it (``ctxbench.cli.main`` with its arguments,
markdown to a discarded stdout), after one warm-up call of each on a small file so imports are
not timed. It prints both times -- wall clock and this process's CPU time, which a machine busy
with other work disturbs less -- and ``compare / report``: ``compare`` reads the file twice and
judges every cell, so a ratio near 2 means it costs what reading and pivoting cost.

    python scripts/bench_compare.py                 # ~99k rows, 8,990 cells
    python scripts/bench_compare.py --depths 3      # ~9.6k rows, for a quick look
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

from ctxbench.results.store import Row, write_records

TRIALS = 8  # per cell, plus accuracy, accuracy_lo, accuracy_hi: 11 rows
LENGTHS = tuple(1024 * (i + 1) for i in range(10))
LABELS = 14  # yarn labels besides none, each at two factors


def _rows(depths: int) -> list[dict]:
    """Every row of the synthetic file (dicts of strings, as the CSV holds them)."""
    common = dict(run_id="20261126T000000-bench00", time="2026-11-26T00:00:00+00:00", model="smollm2-135m",
                  model_digest="sha256:b179c9523d0e6a0f", dataset="passkey", data_digest="sha256:90fe94367af3a9f3",
                  task="passkey", variant="", doc="", stride="", status="ok", device="cpu", dtype="float32", seed=0,
                  options=json.dumps({"chat": False, "digits": 5}), ctxbench_version="0.1.0", torch_version="2.13.0",
                  transformers_version="5.24.0")  # fmt: skip
    methods = [("none", "none", "", "{}")] + [
        (f"yarn(beta_fast={b})", "yarn", f, json.dumps({"beta_fast": float(b)})) for b in range(8, 8 + LABELS) for f in (2.0, 4.0)
    ]
    out = []
    for m, (label, method, factor, params) in enumerate(methods):
        for n, length in enumerate(LENGTHS):
            for d in range(depths):
                depth = round(d / max(1, depths - 1), 4)
                cell = dict(common, method=method, label=label, factor=factor, method_params=params, length=length, depth=depth)
                # right while the length is short, fading with the length and more for a weaker method
                scores = [int((t + m + d) % 10 < 10 - n) for t in range(TRIALS)]
                extra = json.dumps({"cell_rows": TRIALS + 3, "trained_len": 8192})
                for t, s in enumerate(scores):
                    out.append(Row(**cell, trial=t, metric="correct", value=s, tokens=length, seconds=0.5, answer=str(s),
                                   extra=extra).as_strings())  # fmt: skip
                k = sum(scores)
                agg = dict(cell, trial="all", tokens=TRIALS * length, seconds=4.0)
                out.append(Row(**agg, metric="accuracy", value=k / TRIALS,
                               extra=json.dumps({"cell_rows": TRIALS + 3, "trials": TRIALS, "correct": float(k),
                                                 "trained_len": 8192})).as_strings())  # fmt: skip
                lo, hi = _wilson(k, TRIALS)
                out.append(Row(**agg, metric="accuracy_lo", value=lo, extra=extra).as_strings())
                out.append(Row(**agg, metric="accuracy_hi", value=hi, extra=extra).as_strings())
    return out


def _wilson(k: int, n: int) -> tuple[float, float]:
    from ctxbench.stats import wilson

    return wilson(k, n)


def _timed(argv: list[str]) -> tuple[float, float]:
    """Wall-clock and CPU seconds ``ctxbench ARGV`` takes in this process (its output discarded)."""
    from ctxbench.cli import main

    old = sys.argv
    sys.argv = ["ctxbench", *argv]
    start, cpu = time.perf_counter(), time.process_time()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            main()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise RuntimeError(f"ctxbench {' '.join(argv)} exited {exc.code}") from None
    finally:
        sys.argv = old
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", type=int, default=31, help="depths per (method, length): 31 gives ~99k rows")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small, path = Path(tmp) / "small.csv", Path(tmp) / "results.csv"
        write_records(small, _rows(1))
        rows = _rows(args.depths)
        write_records(path, rows)
        cells = len(rows) // (TRIALS + 3)
        print(f"{len(rows):,} rows, {cells:,} cells, {path.stat().st_size / 1e6:.1f} MB")
        for argv in (["report", str(small), "--format", "markdown"], ["compare", str(small), str(small), "--format", "markdown"]):
            _timed(argv)  # warm-up: imports and the task registry
        report = _timed(["report", str(path), "--format", "markdown"])
        compare = _timed(["compare", str(path), str(path), "--format", "markdown"])
    print("             wall s   CPU s")
    print(f"report A     {report[0]:7.2f} {report[1]:7.2f}")
    print(f"compare A A  {compare[0]:7.2f} {compare[1]:7.2f}")
    print(f"compare / report = {compare[0] / report[0]:.2f} wall, {compare[1] / report[1]:.2f} CPU")


if __name__ == "__main__":
    main()
