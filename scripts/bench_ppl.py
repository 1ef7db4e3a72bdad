"""Benchmark: ctxbench's perplexity path against the naive way, in one process run.

Naive (the HF perplexity guide): for each method a fresh model loaded with the method in its
``rope_parameters`` (``ntk`` as a changed ``rope_theta``), then one ``labels=`` forward per
document and length. ctxbench: one loaded model, methods switched in place, one forward per
document at the longest length for length-independent methods, loss from hidden states in chunks.

Checks the perplexities agree (relative 1e-4) and prints the wall-time and 4k peak-memory ratios.

    python scripts/bench_ppl.py --method linear,ntk,yarn --factor 2 --len 512,1k,2k,4k --docs 2
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from ctxbench.backends.hf import load_model as load
from ctxbench.defaults import DEFAULT_MODEL
from ctxbench.model.files import locate
from ctxbench.model.measure import Measured
from ctxbench.runner.grid import Job, MemoryResults, run_task
from ctxbench.runner.settings import build_settings
from ctxbench.tasks import get
from ctxbench.tasks.corpus import Tokenized, load_corpus


def native_rope(method: str, factor: float, geom) -> dict:
    """The transformers ``rope_parameters`` that give ``method`` (ntk: a new base)."""
    base = {"rope_theta": geom.base}
    d = geom.rotary_dim
    if method == "none":
        return {**base, "rope_type": "default"}
    if method == "ntk":
        return {"rope_type": "default", "rope_theta": geom.base * factor ** (d / (d - 2))}
    if method == "linear":
        return {**base, "rope_type": "linear", "factor": factor}
    if method == "yarn":
        return {**base, "rope_type": "yarn", "factor": factor, "original_max_position_embeddings": geom.trained_len}
    if method == "dynamic-ntk":
        return {**base, "rope_type": "dynamic", "factor": factor}
    raise SystemExit(f"bench: no native equivalent for {method}")


def naive(model_spec: str, methods, factor, lengths, docs_by_len, tokens, geom):
    """Fresh model per method, `labels=` forward per (document, length)."""
    from transformers import AutoModelForCausalLM

    kind, path, gguf = locate(model_spec)
    out, peak4k, loading = {}, 0.0, 0.0
    for method in methods:
        kwargs = {"gguf_file": gguf} if gguf else {}
        t0 = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(
            str(path) if path else model_spec, dtype=torch.float32, rope_parameters=native_rope(method, factor, geom), **kwargs
        ).eval()
        loading += time.perf_counter() - t0
        for n in lengths:
            total = count = 0.0
            for i in docs_by_len[n]:
                x = tokens[i][:n].long()[None]
                with torch.no_grad(), Measured("cpu") as m:
                    loss = model(input_ids=x, labels=x).loss.item()
                if n == max(lengths):
                    peak4k = max(peak4k, m.peak_mb)
                total, count = total + loss * (n - 1), count + (n - 1)
            out[(method, n)] = math.exp(total / count)
        del model
    return out, peak4k, loading


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--method", default="linear,ntk,yarn")
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--len", dest="length", default="512,1k,2k,4k")
    ap.add_argument("--docs", type=int, default=2)
    args = ap.parse_args()
    methods = args.method.split(",")
    settings = build_settings(get("ppl"), args.method, args.factor, args.length, {"docs": args.docs})
    lengths = list(settings.lengths)

    t0 = time.perf_counter()
    lm = load(args.model, device="cpu", dtype="float32")
    load_seconds = time.perf_counter() - t0
    result = run_task(lm, Job(get("ppl"), settings), MemoryResults())
    fast_seconds = time.perf_counter() - t0
    ours = {
        (r["method"], int(r["length"])): float(r["value"])
        for r in result.records if r["doc"] == "all" and r["metric"] == "ppl"
    }
    peak_ours = max(float(r["value"]) for r in result.records if r["metric"] == "peak_mem_mb" and int(r["length"]) == max(lengths))
    tokens = Tokenized(load_corpus(None), lm.tokenizer)
    docs_by_len = tokens.select(lengths, args.docs)
    geom = lm.geometry
    del lm

    t0 = time.perf_counter()
    theirs, peak_naive, naive_loading = naive(args.model, methods, args.factor, lengths, docs_by_len, tokens, geom)
    naive_seconds = time.perf_counter() - t0

    worst = 0.0
    print(f"{'method':<12}{'length':>8}{'ctxbench ppl':>16}{'naive ppl':>16}{'rel diff':>12}")
    for key in sorted(theirs):
        rel = abs(ours[key] - theirs[key]) / theirs[key]
        worst = max(worst, rel)
        print(f"{key[0]:<12}{key[1]:>8}{ours[key]:>16.6f}{theirs[key]:>16.6f}{rel:>12.2e}")
    print(f"max relative difference: {worst:.2e} ({'OK' if worst <= 1e-4 else 'MISMATCH'} at 1e-4)")
    print(f"wall time: naive {naive_seconds:.1f} s, ctxbench {fast_seconds:.1f} s -> {naive_seconds / fast_seconds:.2f}x faster")
    print(f"  (ctxbench's one model load took {load_seconds:.1f} s; the naive way loads the GGUF once per method, {naive_loading:.1f} s in all)")
    naive_compute, fast_compute = naive_seconds - naive_loading, fast_seconds - load_seconds
    print(f"forward passes alone: naive {naive_compute:.1f} s, ctxbench {fast_compute:.1f} s -> {naive_compute / fast_compute:.2f}x faster")
    print(f"peak memory at {max(lengths)}: naive {peak_naive:.0f} MB, ctxbench {peak_ours:.0f} MB -> {peak_ours / peak_naive:.2f}x")
    if worst > 1e-4:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
