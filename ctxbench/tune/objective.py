"""What ``ctxbench tune`` minimises, from what ctxbench already computes on any backend.

* ``nll``: a document's mean NLL on its target positions past the trained length ``L`` in a window of
  the target's ``T`` tokens (the ``nll_beyond_L`` of :mod:`ctxbench.tasks.ppl`), from one forward
  (:meth:`ctxbench.backends.base.Session.token_nll`).
* ``needle``: the teacher-forced NLL of a needle's answer (:meth:`Session.scores`, the answer-NLL
  proxy of the retrieval tasks), the needle ("The special magic number is N.") placed at a depth of a
  ``T``-token haystack made of the document, the question after it.
* ``both``: the two, weighted equally: ``(nll + needle) / 2`` per document (one needle per document,
  at a depth its name's hash picks).

Every :class:`Value` also carries the document's NLL at ``L/2`` (its first ``L/2`` tokens), the
guard. For a causal method whose frequencies do not depend on the length, the loss of token ``t`` in
a window from 0 is the same in every longer window (the shared pass of :mod:`ctxbench.tasks.ppl`), so
the guard is the prefix of the same forward; otherwise it takes a forward of its own.

Units: each value is a list of ``(sum, weight)`` units, the paired tests' units: the 512-position
blocks past ``L`` (the loss-by-position buckets of the ppl task, so a single document still gives a
paired test: :mod:`ctxbench.report.paired`'s block units), a needle's answer, or both.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from ctxbench.errors import unknown

OBJECTIVES = ("nll", "needle", "both")
BLOCK = 512  # target positions per unit, the ppl task's loss-by-position bucket
DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)  # needle depths per document (``needle``), as the niah task's default sweep


def parse_objective(text: str) -> str:
    name = str(text).strip().lower()
    if name not in OBJECTIVES:
        raise unknown("--objective", name, OBJECTIVES)
    return name


@dataclass(frozen=True)
class Value:
    """One instance scored under one setting: ``units`` ``((sum, weight), ...)`` whose ratio of sums is
    the objective; ``guard`` ``((sum, tokens), ...)`` the NLL of the first ``L/2`` tokens by block."""

    instance: str
    units: tuple[tuple[float, float], ...]
    guard: tuple[tuple[float, float], ...]
    seconds: float

    @property
    def value(self) -> float:
        return sum(s for s, _ in self.units) / sum(w for _, w in self.units)

    @property
    def guard_value(self) -> float:
        return sum(s for s, _ in self.guard) / sum(w for _, w in self.guard)


class Objective(Protocol):
    """What the search asks of an objective: the instances, and their values under a setting."""

    name: str
    instances: tuple[str, ...]

    def values(self, setting, factor: float, instances, guard_only: bool = False) -> Iterator[Value]:
        """A :class:`Value` per instance, in order, on one session of ``setting`` at ``factor``
        (a consumer may stop early); ``guard_only``: the ``L/2`` guard alone (``units`` empty)."""


def blocks(nll, start: int, end: int, block: int = BLOCK) -> tuple[tuple[float, float], ...]:
    """``(summed NLL, tokens)`` of target positions ``[start, end)`` of a per-token NLL ``nll``
    ((n - 1,): entry ``t - 1`` is the loss of token ``t``), in blocks aligned to multiples of ``block``."""
    out = []
    a = start
    while a < end:
        b = min(end, (a // block + 1) * block)
        part = nll[a - 1 : b - 1]
        out.append((float(part.double().sum()), float(part.numel())))
        a = b
    return tuple(out)


def _prefix_valid(setting) -> bool:
    """The first ``L/2`` losses of a ``T`` window are the ``L/2`` window's (causal, length-free)."""
    return setting.causal and not setting.dynamic


@dataclass(frozen=True)
class Needle:
    """A needle: its prompt (haystack with the needle sentence at ``depth``, then the question) and
    the answer's token ids."""

    prompt: tuple[int, ...]
    answer: tuple[int, ...]


