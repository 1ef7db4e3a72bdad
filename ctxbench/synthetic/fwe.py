"""Frequent words extraction (RULER, arXiv 2404.06654; ``scripts/data/synthetic/freq_words_extraction.py``,
``scripts/synthetic.yaml`` fwe: alpha=2.0).

A vocabulary of ``length // 50`` random 6-letter coded words is shuffled and the first one
replaced by "..." (noise); word ``k`` (1-based) appears ``int(N * k**-alpha / zeta(alpha))``
times, all shuffled into one space-separated text; the answer is words 2 to 4, the three most
frequent after the dots. No example is given (RULER's ``add_fewshot`` defaults to off).

Length: ``N`` is the largest whose text fits in the tokens left. ``ruler`` protocol
(``ruler=True``): the tokens left keep RULER's generation budget (50 tokens) free, and the
vocabulary is ``(length - 50) // 50`` as RULER sizes it from the budget-reduced length. RULER
grows ``N`` from ``(L - 50) // 6`` in steps of ``(L - 50) // 32`` while the prompt stays under
``L - 50`` and keeps the last step below, one ``N`` for all samples, so its prompts end up to a
step (and, with a new vocabulary per sample, more) short of the largest fit that ctxbench takes
(side by side at 4096: RULER 3453-3936 tokens, ctxbench 4039-4046).
``exact``: the few tokens still missing are filled with more "..." (the noise word the question
says to ignore), cut at the exact count.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ctxbench.synthetic import config
from ctxbench.synthetic.pieces import Frame, TooShort, encode, encode_many
from ctxbench.synthetic.words import coded_word, distinct

NOISE_WORD = "..."


def zeta(alpha: float, terms: int = 1000) -> float:
    """Riemann zeta for alpha > 1 (RULER uses scipy.special.zeta): a partial sum plus its
    Euler-Maclaurin tail, accurate to ~1e-12 for alpha >= 1.5."""
    head = sum(k**-alpha for k in range(1, terms))
    n = float(terms)
    return head + n ** (1 - alpha) / (alpha - 1) + n**-alpha / 2 - alpha * n ** (-alpha - 1) / 12


def counts(num_words: int, size: int, alpha: float) -> list[int]:
    z = zeta(alpha)
    return [int(num_words * k**-alpha / z) for k in range(1, size + 1)]


def make(tokenizer, fr: Frame, cfg: dict, length: int, depth, hay_rng: Callable[[], random.Random],
         rng: random.Random, haystack, label: str, ruler: bool = False) -> dict:
    alpha = cfg["alpha"]
    budget = config.TOKENS_TO_GENERATE["fwe"] if ruler else 0
    # RULER: vocab_size = (length - budget) // 50; at least the noise word, three answers and one more
    size = max(5, (length - budget) // cfg["vocab_per_tokens"])
    vocab = sorted(distinct(rng, lambda r: coded_word(r, cfg["coded_wordlen"]), size))
    rng.shuffle(vocab)
    vocab[0] = NOISE_WORD
    pre = list(fr.head) + encode(tokenizer, config.FWE_INSTRUCTION)
    tail = encode(tokenizer, config.FWE_QUESTION + fr.between + config.FWE_ANSWER_PREFIX)
    fixed = len(pre) + len(tail) + budget
    room = length - fixed
    words = encode_many(tokenizer, [" " + w for w in vocab])

    def cost(n: int) -> int:
        return sum(c * len(w) for c, w in zip(counts(n, size, alpha), words, strict=True))

    low = _smallest(size, alpha)
    minimum = fixed + cost(low)
    if minimum > length:
        raise TooShort(label, length, minimum)
    high = low
    while cost(high * 2) <= room:
        high *= 2
    high *= 2  # cost(low..high/2] fits, cost(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if cost(mid) <= room else (low, mid)
    listed = [k for k, c in enumerate(counts(low, size, alpha)) for _ in range(c)]
    rng.shuffle(listed)
    body = [t for k in listed for t in words[k]]
    pad = encode(tokenizer, " " + NOISE_WORD)
    while not ruler and len(body) < room:
        body += pad
    return dict(
        ids=pre + body[:room] + tail,
        answers=vocab[1:4],
        needle_positions=[],
        shared_len=len(pre),
        extra=dict(vocab=size, num_words=low, counts=counts(low, size, alpha)[:5], min_length=minimum,
                   next_unit=cost(low + 1) - cost(low)),
    )


def _smallest(size: int, alpha: float) -> int:
    """The smallest text: every answer word appears at least once."""
    n = 1
    while counts(n, size, alpha)[3] < 1:
        n += 1
    return n
