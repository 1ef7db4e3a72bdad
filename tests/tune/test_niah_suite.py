"""After a search, ``niah.toml`` puts the winner against the defaults in niah at the target (RULER
protocol), a suite ``ctxbench sweep`` reads; when the winner is the defaults' own setting there is
nothing to compare, so no suite is written and the answer says so."""

from __future__ import annotations

from types import SimpleNamespace

from ctxbench.runner.suite import load_suite
from ctxbench.tune.run import TuneOutcome, niah_suite
from ctxbench.tune.search import Trial
from ctxbench.tune.space import Candidate, space_for

L, T = 8192, 16384
LM = SimpleNamespace(name="smollm2-135m")


def _outcome(winner: Candidate) -> TuneOutcome:
    space = space_for("yarn", L, T)
    defaults = Trial(0, Candidate(2.0), "yarn")
    return TuneOutcome(space, winner=Trial(3, winner, "tuned"), defaults=defaults)


def test_a_winner_other_than_the_defaults_gets_a_niah_suite_of_both(tmp_path):
    winner = Candidate(2.5, (("beta_fast", 24.0),))
    command = niah_suite(_outcome(winner), tmp_path, LM)
    (job,) = load_suite(str(tmp_path / "niah.toml")).jobs
    methods = {m.label: m for m in job.settings.methods}
    assert set(methods) == {"tuned", "defaults"} and job.task.name == "niah"
    assert methods["tuned"].param_dict["beta_fast"] == 24.0 and methods["defaults"].param_dict["beta_fast"] == 32.0
    assert tuple(job.settings.factors) == (2.0, 2.5) and tuple(job.settings.lengths) == (T,)
    assert command.startswith(f"ctxbench sweep {tmp_path / 'niah.toml'}") and "--task niah" in command


def test_the_defaults_winning_writes_no_niah_suite_and_removes_an_earlier_one(tmp_path):
    niah_suite(_outcome(Candidate(2.5, (("beta_fast", 24.0),))), tmp_path, LM)  # an earlier search's winner
    assert (tmp_path / "niah.toml").is_file()
    assert niah_suite(_outcome(Candidate(2.0)), tmp_path, LM) == ""
    assert not (tmp_path / "niah.toml").exists()


def test_a_users_own_niah_toml_is_never_removed(tmp_path):
    (tmp_path / "niah.toml").write_text("# mine\n")
    niah_suite(_outcome(Candidate(2.0)), tmp_path, LM)
    assert (tmp_path / "niah.toml").read_text() == "# mine\n"
