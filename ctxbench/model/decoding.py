"""Greedy decoding of many prompts that share prefixes, each shared token computed once.

Retrieval prompts of one length (passkey, RULER's needle tasks) start with the same instruction
and haystack and differ from the first trial-specific token on. :func:`decode_shared` finds that
structure itself from the token ids, with no help from the task:

1. the *stream* is the prompt sharing the most tokens with the others; every prompt ``i`` shares
   ``s_i`` leading tokens with it (at most ``len - 1``, so each prompt feeds at least a token);
2. prompts are taken in increasing ``s_i``; one running KV cache is extended along the stream
   to each ``s_i`` in turn, so the shared haystack goes through the model once per length;
3. prompts with the same ``s_i`` copy the running cache, add what they share beyond it (e.g. a
   needle's head, the same for every key at one depth) once, and then each prompt's own suffix;
   suffixes of equal token count are decoded as one batch.

The answers equal those of decoding each prompt alone (tests check it), and the tokens fed are
reported so benchmarks can state the bound on the speed-up. Given each prompt's expected answer
(``continuations``), the answer is scored on the prompt's own prefill: its tokens but the last go
through on a copy of the prompt's cache, and decoding starts from the prompt's last position on the
cache itself, so scoring an answer costs its own few tokens, not a second prefill.

Sharing needs a causal method: under one
whose every output depends on the whole input (``ms-poe``'s head order comes from the prompt's last
token; ``MethodSetting.causal`` is False) a prefix's cache is not a longer prompt's, so callers pass
``share=False``: the plan then puts each prompt in a group of its own with nothing shared, and each
is prefilled whole, in one forward, as its authors run it.
"""

from __future__ import annotations

import copy
import inspect
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache as _memo

import numpy as np
import torch
import torch.nn.functional as F

from ctxbench.model.describe import stop_ids
from ctxbench.model.scoring import decoder

# KV-cache budget for a batch of trials (bytes); more trials than fit run in several batches.
CACHE_BUDGET = 4 * 2**30


@_memo
def _cache_arg(forward_type: type[torch.nn.Module]) -> str:
    """The name a model's forward takes its KV cache by: ``cache`` from transformers 5.24 on
    (where ``past_key_values`` still works but warns on every call), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(forward_type.forward).parameters else "past_key_values"


def with_cache(model: torch.nn.Module, cache: object) -> dict[str, object]:
    """``{name: cache}`` for ``model(...)``, under the name this transformers version expects."""
    return {_cache_arg(type(model)): cache}  # type: ignore[arg-type]  # mypy takes a class for unhashable (its __hash__ is unbound)


def cache_of(out):
    """The KV cache a forward returned (``out.cache`` from transformers 5.24 on)."""
    return out["cache"] if "cache" in out else out.past_key_values


@dataclass(frozen=True)
class Scored:
    index: int  # position of the prompt in the input list
    nll: torch.Tensor  # (k,) float32 NLL of each continuation token, on the CPU
    seconds: float  # this prompt's share of the time spent


@dataclass(frozen=True)
class Answer:
    index: int  # position of the prompt in the input list
    tokens: tuple[int, ...]  # the new tokens
    seconds: float  # this prompt's share of the time spent
    nll: torch.Tensor | None = None  # (k,) float32 NLL of each token of the prompt's continuation, when given
    forced: bool = False  # the thinking budget ran out: ctxbench put the end-of-think token in (``think``)


def stop_tokens(model, tokenizer) -> tuple[int, ...]:
    """The token ids decoding stops at: the model's generation config's ``eos_token_id`` (an id or
    a list: what ``model.generate`` stops at) and the tokenizer's ``eos_token_id``.

    Both, because they can disagree: transformers 5.17 reads SmolLM2-Instruct's GGUF tokenizer with
    ``<|im_start|>`` as its eos while the model's generation config keeps ``<|im_end|>`` (5.24 reads
    ``<|im_end|>`` for both). Stopping at the tokenizer's alone ran the answer on past the end of
    the assistant's turn, where a needle later in the text could be found and scored."""
    return stop_ids(getattr(getattr(model, "generation_config", None), "eos_token_id", None), tokenizer)


