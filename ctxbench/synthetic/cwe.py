"""Common words extraction (RULER, arXiv 2404.06654; ``scripts/data/synthetic/common_words_extraction.py``,
``scripts/synthetic.yaml`` cwe: freq_cw=30, freq_ucw=3, num_cw=10).

A numbered list "1. word 2. word ..." in which ``num_cw`` common words appear ``freq_cw`` times
each and every other word ``freq_ucw`` times, shuffled; the answer is the common words. RULER
switches to 6/1 repeats below 4096 tokens and puts one solved example (20 words at 3/1, or 40 at
10/3) before the task; the example is drawn per (seed, length), so trials of a length share it.

Length, ``ruler`` protocol (``ruler=True``): as RULER's binary search finds, the most words whose
list fits with the prompt and RULER's generation budget (120 tokens) within the length. ``exact``:
the list is the largest that fits in the tokens left, and the few tokens still missing are
filled by further list entries of words that appear once (fewer times than any counted word),
cut at the exact count. Either way the repeat switch at 4096 reads the whole length, as RULER's
``max_seq_length < 4096`` does.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ctxbench.errors import UserError
from ctxbench.synthetic import config
from ctxbench.synthetic.pieces import Frame, TooShort, batched, encode
from ctxbench.synthetic.words import common_pool


def _numbered(words: list[str]) -> str:
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(words))


def example(rng: random.Random, num_words: int, freq_cw: int, freq_ucw: int, num_cw: int) -> str:
    """One solved example (RULER's few-shot), ending in the newline RULER puts before the task."""
    words = rng.sample(common_pool(), num_words)
    common, uncommon = words[:num_cw], words[num_cw:]
    listed = common * freq_cw + uncommon * freq_ucw
    rng.shuffle(listed)
    return (
        config.CWE_INSTRUCTION + _numbered(listed) + config.CWE_QUESTION.format(num_cw=num_cw)
        + config.CWE_ANSWER_PREFIX.format(num_cw=num_cw) + " " + _numbered(common) + "\n"
    )


class _Lazy:
    """Token lists of an endless text stream, tokenised on first use."""

    def __init__(self, tokenizer, texts) -> None:
        self._it = batched(tokenizer, texts, 512)
        self.items: list[list[int]] = []

    def __getitem__(self, i: int) -> list[int]:
        while len(self.items) <= i:
            self.items.append(next(self._it))
        return self.items[i]


def make(tokenizer, fr: Frame, cfg: dict, length: int, depth, hay_rng: Callable[[], random.Random],
         rng: random.Random, haystack, label: str, ruler: bool = False) -> dict:
    num_cw = cfg["num_cw"]
    short = length < cfg["short_below"]
    freq_cw, freq_ucw = (cfg["short_freq_cw"], cfg["short_freq_ucw"]) if short else (cfg["freq_cw"], cfg["freq_ucw"])
    shot_args = (20, 3, 1) if short else (40, 10, 3)
    hrng = hay_rng()
    shots = "".join(example(hrng, *shot_args, num_cw) for _ in range(cfg["num_fewshot"]))
    pre = list(fr.head) + encode(tokenizer, shots + config.CWE_INSTRUCTION)
    tail = encode(tokenizer, config.CWE_QUESTION.format(num_cw=num_cw) + fr.between + config.CWE_ANSWER_PREFIX.format(num_cw=num_cw))
    budget = config.TOKENS_TO_GENERATE["cwe"] if ruler else 0
    fixed = len(pre) + len(tail) + budget
    room = length - fixed

    pool = common_pool()
    order = rng.sample(pool, len(pool))
    word = _Lazy(tokenizer, (" " + w for w in order))
    number = _Lazy(tokenizer, (f"{i + 1}." if i == 0 else f" {i + 1}." for i in range(10**9)))

    def entries(n: int) -> int:
        return num_cw * freq_cw + (n - num_cw) * freq_ucw

    # the smallest list: twice as many words as are asked (RULER's short example has 20 for 10)
    n = 2 * num_cw
    cost = sum(len(number[i]) for i in range(entries(n)))
    cost += freq_cw * sum(len(word[j]) for j in range(num_cw)) + freq_ucw * sum(len(word[j]) for j in range(num_cw, n))
    if cost > room:
        raise TooShort(label, length, fixed + cost)
    minimum = fixed + cost
    while True:
        if n + 64 >= len(pool):  # keep a few unused words for the fill
            raise UserError(f"length {length} needs more distinct words than cwe's word list has ({len(pool)})", "use a shorter length for cwe")
        step = freq_ucw * len(word[n]) + sum(len(number[i]) for i in range(entries(n), entries(n + 1)))
        if cost + step > room:
            break  # ``step``: what one more word would have cost
        cost, n = cost + step, n + 1
    common, uncommon = order[:num_cw], list(range(num_cw, n))
    listed = list(range(num_cw)) * freq_cw + uncommon * freq_ucw
    rng.shuffle(listed)
    body: list[int] = []
    for i, j in enumerate(listed):
        body += number[i] + word[j]
    i, j = len(listed), n
    while not ruler and len(body) < room:  # entries of once-listed words fill the last few tokens
        body += number[i] + word[j]
        i, j = i + 1, j + 1
    return dict(
        ids=pre + body[:room] + tail,
        answers=common,
        needle_positions=[],
        shared_len=len(pre),
        extra=dict(words=n, repeats=(freq_cw, freq_ucw), entries=len(listed), filler_entries=i - len(listed), min_length=minimum,
                   next_unit=step),
    )
