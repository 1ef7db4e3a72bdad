"""A fake objective for the search's tests: a known function of the parameters, plus per-instance
difficulty (shared by every setting, as a document's is) and optional noise; it counts its evaluations."""

from __future__ import annotations

import math
import random
from collections import Counter

from ctxbench.tune.objective import Value


class FakeObjective:
    """``f(params, factor) -> float`` added to each unit of each instance; ``noise``: the sd of
    independent Gaussian noise per unit and setting; ``stop_after``: raise KeyboardInterrupt (a
    killed search) once that many evaluations ran."""

    name = "nll"

    def __init__(self, f, instances: int = 6, units: int = 8, noise: float = 0.0, stop_after: int | None = None, salt: int = 0) -> None:
        self.salt = salt  # another draw of the noise
        self.f, self.units, self.noise, self.stop_after = f, units, noise, stop_after
        self.none_level = 1.0  # none past L: a nat worse than any tuned setting's bowl floor
        self.instances = tuple(f"doc{i}" for i in range(instances))
        self.calls: Counter = Counter()

    def values(self, setting, factor: float, instances, guard_only: bool = False):
        for name in instances:
            if self.stop_after is not None and sum(self.calls.values()) >= self.stop_after:
                raise KeyboardInterrupt
            key = (setting.label, float(factor), name, guard_only)
            self.calls[key] += 1
            shared = random.Random(f"difficulty|{name}")
            own = random.Random(f"noise|{self.salt}|{setting.label}|{factor}|{name}")
            level = 0.0 if guard_only else (self.none_level if setting.name == "none" else self.f(setting.param_dict, factor))
            units = tuple((2.0 + shared.random() + level + self.noise * own.gauss(0, 1), 1.0) for _ in range(self.units))
            guard = tuple((1.5 + shared.random(), 1.0) for _ in range(4))
            yield Value(name, () if guard_only else units, guard, 0.0)


def yarn_bowl(params: dict, factor: float) -> float:
    """A bowl in log beta_fast, log beta_slow, the factor and the attention factor, lowest at
    beta_fast 16, beta_slow 2, factor 2.5, attention factor 1.15 (the defaults sit far from it)."""
    att = params.get("attention_factor") or 0.1 * math.log(factor) + 1
    return ((math.log(params["beta_fast"] / 16)) ** 2 + (math.log(params["beta_slow"] / 2)) ** 2
            + (math.log(factor / 2.5)) ** 2 + 10 * (att - 1.15) ** 2)  # fmt: skip


def self_extend_bowl(params: dict, factor: float) -> float:
    """Lowest at window 1k, group 8 (of the grid at L = 8k); the defaults (auto: window 2k, group 2)
    elsewhere."""
    window = params.get("window") or 2048
    group = params.get("group") or 2
    return abs(math.log2(window / 1024)) + abs(math.log2(group / 8))
