"""The search finds a known optimum, keeps the defaults when only noise differs, stops clearly worse
trials early, and resumes a killed search without repeating an evaluation."""

from __future__ import annotations

import pytest
from tune_fakes import FakeObjective, self_extend_bowl, yarn_bowl

from ctxbench.tune.search import Budget, Search
from ctxbench.tune.space import space_for
from ctxbench.tune.verdict import DEFAULTS_WON, KEEP, decide

L, T = 8192, 16384


def _search(space, objective, trials, **kw):
    tuning = list(objective.instances)
    ref = {v.instance: v for v in objective.values(_none(), 1.0, tuning, guard_only=True)}
    return Search(space, objective, tuning, Budget(trials), guard=0.05, guard_reference=ref, **kw)


def _none():
    from ctxbench.methods import resolve

    return resolve("none")


def test_a_grid_optimum_is_found_exactly():
    space = space_for("self-extend", L, T)
    s = _search(space, FakeObjective(self_extend_bowl, instances=3), trials=len(space.grid()) + 1)
    s.run()
    assert dict(s.best().candidate.params) == {"group": 8, "window": 1024}


def test_a_continuous_optimum_is_approached():
    space = space_for("yarn", L, T)
    s = _search(space, FakeObjective(yarn_bowl, instances=3), trials=40, seed=1)
    s.run()
    best, defaults = s.best(), s.trials[0]
    f = lambda t: yarn_bowl(space.setting(t.candidate).param_dict, t.candidate.factor)  # noqa: E731
    assert f(best) < f(defaults) / 5
    assert best.objective < defaults.objective


def test_noise_alone_keeps_the_defaults():
    """Ten draws of an objective where no setting differs but by noise: the search always crowns
    some noise-fitted setting, held-out data often shows it ahead of the defaults, and the verdict
    never deploys it."""
    space = space_for("yarn", L, T)
    ahead = 0
    for salt in range(10):
        objective = FakeObjective(lambda p, s: 0.0, instances=8, noise=0.3, salt=salt)
        tuning, held = list(objective.instances[:4]), list(objective.instances[4:])
        ref = {v.instance: v for v in objective.values(_none(), 1.0, tuning, guard_only=True)}
        s = Search(space, objective, tuning, Budget(12), guard=0.05, guard_reference=ref)
        s.run()
        winner, defaults = s.best(), s.trials[0]
        if winner is defaults:  # the defaults won by chance: nothing to resist
            continue

        def held_out(t, objective=objective, held=held):
            return list(objective.values(space.setting(t.candidate), t.candidate.factor, held))

        none = list(objective.values(_none(), 1.0, held))
        verdict = decide(held_out(winner), held_out(defaults), none, same=False, guard=0.05)
        ahead += verdict.comparisons[0].delta < 0
        assert verdict.text == KEEP and not verdict.deploy  # a noise-fitted winner is never deployed
    assert ahead >= 2  # ...though held-out data showed it ahead of the defaults more than once


def test_a_real_gain_is_deployed():
    space = space_for("yarn", L, T)
    objective = FakeObjective(yarn_bowl, instances=8, noise=0.01)
    tuning, held = list(objective.instances[:4]), list(objective.instances[4:])
    s = _search(space, FakeObjective(yarn_bowl, instances=4, noise=0.01), trials=20)
    s.run()

    def held_out(t):
        return list(objective.values(space.setting(t.candidate), t.candidate.factor, held))

    verdict = decide(held_out(s.best()), held_out(s.trials[0]), list(objective.values(_none(), 1.0, held)), same=False, guard=10.0)
    assert verdict.deploy and verdict.text.startswith("deploy the winner")
    assert tuning


def test_the_defaults_winning_says_keep_them():
    space = space_for("self-extend", L, T)
    s = _search(space, FakeObjective(lambda p, f: 0.0 if not p.get("group") else 1.0, instances=3), trials=4)
    s.run()
    assert s.best() is s.trials[0]
    v = decide(s.trials[0].values, s.trials[0].values, s.trials[0].values, same=True, guard=0.05)
    assert v.text == DEFAULTS_WON


def test_a_clearly_worse_trial_is_pruned_after_its_first_instance():
    space = space_for("self-extend", L, T)
    bad = lambda p, f: 0.0 if not p.get("group") else 1.0  # noqa: E731  every tuned point is worse by a whole nat
    objective = FakeObjective(bad, instances=6, noise=0.05)
    s = _search(space, objective, trials=3)
    s.run()
    assert s.trials[0].status == "complete" and len(s.trials[0].values) == 6
    for t in s.trials[1:]:
        assert t.status == "pruned", t
        assert len(t.values) == 1  # 8 units, all worse: p = 2/256 after one instance


def test_pruning_is_what_stops_them():
    """The same search with pruning off (``prune_alpha=0``) stops none of them."""
    space = space_for("self-extend", L, T)
    objective = FakeObjective(lambda p, f: 0.0 if not p.get("group") else 1.0, instances=6, noise=0.05)
    s = _search(space, objective, trials=3, prune_alpha=0.0)
    s.run()
    assert not any(t.status == "pruned" for t in s.trials)
    assert sum(len(t.values) for t in s.trials[1:]) > 2


