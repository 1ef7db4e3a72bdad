"""The search space of ``ctxbench tune``: a method's tunable parameters, read from the registry.

Each parameter a method tunes declares its range next to its :class:`~ctxbench.methods.params.Param`
(``tune``: a :class:`~ctxbench.methods.params.Tune`), in terms of the model's trained length ``L`` and
the target length ``T``; the factor's range is the method's own (:attr:`Method.tune_factor`, around
``T/L``). A method's ``tune_rule`` (the authors' rule: Self-Extend's ``w + (L - w) G >= T``) leaves out
the points that break it. A method, or a parameter asked for, that declares no range is refused with
the reason, before any model loads. Parameters without a range keep their defaults.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from dataclasses import dataclass
from typing import Any

from ctxbench.errors import UserError, closest
from ctxbench.methods import METHODS, resolve
from ctxbench.methods.params import Tune, format_value
from ctxbench.parsing import len_label

FACTOR = "factor"  # the dimension of the scale factor s, beside the method's own parameters


@dataclass(frozen=True)
class Dim:
    """One searched dimension: ``scale`` ``log``/``linear`` between ``low`` and ``high``, or ``grid``
    over ``values``; ``integer`` rounds a continuous value (a ``length`` or ``int`` parameter)."""

    name: str
    scale: str
    low: float = math.nan
    high: float = math.nan
    values: tuple = ()
    integer: bool = False
    why: str = ""
    part_of: str = ""  # a knot of this curve parameter (``knots.2`` of ``knots``), else ""

    def sample(self, rng: random.Random):
        if self.scale == "grid":
            return rng.choice(self.values)
        if self.scale == "log":
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            x = rng.uniform(self.low, self.high)
        return int(round(x)) if self.integer else float(f"{x:.3g}")  # 3 significant digits: labels stay short

    def ends(self) -> tuple:
        """Its two ends (a grid's smallest and largest value)."""
        if self.scale == "grid":
            return min(self.values), max(self.values)
        return (int(round(self.low)), int(round(self.high))) if self.integer else (self.low, self.high)

    def text(self) -> str:
        if self.scale == "grid":
            return "{" + ", ".join(format_value(v) for v in self.values) + "}"
        return f"[{self.low:.4g}, {self.high:.4g}] {self.scale}"


@dataclass(frozen=True, order=True)
class Candidate:
    """A point of the space: the factor and the parameters given (others keep their defaults);
    ``params`` sorted ``(name, value)`` pairs, so equal points are equal keys."""

    factor: float
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> str:
        """Stable text identity (the CSV's ``candidate`` column, the resume key)."""
        return f"x{self.factor:.6g}" + "".join(f",{k}={format_value(v)}" for k, v in self.params)


@dataclass(frozen=True)
class Space:
    """``method`` tuned at target ``target`` on a model trained at ``trained``: its :class:`Dim`s and
    the factor used when the factor is not searched (``T/L``)."""

    method: str
    trained: int
    target: int
    dims: tuple[Dim, ...]

    @property
    def base_factor(self) -> float:
        return self.target / self.trained

    def defaults(self) -> Candidate:
        """The published defaults: no parameter given, factor ``T/L``."""
        return Candidate(float(f"{self.base_factor:.6g}"))

    def allowed(self, candidate: Candidate) -> str | None:
        """Why ``candidate`` is left out (the method's rule), or None."""
        rule = METHODS[self.method].tune_rule
        return rule(dict(candidate.params), self.trained, self.target) if rule else None

    def candidate(self, values: dict) -> Candidate:
        """The point of these dimension values; a curve's knots (``knots.0``, ``knots.1``, ...) become
        one parameter, sorted (a curve that never falls, as LongRoPE's factors rise from the
        highest-frequency pair to the lowest)."""
        factor = float(values.get(FACTOR, self.base_factor))
        parts = {d.name: d.part_of for d in self.dims if d.part_of}
        params = {k: v for k, v in values.items() if k != FACTOR and k not in parts}
        for curve in dict.fromkeys(parts.values()):
            knots = [values[d.name] for d in self.dims if d.part_of == curve and d.name in values]
            if knots:
                params[curve] = tuple(sorted(float(f"{k:.3g}") for k in knots))
        return Candidate(float(f"{factor:.6g}"), tuple(sorted(params.items())))

    def value(self, candidate: Candidate, dim: str):
        """The value of dimension ``dim`` at ``candidate`` (a knot's after sorting)."""
        if dim == FACTOR:
            return candidate.factor
        d = next((d for d in self.dims if d.name == dim), None)
        params = dict(candidate.params)
        if d is not None and d.part_of:
            knots = params.get(d.part_of)
            return None if knots is None else knots[int(dim.rsplit(".", 1)[1])]
        return params.get(dim)

    def sample(self, rng: random.Random, tries: int = 1000) -> Candidate:
        """A random point that the rule keeps (uniform over each dimension's scale)."""
        for _ in range(tries):
            c = self.candidate({d.name: d.sample(rng) for d in self.dims})
            if self.allowed(c) is None:
                return c
        raise UserError(f"no point of {self.method}'s tuning space at T = {len_label(self.target)} keeps its rule",
                        "tune at a shorter target, or another method")  # fmt: skip

    def grid(self) -> list[Candidate] | None:
        """Every point the rule keeps, when every dimension is a grid (else None)."""
        if not self.dims or any(d.scale != "grid" for d in self.dims):
            return None
        points = [self.candidate(dict(zip([d.name for d in self.dims], combo, strict=True)))
                  for combo in itertools.product(*(d.values for d in self.dims))]  # fmt: skip
        return [c for c in points if self.allowed(c) is None]

    def setting(self, candidate: Candidate):
        """The resolved method setting of a point (its label names what differs from the defaults)."""
        return resolve(self.method, dict(candidate.params), runnable=True)

    def label(self, candidate: Candidate) -> str:
        label = self.setting(candidate).label
        return label if abs(candidate.factor - self.base_factor) < 1e-9 else f"{label} x{candidate.factor:g}"

    def command(self, candidate: Candidate) -> str:
        """The options a task command takes for this point, the parameters in the method spec:
        ``--method 'yarn(beta_fast=24)' -f 2.3`` (quoted for a shell: the brackets)."""
        if not candidate.params:
            return f"--method {self.method} -f {candidate.factor:g}"
        def text(v) -> str:  # a curve as a JSON list, which a method spec reads back as one value
            return "[" + ",".join(format_value(x) for x in v) + "]" if isinstance(v, (list, tuple)) else format_value(v)

        spec = self.method + "(" + ",".join(f"{k}={text(v)}" for k, v in candidate.params) + ")"
        return f"--method '{spec}' -f {candidate.factor:g}"


def space_for(method: str, trained: int, target: int, only: list[str] | None = None) -> Space:
    """The search space of ``method`` (one registry name or alias) at ``target`` on a model trained at
    ``trained``; ``only`` narrows it to those parameters (``factor`` included). One clear error for a
    combination (``ntk+logn``), a method without ranges, or a parameter asked for that has none."""
    setting = resolve(method)
    names = setting.name.split("+")  # canonical: self-extend alone, not its plain-RoPE frequency part
    if len(names) != 1:
        raise UserError(f"ctxbench tune searches one method at a time, not '{method}'",
                        f"tune one of its parts, e.g. --method {names[-1]}")  # fmt: skip
    entry = next(p for p in setting.parts if p.name == names[0])
    if target <= trained:
        raise UserError(f"--target {len_label(target)} is not past the model's trained length L = {len_label(trained)}",
                        f"tune for a target longer than L, e.g. --target {len_label(2 * trained)}")  # fmt: skip
    ranges: dict[str, tuple[Tune, bool]] = {}
    if entry.tune_factor is not None and entry.uses_factor:
        ranges[FACTOR] = (entry.tune_factor, False)
    for p in entry.declared:
        if p.tune is not None:
            ranges[p.name] = (p.tune, p.kind in ("int", "length"))
    if not ranges:
        raise UserError(f"method '{entry.name}' declares no tuning range, so there is nothing to search",
                        f"tune one that does: {', '.join(tunable_methods())}")  # fmt: skip
    if only:
        known = [FACTOR] + [p.name for p in entry.declared] if entry.uses_factor else [p.name for p in entry.declared]
        for name in only:
            if name not in known:
                guess = closest(name, known)
                raise UserError(f"'{name}' is not a parameter of {entry.name}",
                                (f"did you mean '{guess}'? " if guess else "") + f"its tunable ones: {', '.join(ranges)}")  # fmt: skip
            if name not in ranges:
                raise UserError(f"{entry.name} parameter '{name}' declares no tuning range, so it cannot be searched",
                                f"search its tunable ones: {', '.join(ranges)}")  # fmt: skip
        ranges = {k: v for k, v in ranges.items() if k in only}
    dims = []
    for name, (tune, integer) in ranges.items():
        if tune.scale == "grid":
            assert tune.values is not None  # (a grid range has its values: Tune checks it)
            values = tuple(sorted({int(v) for v in tune.values(trained, target)}))
            dims.append(Dim(name, "grid", values=values, integer=True, why=tune.why))
        else:
            assert tune.bounds is not None  # (a log or linear range has its bounds: Tune checks it)
            low, high = tune.bounds(trained, target)
            for j in range(tune.knots) if tune.knots else (None,):  # a curve: one dimension per knot
                dims.append(Dim(name if j is None else f"{name}.{j}", tune.scale, low=float(low), high=float(high),
                                integer=integer, why=tune.why, part_of=name if j is not None else ""))  # fmt: skip
    return Space(entry.name, trained, target, tuple(dims))


def tunable_methods() -> list[str]:
    """The registry's methods that declare at least one tuning range."""
    return [n for n, m in METHODS.items() if (m.tune_factor is not None and m.uses_factor) or any(p.tune for p in m.declared)]


def split_instances(names: list[str], seed: int = 0, held_out: float = 0.5) -> tuple[list[str], list[str]]:
    """``(tuning, held_out)``: instances ordered by ``sha256(seed|name)``, the first ``held_out`` share
    (at least one, and one left to tune on) held out. A hash, not the order given: the split does not
    move when instances are added, and nobody picks which documents the verdict sees."""
    if len(names) < 2:
        raise UserError(f"tuning needs at least two instances (one to tune on, one held out); found {len(names)}",
                        "add documents (--docs, --dataset)")  # fmt: skip
    ranked = sorted(names, key=lambda n: hashlib.sha256(f"{seed}|{n}".encode()).hexdigest())
    k = min(len(names) - 1, max(1, round(held_out * len(names))))
    held = set(ranked[:k])
    return [n for n in names if n not in held], [n for n in names if n in held]
