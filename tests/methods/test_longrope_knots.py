"""LongRoPE's factors as a curve through a few knots (issue 46: a small search space for LongRoPE):
``knot_curve`` against a plain log-linear interpolation, knots that are the factors themselves give
LongRoPE with those factors, and the tune space draws a non-decreasing curve that runs as printed."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.methods.frequencies import knot_curve
from ctxbench.methods.grid import resolve_methods
from ctxbench.methods.setting import frequencies, numpy_namespace
from ctxbench.model.geometry import RopeGeometry
from ctxbench.tune.space import space_for

GEOM = RopeGeometry(head_dim=64, rotary_dim=64, base=100000.0, trained_len=8192)  # 32 pairs


def _reference(knots, pairs):
    """np.interp of log-factors, the knots at evenly spaced pair positions."""
    at = np.linspace(0, pairs - 1, len(knots))
    return np.exp(np.interp(np.arange(pairs), at, np.log(knots)))


@pytest.mark.parametrize("knots", [(1.0, 2.0), (1.0, 1.5, 3.0, 4.0), (1.0, 1.0, 8.0), (2.5,)])
def test_the_curve_is_the_log_linear_interpolation_of_its_knots(knots):
    want = _reference(knots, GEOM.pairs) if len(knots) > 1 else np.full(GEOM.pairs, knots[0])
    assert np.allclose(knot_curve(knots, GEOM.pairs), want, rtol=1e-12)


def test_the_curve_passes_through_its_first_and_last_knot_and_never_falls():
    curve = knot_curve((1.0, 1.2, 3.0, 4.0), GEOM.pairs)
    assert curve[0] == pytest.approx(1.0) and curve[-1] == pytest.approx(4.0)
    assert all(b >= a for a, b in zip(curve, curve[1:], strict=False))


def test_as_many_knots_as_pairs_are_longrope_with_those_factors():
    factors = [1.0 + 0.1 * i for i in range(GEOM.pairs)]
    xp = numpy_namespace()
    by_knots = frequencies(resolve("longrope", {"knots": factors}), GEOM, 2.0, 16384, xp=xp)
    by_factors = frequencies(resolve("longrope", {"factors": factors}), GEOM, 2.0, 16384, xp=xp)
    assert np.allclose(by_knots[0], by_factors[0], rtol=1e-6) and by_knots[1] == by_factors[1]


def test_knots_divide_the_plain_frequencies():
    xp = numpy_namespace()
    plain, _ = frequencies(resolve("none"), GEOM, 1.0, 16384, xp=xp)
    got, scale = frequencies(resolve("longrope", {"knots": [1, 4]}), GEOM, 2.0, 16384, xp=xp)
    assert np.allclose(np.asarray(plain) / np.asarray(got), _reference((1, 4), GEOM.pairs), rtol=1e-5)
    assert scale == pytest.approx(math.sqrt(1 + math.log(2) / math.log(8192)))


def test_factors_and_knots_together_are_refused():
    with pytest.raises(UserError, match="factors or knots, not both"):
        frequencies(resolve("longrope", {"knots": [1, 2], "factors": [1.0] * GEOM.pairs}), GEOM, 2.0, 16384, xp=numpy_namespace())


@pytest.mark.parametrize(("knots", "words"), [([2, 1], "not non-decreasing"), ([], "is empty"), ([0, 1], "outside"),
                                              (["a"], "not a finite number")])  # fmt: skip
def test_bad_knots_are_one_error_naming_them(knots, words):
    with pytest.raises(UserError, match=words):
        resolve("longrope", {"knots": knots})


def test_the_tune_space_has_four_knots_and_draws_a_curve_that_never_falls():
    space = space_for("longrope", 8192, 16384)
    assert [d.name for d in space.dims] == ["knots.0", "knots.1", "knots.2", "knots.3"]
    rng = random.Random(1)
    for _ in range(50):
        knots = dict(space.sample(rng).params)["knots"]
        assert len(knots) == 4 and list(knots) == sorted(knots) and 1 <= knots[0] and knots[-1] <= 4


def test_the_tuned_curve_runs_as_printed_and_as_labelled():
    space = space_for("longrope", 8192, 16384)
    c = space.candidate({"knots.0": 3.0, "knots.1": 1.0, "knots.2": 2.0, "knots.3": 1.5})
    assert dict(c.params)["knots"] == (1.0, 1.5, 2.0, 3.0)
    (from_command,) = resolve_methods(space.command(c).split("'")[1])
    (from_label,) = resolve_methods(space.label(c))
    assert dict(from_command.params)["knots"] == dict(from_label.params)["knots"] == (1.0, 1.5, 2.0, 3.0)
