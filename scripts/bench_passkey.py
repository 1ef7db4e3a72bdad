"""Benchmark: ctxbench's passkey path against the naive way, in one process run.

Naive: for every trial, the whole prompt through ``model.generate(do_sample=False,
max_new_tokens=10)``. ctxbench: per length one running KV cache along the instruction and filler
shared by every depth, per (length, depth) a copy with the needle's head, then the trials'
suffixes as one batch, greedy. Checks the answers are identical and prints the ratio, and how
many tokens each way puts through the model before decoding (the bound on the ratio: a trial's
text after its key must be computed anew for every key).

    python scripts/bench_passkey.py --len 2k --depths 3 --trials 4
    python scripts/bench_passkey.py --len 2k --depth 0.5,0.75,1 --trials 4
"""

from __future__ import annotations

import argparse
import time

import torch

from ctxbench.backends.hf import load_model as load
from ctxbench.defaults import DEFAULT_MODEL
from ctxbench.methods.patching import applied
from ctxbench.runner.settings import build_settings
from ctxbench.tasks import get, passkey
from ctxbench.tasks.common import parse_depths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--method", default="none")
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--len", dest="length", default="2k")
    ap.add_argument("--depths", type=int, default=None, help="N evenly spaced depths (default 3: 0, 0.5, 1)")
    ap.add_argument("--depth", default=None, help="explicit comma list of depths, e.g. 0.5,0.75,1")
    ap.add_argument("--trials", type=int, default=4)
    args = ap.parse_args()
    depths = parse_depths(args.depths if args.depths or args.depth else 3, args.depth)
    settings = build_settings(get("passkey"), args.method, args.factor, args.length, {"depths": depths, "trials": args.trials})
    lm = load(args.model, device="cpu", dtype="float32")
    ctx = passkey.prepare(lm, settings)
    cells = passkey.cells(settings, ctx)

    t0 = time.perf_counter()
    ours = {}
    for group in passkey.groups(cells, settings):
        for cell, rows in passkey.run_group(lm, ctx, group, settings):
            for r in rows:
                if r.metric == "correct":
                    ours[(cell.length, cell.depth, r.trial)] = r.answer
    fast = time.perf_counter() - t0

    t0 = time.perf_counter()
    naive = {}
    tok = lm.tokenizer
    for cell in cells:
        for t in range(settings.trials):
            key = passkey.draw_key(ctx.seed, cell.length, cell.depth, t, settings.digits)
            ids = torch.tensor([passkey.build_prompt(tok, cell.length, cell.depth, key).ids])
            with applied(lm.model, lm.geometry, cell.method, cell.factor or 1.0, ids.shape[1] + 10), torch.no_grad():
                out = lm.model.generate(ids, max_new_tokens=10, do_sample=False, pad_token_id=tok.eos_token_id)
            naive[(cell.length, cell.depth, t)] = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True).strip()
    slow = time.perf_counter() - t0

    prompts = {(c.length, c.depth): passkey.build_prompt(tok, c.length, c.depth, 10 ** (settings.digits - 1)) for c in cells}
    naive_tokens = sum(len(p.ids) for p in prompts.values()) * settings.trials
    ours_tokens = sum(
        max(p.shared_len for (n, _), p in prompts.items() if n == length) for length in {n for n, _ in prompts}
    ) + sum(p.prefix_len - p.shared_len + settings.trials * (len(p.ids) - p.prefix_len) for p in prompts.values())
    same = all(ours[k] == naive[k] for k in naive)
    print(f"{len(naive)} trials ({len(cells)} cells x {settings.trials} trials) at {args.length}, depths {settings.depths}, method {args.method}")
    print(f"answers identical: {same}; correct: {sum(passkey.first_integer(a) is not None for a in naive.values())} answers with a number")
    print(f"prompt tokens through the model: naive {naive_tokens}, ctxbench {ours_tokens} -> {naive_tokens / ours_tokens:.2f}x fewer")
    print(f"wall time: naive generate {slow:.1f} s, ctxbench {fast:.1f} s -> {slow / fast:.2f}x faster")
    if not same:
        for k in naive:
            if ours[k] != naive[k]:
                print("differs", k, repr(ours[k]), repr(naive[k]))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
