"""Benchmark: does the plan hold? The plan's estimate of a grid against the grid's wall time.

In one process, per ``--dtype``: load the model, measure its throughput as a first run does (fitted
from forwards of 1k and 4k tokens and decoding steps on both caches, ``ctxbench.runner.costmodel``;
``--cached`` keeps a rate measured before), then per grid the plan as ``execute`` prints it and the
wall time of ``execute`` running it (tokenising and preparing included, loading not), into a
fresh results file. Prints both and their ratio, and whether the plan is within 1.5x. An
attention-level method's grid (Self-Extend, DCA) first measures its path's cost factor, as a first
run of it does, so its plan prices that path's attention at the factor measured.

    python scripts/bench_plan.py                       # float32 and bfloat16, the two default grids
    python scripts/bench_plan.py --dtype auto --grid "ppl --method none --len 8k --docs 1"

A grid is a ctxbench command line's task and options: --method, --factor, --len, and the task's
own (--docs, --trials, --depths, --variant, ...).
"""

from __future__ import annotations

import argparse
import shlex
import tempfile
import time
from pathlib import Path

from ctxbench.defaults import DEFAULT_MODEL
from ctxbench.model.autodtype import device_key
from ctxbench.model.size import size_of
from ctxbench.runner.costmodel import PATH_FACTORS, RATES, measured_factor, measured_rate
from ctxbench.runner.grid import Job, ModelConfig, execute
from ctxbench.runner.plan import plan_table
from ctxbench.runner.settings import build_settings
from ctxbench.tasks import get

GRIDS = ("ppl --method none,yarn --len 1k,2k,4k --docs 2", "passkey --method none --len 2k,4k --trials 2",
         "ppl --method self-extend --len 4k,8k --docs 1", "passkey --method self-extend,dca --len 2k,4k --trials 2")
WITHIN = 1.5


def job_of(grid: str) -> Job:
    """A Job from ``TASK --option value ...`` (dashes in option names become underscores)."""
    task_name, *words = shlex.split(grid)
    task = get(task_name)
    opts = {words[i].lstrip("-").replace("-", "_"): words[i + 1] for i in range(0, len(words), 2)}
    method, factor, length = opts.pop("method", "none"), opts.pop("factor", "2"), opts.pop("len", None)
    aliases = {"variant": "variants"}
    opts = {aliases.get(k, k) if aliases.get(k, k) in task.option_names() else k: v for k, v in opts.items()}
    return Job(task, build_settings(task, method, factor, length, opts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32,bfloat16", help="comma list; auto resolves as a run does")
    ap.add_argument("--grid", action="append", help=f"a grid (repeatable); default: {' and '.join(repr(g) for g in GRIDS)}")
    ap.add_argument("--cached", action="store_true", help="use a throughput measured before, if any (default: measure now)")
    args = ap.parse_args()
    grids = args.grid or list(GRIDS)
    results = []
    for dtype in [d.strip() for d in args.dtype.split(",") if d.strip()]:
        lm = ModelConfig(model=args.model, device=args.device, dtype=dtype).load()
        key = f"{device_key(lm.torch_device.type, lm.dtype)}|{lm.name}"
        if not args.cached:  # measure now, as a first run does
            RATES._write({k: v for k, v in RATES.entries().items() if k != key})
            PATH_FACTORS._write({k: v for k, v in PATH_FACTORS.entries().items() if not k.startswith(key + "|")})
        t0 = time.perf_counter()
        rate = measured_rate(lm)
        print(f"{lm.name} on {lm.device} {lm.dtype}{' (' + lm.dtype_note + ')' if lm.dtype_note else ''}: "
              f"throughput {rate.linear / 1e9:.0f} GFLOP/s linear, {rate.attention / 1e9:.0f} attention, "
              f"{rate.decode_linear / 1e9:.1f} / {rate.decode_attention / 1e9:.1f} decoding "
              f"({time.perf_counter() - t0:.1f} s to measure{', cached' if args.cached else ''})")  # fmt: skip
        for grid in grids:
            jobs = [job_of(grid)]
            for m in jobs[0].settings.methods:  # each attention path's cost factor, as a first run of it measures it
                if m.attention_path:
                    t0 = time.perf_counter()
                    factor = measured_factor(lm, m, jobs[0].settings.factors[0], rate)
                    print(f"  attention of {m.label} ({m.attention_path} path): {factor:.2f}x a plain forward's "
                          f"({time.perf_counter() - t0:.1f} s to measure, or cached)")  # fmt: skip
            plan = plan_table(jobs, lm.name, lm.geometry.trained_len, device=lm.device, dtype=lm.dtype, size=size_of(lm))
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                execute(jobs, lm, out=Path(tmp) / "r.csv")
                wall = time.perf_counter() - t0
            ratio = plan.seconds / wall
            ok = 1 / WITHIN <= ratio <= WITHIN
            results.append((lm.dtype, grid, plan.seconds, wall, ratio, ok))
            print(f"  {grid}: plan {plan.seconds:.1f} s, wall {wall:.1f} s, plan/wall {ratio:.2f} "
                  f"({'within' if ok else 'NOT within'} {WITHIN}x)", flush=True)  # fmt: skip
        del lm
    print("\n| dtype | grid | plan (s) | wall (s) | plan/wall | within 1.5x |\n| --- | --- | ---: | ---: | ---: | --- |")
    for dtype, grid, planned, wall, ratio, ok in results:
        print(f"| {dtype} | `{grid}` | {planned:.1f} | {wall:.1f} | {ratio:.2f} | {'yes' if ok else 'no'} |")


if __name__ == "__main__":
    main()
