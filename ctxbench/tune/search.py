"""The search of ``ctxbench tune``: the published defaults first, then candidates from a sampler, each
evaluated instance by instance and stopped as soon as a paired test shows it worse than the best so far.

Samplers
    * built in (no extra package): successive halving (Jamieson & Talwalkar 2016, "Non-stochastic best
      arm identification and hyperparameter optimization", AISTATS; the rung schedule of Li et al.
      2018, Hyperband, JMLR 18:185) over the tuning instances: a batch of ``eta^k`` candidates is
      scored on the first rung's instances, the best ``1/eta`` go on to ``eta`` times as many, until
      the last rung scores every tuning instance. Candidates are uniform samples of each dimension's
      scale, or, when every dimension is a grid (Self-Extend's window and group), the whole grid in an
      order fixed by the seed.
    * Optuna's TPE (Bergstra et al. 2011, "Algorithms for hyper-parameter optimization", NeurIPS) when
      ``optuna`` is installed (``pip install 'ctxbench[tune]'``): continuous dimensions are sampled by
      it, grids as categorical choices; each candidate scores every tuning instance (pruning aside).

Early stopping
    After each instance a candidate is compared with the best complete one on the units they share
    (:mod:`ctxbench.tune.objective`): a two-sided sign-flip permutation test of the paired
    differences (:func:`ctxbench.stats.sign_flip_test`, the test of ``ctxbench rank``); worse with
    ``p < PRUNE_ALPHA`` stops it (``pruned``). A candidate whose NLL at ``L/2`` exceeds ``none``'s by
    more than the guard stops too (``guarded``) and never wins.

Resuming
    Every instance's value is written as it lands (:mod:`ctxbench.tune.store`); a resumed search
    replays the same deterministic sequence (seeded samplers see the same values), taking each value
    already in the file instead of computing it, so no finished evaluation runs twice.
"""

from __future__ import annotations

import importlib.util
import math
import random
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field

from ctxbench.tune.objective import Objective, Value
from ctxbench.tune.space import Candidate, Space

PRUNE_ALPHA = 0.01  # a trial is stopped when worse than the best at p below this (each look: a 1% chance to stop an equal one)
ETA = 3  # successive halving keeps the best third at each rung


@dataclass
class Trial:
    """One candidate and what it scored so far; ``status``: ``complete`` (every tuning instance),
    ``pruned`` (stopped: worse than the best), ``guarded`` (stopped: its L/2 NLL broke the guard),
    ``halved`` (left at a lower rung by successive halving) or ``running``."""

    number: int
    candidate: Candidate
    label: str
    values: list[Value] = field(default_factory=list)
    status: str = "running"
    reason: str = ""

    @property
    def objective(self) -> float:
        units = [u for v in self.values for u in v.units]
        return sum(s for s, _ in units) / sum(w for _, w in units) if units else math.nan

    @property
    def guard_value(self) -> float:
        units = [u for v in self.values for u in v.guard]
        return sum(s for s, _ in units) / sum(w for _, w in units) if units else math.nan

    def by_instance(self) -> dict[str, Value]:
        return {v.instance: v for v in self.values}


@dataclass(frozen=True)
class Budget:
    """At most ``trials`` candidates (the defaults included), and/or stop starting evaluations that
    would end past ``seconds`` from the start, leaving time for the search's ``reserve`` evaluations
    after it (estimated from the evaluations so far). The defaults always run."""

    trials: int | None = None
    seconds: float | None = None


def paired_units(a: Trial | list[Value], b: Trial | list[Value]) -> tuple[list[float], list[float]]:
    """(differences a - b, weights) of the units two trials share, matched by instance and position."""
    va = {v.instance: v for v in (a.values if isinstance(a, Trial) else a)}
    vb = {v.instance: v for v in (b.values if isinstance(b, Trial) else b)}
    diffs, weights = [], []
    for name in va:
        if name in vb:
            for (sa, wa), (sb, _) in zip(va[name].units, vb[name].units, strict=True):
                diffs.append(sa - sb)
                weights.append(wa)
    return diffs, weights


def clearly_worse(trial: Trial, best: Trial, alpha: float = PRUNE_ALPHA) -> tuple[bool, str]:
    """Whether ``trial`` is worse than ``best`` on the units they share at two-sided ``p < alpha``."""
    from ctxbench.stats import sign_flip_test  # start-up: loads numpy

    diffs, weights = paired_units(trial, best)
    if len(diffs) < 2 or sum(diffs) <= 0:
        return False, ""
    p, _ = sign_flip_test(diffs, n_perm=9999, seed=0)
    delta = sum(diffs) / sum(weights)
    return p < alpha, f"worse than trial {best.number} by {delta:+.4f} on {len(diffs)} units (sign-flip p = {p:.2g})"


