"""Benchmark ``ctxbench tune``'s search: evaluations per hour, and what early stopping (paired
pruning) and successive halving saved against evaluating every trial on every tuning instance,
measured in one run.

    python scripts/bench_tune.py                      # tiny random-weight Llama (L = 512), T = 2k, yarn, 24 trials
    python scripts/bench_tune.py --method self-extend --trials 40
    python scripts/bench_tune.py --model smollm2-135m --trained 256 --target 1k   # the real model, its L taken as 256

A random-weight model scores every setting alike (its NLL is about ln(vocab) whatever the positions),
so there only successive halving saves work; ``--model`` runs the default model on the built-in
corpus with its trained length taken as ``--trained`` (the search's mechanics at short, cheap
lengths: compressing positions the model knows is clearly worse, which pruning catches).

One search runs as ``ctxbench tune`` runs it (the same :class:`ctxbench.tune.search.Search`, objective
and in-place method switching on one loaded model); every evaluation is timed. "Every trial fully" is
what the same trials would cost scored on every tuning instance: the evaluations the search skipped
times the mean seconds of one. ``--full`` also runs that search (pruning and halving off) and says
whether it crowns the same winner. Markdown output, for docs/tune.md.
"""

from __future__ import annotations

import argparse
import time

import torch


def tiny_lm(trained: int, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    from ctxbench.backends.hf import wrap

    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      vocab_size=258, max_position_embeddings=trained, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)  # fmt: skip
    return wrap(LlamaForCausalLM(cfg).eval(), None, name="tiny-llama", digest=f"tiny-llama-seed{seed}")


def real_lm(model: str, trained: int):
    """The model with its trained length taken as ``trained`` (what the methods scale from)."""
    import dataclasses

    from ctxbench.backends.hf import load_model as load

    lm = load(model, device="cpu", dtype="float32")
    return dataclasses.replace(lm, geometry=dataclasses.replace(lm.geometry, trained_len=trained))


def corpus_documents(lm, n: int, length: int) -> dict:
    from ctxbench.tasks.corpus import Tokenized, load_corpus

    corpus = load_corpus()
    tokens = Tokenized(corpus, lm.tokenizer)
    return {corpus.names[i]: tokens[i][:length] for i in tokens.select([length], n)[length]}


def documents(n: int, length: int) -> dict:
    """Token ids with structure a model can use (repeated random phrases), so settings differ."""
    g = torch.Generator().manual_seed(1)
    docs = {}
    for i in range(n):
        phrase = torch.randint(0, 256, (int(torch.randint(16, 64, (1,), generator=g)),), generator=g)
        reps = phrase.repeat(length // len(phrase) + 1)[:length]
        noise = torch.rand(length, generator=g) < 0.2
        docs[f"doc{i}"] = torch.where(noise, torch.randint(0, 256, (length,), generator=g), reps).to(torch.int32)
    return docs


def run_search(lm, docs, method: str, target: int, trials: int, prune: bool):
    from ctxbench.methods import resolve
    from ctxbench.tune.objective import ModelObjective
    from ctxbench.tune.search import PRUNE_ALPHA, Budget, Search
    from ctxbench.tune.space import space_for

    space = space_for(method, lm.geometry.trained_len, target)
    objective = ModelObjective(lm, docs, target)
    tuning = list(docs)
    ref = {v.instance: v for v in objective.values(resolve("none"), 1.0, tuning, guard_only=True)}
    search = Search(space, objective, tuning, Budget(trials), guard=10.0, guard_reference=ref, seed=0,
                    prune_alpha=PRUNE_ALPHA if prune else 0.0, halving=prune)  # fmt: skip
    t0 = time.perf_counter()
    search.run()
    return search, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", default="yarn")
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--docs", type=int, default=9, help="tuning instances (successive halving's rungs: 1, 3, 9)")
    ap.add_argument("--trained", type=int, default=512)
    ap.add_argument("--target", default="2048")
    ap.add_argument("--full", action="store_true", help="also run every trial fully and compare the winners")
    ap.add_argument("--model", default=None, help="a real model (e.g. smollm2-135m) instead of the tiny random one")
    args = ap.parse_args()
    from ctxbench.parsing import parse_length

    args.target = parse_length(str(args.target))
    if args.model:
        lm = real_lm(args.model, args.trained)
        docs = corpus_documents(lm, args.docs, args.target)
    else:
        torch.set_num_threads(1)
        lm = tiny_lm(args.trained)
        docs = documents(args.docs, args.target)
    search, wall = run_search(lm, docs, args.method, args.target, args.trials, prune=True)
    n = len(docs)
    done = search.computed
    full = len(search.trials) * n
    each = sum(search.eval_seconds) / len(search.eval_seconds)
    statuses = {s: sum(1 for t in search.trials if t.status == s) for s in sorted({t.status for t in search.trials})}
    what = f"{args.model} (L taken as {args.trained})" if args.model else f"tiny random Llama (L = {args.trained})"
    print(f"## bench_tune: {args.method}, {what}, T = {args.target}, {n} tuning documents, "
          f"{len(search.trials)} trials, {torch.get_num_threads()} thread(s), {time.strftime('%Y-%m-%d')}\n")
    print("| what | value |\n| --- | --- |")
    print(f"| evaluations computed | {done} |")
    print(f"| evaluations if every trial ran on every instance | {full} |")
    print(f"| saved by pruning and halving | {full - done} ({(full - done) / full:.0%}), ~{(full - done) * each:.1f} s |")
    print(f"| trial outcomes | {', '.join(f'{k}: {v}' for k, v in statuses.items())} |")
    print(f"| seconds per evaluation (one forward of {args.target} tokens) | {each:.3f} |")
    print(f"| evaluations per hour (search wall clock, bookkeeping included) | {done / wall * 3600:,.0f} |")
    print(f"| search wall clock | {wall:.1f} s |")
    print(f"| winner | {search.best().label} ({search.best().objective:.4f}) |")
    if args.full:
        full_search, full_wall = run_search(lm, docs, args.method, args.target, args.trials, prune=False)
        same = full_search.best().candidate == search.best().candidate
        print(f"| every trial fully: evaluations, wall clock | {full_search.computed}, {full_wall:.1f} s |")
        print(f"| every trial fully: winner | {full_search.best().label} ({full_search.best().objective:.4f}); "
              f"{'the same' if same else 'another'} winner |")  # fmt: skip


if __name__ == "__main__":
    main()
