"""Exact-length assembly from separately tokenised pieces (the approach of ctxbench's passkey task).

A prompt is ``head + pre + context + tail``: ``head`` is BOS (when the tokenizer adds one) or the
chat template's opening, ``pre`` the fixed text before the context, ``tail`` the question and
answer prefix. The context is a token stream cut at exactly the tokens left over, with inserts
(needles, chain lines) placed at piece boundaries. Tokenising pieces separately is what makes
the length exact and keeps everything before the first inserted piece identical between prompts.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ctxbench.errors import UserError


class TooShort(UserError):
    """The requested length cannot hold the fixed text; ``minimum`` is the shortest that can."""

    def __init__(self, label: str, length: int, minimum: int) -> None:
        super().__init__(
            f"length {length} is shorter than the {label} prompt's fixed text ({minimum} tokens)",
            f"use a length of at least {minimum}",
        )
        self.minimum = minimum


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_many(tokenizer, texts: list[str]) -> list[list[int]]:
    """Batch tokenisation (much faster than one call per piece for long contexts)."""
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def adds_bos(tokenizer) -> bool:
    bos = tokenizer.bos_token_id
    return bos is not None and tokenizer("a")["input_ids"][:1] == [bos]


@dataclass(frozen=True)
class Prompt:
    """One trial's prompt, whichever task built it (RULER's, BABILong's, InfiniteBench's, LongBench
    v2's). ``ids``: the prompt, ending with the task's answer prefix; ``answers``: the expected
    outputs, scored over at most ``max_new_tokens`` generated tokens, with ``metric`` where the task
    has several scorers (RULER's, InfiniteBench's; "" where it has one). ``needle_positions``: token
    offsets where the answer-bearing needles or chain lines start (empty where there are none).
    ``shared_len``: ``ids[:shared_len]`` is the same for every trial and depth of the task, variant,
    seed and length (0: nothing known to be shared). ``extra``: what was drawn and where it went.
    ``choices``: a multiple-choice prompt's letters scored by their NLL, per letter ``(the tokens it
    is scored after, its tokens)`` (LongBench v2's ``--mode nll``)."""

    ids: tuple[int, ...]
    answers: tuple[str, ...]
    max_new_tokens: int
    metric: str = ""
    needle_positions: tuple[int, ...] = ()
    shared_len: int = 0
    extra: dict = field(default_factory=dict, hash=False)
    choices: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = field(default=(), hash=False)


@dataclass(frozen=True)
class Frame:
    """``head``: tokens before the task text. ``between``: text between the question and the
    answer prefix ("" for raw prompts, the chat template's end of turn and generation prompt)."""

    head: tuple[int, ...]
    between: str


def frame(tokenizer, chat: bool) -> Frame:
    bos = (tokenizer.bos_token_id,) if adds_bos(tokenizer) else ()
    if not chat:
        return Frame(bos, "")
    if not getattr(tokenizer, "chat_template", None):
        raise UserError("chat prompts need a tokenizer with a chat template and this one has none", "use raw prompts (chat=False)")
    marker = "\u2063CTXBENCH\u2063"
    text = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False, add_generation_prompt=True)
    head, tail = text.split(marker)
    # RULER's chat templates put the answer prefix right after the assistant marker.
    return Frame(tuple(encode(tokenizer, head)), tail)


def batched(tokenizer, texts: Iterable[str], size: int = 256) -> Iterator[list[int]]:
    """Tokens of each text of a (possibly endless) stream, tokenised ``size`` at a time."""
    it = iter(texts)
    while True:
        chunk = [t for _, t in zip(range(size), it, strict=False)]
        if not chunk:
            return
        yield from encode_many(tokenizer, chunk)


def take(pieces: Iterator[list[int]], count: int) -> tuple[list[int], list[int], int]:
    """The first ``count`` tokens of the pieces' concatenation, the piece boundaries within them
    (0 and ``count`` included) and how many pieces were used (the last one maybe cut)."""
    out: list[int] = []
    bounds = [0]
    used = 0
    while len(out) < count:
        piece = next(pieces)
        out += piece
        used += 1
        if len(out) <= count:
            bounds.append(len(out))
    if bounds[-1] != count:
        bounds.append(count)
    return out[:count], bounds, used


def take_whole(pieces: Iterator[list[int]], count: int) -> tuple[list[int], list[int], int, int]:
    """Whole pieces while their concatenation fits in ``count`` tokens (RULER's length accounting
    counts haystack units, never cutting one): the tokens, the boundaries (0 and the end
    included), how many pieces were used and the size of the first piece that did not fit."""
    out: list[int] = []
    bounds = [0]
    for piece in pieces:
        if len(out) + len(piece) > count:
            return out, bounds, len(bounds) - 1, len(piece)
        out += piece
        bounds.append(len(out))
    return out, bounds, len(bounds) - 1, 0


def nearest(bounds: list[int], target: float) -> int:
    """The boundary nearest to ``target`` (the earlier one on a tie)."""
    i = bisect.bisect_left(bounds, target)
    near = bounds[max(0, i - 1) : i + 1]
    return min(near, key=lambda b: (abs(b - target), b))


def after(rng: random.Random, bounds: list[int], first: int, count: int) -> list[int]:
    """``count`` sorted boundaries after ``first``: distinct and strictly after it when there are
    enough, else drawn with repeats from those at or after it. The ``exact`` protocol's placement
    of the later needles and chain lines; RULER, and the ``ruler`` protocol, spread them over
    random, distinct positions anywhere in the haystack instead."""
    later = [b for b in bounds if b > first]
    if len(later) >= count:
        return sorted(rng.sample(later, count))
    return sorted(rng.choice([b for b in bounds if b >= first]) for _ in range(count))


def weave(hay: list[int], inserts: list[tuple[int, list[int]]]) -> tuple[list[int], list[int]]:
    """``hay`` with each ``(boundary, ids)`` inserted (in list order on equal boundaries); the
    offsets of the inserts in the result, in the order given."""
    order = sorted(range(len(inserts)), key=lambda i: (inserts[i][0], i))
    out: list[int] = []
    offsets = [0] * len(inserts)
    last = 0
    for i in order:
        at, ids = inserts[i]
        out += hay[last:at]
        offsets[i] = len(out)
        out += ids
        last = at
    out += hay[last:]
    return out, offsets
