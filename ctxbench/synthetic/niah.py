"""Needle in a haystack, RULER's eight niah configs (arXiv 2404.06654; ``scripts/data/synthetic/niah.py``,
``scripts/synthetic.yaml`` niah_single_1 .. niah_multiquery).

Needles read "One of the special magic {numbers|uuids} for {key} is: {value}."; keys are
adjective-noun words or uuids, values 7-digit numbers or uuids. ``num_needle_k`` keys carry
``num_needle_v`` values each; ``num_needle_q`` keys are asked, and the answers are all their
values. When one value is asked the template is made singular as RULER does. Haystacks: noise
lines and needle-shaped distractor lines joined by newlines, essay sentences joined by spaces.

Two protocols. ``ruler`` (``ruler=True``) follows niah.py: the haystack is as many whole units
(lines, or essay sentences) as fit with the prompt AND RULER's generation budget (128 tokens)
within the length, and every needle goes to a random place: noise and needle haystacks insert
the needles at distinct random line indices (the first needle at the latest), essays at
``int(sentences * d)`` for depths ``d`` drawn without replacement from RULER's 40 depths, in
needle order. ``exact`` (``ruler=False``, the depth-by-length heatmap mode) makes the prompt
exactly the length, cutting the last unit, with ``depth`` as a knob: the first asked needle sits
at the piece boundary nearest ``depth`` of the haystack and the other asked needles at random
later boundaries; unasked needles (multikey_1) at random boundaries anywhere. Under ``ruler`` a
given ``depth`` places the first asked needle the same way and every other needle at random.
``depth=None`` (exact) draws the depth from RULER's 40 evenly spaced depths.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator

from ctxbench.synthetic import config
from ctxbench.synthetic.haystack import NOISE, Haystack, sentences
from ctxbench.synthetic.pieces import (
    Frame,
    TooShort,
    after,
    batched,
    encode,
    encode_many,
    nearest,
    take,
    take_whole,
    weave,
)
from ctxbench.synthetic.words import distinct, random_needle

# niah.py: DEPTHS = round(linspace(0, 100, 40)) percent
RULER_DEPTHS = tuple(round(100 * i / 39) / 100 for i in range(40))


def _singular(text: str) -> str:
    """niah.py's rewrite of the template when a single value is asked (same replacements, same order)."""
    for old, new in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):
        text = text.replace(old, new)
    return text


def _query(keys: list[str]) -> str:
    """niah.py: "a", or "a, b, c, and d"."""
    return keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + ", and " + keys[-1]


def _stream(tokenizer, kind: str, hay_rng: random.Random, haystack: Haystack, plural: str, cfg: dict, made: list) -> Iterator[list[int]]:
    """Haystack pieces: a newline and a line (noise, needle), or a space and a sentence (essay).
    Needle lines' (key, value) pairs are appended to ``made`` as they are drawn."""
    if kind == "noise":
        line = encode(tokenizer, "\n" + NOISE)
        return iter(lambda: line, None)
    if kind == "needle":
        def lines():
            while True:
                key, value = random_needle(hay_rng, cfg["type_needle_k"]), random_needle(hay_rng, cfg["type_needle_v"])
                made.append((key, value))
                yield "\n" + config.NIAH_NEEDLE.format(type_needle_v=plural, key=key, value=value)
        return batched(tokenizer, lines(), 64)
    sents = sentences(haystack.text)
    start = hay_rng.randrange(len(sents))  # where in the essay this length's haystack begins
    # Every sentence (and needle) piece starts with its space, so any piece can go anywhere; the
    # context therefore starts "\n " where RULER has "\n".
    return batched(tokenizer, (" " + sents[i % len(sents)] for i in itertools.count(start)))


