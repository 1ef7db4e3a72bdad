"""Benchmark: ctxbench's RULER path (niah and friends) against the naive way, in one process run.

Naive: for every trial, the whole prompt through ``model.generate(do_sample=False,
max_new_tokens=RULER's answer length)``. ctxbench: per (method, length, variant) one running KV
cache along the haystack shared by every depth and trial, a copy per needle position, and the
trials with equal suffix length decoded as one batch, greedy
(:func:`ctxbench.model.decoding.decode_shared`), and a trial stops decoding once its score can no
longer change (every expected answer is in its output). Checks every trial scores the same both
ways and that ctxbench's answer is the start of the naive one; prints both wall times and their
ratio.

    python scripts/bench_niah.py --len 2k --depths 0.25,0.5,0.75 --trials 4
    python scripts/bench_niah.py --task vt --len 2k --trials 4
"""

from __future__ import annotations

import argparse
import time

import torch

from ctxbench.backends.hf import load_model as load
from ctxbench.defaults import DEFAULT_MODEL
from ctxbench.methods.patching import applied
from ctxbench.runner.settings import build_settings
from ctxbench.synthetic import build, score
from ctxbench.tasks import get


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--task", default="niah", help="niah | vt | cwe | fwe")
    ap.add_argument("--variant", default=None, help="a variant of the task (niah: single_1 ...)")
    ap.add_argument("--method", default="none")
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--len", dest="length", default="2k")
    ap.add_argument("--depths", default="0.25,0.5,0.75")
    ap.add_argument("--trials", type=int, default=4)
    args = ap.parse_args()
    task = get(args.task)
    options = {"trials": args.trials}
    if args.variant:
        options["variants"] = args.variant
    if any(o.name == "depths" for o in task.options):
        options["depths"] = args.depths
        options["protocol"] = "exact"  # fixed depths: the heatmap protocol
    settings = build_settings(task, args.method, args.factor, args.length, options)
    lm = load(args.model, device="cpu", dtype="float32")
    ctx = task.prepare(lm, settings)
    cells = task.cells(settings, ctx)

    t0 = time.perf_counter()
    ours = {}
    for group in task.groups(cells, settings):
        for cell, rows in task.run_group(lm, ctx, group, settings):
            for r in rows:
                if r.metric == "score":
                    ours[(cell.variant, cell.length, cell.depth, r.trial)] = (r.value, r.answer)
    fast = time.perf_counter() - t0

    t0 = time.perf_counter()
    naive = {}
    tok = lm.tokenizer
    _, haystack = ctx.state
    for cell in cells:
        for t in range(settings.trials):
            p = build(args.task, cell.variant, tok, cell.length, cell.depth, ctx.seed, t, settings.chat, haystack)
            ids = torch.tensor([p.ids])
            with applied(lm.model, lm.geometry, cell.method, cell.factor or 1.0, ids.shape[1] + p.max_new_tokens), torch.no_grad():
                out = lm.model.generate(ids, max_new_tokens=p.max_new_tokens, do_sample=False, pad_token_id=tok.eos_token_id)
            text = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
            naive[(cell.variant, cell.length, cell.depth, t)] = (score(p.metric, text, p.answers), text.strip())
    slow = time.perf_counter() - t0

    same = sum(ours[k][0] == naive[k][0] and naive[k][1].startswith(ours[k][1]) for k in naive)
    print(f"{args.task}: {len(naive)} trials ({len(cells)} cells x {settings.trials} trials) at {args.length}, method {args.method}")
    print(f"same score, answer a prefix of the naive one: {same}/{len(naive)}; mean score {sum(v for v, _ in naive.values()) / len(naive):.2f}")
    print(f"wall time: naive generate {slow:.1f} s, ctxbench {fast:.1f} s -> {slow / fast:.2f}x faster")
    if same != len(naive):
        for k in naive:
            if ours[k] != naive[k]:
                print("differs", k, ours[k][0], naive[k][0], repr(ours[k][1][:80]), repr(naive[k][1][:80]))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