@torch.inference_mode()
def greedy(model, ids: torch.Tensor | None, max_new_tokens: int, eos: int | Sequence[int] | None, cache=None,
           finished=None, logits: torch.Tensor | None = None, steers=None) -> list[list[int]]:  # fmt: skip
    """Greedy decoding of a batch ``ids`` (batch, n) continuing ``cache``; only the last
    position's logits are computed (``logits_to_keep=1``). A row stops at ``eos`` (an id or
    several, see :func:`stop_tokens`), or once
    ``finished(row, tokens)`` says its result can no longer change; the batch stops when all have.
    ``logits`` (batch, vocab): the prompts' last-position logits when ``cache`` already holds the
    prompts (``ids`` is then not fed). ``steers`` (one :class:`ctxbench.model.thinking.Steer` per
    row): a thinking budget; each row's token goes through its steer (the end-of-think token put in
    where the budget runs out, fed on the same cache: one generation), the row stops once its
    answer budget is spent, and ``finished`` sees the answer's tokens only, never the reasoning.
    ``max_new_tokens`` is then the most steps of all (:meth:`ctxbench.model.thinking.Thinking.steps`)."""
    from transformers import DynamicCache  # start-up: transformers only where it runs

    cache = DynamicCache() if cache is None else cache
    if logits is None:
        logits = model(input_ids=ids, **with_cache(model, cache), use_cache=True, logits_to_keep=1).logits[:, -1]
    batch = logits.shape[0]
    new: list[list[int]] = [[] for _ in range(batch)]
    done = torch.zeros(batch, dtype=torch.bool, device=logits.device)
    stops = None if eos is None else torch.tensor([eos] if isinstance(eos, int) else list(eos), device=logits.device)
    for step in range(max_new_tokens):
        token = logits.argmax(dim=-1)  # (batch,)
        for b in range(batch):
            if not done[b]:
                t = int(token[b])
                if steers is not None:
                    fed = steers[b].take(t)
                    if fed != t:
                        token[b] = t = fed
                new[b].append(t)
                seen = new[b] if steers is None else steers[b].answer(new[b])
                if finished is not None and seen and finished(b, new[b] if steers is None else list(seen)):
                    done[b] = True
                if steers is not None and steers[b].spent:
                    done[b] = True
        if stops is not None:
            done |= torch.isin(token, stops)
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        logits = model(input_ids=token[:, None], **with_cache(model, cache), use_cache=True, logits_to_keep=1).logits[:, -1]
    return new


@torch.inference_mode()
def extend(model, ids: Sequence[int], cache=None):
    """KV cache of ``ids`` (one sequence), continuing ``cache`` in place when given."""
    from transformers import DynamicCache  # start-up: transformers only where it runs

    device = next(model.parameters()).device
    cache = DynamicCache() if cache is None else cache
    if len(ids):
        model(input_ids=torch.tensor([list(ids)], device=device), **with_cache(model, cache), use_cache=True, logits_to_keep=1)
    return cache


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading tokens ``a`` and ``b`` share (vectorised: prompts have 100k tokens)."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if differ.size else n


def cache_bytes_per_token(model) -> int:
    cfg = model.config
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * next(model.parameters()).element_size()


@dataclass
class Plan:
    """Which tokens go through the model: the stream, each prompt's shared length and groups."""

    stream: int  # index of the stream prompt
    shared: list[int]  # s_i per prompt
    groups: list[tuple[int, int, list[int]]]  # (s, group prefix end g >= s, prompt indices), by s

    def pieces(self, prompts: Sequence[Sequence[int]]) -> list[int]:
        """Token counts of what goes through the model before decoding, per prompt: the stream's
        extensions from one ``s`` to the next, each group's shared part beyond its ``s``, and each
        prompt's own suffix (batched suffixes are one forward, counted here prompt by prompt)."""
        out, done = [], 0
        for s, g, members in self.groups:
            out += [s - done, g - s] + [len(prompts[i]) - g for i in members]
            done = s
        return [n for n in out if n]


