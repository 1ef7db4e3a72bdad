"""A method spec carries its own parameters: ``--method 'yarn(beta_fast=24,beta_slow=2)'`` is the
setting ``--method yarn --param beta_fast=24 --param beta_slow=2`` is, and the label reports print
(and the winner ``ctxbench tune`` prints) is a spec every task command takes."""

from __future__ import annotations

import pytest

from ctxbench.errors import UserError
from ctxbench.methods.grid import parse_spec, resolve_methods
from ctxbench.parsing import split_methods
from ctxbench.tune.space import space_for


def test_commas_inside_a_spec_belong_to_it():
    assert split_methods("none,yarn(beta_fast=24,beta_slow=2),ntk") == ["none", "yarn(beta_fast=24,beta_slow=2)", "ntk"]


def test_a_spec_is_the_setting_the_same_params_give():
    inline = resolve_methods("yarn(beta_fast=24,beta_slow=2)")
    flags = resolve_methods("yarn", {"beta_fast": 24, "beta_slow": 2})
    assert inline == flags and inline[0].label == "yarn(beta_fast=24,beta_slow=2)"


def test_a_label_round_trips_as_a_spec():
    (setting,) = resolve_methods("self-extend", {"group": 4, "window": 512})
    assert resolve_methods(setting.label) == [setting]


def test_a_list_inside_a_spec_is_a_grid_as_with_param():
    assert [s.label for s in resolve_methods("yarn(beta_fast=16,24)")] == ["yarn(beta_fast=16)", "yarn(beta_fast=24)"]


def test_each_method_keeps_its_own_spec():
    settings = resolve_methods("yarn(beta_fast=24),yarn(beta_fast=16)")
    assert [s.label for s in settings] == ["yarn(beta_fast=24)", "yarn(beta_fast=16)"]


def test_the_tune_winner_command_runs_the_winner():
    space = space_for("yarn", 8192, 16384)
    c = space.candidate({"factor": 2.5, "beta_fast": 24.0, "beta_slow": 1.5})
    spec = space.command(c).split("'")[1]
    (setting,) = resolve_methods(spec)
    assert dict(setting.params)["beta_fast"] == 24.0 and dict(setting.params)["beta_slow"] == 1.5


@pytest.mark.parametrize(("method", "params", "words"), [
    ("yarn(beta_fast=24", None, "a bracket is never closed"),
    ("yarn(beta_fast=24))", None, "closes nothing"),
    ("yarn(beta_fast=24)x", None, "bad method spec"),
    ("(beta_fast=24)", None, "bad method spec"),
    ("yarn(bogus=1)", None, "unknown parameter 'bogus'"),
    ("yarn(=1)", None, "empty key"),
    ("yarn(beta_fast=24)", {"beta_fast": 16}, "given in --method yarn(...) and in --param too"),
    ("none,,yarn", None, "empty item"),
])  # fmt: skip
def test_a_bad_spec_is_one_error_naming_it(method, params, words):
    with pytest.raises(UserError, match=None) as err:
        resolve_methods(method, params)
    assert words in str(err.value)


def test_a_bare_name_has_no_parameters():
    assert parse_spec(" yarn ") == ("yarn", {})
