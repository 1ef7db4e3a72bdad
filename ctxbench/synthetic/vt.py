"""Variable tracking (RULER, arXiv 2404.06654; ``scripts/data/synthetic/variable_tracking.py``,
``scripts/synthetic.yaml`` vt: noise haystack, num_chains=1, num_hops=4).

A chain "VAR ABCDE = 12345", "VAR FGHIJ = VAR ABCDE ", ... (num_hops + 1 lines, RULER's trailing
space kept) is hidden among noise lines; the answer is every variable of the chain. RULER puts
one solved example first: the same task with 3-letter names, as many noise lines (at least 5)
as fit in 500 tokens, followed by its answer. Here that example is drawn per (seed, length) so
all trials of a length share it.

Two protocols. ``ruler`` (``ruler=True``) follows variable_tracking.py: as many whole noise lines
as fit with the prompt and RULER's generation budget (30 tokens) within the length, and the
chain's lines at distinct random line indices, in chain order (``sorted(random.sample(...))``).
``exact`` makes the prompt exactly the length and uses ``depth`` as a knob: the chain's first
line sits at ``depth`` and the later hops at random distinct boundaries after it, in chain order
(so the chain is on average closer to the question than RULER's). Under ``ruler`` a given
``depth`` places the first line the same way.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ctxbench.synthetic import config
from ctxbench.synthetic.haystack import NOISE
from ctxbench.synthetic.niah import RULER_DEPTHS
from ctxbench.synthetic.pieces import (
    Frame,
    TooShort,
    after,
    encode,
    encode_many,
    nearest,
    take,
    take_whole,
    weave,
)
from ctxbench.synthetic.words import distinct, variable_name


def _chain(names: list[str], value: int) -> list[str]:
    return [f"VAR {names[0]} = {value}"] + [f"VAR {b} = VAR {a} " for a, b in zip(names, names[1:], strict=False)]


def _task_text(lines: list[str], value: int, num_v: int) -> str:
    return (
        config.VT_INSTRUCTION + "\n" + "\n".join(lines)
        + config.VT_QUESTION.format(query=value) + config.VT_ANSWER_PREFIX.format(num_v=num_v, query=value)
    )


def example(tokenizer, rng: random.Random, seed_text: str, num_hops: int, max_tokens: int) -> str:
    """RULER's in-context example with its answer, ending in the blank line RULER leaves before the task."""
    names = distinct(rng, lambda r: variable_name(r, 3), num_hops + 1)
    value = rng.randint(10000, 99999)
    chain = _chain(names, value)

    def text(n: int) -> str:
        lines = [NOISE] * n
        # positions per noise count from their own generator, so the search below is deterministic
        spots = sorted(random.Random(f"{seed_text}|icl|{n}").sample(range(n), len(chain)))
        for j, (at, line) in enumerate(zip(spots, chain, strict=True)):
            lines.insert(at + j, line)
        return _task_text(lines, value, num_hops + 1)

    def size(n: int) -> int:
        return len(encode(tokenizer, text(n)))

    low = len(chain)  # RULER's smallest noise count (its search step, 5)
    per_line = max(1, len(encode(tokenizer, "\n" + NOISE)))
    n = max(low, low + (max_tokens - size(low)) // per_line)
    while n > low and size(n) > max_tokens:
        n -= 1
    while size(n + 1) <= max_tokens:
        n += 1
    return text(n) + " " + " ".join(names) + "\n\n"


def make(tokenizer, fr: Frame, cfg: dict, length: int, depth: float | None, hay_rng: Callable[[], random.Random],
         rng: random.Random, haystack, label: str, ruler: bool = False) -> dict:
    hops = cfg["num_hops"]
    hrng = hay_rng()
    shot = example(tokenizer, hrng, repr(hrng.random()), hops, cfg["icl_max_tokens"])
    pre = list(fr.head) + encode(tokenizer, shot + config.VT_INSTRUCTION)
    if depth is None and not ruler:
        depth = rng.choice(RULER_DEPTHS)
    budget = config.TOKENS_TO_GENERATE["vt"] if ruler else 0
    names = distinct(rng, lambda r: variable_name(r, 5), hops + 1)
    value = rng.randint(10000, 99999)
    lines = encode_many(tokenizer, ["\n" + line for line in _chain(names, value)])
    tail = encode(tokenizer, config.VT_QUESTION.format(query=value) + fr.between + config.VT_ANSWER_PREFIX.format(num_v=hops + 1, query=value))
    fixed = len(pre) + sum(map(len, lines)) + len(tail)
    room = length - budget - fixed
    if room < 0:
        raise TooShort(label, length, fixed + budget)
    line = encode(tokenizer, "\n" + NOISE)
    hay, bounds, _, next_unit = take_whole(iter(lambda: line, None), room) if ruler else (*take(iter(lambda: line, None), room), 0)
    if ruler and depth is None:
        slots = bounds[:-1] or bounds  # before line i, i < lines (RULER inserts, never appends)
        places = sorted(rng.sample(slots, hops + 1)) if len(slots) > hops else sorted(rng.choice(slots) for _ in range(hops + 1))
        first = places[0]
    else:
        assert depth is not None  # (given, or drawn above when not ruler)
        first = nearest(bounds, depth * len(hay))
        places = [first] + after(rng, bounds, first, hops)
    context, offsets = weave(hay, list(zip(places, lines, strict=True)))
    return dict(
        ids=pre + context + tail,
        answers=names,
        needle_positions=[len(pre) + o for o in offsets],
        shared_len=len(pre) + first,
        extra=dict(
            variables=names, value=value, example_tokens=len(pre) - len(fr.head),
            depth=depth, depth_used=round(first / len(hay), 4) if hay else 0.0,
            needle_depths=[round(p / len(hay), 4) if hay else 0.0 for p in places],
            needle_units=[bounds.index(p) for p in places],  # noise lines before each chain line
            min_length=fixed + budget, haystack_units=len(bounds) - 1, next_unit=next_unit,
        ),
    )
