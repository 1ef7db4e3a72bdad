"""Benchmark: cost of the attention-level methods against plain RoPE attention (SDPA).

For each length, one forward of the same document under ``none`` (transformers' SDPA path) and
under each attention-level method (ctxbench's blocked attention), in one process run; prints
seconds, tokens/s, peak memory and the ratio to plain attention.

    python scripts/bench_attention.py --len 2k,4k,8k --method rerope,leaky-rerope,self-extend,ntk+logn
"""

from __future__ import annotations

import argparse

from ctxbench.api import resolve_methods
from ctxbench.data import Tokenized, load_corpus
from ctxbench.measure import Measured
from ctxbench.models import DEFAULT_MODEL, load
from ctxbench.parsing import parse_lengths
from ctxbench.patching import applied
from ctxbench.scoring import token_nll


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--method", default="rerope,leaky-rerope,self-extend,ntk+logn")
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--len", dest="length", default="2k,4k,8k")
    args = ap.parse_args()
    lengths = parse_lengths(args.length)
    lm = load(args.model, device="cpu", dtype="float32")
    tokens = Tokenized(load_corpus(None), lm.tokenizer)
    doc = tokens.select([max(lengths)], 1)[max(lengths)][0]
    methods = resolve_methods("none," + args.method)
    print(f"{'length':>7} {'method':<14}{'seconds':>9}{'tok/s':>9}{'peak MB':>9}{'time x':>8}{'mem x':>7}{'nll':>9}")
    for n in lengths:
        ids = tokens[doc][:n]
        base = None
        for setting in methods:
            with applied(lm.model, lm.geometry, setting, args.factor, n), Measured("cpu") as m:
                nll = token_nll(lm.model, ids).mean().item()
            if base is None:
                base = m
            print(f"{n:>7} {setting.name:<14}{m.seconds:>9.1f}{n / m.seconds:>9.0f}{m.peak_mb:>9.0f}"
                  f"{m.seconds / base.seconds:>8.2f}{m.peak_mb / max(base.peak_mb, 1):>7.2f}{nll:>9.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