def plan(prompts: Sequence[Sequence[int]], share: bool = True) -> Plan:
    """Which tokens go through the model (see the module docstring); ``share=False``: nothing is
    shared, each prompt is a group of its own whose shared length is 0 (an empty cache)."""
    k = len(prompts)
    if not share:
        return Plan(0, [0] * k, [(0, 0, [i]) for i in range(k)])
    if k == 1:
        n = len(prompts[0])
        return Plan(0, [n - 1], [(n - 1, n - 1, [0])])
    # The stream: the prompt with the largest total shared prefix (ties: the first).
    totals = [sum(common_prefix(prompts[i], prompts[j]) for j in range(k) if j != i) for i in range(k)]
    stream = max(range(k), key=lambda i: (totals[i], -i))
    shared = [min(common_prefix(prompts[i], prompts[stream]), len(prompts[i]) - 1) for i in range(k)]
    by_s: dict[int, list[int]] = {}
    for i in range(k):
        by_s.setdefault(shared[i], []).append(i)
    groups = []
    for s in sorted(by_s):
        members = by_s[s]
        first = prompts[members[0]]
        g = min([len(prompts[i]) - 1 for i in members] + [common_prefix(first, prompts[i]) for i in members[1:]])
        groups.append((s, max(g, s), members))
    return Plan(stream, shared, groups)


