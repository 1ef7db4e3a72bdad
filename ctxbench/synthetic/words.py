"""Random keys, values and words, as RULER draws them (arXiv 2404.06654).

Words come from ``wonderwords``' bundled noun/adjective/verb lists, RULER's own source
(``niah.py``: keys are ``adjective-noun``; ``common_words_extraction.py``: the sorted set of
all three lists). Every draw takes an explicit ``random.Random`` so prompts are reproducible.
"""

from __future__ import annotations

import functools
import random
import string
import uuid
from importlib import resources


@functools.cache
def wordlist(name: str) -> tuple[str, ...]:
    """A wonderwords list (``nouns``, ``adjectives``, ``verbs``), one word a line, right-stripped
    as wonderwords' own reader does."""
    text = resources.files("wonderwords.assets").joinpath(f"{name[:-1]}list.txt").read_text(encoding="utf-8")
    return tuple(w.rstrip() for w in text.splitlines() if w.strip())


@functools.cache
def common_pool() -> tuple[str, ...]:
    """cwe's vocabulary: the sorted set of all nouns, adjectives and verbs."""
    return tuple(sorted(set(wordlist("nouns")) | set(wordlist("adjectives")) | set(wordlist("verbs"))))


def random_word(rng: random.Random) -> str:
    """An ``adjective-noun`` key. RULER picks from the sorted set of all pairs; an adjective and
    a noun drawn independently give the same pairs without building that 6-million-string list."""
    return f"{rng.choice(wordlist('adjectives'))}-{rng.choice(wordlist('nouns'))}"


def random_number(rng: random.Random, digits: int = 7) -> str:
    """A ``digits``-digit number without a leading zero (niah values: 7 digits)."""
    return str(rng.randint(10 ** (digits - 1), 10**digits - 1))


def random_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def random_needle(rng: random.Random, kind: str) -> str:
    """A key or value of RULER's ``type_needle_k``/``type_needle_v``: words, numbers or uuids."""
    if kind == "words":
        return random_word(rng)
    if kind == "numbers":
        return random_number(rng)
    if kind == "uuids":
        return random_uuid(rng)
    raise ValueError(f"unknown needle type {kind!r}")


def distinct(rng: random.Random, draw, count: int, avoid: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """``count`` different draws, none in ``avoid``."""
    out: list[str] = []
    while len(out) < count:
        item = draw(rng)
        if item not in avoid and item not in out:
            out.append(item)
    return out


def variable_name(rng: random.Random, letters: int) -> str:
    """variable_tracking.py: upper-case letters (5 for the task, 3 for its in-context example)."""
    return "".join(rng.choices(string.ascii_uppercase, k=letters))


def coded_word(rng: random.Random, letters: int) -> str:
    """freq_words_extraction.py: a random lower-case "coded word"."""
    return "".join(rng.choices(string.ascii_lowercase, k=letters))