def make_needle(tokenizer, hay, length: int, depth: float, key: int) -> Needle:
    """A ``length``-token prompt from the haystack ids ``hay``: the needle sentence inserted at
    ``depth`` (at a position rounded down to the haystack's own tokens), the question last."""
    enc = lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    needle = enc(f" The special magic number is {key}. ")
    question = enc(" What is the special magic number mentioned in the text above? The special magic number is")
    answer = tuple(enc(f" {key}."))
    room = length - len(needle) - len(question)
    hay = [int(t) for t in hay[:room]]
    at = int(depth * len(hay))
    return Needle(tuple(hay[:at] + needle + hay[at:] + question), answer)


class ModelObjective:
    """An :class:`Objective` on a loaded model (any backend): ``tokens`` ``{name: (n,) ids}`` of
    documents of at least ``target`` tokens, reused by every trial (tokenised once)."""

    def __init__(self, lm, tokens: dict, target: int, name: str = "nll", chunk: int = 1024, seed: int = 0) -> None:
        self.lm, self.tokens, self.target, self.name, self.chunk = lm, tokens, target, parse_objective(name), chunk
        self.trained = lm.geometry.trained_len
        self.needles: dict[str, tuple[str, Needle]] = {}  # instance -> (document, needle)
        if self.name == "needle":
            for doc in tokens:
                for depth in DEPTHS:
                    self.needles[f"{doc}@{depth:g}"] = (doc, self._needle(doc, depth, seed))
        elif self.name == "both":
            for doc in tokens:
                depth = DEPTHS[int(hashlib.sha256(f"{seed}|{doc}".encode()).hexdigest(), 16) % len(DEPTHS)]
                self.needles[doc] = (doc, self._needle(doc, depth, seed))
        self.instances = tuple(self.needles) if self.name == "needle" else tuple(tokens)

    def _needle(self, doc: str, depth: float, seed: int) -> Needle:
        key = random.Random(f"{seed}|{doc}|{depth}").randrange(1_000_000, 10_000_000)
        return make_needle(self.lm.tokenizer, self.tokens[doc], self.target, depth, key)

    def values(self, setting, factor: float, instances, guard_only: bool = False) -> Iterator[Value]:
        from ctxbench import backends

        half = self.trained // 2
        n = half if guard_only else self.target
        if guard_only or _prefix_valid(setting) or self.name == "needle":
            with backends.session(self.lm, setting, factor, n) as engine:
                for name in instances:
                    yield self._value(engine, name, n, guard_only)
            return
        for name in instances:  # the guard needs a forward of its own at L/2
            with backends.session(self.lm, setting, factor, n) as engine:
                v = self._value(engine, name, n, False, with_guard=False)
            t0 = time.perf_counter()
            with backends.session(self.lm, setting, factor, half) as engine:
                nll = engine.token_nll(self.tokens[name][:half], chunk=self.chunk)
            yield Value(v.instance, v.units, blocks(nll, 1, half), v.seconds + time.perf_counter() - t0)

    def _value(self, engine, name: str, n: int, guard_only: bool, with_guard: bool = True) -> Value:
        half = self.trained // 2
        t0 = time.perf_counter()
        doc = self.needles[name][0] if self.name == "needle" else name
        if guard_only or self.name == "needle":
            nll = engine.token_nll(self.tokens[doc][:half], chunk=self.chunk)  # (L/2 - 1,)
            guard, units = blocks(nll, 1, half), ()
            if not guard_only:
                units = (self._answer(engine, name),)
            return Value(name, units, guard, time.perf_counter() - t0)
        nll = engine.token_nll(self.tokens[doc][:n], chunk=self.chunk)  # (T - 1,)
        units = blocks(nll, self.trained, n)
        guard = blocks(nll, 1, half) if with_guard else ()
        if self.name == "both":  # equal weights: half the mean NLL past L, half the answer's
            tokens = sum(w for _, w in units)
            answer, k = self._answer(engine, name)
            units = tuple((s / (2 * tokens), w / (2 * tokens)) for s, w in units) + ((answer / (2 * k), 0.5),)
        return Value(name, units, guard, time.perf_counter() - t0)

    def _answer(self, engine, name: str) -> tuple[float, float]:
        """(summed answer NLL, answer tokens) of the instance's needle."""
        needle = self.needles[name][1]
        scored = next(iter(engine.scores([needle.prompt], [needle.answer])))
        return float(scored.nll.double().sum()), float(scored.nll.numel())
