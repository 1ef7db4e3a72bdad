"""What ``ctxbench tune`` minimises, from what ctxbench already computes on any backend.

Each objective is one object (a :class:`Kind`) in :data:`OBJECTIVES`, which maps ``--objective``'s
names to them; :class:`ModelObjective` runs any of them on a loaded model.

* ``nll``: a document's mean NLL on its target positions past the trained length ``L`` in a window of
  the target's ``T`` tokens (the ``nll_beyond_L`` of :mod:`ctxbench.tasks.ppl`), from one forward
  (:meth:`ctxbench.backends.base.Session.token_nll`).
* ``needle``: the teacher-forced NLL of a pass key (:meth:`Session.scores`, the answer-NLL proxy of
  the retrieval tasks) in the passkey task's own prompt (:func:`ctxbench.tasks.passkey.build_prompt`)
  of ``T`` tokens with the document as its filler, the key at one of five depths.
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
from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import dataclass
from typing import ClassVar, Protocol

from ctxbench.errors import unknown

DEFAULT_OBJECTIVE = "nll"
BLOCK = 512  # target positions per unit, the ppl task's loss-by-position bucket
DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)  # needle depths per document (``needle``), as the niah task's default sweep


def parse_objective(text: str) -> str:
    """``--objective``'s value: a name in :data:`OBJECTIVES` (else did-you-mean, exit 2)."""
    name = str(text).strip().lower()
    if name not in OBJECTIVES:
        raise unknown("--objective", name, OBJECTIVES)
    return name


def objective_kind(name: str) -> Kind:
    """The objective ``--objective name`` picks (checked as :func:`parse_objective` checks it)."""
    return OBJECTIVES[parse_objective(name)]


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

    def values(self, setting, factor: float, instances, guard_only: bool = False) -> Generator[Value, None, None]:
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
    """A needle: its prompt (the passkey task's, the document as its filler) and the answer's token ids."""

    prompt: tuple[int, ...]
    answer: tuple[int, ...]


def make_needle(tokenizer, hay, length: int, depth: float, key: int) -> Needle:
    """The passkey task's ``length``-token prompt (:func:`ctxbench.tasks.passkey.build_prompt`) with
    the haystack ids ``hay`` as its filler, the key ``key`` at the token nearest ``depth`` of it; the
    answer is the key as the task scores it (:func:`ctxbench.tasks.passkey.answer_ids`)."""
    from ctxbench.tasks.passkey import answer_ids, build_prompt  # start-up: loads numpy

    prompt = build_prompt(tokenizer, length, depth, key, filler=[int(t) for t in hay[:length]])
    return Needle(prompt.ids, answer_ids(prompt))


Units = tuple[tuple[float, float], ...]


class Kind(ABC):
    """One objective, under its ``--objective`` name in :data:`OBJECTIVES`: the instances a document
    gives, what one instance scores on a session, and what a plan prices for it."""

    name: ClassVar[str]
    per_document: ClassVar[int] = 1  # instances per document
    # forwards of L/2 tokens the plan prices per instance beside its forward of T (ctxbench.tune.run.price)
    half_forwards: ClassVar[int] = 0
    needles: ClassVar[bool] = False  # whether its instances carry a needle (the passkey prompt: part of the data's identity)

    @abstractmethod
    def instances(self, doc: str, seed: int) -> tuple[tuple[str, float | None], ...]:
        """``(instance, needle depth or None)`` of the document ``doc``, in order."""

    def one_session(self, setting) -> bool:
        """Whether every instance's guard comes out of the session of ``T`` tokens (else each takes a
        session of ``L/2`` of its own: :meth:`ModelObjective.values`)."""
        return _prefix_valid(setting)

    @abstractmethod
    def score(self, objective: ModelObjective, engine, instance: str, n: int, with_guard: bool) -> tuple[Units, Units]:
        """``(units, guard)`` of ``instance`` on ``engine`` (a session of ``n`` tokens); ``guard`` empty
        unless ``with_guard``."""

    def data_digest(self, documents: str) -> str:
        """The digest of what the objective reads: the documents' (``documents``), and with needles the
        passkey prompt's template (:data:`ctxbench.tasks.passkey.TEMPLATE_DIGEST`), so a stored value of
        another prompt is never read back as this one's."""
        if not self.needles:
            return documents
        from ctxbench.tasks.passkey import TEMPLATE_DIGEST  # start-up: loads numpy

        return "sha256:" + hashlib.sha256(f"{documents}|{TEMPLATE_DIGEST}".encode()).hexdigest()[:16]


