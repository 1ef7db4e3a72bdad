"""The search space comes from the registry: every tunable range passes the method's own checks at
both ends, the authors' rules filter the grid, and what has no range is refused with a reason."""

from __future__ import annotations

import pytest

from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.methods.setting import check_derived, frequencies
from ctxbench.model.geometry import RopeGeometry
from ctxbench.tune.space import FACTOR, Candidate, space_for, split_instances, tunable_methods

L = 8192
GEOM = RopeGeometry(head_dim=64, rotary_dim=64, base=100000.0, trained_len=L)  # SmolLM2-135M's


def _checked(space, values: dict) -> None:
    """What the method itself checks: the declaration (resolve, runnable), the numbers it computes
    at this factor on this model (check_derived), its frequencies."""
    c = space.candidate(values)
    setting = resolve(space.method, dict(c.params), runnable=True)
    check_derived(setting, GEOM, c.factor, [space.target])
    if setting.freq.fn is not None:
        frequencies(setting, GEOM, c.factor, space.target)


@pytest.mark.parametrize("target", [2 * L, 8 * L])
@pytest.mark.parametrize("method", tunable_methods())
def test_every_range_passes_the_methods_own_checks_at_both_ends(method, target):
    space = space_for(method, L, target)
    for d in space.dims:
        low, high = d.ends()
        assert low <= high
        if d.part_of:  # one knot of a curve parameter: a curve of that one knot is inside the declared range
            p = resolve(method).declarations()[d.part_of]
            assert p.check([low], method) == (low,) and p.check([high], method) == (high,)
        elif d.name != FACTOR:
            p = resolve(method).declarations()[d.name]
            assert p.check(low, method) == low and p.check(high, method) == high  # inside the declared range
        for end in (low, high):  # each end alone, the others at their defaults
            _checked(space, {d.name: end})
    _checked(space, {d.name: d.ends()[0] for d in space.dims})  # every dimension at its low end together
    _checked(space, {d.name: d.ends()[1] for d in space.dims})  # and at its high end


@pytest.mark.parametrize("method", tunable_methods())
def test_every_point_the_search_samples_is_one_the_method_takes(method):
    """Ranges of parameters tied by a rule (beta_fast > beta_slow) must not cross: 200 samples each."""
    import random

    space = space_for(method, L, 4 * L)
    rng = random.Random(0)
    for _ in range(200):
        c = space.sample(rng)
        _checked(space, {FACTOR: c.factor, **dict(c.params)})


def test_tunable_methods_include_the_issues_list():
    assert {"yarn", "self-extend", "leaky-rerope", "llama3", "string", "dca", "ssmax"} <= set(tunable_methods())


def test_every_self_extend_grid_point_keeps_the_authors_rule():
    T = 4 * L
    points = space_for("self-extend", L, T).grid()
    assert points
    for c in points:
        p = dict(c.params)
        assert p["window"] + (L - p["window"]) * p["group"] >= T
    assert len(points) < 4 * 9  # some were left out


def test_the_defaults_come_first_at_factor_T_over_L():
    space = space_for("yarn", L, 3 * L)
    assert space.defaults() == Candidate(3.0)
    assert space.label(space.defaults()) == "yarn"


def test_the_winner_prints_as_options_a_task_command_takes():
    space = space_for("yarn", L, 2 * L)
    c = space.candidate({"factor": 2.5, "beta_fast": 24.0})
    assert space.command(c) == "--method 'yarn(beta_fast=24)' -f 2.5"


def test_a_method_without_ranges_is_refused_with_its_reason():
    with pytest.raises(UserError, match="declares no tuning range"):
        space_for("none", L, 2 * L)


def test_a_parameter_without_a_range_is_refused():
    with pytest.raises(UserError, match="'truncate' declares no tuning range"):
        space_for("yarn", L, 2 * L, only=["truncate"])


def test_a_target_not_past_L_is_refused():
    with pytest.raises(UserError, match="not past the model's trained length"):
        space_for("yarn", L, L)


def test_a_combination_is_refused():
    with pytest.raises(UserError, match="one method at a time"):
        space_for("yarn+self-extend", L, 2 * L)


def test_the_split_is_by_hash_and_keeps_one_on_each_side():
    names = [f"doc{i}" for i in range(10)]
    tune, held = split_instances(names)
    assert len(held) == 5 and set(tune) | set(held) == set(names)
    assert set(split_instances(list(reversed(names)))[1]) == set(held)  # the hash decides, not the order given
    assert split_instances(names, seed=1)[1] != held  # another seed, another split
    assert split_instances(["a", "b"])[0] and split_instances(["a", "b"])[1]
    with pytest.raises(UserError):
        split_instances(["a"])
