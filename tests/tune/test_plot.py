"""The search's plot compares each trial with the defaults on the documents the trial was scored on:
a trial stopped after one document is not set against the defaults' mean over every document."""

from __future__ import annotations

import math

import pytest

from ctxbench.tune.objective import Value
from ctxbench.tune.plot import against_defaults, plot_trials
from ctxbench.tune.search import Trial
from ctxbench.tune.space import Candidate, space_for


def _value(doc: str, nll: float, tokens: int = 10) -> Value:
    return Value(doc, ((nll * tokens, float(tokens)),), (), 1.0)


DEFAULTS = Trial(0, Candidate(2.0), "yarn", [_value("a", 1.0), _value("b", 4.0)], "complete")


def test_a_trial_on_one_document_is_compared_with_the_defaults_on_that_document():
    stopped = Trial(1, Candidate(2.5), "x2.5", [_value("a", 1.2)], "pruned")
    assert DEFAULTS.objective == pytest.approx(2.5)  # the raw objectives (1.2 against 2.5) would say better
    assert against_defaults(stopped, DEFAULTS) == pytest.approx(0.2)


def test_a_trial_on_every_document_is_its_objective_less_the_defaults():
    complete = Trial(2, Candidate(3.0), "x3", [_value("a", 0.5), _value("b", 3.5)], "complete")
    assert against_defaults(complete, DEFAULTS) == pytest.approx(-0.5)
    assert against_defaults(DEFAULTS, DEFAULTS) == 0.0


def test_a_document_the_defaults_lack_gives_no_comparison():
    assert math.isnan(against_defaults(Trial(3, Candidate(3.0), "x3", [_value("c", 1.0)], "pruned"), DEFAULTS))


def test_the_plot_is_written(tmp_path):
    space = space_for("yarn", 8192, 16384)
    trials = [DEFAULTS, Trial(1, Candidate(2.5, (("beta_fast", 24.0),)), "t1", [_value("a", 1.2)], "pruned")]
    path = plot_trials(trials, space, tmp_path / "trials.png")
    assert path.stat().st_size > 10_000
