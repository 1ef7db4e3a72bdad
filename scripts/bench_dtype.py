"""Benchmark: ctxbench's perplexity in a low-precision dtype against float32, in one process run.

The same grid (methods x lengths x documents) through ctxbench twice, the model loaded once in
float32 and once in ``--dtype`` (bfloat16 by default): prints the time of each, their ratio, and
the perplexity difference per cell. On CUDA bf16 is the default (``--dtype auto``); on a CPU it
is an option, and this says whether it is worth taking.

    python scripts/bench_dtype.py --method none,yarn --factor 2 --len 4k,8k,16k --docs 1
"""

from __future__ import annotations

import argparse
import time

from ctxbench.backends.hf import load_model as load
from ctxbench.defaults import DEFAULT_MODEL
from ctxbench.runner.grid import Job, MemoryResults, run_task
from ctxbench.runner.settings import build_settings
from ctxbench.tasks import get


def run(model: str, dtype: str, settings, device: str) -> tuple[dict, float]:
    lm = load(model, device=device, dtype=dtype)
    t0 = time.perf_counter()
    result = run_task(lm, Job(get("ppl"), settings), MemoryResults())
    seconds = time.perf_counter() - t0
    ppl = {(r["label"], int(r["length"])): float(r["value"]) for r in result.records if r["doc"] == "all" and r["metric"] == "ppl"}
    return ppl, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--method", default="none,yarn")
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--len", dest="length", default="4k,8k,16k")
    ap.add_argument("--docs", type=int, default=1)
    ap.add_argument("--dtype", default="bfloat16", help="bfloat16 | float16")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    settings = build_settings(get("ppl"), args.method, args.factor, args.length, {"docs": args.docs})
    full, full_s = run(args.model, "float32", settings, args.device)
    low, low_s = run(args.model, args.dtype, settings, args.device)
    print(f"{'method':<14}{'length':>8}{'float32 ppl':>14}{args.dtype + ' ppl':>16}{'rel diff':>11}")
    worst = 0.0
    for key in sorted(full):
        rel = (low[key] - full[key]) / full[key]
        worst = max(worst, abs(rel))
        print(f"{key[0]:<14}{key[1]:>8}{full[key]:>14.4f}{low[key]:>16.4f}{rel:>+11.2%}")
    print(f"largest perplexity difference: {worst:.2%}")
    print(f"wall time ({args.device}): float32 {full_s:.1f} s, {args.dtype} {low_s:.1f} s -> {args.dtype} is {full_s / low_s:.2f}x the speed of float32")


if __name__ == "__main__":
    main()