def test_a_trial_breaking_the_guard_never_wins():
    space = space_for("self-extend", L, T)
    objective = FakeObjective(lambda p, f: -1.0 if p.get("group") == 32 else 0.0, instances=2)

    class Costly(FakeObjective):
        def values(self, setting, factor, instances, guard_only=False):
            for v in super().values(setting, factor, instances, guard_only):
                if setting.param_dict.get("group") == 32:  # best past L, but 0.5 nats worse at L/2
                    v = type(v)(v.instance, v.units, tuple((s + 0.5, w) for s, w in v.guard), 0.0)
                yield v

    costly = Costly(objective.f, instances=2)
    s = _search(space, costly, trials=len(space.grid()) + 1)
    s.run()
    assert dict(s.best().candidate.params).get("group") != 32
    assert all(t.status == "guarded" for t in s.trials if dict(t.candidate.params).get("group") == 32)


@pytest.mark.parametrize("stop_after", [3, 10])
def test_a_killed_search_resumes_without_repeating_an_evaluation(tmp_path, stop_after):
    from ctxbench.tune.store import TrialsFile

    space = space_for("yarn", L, T)
    base = {"model_digest": "m", "data_digest": "d", "backend": "hf", "dtype": "float32", "method": "yarn", "trained_len": L,
            "target": T, "objective": "nll", "seed": 0}  # fmt: skip
    path = tmp_path / "trials.csv"

    def run(objective):
        store = TrialsFile(path, base)

        def record(t, value):
            store.evaluation("tune", t.number, t.candidate.key, t.label, t.candidate.factor, "{}", value)

        s = _search(space, objective, trials=10, cached=store.cached("tune"), record=record)
        s.run()
        return s

    killed = FakeObjective(yarn_bowl, instances=3, stop_after=stop_after)
    with pytest.raises(KeyboardInterrupt):
        run(killed)
    resumed = FakeObjective(yarn_bowl, instances=3)
    s = run(resumed)
    first = {k for k in killed.calls if not k[3]}
    second = {k for k in resumed.calls if not k[3]}
    assert len(first) == stop_after - 3  # the three guard references ran first
    assert not first & second  # nothing finished before the kill ran again
    whole = FakeObjective(yarn_bowl, instances=3)
    reference = run_fresh(space, whole)
    assert [t.candidate for t in s.trials] == [t.candidate for t in reference.trials]
    assert [t.status for t in s.trials] == [t.status for t in reference.trials]


def run_fresh(space, objective):
    s = _search(space, objective, trials=10)
    s.run()
    return s


def test_optuna_tpe_finds_the_optimum_too():
    pytest.importorskip("optuna")
    space = space_for("yarn", L, T)
    s = _search(space, FakeObjective(yarn_bowl, instances=2), trials=30, sampler="tpe")
    s.run()
    f = lambda t: yarn_bowl(space.setting(t.candidate).param_dict, t.candidate.factor)  # noqa: E731
    assert s.trials[0].label == "yarn"  # the defaults still come first
    assert f(s.best()) < f(s.trials[0]) / 5


def test_optuna_tpe_handles_a_grid_with_a_rule():
    pytest.importorskip("optuna")
    space = space_for("self-extend", L, T)
    s = _search(space, FakeObjective(self_extend_bowl, instances=2), trials=12, sampler="tpe")
    s.run()
    assert all(space.allowed(t.candidate) is None for t in s.trials)
    assert len({t.candidate for t in s.trials}) == len(s.trials)


def test_a_resumed_search_spends_only_what_is_left_of_its_time_budget(tmp_path):
    """Each evaluation takes 10 s on a fake clock; a 95 s budget stops the search. The same command run
    again takes every value from the file, counts the seconds they cost then, and computes nothing."""
    from ctxbench.tune.store import TrialsFile

    space = space_for("yarn", L, T)
    base = {"model_digest": "m", "data_digest": "d", "backend": "hf", "dtype": "float32", "method": "yarn", "trained_len": L,
            "target": T, "objective": "nll", "seed": 0}  # fmt: skip
    path = tmp_path / "trials.csv"

    class Timed(FakeObjective):
        now = 0.0

        def values(self, setting, factor, instances, guard_only=False):
            for v in super().values(setting, factor, instances, guard_only):
                Timed.now += 10.0
                yield type(v)(v.instance, v.units, v.guard, 10.0)

    def run(objective):
        store = TrialsFile(path, base)

        def record(t, value):
            store.evaluation("tune", t.number, t.candidate.key, t.label, t.candidate.factor, "{}", value)

        tuning = list(objective.instances)
        ref = {v.instance: v for v in objective.values(_none(), 1.0, tuning, guard_only=True)}
        s = Search(space, objective, tuning, Budget(None, 95.0), guard=0.05, guard_reference=ref, cached=store.cached("tune"),
                   record=record, clock=lambda: Timed.now)  # fmt: skip
        s.run()
        return s

    first = run(Timed(yarn_bowl, instances=3))
    assert first.computed >= 3 and any(t.status == "stopped" for t in first.trials)
    again = run(Timed(yarn_bowl, instances=3))
    assert again.computed == 0 and again.taken == first.computed
