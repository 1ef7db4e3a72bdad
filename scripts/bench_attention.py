"""Benchmark: cost of the attention-level methods against plain RoPE attention (SDPA).

For each length, one forward of the same document under ``none`` (transformers' SDPA path) and
under each attention-level method (ctxbench's attention function), in one process run; prints
seconds, tokens/s, peak memory and the ratio to plain attention. With ``--blocked``, the
two-branch methods run a second time through the blocked path (what decoding and GPUs use, and
what every prefill used before the fused CPU path), checked to give the same loss.

    python scripts/bench_attention.py --len 2k,4k,8k --method rerope,leaky-rerope,self-extend,ntk+logn
    python scripts/bench_attention.py --len 4k --method rerope,self-extend --blocked
"""

from __future__ import annotations

import argparse

from ctxbench.backends.hf import load_model as load
from ctxbench.defaults import DEFAULT_MODEL
from ctxbench.methods import attention
from ctxbench.methods.patching import applied
from ctxbench.model.measure import Measured
from ctxbench.model.scoring import token_nll
from ctxbench.parsing import parse_lengths
from ctxbench.runner.settings import resolve_methods
from ctxbench.tasks.corpus import Tokenized, load_corpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--method", default="rerope,leaky-rerope,self-extend,ntk+logn")
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--len", dest="length", default="2k,4k,8k")
    ap.add_argument("--blocked", action="store_true", help="also time the blocked two-branch path")
    args = ap.parse_args()
    lengths = parse_lengths(args.length)
    lm = load(args.model, device="cpu", dtype="float32")
    tokens = Tokenized(load_corpus(None), lm.tokenizer)
    doc = tokens.select([max(lengths)], 1)[max(lengths)][0]
    methods = resolve_methods("none," + args.method)
    print(f"{'length':>7} {'method':<22}{'seconds':>9}{'tok/s':>9}{'peak MB':>9}{'time x':>8}{'mem x':>7}{'nll':>9}")
    for n in lengths:
        ids = tokens[doc][:n]
        base = None
        for setting in methods:
            paths = [("", attention.FUSED_DEVICES)]
            if args.blocked and setting.attention is not None and setting.attention.name != "logn":
                paths.append((" (blocked)", ()))
            nlls = []
            for label, fused in paths:
                attention.FUSED_DEVICES = fused
                with applied(lm.model, lm.geometry, setting, args.factor, n), Measured("cpu") as m:
                    nlls.append(token_nll(lm.model, ids).mean().item())
                attention.FUSED_DEVICES = paths[0][1]
                if base is None:
                    base = m
                print(f"{n:>7} {setting.name + label:<22}{m.seconds:>9.1f}{n / m.seconds:>9.0f}{m.peak_mb:>9.0f}"
                      f"{m.seconds / base.seconds:>8.2f}{m.peak_mb / max(base.peak_mb, 1):>7.2f}{nlls[-1]:>9.4f}")  # fmt: skip
            if len(nlls) > 1 and abs(nlls[0] - nlls[1]) > 1e-4 * abs(nlls[1]):
                raise SystemExit(f"fused and blocked paths disagree for {setting.name}: {nlls}")


if __name__ == "__main__":
    main()
