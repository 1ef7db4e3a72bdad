"""Trials until separated (``--trials auto``) and trials kept on resume: a cell that asks for more
trials runs only the missing ones; batches go only to the cells of undecided paired comparisons
and stop when every pair is separated or equivalent, at --max-trials, or when the budget ends."""

from __future__ import annotations

import json

import pytest
from helpers import run_settings

from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.runner.adaptive import open_slots, run_adaptive, verdicts
from ctxbench.runner.grid import Job, Outcome
from ctxbench.runner.settings import build_settings
from ctxbench.tasks import get


def _niah(methods=("none",), **options):
    return build_settings(get("niah"), [resolve(m) for m in methods], 2.0, "700", {"variants": "single_1", **options})


def _scores(records):
    return {(r["label"], int(r["trial"])): r for r in records if r["metric"] == "score"}


# -- trials kept on resume ----------------------------------------------------------------------


def test_raising_trials_reuses_the_trials_the_file_holds(tiny_lm, tmp_path):
    out = tmp_path / "r.csv"
    first = _scores(run_settings(tiny_lm, "niah", _niah(trials=2), out=out).records)
    more = _scores(run_settings(tiny_lm, "niah", _niah(trials=4), out=out).records)
    fresh = _scores(run_settings(tiny_lm, "niah", _niah(trials=4)).records)
    assert sorted(more) == sorted(fresh) == [("none", t) for t in range(4)]
    # the kept trials are the very rows of the first run (their timings too: nothing ran again) ...
    assert all(more[k]["seconds"] == first[k]["seconds"] for k in first)
    # ... and every trial reads as a fresh 4-trial run's
    assert {k: (r["value"], r["answer"]) for k, r in more.items()} == {k: (r["value"], r["answer"]) for k, r in fresh.items()}
    agg = next(r for r in run_settings(tiny_lm, "niah", _niah(trials=4), out=out).records if r["metric"] == "accuracy")
    assert json.loads(agg["extra"])["trials"] == 4


# -- the decision -------------------------------------------------------------------------------


def _trials(label, outcomes, length=2048):
    base = dict(task="niah", variant="single_1", factor="2.0", length=str(length), depth="", seed="0", data_digest="d", model_digest="m",
                status="ok", method=label, label=label, options="{}")  # fmt: skip
    rows = [dict(base, trial=str(t), metric="score", value=str(float(v))) for t, v in enumerate(outcomes)]
    return rows + [dict(base, trial="all", metric="accuracy", value=str(sum(outcomes) / len(outcomes)))]


def test_a_pair_right_on_every_trial_against_wrong_on_every_trial_is_separated():
    (v,) = verdicts(_trials("a", [1] * 10) + _trials("b", [0] * 10))
    assert v.ref == "a" and v.separated and v.decided and v.p_holm == pytest.approx(2 / 2**10)


def test_identical_methods_are_equivalent_not_open():
    (v,) = verdicts(_trials("a", [1, 0] * 5) + _trials("b", [1, 0] * 5))
    assert v.equivalent and not v.separated and open_slots([v]) == set()


def test_a_pair_differing_on_half_the_trials_stays_open_at_10_trials():
    (v,) = verdicts(_trials("a", [1] * 10) + _trials("b", [1, 0] * 5))  # 5 discordant: McNemar p = 0.0625
    assert not v.decided and open_slots([v]) == {("single_1", 2.0, 2048, "a"), ("single_1", 2.0, 2048, "b")}


def test_the_baseline_is_the_reference_and_holm_adjusts_one_lengths_comparisons():
    rows = _trials("a", [1] * 10) + _trials("b", [0] * 10) + _trials("c", [0] * 10)
    found = {v.new: v for v in verdicts(rows, baseline="b")}
    assert set(found) == {"a", "c"} and found["a"].ref == "b"
    assert found["a"].p_holm == pytest.approx(2 * 2 / 2**10) and found["c"].p_holm == 1.0


# -- the loop (a fake run: trial t of "b" is right on even t, "a" always) -------------------------


def _fake_run(calls):
    def run(lm, job, results, select=None, **kw):
        calls.append((job.settings.trials, select))
        n = job.settings.trials
        return Outcome(records=_trials("a", [1] * n) + _trials("b", [1 - t % 2 for t in range(n)]))

    return run


def test_batches_add_trials_until_the_pair_is_separated():
    calls = []
    job = Job(get("niah"), _niah(("none", "ntk"), trials="auto"))
    out = run_adaptive(_fake_run(calls), None, job, None)
    assert [t for t, _ in calls] == [10, 20]  # 5 discordant of 10: open; 10 of 20: p = 0.002, separated
    assert calls[0][1] is None and calls[1][1] is not None
    assert "every pair decided at 20 trials" in out.notes[-1]


def test_max_trials_and_budget_stop_the_batches():
    calls = []
    run_adaptive(_fake_run(calls), None, Job(get("niah"), _niah(("none", "ntk"), trials="auto", max_trials=10)), None)
    assert [t for t, _ in calls] == [10]
    calls.clear()
    out = run_adaptive(_fake_run(calls), None, Job(get("niah"), _niah(("none", "ntk"), trials="auto", budget=1e-9)), None)
    assert [t for t, _ in calls] == [10] and "--budget spent" in out.notes[-1]


def test_auto_on_a_tiny_model_runs_one_batch_when_methods_agree(tiny_lm, tmp_path):
    out = run_settings_auto(tiny_lm, _niah(("none", "yarn"), trials="auto", max_trials=20), tmp_path / "r.csv")
    per_cell = {}
    for r in out.records:
        if r["metric"] == "score":
            per_cell[r["label"]] = per_cell.get(r["label"], 0) + 1
    assert per_cell == {"none": 10, "yarn": 10}  # the random tiny model fails every trial under both: equivalent


def run_settings_auto(lm, settings, out):
    from ctxbench.results.store import ResultsFile
    from ctxbench.runner.grid import run_task

    return run_adaptive(run_task, lm, Job(get("niah"), settings), ResultsFile(out))


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(trials=4, budget=10), "--budget bounds --trials auto"),
        (dict(trials=4, baseline="none"), "--baseline bounds --trials auto"),
        (dict(trials=4, max_trials=20), "--max-trials bounds --trials auto"),
        (dict(trials="auto", max_trials=5), "below one batch of 10"),
        (dict(trials="auto", baseline="yran"), "did you mean 'yarn'"),
        (dict(trials="auto", budget="soon"), "not a number of minutes"),
        (dict(trials="many"), "--trials 'many' is not a whole number"),
    ],
)
def test_bad_trial_options_are_one_clear_error(options, message):
    with pytest.raises(UserError, match=message):
        _niah(("none", "yarn"), **options)


def test_the_plan_of_auto_counts_the_most_trials():
    from ctxbench.runner.plan import plan_table

    auto = plan_table([Job(get("niah"), _niah(("none", "yarn"), trials="auto", max_trials=30))], "smollm2-135m", 8192)
    fixed = plan_table([Job(get("niah"), _niah(("none", "yarn"), trials=30))], "smollm2-135m", 8192)
    assert auto.jobs[0].tokens == fixed.jobs[0].tokens > 0 and auto.jobs[0].trials == 30
    assert auto.jobs[0].auto and not fixed.jobs[0].auto
    assert auto.jobs[0].flops == fixed.jobs[0].flops > auto.jobs[0].decode_flops > 0