class Search:
    """Runs the search of ``space`` on ``objective``'s ``tuning`` instances.

    ``cached`` ``{(candidate key, instance): Value}``: values already in the trials file (resume);
    ``record(trial, value)`` is called with each value computed here (the store writes it), and
    ``finish(trial)`` when a trial ends; ``progress(trials, best)`` after each evaluation."""

    def __init__(self, space: Space, objective: Objective, tuning: list[str], budget: Budget, *, guard: float,
                 guard_reference: dict[str, Value], seed: int = 0, sampler: str = "halving",
                 cached: dict | None = None, record: Callable | None = None, finish: Callable | None = None,
                 progress: Callable | None = None, clock: Callable[[], float] = time.monotonic, reserve: int = 0,
                 prune_alpha: float = PRUNE_ALPHA, halving: bool = True) -> None:  # fmt: skip
        self.space, self.objective, self.tuning, self.budget = space, objective, list(tuning), budget
        self.guard, self.guard_reference, self.seed, self.sampler = guard, guard_reference, seed, sampler
        self.cached = dict(cached or {})
        self.record, self.finish, self.progress = record, finish, progress
        self.prune_alpha = prune_alpha  # 0: never prune (scripts/bench_tune.py measures what pruning saves)
        self.halving = halving  # False: every trial on every tuning instance (one rung)
        self.clock, self.reserve = clock, reserve  # evaluations to leave time for after the search (the verdict)
        self.start = clock()
        self.trials: list[Trial] = []
        self.seen: dict[str, Trial] = {}
        self.computed = 0  # evaluations computed here (not taken from the file)
        self.taken = 0  # evaluations taken from the file
        self.eval_seconds: list[float] = []
        # the seconds the evaluations taken from the file cost when they ran: a resumed search spends
        # what is left of its --minutes, and a finished one run again stops where it stopped
        self.resumed_seconds = 0.0

    # ---- budget -------------------------------------------------------------------------------
    def _room_for_trial(self) -> bool:
        return self.budget.trials is None or len(self.trials) < self.budget.trials

    def _room_for_eval(self) -> bool:
        if self.budget.seconds is None:
            return True
        each = sum(self.eval_seconds) / len(self.eval_seconds) if self.eval_seconds else 0.0
        return self.clock() - self.start + self.resumed_seconds + each * (1 + self.reserve) <= self.budget.seconds

    # ---- the best so far ----------------------------------------------------------------------
    def best(self) -> Trial | None:
        done = [t for t in self.trials if t.status == "complete"]
        return min(done, key=lambda t: (t.objective, t.number)) if done else None

    # ---- one trial ----------------------------------------------------------------------------
    def _trial(self, candidate: Candidate) -> Trial | None:
        if candidate.key in self.seen:
            return self.seen[candidate.key]
        if not self._room_for_trial():
            return None
        t = Trial(len(self.trials), candidate, self.space.label(candidate))
        self.trials.append(t)
        self.seen[candidate.key] = t
        return t

    def _guard_problem(self, t: Trial) -> str:
        ref = [self.guard_reference[v.instance] for v in t.values if v.instance in self.guard_reference]
        if not ref or not t.values[0].guard:
            return ""
        units = [u for r in ref for u in r.guard]
        base = sum(s for s, _ in units) / sum(w for _, w in units)
        excess = t.guard_value - base
        return f"NLL at L/2 is {excess:+.4f} above none's (guard {self.guard:g})" if excess > self.guard else ""

    def evaluate(self, t: Trial, upto: int) -> Trial:
        """Score ``t`` on the first ``upto`` tuning instances (those it lacks), stopping early when
        it is clearly worse than the best or breaks the guard."""
        todo = [name for name in self.tuning[:upto] if name not in t.by_instance()]
        fresh = [name for name in todo if (t.candidate.key, name) not in self.cached]
        stream: Generator[Value, None, None] | None = None
        try:
            for name in todo:
                best = self.best()
                if (t.candidate.key, name) in self.cached:
                    value = self.cached[(t.candidate.key, name)]
                    self.taken += 1
                    self.eval_seconds.append(value.seconds)
                    self.resumed_seconds += value.seconds
                else:
                    if t.number > 0 and not self._room_for_eval():  # the defaults always run
                        t.status, t.reason = "stopped", "the time budget ran out"
                        break
                    if stream is None:
                        stream = self.objective.values(self.space.setting(t.candidate), t.candidate.factor, fresh)
                    value = next(stream)
                    assert value.instance == name, (value.instance, name)
                    self.computed += 1
                    self.eval_seconds.append(value.seconds)
                    if self.record:
                        self.record(t, value)
                t.values.append(value)
                problem = self._guard_problem(t)
                if problem:
                    t.status, t.reason = "guarded", problem
                    break
                if best is not None and best is not t:
                    worse, why = clearly_worse(t, best, self.prune_alpha)
                    if worse:
                        t.status, t.reason = "pruned", why
                        break
                if self.progress:
                    self.progress(self)
        finally:
            if stream is not None:
                stream.close()
        if t.status == "running" and len(t.values) == len(self.tuning):
            t.status = "complete"
        if t.status != "running" and self.finish:
            self.finish(t)
        if self.progress:
            self.progress(self)
        return t

    # ---- samplers -----------------------------------------------------------------------------
    def _proposals(self, rng: random.Random) -> Iterator[Candidate]:
        """Candidates in the order the built-in sampler tries them: a grid space's every point
        (shuffled by the seed), else uniform samples."""
        points = self.space.grid()
        if points is not None:
            rng.shuffle(points)
            yield from points
            return
        misses = 0
        while misses < 1000:
            c = self.space.sample(rng)
            misses = misses + 1 if c.key in self.seen else 0
            yield c

    def run(self) -> list[Trial]:
        """The whole search; returns every trial (in order)."""
        defaults = self._trial(self.space.defaults())
        assert defaults is not None  # (the first trial always has room)
        self.evaluate(defaults, len(self.tuning))
        if self.sampler == "tpe":
            self._tpe()
        else:
            self._halving()
        for t in self.trials:
            if t.status == "running":
                t.status = "halved" if t.values else "stopped"
                if self.finish:
                    self.finish(t)
        return self.trials

    def rungs(self) -> list[int]:
        """Instances per rung: ``ceil(n / eta^k)`` down to 1, ascending (``[1, 3, 9]`` for 9)."""
        n, out, k = len(self.tuning), set(), 0
        if not self.halving:
            return [n]
        while True:
            r = max(1, math.ceil(n / ETA**k))
            out.add(r)
            if r == 1:
                return sorted(out)
            k += 1

    def _halving(self) -> None:
        rng = random.Random(self.seed)
        proposals = self._proposals(rng)
        rungs = self.rungs()
        while self._room_for_trial() and self._room_for_eval():
            batch: list[Trial] = []
            for c in proposals:
                if c.key in self.seen:
                    continue
                t = self._trial(c)
                if t is None:
                    break
                batch.append(t)
                if len(batch) >= ETA ** (len(rungs) - 1):
                    break
            if not batch:
                return
            alive = batch
            for i, upto in enumerate(rungs):
                for t in alive:
                    if t.status == "running":
                        self.evaluate(t, upto)
                if i + 1 == len(rungs):
                    break
                ranked = sorted((t for t in alive if t.status == "running"), key=lambda t: (t.objective, t.number))
                keep = ranked[: max(1, math.ceil(len(ranked) / ETA))]
                for t in alive:
                    if t.status == "running" and t not in keep:
                        t.status, t.reason = "halved", f"not in the best 1/{ETA} at {upto} instance(s)"
                        if self.finish:
                            self.finish(t)
                alive = keep
            if not self._room_for_eval():
                return

    def _tpe(self) -> None:
        import optuna  # optional: optuna only where it is used

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=self.seed))
        misses = 0
        while self._room_for_trial() and self._room_for_eval() and misses < 100:
            ot = study.ask()
            values = {}
            for d in self.space.dims:
                if d.scale == "grid":
                    values[d.name] = ot.suggest_categorical(d.name, list(d.values))
                elif d.integer:
                    values[d.name] = ot.suggest_int(d.name, int(round(d.low)), int(round(d.high)), log=d.scale == "log")
                else:
                    values[d.name] = float(f"{ot.suggest_float(d.name, d.low, d.high, log=d.scale == 'log'):.3g}")
            c = self.space.candidate(values)
            if self.space.allowed(c) is not None or c.key in self.seen:
                study.tell(ot, state=optuna.trial.TrialState.PRUNED)
                misses += 1
                continue
            misses = 0
            t = self._trial(c)
            if t is None:
                return
            self.evaluate(t, len(self.tuning))
            if t.status == "complete":
                study.tell(ot, t.objective)
            else:
                study.tell(ot, state=optuna.trial.TrialState.PRUNED)


def has_optuna() -> bool:
    """Whether the optional extra ``ctxbench[tune]`` (optuna) is installed."""
    return importlib.util.find_spec("optuna") is not None
