"""Benchmark: the ways to run the default model's forward on this CPU, measured side by side.

For each ``--len``, in one process and on the same tokens (the first built-in corpus document
with that many tokens): the forward of the decoder (no LM head, as ctxbench's chunked loss runs it)
in float32 eager — the naive way, every ratio is against it — then in each of ``--modes``:

- ``bf16``: bfloat16 weights, eager;
- ``bf16-compile``: bfloat16, ``torch.compile`` (inductor) of the decoder, weights as graph inputs;
- ``bf16-frozen``: the same with inductor's ``freezing`` (weights folded in and prepacked for
  oneDNN), the usual CPU inference recipe;
- ``fp32-compile``: float32, ``torch.compile``.

Each line prints the seconds of one forward (best of ``--repeats`` after a warm-up; compiling is
the warm-up, its seconds printed apart), the speed-up over float32 eager, and parity: the
perplexity of the document's tokens (LM head applied in float32 chunks) and its relative
difference from float32 eager's. Then it checks whether a compiled model follows a method switch
(ctxbench writes a method's inverse frequencies into the rotary buffers in place): the perplexity
under ``ntk`` at factor 2, compiled against eager, without recompiling.

    python scripts/bench_compile.py --len 1k,4k --modes bf16,bf16-compile,bf16-frozen

On a loaded machine every time is high; the ratios in one run are still comparable.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from ctxbench.backends.hf import load_model as load
from ctxbench.defaults import DEFAULT_MODEL
from ctxbench.methods import resolve
from ctxbench.methods.patching import applied
from ctxbench.model.scoring import decoder, nll_from_hidden
from ctxbench.parsing import parse_lengths
from ctxbench.tasks.corpus import Tokenized, load_corpus

MODES = ("bf16", "bf16-compile", "bf16-frozen", "fp32-compile")


def document(lm, n: int) -> torch.Tensor:
    """The first built-in corpus document's first ``n`` tokens (n,)."""
    tokens = Tokenized(load_corpus(None), lm.tokenizer)
    (i,) = tokens.select([n], 1)[n]
    return tokens[i][:n]


def forward_fn(lm, mode: str):
    """``ids (n,) -> hidden (1, n, hidden)`` for a mode, compiled where the mode says."""
    body = decoder(lm.model)
    if "compile" in mode or "frozen" in mode:
        import torch._inductor.config as inductor

        torch._dynamo.reset()  # a fresh compile per mode: the previous mode's graphs are not reused
        inductor.freezing = mode.endswith("frozen")
        body = torch.compile(body, dynamic=False)

    @torch.inference_mode()
    def run(ids):
        return body(input_ids=ids[None], use_cache=False).last_hidden_state

    return run


def ppl(lm, run, ids) -> float:
    hidden = run(ids)  # (1, n, hidden)
    return math.exp(float(nll_from_hidden(lm.model, hidden, ids).double().mean()))


def timed(run, ids, repeats: int) -> tuple[float, float]:
    """(seconds of the first call, best of ``repeats`` later calls)."""
    t0 = time.perf_counter()
    run(ids)
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run(ids)
        best = min(best, time.perf_counter() - t0)
    return first, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--len", dest="length", default="1k,4k")
    ap.add_argument("--modes", default=",".join(MODES[:3]), help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-switch", action="store_true", help="skip the method-switch check")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SystemExit(f"error: unknown mode {bad[0]!r}; use {', '.join(MODES)}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    models = {"float32": load(args.model, device="cpu", dtype="float32")}
    for m in modes:
        dtype = "float32" if m.startswith("fp32") else "bfloat16"
        models.setdefault(dtype, load(args.model, device="cpu", dtype=dtype))
    ntk = resolve("ntk")
    print(f"{'mode':<14}{'length':>7}{'compile s':>10}{'seconds':>9}{'speed-up':>9}{'ppl':>10}{'vs fp32':>10}"
          f"{'ntk x2 ppl: eager':>19}{'compiled':>10}")  # fmt: skip
    for n in parse_lengths(args.length):
        ref = models["float32"]
        ids = document(ref, n)
        eager = forward_fn(ref, "fp32")
        _, base = timed(eager, ids, args.repeats)
        base_ppl = ppl(ref, eager, ids)
        print(f"{'fp32':<14}{n:>7}{'':>10}{base:>9.2f}{1.0:>8.2f}x{base_ppl:>10.4f}{'':>10}")
        for mode in modes:
            lm = models["float32" if mode.startswith("fp32") else "bfloat16"]
            run = forward_fn(lm, mode)
            first, best = timed(run, ids, args.repeats)
            value = ppl(lm, run, ids)
            line = (f"{mode:<14}{n:>7}{first - best:>10.1f}{best:>9.2f}{base / best:>8.2f}x"
                    f"{value:>10.4f}{value / base_ppl - 1:>+10.2e}")  # fmt: skip
            if not args.no_switch and ("compile" in mode or "frozen" in mode):
                with applied(lm.model, lm.geometry, ntk, 2.0, n):
                    switched = ppl(lm, run, ids)
                    plain = ppl(lm, forward_fn(lm, "eager"), ids)
                # follows the switch when the compiled ntk value is nearer eager ntk than its own plain value
                follows = abs(switched - plain) < abs(switched - value)
                line += f"{plain:>19.4f}{switched:>10.4f}" + ("  follows" if follows else "  <- ignores the switch")
            print(line, flush=True)


if __name__ == "__main__":
    main()
