"""Passkey retrieval (DESIGN.md "Tasks: protocols"; the landmark-attention prompt used by the
YaRN and LongRoPE evaluations).

Prompt, lines joined by newlines: the instruction, filler sentences, the needle line
"The pass key is N. Remember it. N is the pass key." at the requested depth of the filler, more
filler, then "What is the pass key? The pass key is". The filler is sized in tokens (the prompt
is assembled from separately tokenised pieces), so the prompt has exactly the requested length
whenever the fixed text fits. Keys are random ``digits``-digit integers from a generator seeded
by (seed, length, depth, trial) — the same keys for every method. Greedy decoding, at most
``max_new_tokens`` (10) tokens; a trial passes when the first integer in the answer equals N.

Speed: everything before the key is identical for all trials of a (length, depth) cell, so the
prefix's KV cache is computed once per cell and reused by every trial; the prefixes of the depths
of one length are themselves prefixes of one instruction-and-filler stream, so one running cache
is extended from the shallowest needle to the deepest; trials whose suffixes have the same token
count are decoded as one batch.
"""

from __future__ import annotations

import copy
import hashlib
import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..errors import UserError
from ..methods import MethodSetting
from ..models import LoadedModel
from ..patching import applied
from .base import Cell, Measurement

NAME = "passkey"
INSTRUCTION = (
    "There is an important info hidden inside a lot of irrelevant text. "
    "Find it and memorize them. I will quiz you about the important information there."
)
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE_HEAD = "The pass key is"
NEEDLE_TAIL = ". Remember it. {key} is the pass key."
QUESTION = "What is the pass key?"
ANSWER_START = "The pass key is"
TEMPLATE_DIGEST = "sha256:" + hashlib.sha256("\n".join([INSTRUCTION, FILLER, NEEDLE_HEAD, NEEDLE_TAIL, QUESTION, ANSWER_START]).encode()).hexdigest()[:16]
# KV-cache budget for a batch of trials (bytes); more trials than fit run in several batches.
CACHE_BUDGET = 4 * 2**30


@dataclass
class Settings:
    methods: list[MethodSetting]
    factors: list[float]
    lengths: list[int] | None = None
    depths: list[float] | None = None
    trials: int = 2
    digits: int = 5
    seed: int = 0
    chat: bool = False
    max_new_tokens: int = 10


@dataclass
class Context:
    dataset: str
    data_digest: str
    notes: list[str]


@dataclass(frozen=True)
class Prompt:
    """Token ids of one passkey prompt; ``ids[:prefix_len]`` is the same for every key."""

    ids: tuple[int, ...]
    key: int
    key_span: tuple[int, int]  # [start, end) of the key's tokens in the needle line
    prefix_len: int
    # ids[:shared_len] (instruction + filler up to the needle line) is the start of the same token
    # stream for every depth and key of a length, so depths can extend one running KV cache
    shared_len: int = 0

    @property
    def needle_pos(self) -> int:
        return self.key_span[0]

    @property
    def depth(self) -> float:
        return self.key_span[0] / len(self.ids)


def parse_depths(depths: int | None = None, depth: str | None = None) -> list[float]:
    """``--depths N`` (N evenly spaced in [0, 1]) or ``--depth 0.1,0.5``; default 5 depths."""
    if depths is not None and depth is not None:
        raise UserError("give --depths N or --depth LIST, not both", "e.g. --depths 5 or --depth 0.1,0.5,0.9")
    if depth is not None:
        values = []
        for part in str(depth).split(","):
            try:
                value = float(part)
            except ValueError:
                raise UserError(f"bad depth '{part}': not a number", "depths are fractions in [0, 1], e.g. 0.5") from None
            if not 0.0 <= value <= 1.0:
                raise UserError(f"depth {part} is outside [0, 1]", "0 puts the key at the start of the filler, 1 at its end")
            values.append(value)
        return sorted(dict.fromkeys(values))
    n = 5 if depths is None else depths
    if n < 1:
        raise UserError(f"--depths {n} must be >= 1", "e.g. --depths 5 for 0, 0.25, 0.5, 0.75, 1")
    return [0.5] if n == 1 else [round(i / (n - 1), 4) for i in range(n)]


