"""Benchmark: how close the default model's forward comes to this machine's matmul peak.

In one process: the peak of a square matmul (``--peak-size``, default 2048) in float32 and in
bfloat16, then one forward of the default model (no output head past the last token, as
ctxbench's chunked loss and its prefill run it) at each ``--len`` in each ``--dtype``, timed after
a warm-up of the same shape. For each it prints the FLOPs as ``ctxbench.runner.costmodel`` counts them,
GFLOP/s, the fraction of the same dtype's measured matmul peak, and where the time goes: the
share of self CPU time per op class from ``torch.profiler`` (matmul, attention, element-wise,
copies and casts, other).

    python scripts/bench_forward.py --len 1k,4k,16k --dtype float32,bfloat16
    python scripts/bench_forward.py --len 1k,4k --dtype float32,auto --no-profile   # what auto gains here

``--dtype auto`` loads as a run does (``ctxbench.model.autodtype``: bfloat16 on a CPU where a probe
finds it faster and the committed parity holds) and is printed with what it resolved to; every
dtype's time is then also given as a speed ratio against float32 at each length.

On a loaded machine every number is low; the ratios in one run are still comparable.
"""

from __future__ import annotations

import argparse
import time

import torch

from ctxbench.backends.hf import load_model as load
from ctxbench.defaults import DEFAULT_MODEL
from ctxbench.model.size import ModelSize
from ctxbench.parsing import parse_lengths

# Op classes by the profiler's op names (aten's, as CPU kernels report them).
MATMUL = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")
ATTENTION = ("scaled_dot_product", "flash_attention", "_efficient_attention")
COPY = ("aten::copy_", "aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone", "aten::cat")
ELEMENTWISE = ("aten::mul", "aten::add", "aten::neg", "aten::pow", "aten::mean", "aten::rsqrt", "aten::silu",
               "aten::sum", "aten::div", "aten::sub", "aten::exp", "aten::sin", "aten::cos", "aten::where")  # fmt: skip


def op_class(name: str) -> str:
    if name in MATMUL:
        return "matmul"
    if any(a in name for a in ATTENTION):
        return "attention"
    if name in COPY:
        return "copy/cast"
    if name.split(".")[0].rstrip("_") in ELEMENTWISE:
        return "element-wise"
    return "other"


def matmul_peak(size: int, dtype: torch.dtype, repeats: int = 10) -> float:
    """GFLOP/s of ``size`` x ``size`` matmuls (2 n^3 FLOPs each), best of ``repeats``."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best / 1e9


def forward_seconds(lm, n: int) -> float:
    ids = torch.randint(0, 1000, (1, n))
    with torch.inference_mode():
        lm.model(input_ids=ids, use_cache=False, logits_to_keep=1)  # warm-up, same shape
        t0 = time.perf_counter()
        lm.model(input_ids=ids, use_cache=False, logits_to_keep=1)
        return time.perf_counter() - t0


def op_shares(lm, n: int) -> dict[str, float]:
    """Share of self CPU time per op class in one forward of ``n`` tokens."""
    from torch.profiler import ProfilerActivity, profile

    ids = torch.randint(0, 1000, (1, n))
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        lm.model(input_ids=ids, use_cache=False, logits_to_keep=1)
    totals: dict[str, float] = {}
    for event in prof.key_averages():
        totals[op_class(event.key)] = totals.get(op_class(event.key), 0.0) + event.self_cpu_time_total
    whole = sum(totals.values()) or 1.0
    return {k: v / whole for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--len", dest="length", default="1k,4k")
    ap.add_argument("--dtype", default="float32,bfloat16")
    ap.add_argument("--peak-size", type=int, default=2048)
    ap.add_argument("--no-profile", action="store_true", help="time only, no op breakdown (a profiled forward costs one more)")
    args = ap.parse_args()
    lengths = parse_lengths(args.length)
    dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    peaks = {d: matmul_peak(args.peak_size, getattr(torch, d)) for d in {*dtypes, "float32", "bfloat16"} - {"auto"}}
    for d, p in sorted(peaks.items()):
        print(f"matmul peak {d} ({args.peak_size}^3): {p:.0f} GFLOP/s")
    print(f"{'dtype':<18}{'length':>8}{'seconds':>10}{'GFLOP/s':>10}{'of peak':>9}  time by op class")
    times: dict[tuple[str, int], float] = {}
    for d in dtypes:
        lm = load(args.model, device="cpu", dtype=d)
        label = d if d != "auto" else f"auto->{lm.dtype}"
        if lm.dtype_note:
            print(f"  {label}: {lm.dtype_note}")
        size = ModelSize.from_config(lm.model.config, lm.name)
        for n in lengths:
            seconds = times[(label, n)] = forward_seconds(lm, n)
            rate = size.forward_flops(n, head_tokens=1) / seconds / 1e9
            shares = "" if args.no_profile else ", ".join(f"{k} {v:.0%}" for k, v in op_shares(lm, n).items())
            print(f"{label:<18}{n:>8}{seconds:>10.2f}{rate:>10.0f}{rate / peaks[lm.dtype]:>9.0%}  {shares}")
        del lm
    for label in dict.fromkeys(label for label, _ in times):
        if label != "float32" and all(("float32", n) in times for n in lengths):
            ratios = ", ".join(f"{times[('float32', n)] / times[(label, n)]:.2f}x at {n}" for n in lengths)
            print(f"{label} against float32 (speed, higher is faster): {ratios}")


if __name__ == "__main__":
    main()
