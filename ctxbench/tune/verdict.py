"""The verdict of ``ctxbench tune``, on held-out instances only: the winner against the method's
defaults and against ``none``, at the target ``T`` and at ``L/2``.

Each comparison is a paired one on the same units (:mod:`ctxbench.tune.objective`: 512-position
blocks of the held-out documents, or needles): the token-weighted mean difference, its 95% percentile
paired bootstrap interval (:func:`ctxbench.stats.paired_bootstrap`) and the two-sided sign-flip
permutation p (:func:`ctxbench.stats.sign_flip_test`) -- the statistics of ``ctxbench rank`` -- with
Holm's adjustment over the six comparisons (:func:`ctxbench.stats.holm`). The winner is deployed
only when it beats the defaults at ``T`` with adjusted ``p < alpha`` and costs no more than the guard
at ``L/2`` against ``none``; otherwise the answer is "no significant gain: keep the defaults".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ctxbench.tune.objective import Value

KEEP = "no significant gain: keep the defaults"
DEFAULTS_WON = "the defaults won the search: keep the defaults"
UNSCALED = "unscaled"  # the contender without scaling (method none), as the verdict names it


@dataclass(frozen=True)
class Comparison:
    """NEW against BASE at ``where`` (``T`` or ``L/2``): ``delta`` new minus base (nats per token;
    negative is better), its interval, the raw and Holm-adjusted p, ``n`` paired units."""

    new: str
    base: str
    where: str
    delta: float
    lo: float
    hi: float
    p: float
    n: int
    p_adjusted: float = math.nan


@dataclass(frozen=True)
class Verdict:
    text: str
    deploy: bool
    comparisons: tuple[Comparison, ...]
    held_out: tuple[str, ...]


def compare(new: list[Value], base: list[Value], new_name: str, base_name: str, where: str, seed: int = 0) -> Comparison:
    """Paired comparison over the units of the same instances (``where == "L/2"``: the guard units)."""
    from ctxbench.stats import paired_bootstrap, sign_flip_test  # start-up: loads numpy

    nb = {v.instance: v for v in base}
    diffs, weights = [], []
    for v in new:
        if v.instance not in nb:
            continue
        a, b = (v.guard, nb[v.instance].guard) if where == "L/2" else (v.units, nb[v.instance].units)
        for (sa, wa), (sb, _) in zip(a, b, strict=True):
            diffs.append(sa - sb)
            weights.append(wa)
    if not diffs:
        return Comparison(new_name, base_name, where, math.nan, math.nan, math.nan, 1.0, 0)
    lo, hi = paired_bootstrap(diffs, weights, n_boot=2000, seed=seed)
    p, _ = sign_flip_test(diffs, n_perm=9999, seed=seed)
    return Comparison(new_name, base_name, where, sum(diffs) / sum(weights), lo, hi, p, len(diffs))


def decide(winner: list[Value], defaults: list[Value], none: list[Value], *, same: bool, guard: float,
           alpha: float = 0.05, seed: int = 0, target_name: str = "T") -> Verdict:  # fmt: skip
    """The verdict from the three contenders' held-out values; ``same``: the winner is the defaults."""
    from ctxbench.stats import holm  # start-up: loads numpy

    pairs = [(winner, defaults, "winner", "defaults"), (winner, none, "winner", UNSCALED), (defaults, none, "defaults", UNSCALED)]
    comps = [compare(a, b, an, bn, where, seed) for where in (target_name, "L/2") for a, b, an, bn in pairs]
    adjusted = holm([c.p for c in comps])
    comps = [Comparison(**{**c.__dict__, "p_adjusted": q}) for c, q in zip(comps, adjusted, strict=True)]
    held = tuple(v.instance for v in winner)
    if same:
        return Verdict(DEFAULTS_WON, False, tuple(comps), held)
    at_t = next(c for c in comps if c.where == target_name and c.base == "defaults")
    short = next(c for c in comps if c.where == "L/2" and c.new == "winner" and c.base == UNSCALED)
    if at_t.delta < 0 and at_t.p_adjusted < alpha:
        if not short.delta > guard:
            return Verdict(f"deploy the winner: {at_t.delta:+.4f} nats/token against the defaults at {target_name} "
                           f"(Holm p = {at_t.p_adjusted:.2g})", True, tuple(comps), held)  # fmt: skip
        return Verdict(f"{KEEP} (the winner is better at {target_name} but costs {short.delta:+.4f} at L/2 against none, "
                       f"past the guard {guard:g})", False, tuple(comps), held)  # fmt: skip
    return Verdict(KEEP, False, tuple(comps), held)