def check_settings(settings: Settings) -> None:
    if settings.trials < 1:
        raise UserError(f"--trials {settings.trials} must be >= 1", "pass e.g. --trials 2")
    if not 1 <= settings.digits <= 20:
        raise UserError(f"--digits {settings.digits} must be between 1 and 20", "the protocol uses 5")
    if settings.max_new_tokens < 1:
        raise UserError(f"max_new_tokens {settings.max_new_tokens} must be >= 1", "the protocol uses 10")
    for d in settings.depths or []:
        if not 0 <= d <= 1:
            raise UserError(f"depth {d} is outside [0, 1]", "0 puts the key at the start of the filler, 1 at its end")


def draw_key(seed: int, length: int, depth: float, trial: int, digits: int) -> int:
    """A ``digits``-digit key (no leading zero), the same for every method."""
    rng = random.Random(f"passkey|{seed}|{length}|{depth!r}|{trial}")
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def first_integer(text: str) -> int | None:
    """The first run of digits in ``text`` as an integer (``"012345"`` -> 12345), or None."""
    match = re.search(r"\d+", text)
    return int(match.group()) if match else None


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _frame(tokenizer, chat: bool) -> tuple[list[int], list[int]]:
    """Tokens before the instruction and after the question (BOS; chat template parts)."""
    bos = [tokenizer.bos_token_id] if _adds_bos(tokenizer) else []
    if not chat:
        return bos, _encode(tokenizer, "\n" + QUESTION + " " + ANSWER_START)
    if not getattr(tokenizer, "chat_template", None):
        raise UserError("--chat needs a tokenizer with a chat template and this one has none", "drop --chat (raw prompts)")
    marker = "\u2063CTXBENCH\u2063"
    text = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False, add_generation_prompt=True)
    head, tail = text.split(marker)
    return _encode(tokenizer, head), _encode(tokenizer, "\n" + QUESTION + tail + ANSWER_START)


def _adds_bos(tokenizer) -> bool:
    bos = tokenizer.bos_token_id
    return bos is not None and tokenizer("a")["input_ids"][:1] == [bos]


def _sentences(tokenizer) -> list[list[int]]:
    parts = [s.strip() + "." for s in FILLER.split(".") if s.strip()]
    return [_encode(tokenizer, s + " ") for s in parts]


def _filler(sentences: list[list[int]], count: int) -> tuple[list[int], list[int]]:
    """``count`` filler tokens cycling through the sentences, and the sentence-boundary offsets."""
    out: list[int] = []
    bounds = [0]
    i = 0
    while len(out) < count:
        out += sentences[i % len(sentences)]
        bounds.append(len(out))
        i += 1
    return out[:count], sorted({b for b in bounds if b <= count} | {count})


def fixed_tokens(tokenizer, digits: int = 5, chat: bool = False) -> int:
    """Tokens of the prompt that are not filler (for the shortest valid length)."""
    key = 10 ** (digits - 1)
    head, tail = _frame(tokenizer, chat)
    needle = _encode(tokenizer, "\n" + NEEDLE_HEAD) + _encode(tokenizer, f" {key}") + _encode(tokenizer, NEEDLE_TAIL.format(key=key) + "\n")
    return len(head) + len(_encode(tokenizer, INSTRUCTION + "\n")) + len(needle) + len(tail)