def decode_shared(
    model, prompts: Sequence[Sequence[int]], max_new_tokens: int, eos: int | Sequence[int] | None, budget: int = CACHE_BUDGET,
    finished=None, share: bool = True, continuations: Sequence[Sequence[int]] | None = None, think=None,
) -> Iterator[Answer]:
    """Greedy answers of every prompt, yielded group by group (see the module docstring).
    ``finished(i, tokens)``: prompt ``i``'s answer so far is final (its decoding may stop).
    ``share=False``: no shared prefix, each prompt prefilled whole and decoded alone.
    ``continuations[i]`` (k_i >= 1 tokens): also score it after prompt ``i`` in the prompt's own
    prefill (:attr:`Answer.nll`, as :func:`score_shared` computes it); only with ``share``, since
    under a non-causal method the continuation's tokens would change what the prompt's positions see.
    ``think`` (:class:`ctxbench.model.thinking.Thinking`): each answer thinks up to its budget, then
    answers with up to ``max_new_tokens`` (:func:`greedy`'s ``steers``); :attr:`Answer.tokens` holds
    all of it, :attr:`Answer.forced` whether the budget ran out."""
    steps = max_new_tokens if think is None else think.steps(max_new_tokens)
    if continuations is not None and not share:
        raise ValueError("continuations are scored in the prompt's prefill, which a non-causal method cannot share")
    device = next(model.parameters()).device
    copies = 1 if continuations is None else 2  # scoring runs on a copy of the prompts' cache
    per_prompt = cache_bytes_per_token(model) * copies * (max(len(q) for q in prompts) + steps)
    batch = max(1, budget // max(1, per_prompt))
    for g, members, base, shared_seconds in _shared_groups(model, prompts, share):
        by_size: dict[tuple[int, int], list[int]] = {}  # (prompt, continuation) token counts -> prompts
        for i in members:
            by_size.setdefault((len(prompts[i]), len(continuations[i]) if continuations else 0), []).append(i)
        for same in by_size.values():
            for a in range(0, len(same), batch):
                chunk = same[a : a + batch]
                t0 = time.perf_counter()
                cache = copy.deepcopy(base)
                if len(chunk) > 1:
                    cache.batch_repeat_interleave(len(chunk))
                stop = None if finished is None else (lambda b, new, chunk=chunk: finished(chunk[b], new))
                steers = None if think is None else [think.steer(prompts[i], max_new_tokens) for i in chunk]
                nlls: Sequence[torch.Tensor | None]
                if continuations is None:
                    suffix = torch.tensor([list(prompts[i][g:]) for i in chunk], device=device)  # (batch, n - g)
                    outs, nlls = greedy(model, suffix, steps, eos, cache, stop, steers=steers), [None] * len(chunk)
                else:
                    logits, nlls = _prefill_scored(model, [prompts[i][g:] for i in chunk], [continuations[i] for i in chunk], cache)
                    outs = greedy(model, None, steps, eos, cache, stop, logits=logits, steers=steers)
                spent = (time.perf_counter() - t0) / len(chunk)
                for b, (i, new, nll) in enumerate(zip(chunk, outs, nlls, strict=True)):
                    yield Answer(i, tuple(new), shared_seconds + spent, nll, forced=bool(steers and steers[b].forced))
        del base  # before the next group's cache is built: one group's cache at a time


@torch.inference_mode()
def _prefill_scored(model, suffixes, continuations, cache) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Each suffix (equal token counts across the batch) through the model on ``cache``, which then
    holds the prompts; each continuation but its last token (equal counts k - 1) on a copy of it, so
    the prompts' cache stays as decoding needs it; the LM head runs only on the k positions that
    predict the continuation. Returns the (batch, vocab) fp32 logits of each prompt's last position
    and each continuation's (k,) NLL on the CPU."""
    device = next(model.parameters()).device
    body = decoder(model)
    ids = torch.tensor([list(s) for s in suffixes], device=device)  # (batch, n - g)
    states = [body(input_ids=ids, **with_cache(body, cache), use_cache=True).last_hidden_state[:, -1:]]  # (batch, 1, hidden)
    if len(continuations[0]) > 1:
        more = torch.tensor([list(c[:-1]) for c in continuations], device=device)  # (batch, k - 1)
        states.append(body(input_ids=more, **with_cache(body, copy.deepcopy(cache)), use_cache=True).last_hidden_state)
    logits, nll = _continuation_nll(model, torch.cat(states, dim=1), continuations)
    return logits[:, 0], list(nll)


def _continuation_nll(model, hidden: torch.Tensor, continuations) -> tuple[torch.Tensor, torch.Tensor]:
    """The LM head on ``hidden`` (batch, k, hidden), the states at the k positions that predict each
    continuation (equal k across the batch): their (batch, k, vocab) fp32 logits and the
    continuations' (batch, k) NLL on the CPU."""
    from ctxbench.model.scoring import head_logits  # looked up when called (tests replace it)

    logits = head_logits(model, hidden)  # (batch, k, vocab)
    target = torch.tensor([list(c) for c in continuations], device=hidden.device)  # (batch, k)
    # the vocabulary on the last dim, as scoring.nll_from_hidden: cross_entropy over dim 1 of a
    # (batch, vocab, k) view sums its float32 exponentials another way, 2e-4 nats off a float64
    # log-softmax over SmolLM2's 49152 entries, against 3e-5 for this layout (lm-eval's)
    nll = F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none").view(target.shape)
    return logits, nll.cpu()


def _shared_groups(model, prompts: Sequence[Sequence[int]], share: bool = True) -> Iterator[tuple]:
    """Walk :func:`plan`'s groups of ``prompts``: the stream's KV cache is extended once, each
    group's shared part once on a copy. Yields ``(g, members, base, shared_seconds)``: the group's
    shared length, its prompt indices, the KV cache of its first ``g`` tokens (callers copy it
    before use) and each member's share of the seconds that cost."""
    p = plan(prompts, share)
    stream = prompts[p.stream]
    running, done = None, 0  # KV cache of stream[:done]
    for s, g, members in p.groups:
        t0 = time.perf_counter()
        running = extend(model, stream[done:s], running)
        done = s
        base = extend(model, prompts[members[0]][s:g], copy.deepcopy(running))
        yield g, members, base, (time.perf_counter() - t0) / len(members)
        del base


@torch.inference_mode()
def score_shared(
    model, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]], share: bool = True
) -> Iterator[Scored]:
    """Teacher-forced NLL of ``continuations[i]`` (k_i >= 1 tokens) after ``prompts[i]``, with the
    prompts' shared prefixes computed once exactly as :func:`decode_shared` computes them (same
    :func:`plan`); then each prompt's own suffix and its continuation but the last token go through
    the model in one forward on a copy of the shared cache, and the LM head runs only on the k_i
    positions that predict the continuation. No decoding. Yields a :class:`Scored` per prompt.
    ``share=False`` (as :func:`decode_shared`): each prompt is prefilled whole, then its
    continuation but the last token goes through on that cache, as decoding would feed it (one
    forward of both would let the continuation's tokens decide what a non-causal method does)."""
    device = next(model.parameters()).device
    body = decoder(model)
    for g, members, base, shared_seconds in _shared_groups(model, prompts, share):
        for i in members:
            t0 = time.perf_counter()
            cont, cache = list(continuations[i]), copy.deepcopy(base)
            # the suffix and the continuation but its last token: one forward, or two for a non-causal method
            feeds = [list(prompts[i][g:]) + cont[:-1]] if share else [list(prompts[i][g:]), cont[:-1]]
            states = []
            for ids in filter(None, feeds):
                out = body(input_ids=torch.tensor([ids], device=device), **with_cache(body, cache), use_cache=True)
                states.append(out.last_hidden_state)
            hidden = torch.cat(states, dim=1)  # (1, n - g + k - 1, hidden)
            _, nll = _continuation_nll(model, hidden[:, -len(cont) :], [cont])
            yield Scored(i, nll[0], shared_seconds + time.perf_counter() - t0)
        del base  # before the next group's cache is built
