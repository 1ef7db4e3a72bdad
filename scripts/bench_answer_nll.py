"""Benchmark: the answer NLL scored on the trials' own prefill against a pass of its own, in one run.

ctxbench: RULER ``niah`` with ``--metrics answer_nll``, where each trial's expected answer
goes through on a copy of the prompt's cache right after its prefill and decoding continues on the
cache itself. Naive: the same decoding without the metric, then the teacher-forced pass as a second
walk over the same prompts (``ctxbench.model.decoding.score_shared``: shared prefixes once, each trial's
suffix and answer again), which is how the metric ran before. Checks that the answers and the NLLs
agree and prints the wall-time ratio and the tokens each way puts through the model.

    python scripts/bench_answer_nll.py --len 4k --trials 4
    python scripts/bench_answer_nll.py --len 8k --trials 4 --method ntk --variant multivalue
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch

from ctxbench.backends.hf import load_model as load
from ctxbench.defaults import DEFAULT_MODEL
from ctxbench.methods.patching import applied
from ctxbench.model.decoding import score_shared
from ctxbench.model.scoring import decoder
from ctxbench.runner.settings import build_settings
from ctxbench.synthetic import build
from ctxbench.tasks import get
from ctxbench.tasks.common import decode_length


def run(task, lm, ctx, cells, settings) -> dict:
    """{(cell, trial): row} of every trial, one group at a time as the runner calls them."""
    out = {}
    for group in task.groups(cells, settings):
        for cell, rows in task.run_group(lm, ctx, group, settings):
            out.update({(cell, r.trial): r for r in rows if r.trial not in ("all", None)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--variant", default="single_1")
    ap.add_argument("--method", default="yarn")
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--len", dest="length", default="4k")
    ap.add_argument("--trials", type=int, default=4)
    args = ap.parse_args()
    task = get("niah")
    options = {"trials": args.trials, "metrics": "answer_nll", "variants": args.variant}
    scored = build_settings(task, args.method, args.factor, args.length, options)
    plain = replace(scored, metrics=())
    lm = load(args.model, device="cpu", dtype="float32")
    ctx = task.prepare(lm, scored)
    cells = task.cells(scored, ctx)
    with torch.inference_mode():  # warm-up, so neither timed way pays the first forward's setup
        lm.model(input_ids=torch.zeros(1, 256, dtype=torch.long))
    fed: list[int] = []
    hook = decoder(lm.model).register_forward_pre_hook(lambda m, a, kw: fed.append(kw["input_ids"].numel()), with_kwargs=True)

    t0 = time.perf_counter()
    ours = run(task, lm, ctx, cells, scored)
    fast, fed_ours = time.perf_counter() - t0, sum(fed)

    fed.clear()
    t0 = time.perf_counter()
    naive = run(task, lm, ctx, cells, plain)
    _, haystack = ctx.state
    tok, nll = lm.tokenizer, {}
    for cell in cells:  # the prompts and answers niah's run_group builds, scored as the metric was before
        ps = [build("niah", cell.variant, tok, cell.length, cell.depth, ctx.seed, t, scored.chat, haystack, scored.protocol)
              for t in range(scored.trials)]  # fmt: skip
        answers = [tok(" " + ", ".join(p.answers), add_special_tokens=False)["input_ids"] for p in ps]
        new_tokens = max(p.max_new_tokens for p in ps)
        with applied(lm.model, lm.geometry, cell.method, cell.factor or 1.0, decode_length(cell, ps, new_tokens)):
            for s in score_shared(lm.model, [p.ids for p in ps], answers):
                nll[(cell, s.index)] = float(s.nll.double().mean())
    slow, fed_naive = time.perf_counter() - t0, sum(fed)
    hook.remove()

    same_answers = all(ours[k].answer == naive[k].answer for k in naive)
    worst = max(abs(ours[k].extra["answer_nll"] - nll[k]) for k in nll)
    print(f"{len(nll)} trials of niah {args.variant} at {args.length}, method {args.method} x{args.factor:g}, {args.model} on the CPU")
    print(f"answers identical: {same_answers}; answer NLL max abs difference {worst:.2e} nats (of {min(nll.values()):.3g}-{max(nll.values()):.3g})")
    print(f"tokens through the model: separate pass {fed_naive}, on the prefill {fed_ours} -> {fed_naive / fed_ours:.2f}x fewer")
    print(f"wall time: separate pass {slow:.1f} s, on the prefill {fast:.1f} s -> {slow / fast:.2f}x faster")
    if not same_answers or worst > 1e-3:  # float32, nats per token: one forward or two over the same tokens
        raise SystemExit(1)


if __name__ == "__main__":
    main()