def build_prompt(tokenizer, length: int, depth: float, key: int, chat: bool = False) -> Prompt:
    """A passkey prompt of ``length`` tokens with the key at ``depth`` of the filler.

    Pieces are tokenised separately and concatenated, so the filler can be sized to the token
    and everything before the key is the same for every key. The needle is placed at the filler
    sentence boundary nearest to ``depth``.
    """
    if not 0 <= depth <= 1:
        raise UserError(f"depth {depth} is outside [0, 1]", "0 puts the key at the start of the filler, 1 at its end")
    head, tail = _frame(tokenizer, chat)
    intro = head + _encode(tokenizer, INSTRUCTION + "\n")
    needle_head = _encode(tokenizer, "\n" + NEEDLE_HEAD)
    key_ids = _encode(tokenizer, f" {key}")
    needle_tail = _encode(tokenizer, NEEDLE_TAIL.format(key=key) + "\n")
    fixed = len(intro) + len(needle_head) + len(key_ids) + len(needle_tail) + len(tail)
    room = length - fixed
    if room < 0:
        raise UserError(
            f"length {length} is shorter than the passkey prompt's fixed text ({fixed} tokens)",
            f"use --len of at least {fixed + 1} (e.g. 1k)",
        )
    filler, bounds = _filler(_sentences(tokenizer), room)
    split = min(bounds, key=lambda b: abs(b - depth * room))
    before = intro + filler[:split] + needle_head
    ids = before + key_ids + needle_tail + filler[split:] + tail
    start = len(before)
    return Prompt(ids=tuple(ids), key=key, key_span=(start, start + len(key_ids)), prefix_len=start, shared_len=len(intro) + split)


def prepare(lm: LoadedModel, settings: Settings) -> Context:
    check_settings(settings)
    if not settings.lengths:
        settings.lengths = [4096, 8192, 16384]
    if not settings.depths:
        settings.depths = parse_depths()
    need = fixed_tokens(lm.tokenizer, settings.digits, settings.chat) + 1
    short = [n for n in settings.lengths if n < need]
    if short:
        raise UserError(
            f"length {short[0]} is shorter than the passkey prompt's fixed text ({need - 1} tokens)",
            f"use --len of at least {need} (e.g. 1k)",
        )
    return Context(dataset="passkey" + ("-chat" if settings.chat else ""), data_digest=TEMPLATE_DIGEST, notes=[])


def cells(settings: Settings, ctx: Context) -> list[Cell]:
    return [
        Cell(NAME, m, f, n, depth=d)
        for m in settings.methods
        for f in settings.factors
        for n in settings.lengths
        for d in settings.depths
    ]


def groups(todo: list[Cell], settings: Settings) -> list[list[Cell]]:
    """The depths of one (method, factor, length) run together: their prompts start with the same
    instruction and filler, so one running KV cache serves them all (see :func:`run_group`)."""
    out: dict[tuple, list[Cell]] = {}
    for cell in todo:
        out.setdefault((cell.method, cell.factor, cell.length), []).append(cell)
    return list(out.values())


@torch.inference_mode()
def greedy(model, ids: torch.Tensor, max_new_tokens: int, eos: int | None, cache=None) -> list[list[int]]:
    """Greedy decoding of a batch ``ids`` (batch, n) continuing ``cache``; only the last
    position's logits are computed (``logits_to_keep=1``)."""
    from transformers import DynamicCache

    cache = DynamicCache() if cache is None else cache
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    new: list[list[int]] = [[] for _ in range(ids.shape[0])]
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    for step in range(max_new_tokens):
        token = out.logits[:, -1].argmax(dim=-1)  # (batch,)
        for b in range(ids.shape[0]):
            if not done[b]:
                new[b].append(int(token[b]))
        if eos is not None:
            done |= token == eos
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        out = model(input_ids=token[:, None], past_key_values=cache, use_cache=True, logits_to_keep=1)
    return new