def make(tokenizer, fr: Frame, cfg: dict, length: int, depth: float | None, hay_rng: Callable[[], random.Random],
         rng: random.Random, haystack: Haystack, label: str, ruler: bool = False) -> dict:
    plural = cfg["type_needle_v"]
    num_k, num_v, num_q = max(cfg["num_needle_k"], cfg["num_needle_q"]), cfg["num_needle_v"], cfg["num_needle_q"]
    single = num_q * num_v == 1
    instruction, question, prefix = config.NIAH_INSTRUCTION, config.NIAH_QUESTION, config.NIAH_ANSWER_PREFIX
    if single:
        instruction, question, prefix = _singular(instruction), _singular(question), _singular(prefix)
    type_v = plural[:-1] if single else plural
    kind = cfg["type_haystack"]
    sep = " " if kind == "essay" else "\n"
    if depth is None and not ruler:
        depth = rng.choice(RULER_DEPTHS)
    budget = config.TOKENS_TO_GENERATE["niah"] if ruler else 0
    if sep == "\n":
        instruction = instruction[:-1]  # the newline before the context comes with each line piece
    pre = list(fr.head) + encode(tokenizer, instruction.format(type_needle_v=type_v))
    for _ in itertools.count():
        keys = distinct(rng, lambda r: random_needle(r, cfg["type_needle_k"]), num_k)
        flat = distinct(rng, lambda r: random_needle(r, plural), num_k * num_v)
        values = [flat[i * num_v : (i + 1) * num_v] for i in range(num_k)]
        asked = rng.sample(range(num_k), num_q)
        queries = [keys[i] for i in asked]
        answers = [v for i in asked for v in values[i]]
        texts = [(k, v) for k, vs in zip(keys, values, strict=True) for v in vs]
        needles = encode_many(tokenizer, [sep + config.NIAH_NEEDLE.format(type_needle_v=plural, key=k, value=v) for k, v in texts])
        q = _query(queries)
        tail = encode(tokenizer, question.format(type_needle_v=type_v, query=q) + fr.between + prefix.format(type_needle_v=type_v, query=q))
        fixed = len(pre) + sum(map(len, needles)) + len(tail)
        room = length - budget - fixed
        if room < 0:
            raise TooShort(label, length, fixed + budget)
        made: list[tuple[str, str]] = []
        stream = _stream(tokenizer, kind, hay_rng(), haystack, plural, cfg, made)
        hay, bounds, used, next_unit = take_whole(stream, room) if ruler else (*take(stream, room), 0)
        made = made[:used]
        # A distractor line must never carry an asked key or any of the needles' values.
        if not ({k for k, _ in made} & set(keys) or {v for _, v in made} & set(flat)):
            break
    is_asked = [k in queries for k, _ in texts]
    asked_ix = [i for i, a in enumerate(is_asked) if a]
    rng.shuffle(asked_ix)
    if ruler and depth is None:
        places = _ruler_places(rng, bounds, len(texts), kind)
        first = min(places[i] for i in asked_ix)
    else:
        assert depth is not None  # (given, or drawn above when not ruler)
        first = nearest(bounds, depth * len(hay))
        places = {asked_ix[0]: first}
        if ruler:  # a fixed depth for the asked needle, RULER's random places for every other one
            rest = [i for i in range(len(texts)) if i != asked_ix[0]]
            places.update(zip(rest, _spread(rng, bounds[:-1] or bounds, len(rest)), strict=True))
        else:
            places.update(zip(asked_ix[1:], after(rng, bounds, first, len(asked_ix) - 1), strict=True))
            others = [i for i, a in enumerate(is_asked) if not a]
            places.update(zip(others, _spread(rng, bounds, len(others)), strict=True))
    order = sorted(range(len(texts)), key=lambda i: (places[i], asked_ix.index(i) if i in asked_ix else -1))
    context, offsets = weave(hay, [(places[i], needles[i]) for i in order])
    at = dict(zip(order, offsets, strict=True))
    ids = pre + context + tail
    return dict(
        ids=ids,
        answers=answers,
        needle_positions=sorted(len(pre) + at[i] for i in asked_ix),
        shared_len=len(pre) + min(places.values()),
        extra=dict(
            keys=keys, values=values, queries=queries,
            distractor_keys=[k for k in keys if k not in queries],
            haystack=kind, haystack_needles=len(made),
            depth=depth, depth_used=round(first / len(hay), 4) if hay else 0.0,
            needle_depths=[round(places[i] / len(hay), 4) if hay else 0.0 for i in range(len(texts))],
            needle_units=[bounds.index(places[i]) for i in range(len(texts))],  # haystack units before each needle
            min_length=fixed + budget, haystack_units=len(bounds) - 1, next_unit=next_unit,
        ),
    )


def _spread(rng: random.Random, bounds: list[int], count: int) -> list[int]:
    """``count`` distinct random boundaries (with repeats only when there are too few)."""
    return rng.sample(bounds, count) if len(bounds) >= count else [rng.choice(bounds) for _ in range(count)]


def _ruler_places(rng: random.Random, bounds: list[int], count: int, kind: str) -> dict[int, int]:
    """niah.py's placement of ``count`` needles (in key order) among the haystack's units, as
    token offsets. Lines: distinct random line indices, sorted descending and inserted in needle
    order (``sentences.insert(index, needle)``), so needle 0 ends up latest. Essay: sentence
    index ``int(sentences * d / 100)`` for distinct depths ``d`` of RULER's 40, sorted, in needle
    order. niah.py first permutes its needle list with a fixed-seed generator, so its needle order
    is not key order; keys, values and the asked keys are drawn at random, so taking key order
    gives the same distribution."""
    units = len(bounds) - 1
    if kind == "essay":
        depths = rng.sample(range(40), count) if count <= 40 else [rng.randrange(40) for _ in range(count)]
        spots = sorted(int(units * RULER_DEPTHS[d]) for d in depths)
        return {i: bounds[spot] for i, spot in enumerate(spots)}
    indices = sorted(_spread(rng, list(range(max(units, 1))), count), reverse=True)
    # inserting needle i before line indices[i], from the latest index down, keeps each index
    # pointing into the original lines; equal indices put the later-inserted needle first.
    return {i: bounds[min(ix, units)] for i, ix in enumerate(indices)}