class NllPastL(Kind):
    """``nll``: the document's NLL per token past ``L`` in its first ``T`` tokens, in 512-position blocks."""

    name = "nll"

    def instances(self, doc: str, seed: int) -> tuple[tuple[str, float | None], ...]:
        return ((doc, None),)

    def score(self, objective: ModelObjective, engine, instance: str, n: int, with_guard: bool) -> tuple[Units, Units]:
        nll = engine.token_nll(objective.tokens[objective.documents[instance]][:n], chunk=objective.chunk)  # (T - 1,)
        guard = blocks(nll, 1, objective.trained // 2) if with_guard else ()
        return blocks(nll, objective.trained, n), guard


class NeedleAnswer(Kind):
    """``needle``: the answer's NLL of a needle at each of :data:`DEPTHS` per document (one unit each);
    the guard a forward of ``L/2`` in the same session."""

    name = "needle"
    per_document = len(DEPTHS)
    half_forwards = 1
    needles = True

    def instances(self, doc: str, seed: int) -> tuple[tuple[str, float | None], ...]:
        return tuple((f"{doc}@{depth:g}", depth) for depth in DEPTHS)

    def one_session(self, setting) -> bool:
        return True  # the needle's prompt and the guard are forwards of their own, in one session

    def score(self, objective: ModelObjective, engine, instance: str, n: int, with_guard: bool) -> tuple[Units, Units]:
        guard = objective.guard_units(engine, instance)
        return (objective.answer_units(engine, instance),), guard


class Both(NllPastL):
    """``both``: ``nll`` and one needle per document (at a depth the document's name's hash picks),
    weighted equally: the blocks scaled to half a unit in all, the answer the other half."""

    name = "both"
    half_forwards = 1
    needles = True

    def instances(self, doc: str, seed: int) -> tuple[tuple[str, float | None], ...]:
        return ((doc, DEPTHS[int(hashlib.sha256(f"{seed}|{doc}".encode()).hexdigest(), 16) % len(DEPTHS)]),)

    def score(self, objective: ModelObjective, engine, instance: str, n: int, with_guard: bool) -> tuple[Units, Units]:
        units, guard = super().score(objective, engine, instance, n, with_guard)
        tokens = sum(w for _, w in units)
        answer, k = objective.answer_units(engine, instance)
        return tuple((s / (2 * tokens), w / (2 * tokens)) for s, w in units) + ((answer / (2 * k), 0.5),), guard


# The objectives by ``--objective`` name: the one place a name picks one.
OBJECTIVES: dict[str, Kind] = {kind.name: kind for kind in (NllPastL(), NeedleAnswer(), Both())}


class ModelObjective:
    """An :class:`Objective` on a loaded model (any backend): ``tokens`` ``{name: (n,) ids}`` of
    documents of at least ``target`` tokens, reused by every trial (tokenised once); ``name`` the
    objective's (:data:`OBJECTIVES`)."""

    def __init__(self, lm, tokens: dict, target: int, name: str = DEFAULT_OBJECTIVE, chunk: int = 1024, seed: int = 0) -> None:
        self.lm, self.tokens, self.target, self.chunk = lm, tokens, target, chunk
        self.kind = objective_kind(name)
        self.name = self.kind.name
        self.trained = lm.geometry.trained_len
        self.documents: dict[str, str] = {}  # instance -> its document
        self.needles: dict[str, Needle] = {}  # instance -> its needle (objectives with needles)
        for doc in tokens:
            for instance, depth in self.kind.instances(doc, seed):
                self.documents[instance] = doc
                if depth is not None:
                    self.needles[instance] = self._needle(doc, depth, seed)
        self.instances = tuple(self.documents)

    def _needle(self, doc: str, depth: float, seed: int) -> Needle:
        key = random.Random(f"{seed}|{doc}|{depth}").randrange(1_000_000, 10_000_000)
        return make_needle(self.lm.tokenizer, self.tokens[doc], self.target, depth, key)

    def values(self, setting, factor: float, instances, guard_only: bool = False) -> Generator[Value, None, None]:
        half = self.trained // 2
        n = half if guard_only else self.target
        if guard_only or self.kind.one_session(setting):
            with self.lm.session(setting, factor, n) as engine:
                for name in instances:
                    yield self._value(engine, name, n, guard_only)
            return
        for name in instances:  # the guard needs a forward of its own at L/2
            with self.lm.session(setting, factor, n) as engine:
                v = self._value(engine, name, n, False, with_guard=False)
            t0 = time.perf_counter()
            with self.lm.session(setting, factor, half) as engine:
                guard = self.guard_units(engine, name)
            yield Value(v.instance, v.units, guard, v.seconds + time.perf_counter() - t0)

    def _value(self, engine, name: str, n: int, guard_only: bool, with_guard: bool = True) -> Value:
        t0 = time.perf_counter()
        if guard_only:
            return Value(name, (), self.guard_units(engine, name), time.perf_counter() - t0)
        units, guard = self.kind.score(self, engine, name, n, with_guard)
        return Value(name, units, guard, time.perf_counter() - t0)

    def guard_units(self, engine, name: str) -> Units:
        """The guard of instance ``name``: its document's first ``L/2`` tokens' NLL, by block."""
        half = self.trained // 2
        nll = engine.token_nll(self.tokens[self.documents[name]][:half], chunk=self.chunk)  # (L/2 - 1,)
        return blocks(nll, 1, half)

    def answer_units(self, engine, name: str) -> tuple[float, float]:
        """(summed answer NLL, answer tokens) of the instance's needle."""
        needle = self.needles[name]
        scored = next(iter(engine.scores([needle.prompt], [needle.answer])))
        return float(scored.nll.double().sum()), float(scored.nll.numel())