@torch.inference_mode()
def prefix_cache(model, ids: list[int], cache=None):
    """KV cache of ``ids`` (one sequence), continuing ``cache`` in place when given."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    cache = DynamicCache() if cache is None else cache
    if ids:
        model(input_ids=torch.tensor([ids], device=device), past_key_values=cache, use_cache=True, logits_to_keep=1)
    return cache


def _cache_bytes_per_token(model) -> int:
    cfg = model.config
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * next(model.parameters()).element_size()


def run_group(lm: LoadedModel, ctx: Context, group: list[Cell], settings: Settings) -> Iterator[tuple[Cell, list[Measurement]]]:
    """The depths of one (method, factor, length), shallowest first.

    Every prompt of a length starts with the same instruction and filler stream; a depth's prefix
    is that stream up to its needle line (``shared_len``) plus the needle's head. One running KV
    cache is extended along the stream from depth to depth, so the filler before the deepest
    needle goes through the model once per length, not once per depth; each depth copies it,
    adds its needle head, and decodes its trials from there (batched when their suffixes have
    the same token count).
    """
    model, tok = lm.model, lm.tokenizer
    device = next(model.parameters()).device
    eos = tok.eos_token_id
    first = group[0]
    assert all((c.method, c.factor, c.length) == (first.method, first.factor, first.length) for c in group)
    planned = []
    for cell in group:
        keys = [draw_key(settings.seed, cell.length, cell.depth, t, settings.digits) for t in range(settings.trials)]
        prompts = [build_prompt(tok, cell.length, cell.depth, key, settings.chat) for key in keys]
        prefix = prompts[0].ids[: prompts[0].prefix_len]
        assert all(p.ids[: p.prefix_len] == prefix for p in prompts)
        planned.append((cell, prompts))
    planned.sort(key=lambda cp: cp[1][0].shared_len)
    # Dynamic methods see prompt plus new tokens; every prompt of a length has that many tokens.
    seq_len = max(len(p.ids) for _, prompts in planned for p in prompts) + settings.max_new_tokens
    per_trial = _cache_bytes_per_token(model) * seq_len
    batch = max(1, CACHE_BUDGET // max(1, per_trial))
    with applied(model, lm.geometry, first.method, first.factor, seq_len):
        running, done = None, 0  # KV cache of the first ``done`` tokens of the shared stream
        for cell, prompts in planned:
            p0 = prompts[0]
            t0 = time.perf_counter()
            running = prefix_cache(model, list(p0.ids[done : p0.shared_len]), running)
            done = p0.shared_len
            base = prefix_cache(model, list(p0.ids[done : p0.prefix_len]), copy.deepcopy(running))
            prefix_seconds = time.perf_counter() - t0
            answers: dict[int, list[int]] = {}
            seconds: dict[int, float] = {}
            by_size: dict[int, list[int]] = {}
            for t, p in enumerate(prompts):
                by_size.setdefault(len(p.ids), []).append(t)
            for trials in by_size.values():
                for a in range(0, len(trials), batch):
                    chunk = trials[a : a + batch]
                    t0 = time.perf_counter()
                    cache = copy.deepcopy(base)
                    if len(chunk) > 1:
                        cache.batch_repeat_interleave(len(chunk))
                    suffix = torch.tensor([prompts[t].ids[prompts[t].prefix_len :] for t in chunk], device=device)
                    outs = greedy(model, suffix, settings.max_new_tokens, eos, cache)
                    spent = time.perf_counter() - t0
                    for t, new in zip(chunk, outs, strict=True):
                        answers[t], seconds[t] = new, spent / len(chunk)
            del base
            yield cell, _rows(tok, prompts, answers, seconds, prefix_seconds, batch)


def _rows(tok, prompts: list[Prompt], answers: dict[int, list[int]], seconds: dict[int, float], prefix_seconds: float, batch: int) -> list[Measurement]:
    """One ``correct`` row per trial and the cell's ``accuracy``; the cell's seconds are the part
    of the running prefix this depth added, its needle head, and its trials."""
    rows: list[Measurement] = []
    for t, p in enumerate(prompts):
        text = tok.decode(answers[t], skip_special_tokens=True)
        correct = int(first_integer(text) == p.key)
        rows.append(
            Measurement(
                "correct", correct, trial=t, answer=text.strip(), tokens=len(p.ids), seconds=round(seconds[t], 4),
                extra={"key": p.key, "needle_pos": p.needle_pos, "needle_depth": round(p.depth, 4)},
            )
        )
    accuracy = sum(int(r.value) for r in rows) / len(rows)
    total = prefix_seconds + sum(seconds.values())
    rows.append(
        Measurement(
            "accuracy", accuracy, trial="all", tokens=sum(len(p.ids) for p in prompts), seconds=round(total, 4),
            extra={"prefix_tokens": prompts[0].prefix_len, "prefix_seconds": round(prefix_seconds, 4), "batch": batch},
        )
    )
    return rows
