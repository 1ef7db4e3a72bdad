"""tune's plan is priced as every plan is (``ctxbench.runner.costmodel``): each instance a forward of
T and its objective's forwards of L/2, at the plan's throughput, the searched method's attention at
its path's measured cost factor and the unscaled contender's as plain."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ctxbench.model.autodtype import device_key
from ctxbench.model.size import model_size
from ctxbench.runner.costmodel import DEFAULT_CPU, PATH_FACTORS
from ctxbench.tune.run import TuneSettings, price
from ctxbench.tune.space import space_for

MODEL = "smollm2-135m"  # planned at the default 2-core CPU rate until measured
CONFIG = SimpleNamespace(model=MODEL, trust_remote_code=False, device="cpu", dtype="float32")
L, T = 8192, 16384
# objective -> (instances per document, forwards of L/2 per instance besides its forward of T)
INSTANCES = {"nll": (1, 0), "needle": (5, 1), "both": (1, 1)}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / "cache"))


def _forward(n: int, factor: float = 1.0) -> float:
    """Seconds of one forward of ``n`` tokens, its attention at ``factor`` x plain."""
    work = model_size(MODEL).forward_parts(n)
    return work.linear / DEFAULT_CPU.linear + factor * work.attention / DEFAULT_CPU.attention


def _search(objective: str, docs: int, trials: int, factor: float) -> float:
    """The search written out: none at L/2 on each tuning document (the guard's reference), every
    trial on each tuning instance, then the winner and the defaults (the method's attention) and the
    unscaled setting (plain) on each held-out instance."""
    per_doc, halves = INSTANCES[objective]
    held = max(1, round(docs / 2))
    tune = docs - held

    def instance(f):
        return _forward(T, f) + halves * _forward(L // 2, f)

    return tune * _forward(L // 2) + trials * tune * per_doc * instance(factor) + held * per_doc * (2 * instance(factor) + instance(1.0))


def _price(method: str, objective: str, docs: int = 4, trials: int = 6):
    settings = TuneSettings(method=method, target=T, out="unused", objective=objective, trials=trials, docs=docs)
    return price(space_for(method, L, T), settings, trials, docs, CONFIG)


def _seed(path: str, factor: float) -> None:
    PATH_FACTORS.lookup(f"{device_key('cpu', 'float32')}|{MODEL}|{path}", lambda: {"factor": factor, "length": 4096, "method": "x"})


@pytest.mark.parametrize("objective", sorted(INSTANCES))
def test_the_plan_prices_every_forward_of_the_search(objective):
    assert _price("yarn", objective).seconds == pytest.approx(_search(objective, 4, 6, 1.0), rel=1e-12)


def test_the_searched_methods_attention_is_priced_at_its_paths_measured_factor():
    _seed("far", 2.0)
    p = _price("self-extend", "nll", docs=5, trials=3)
    assert p.seconds == pytest.approx(_search("nll", 5, 3, 2.0), rel=1e-12)
    assert "far attention at 2.00x a plain forward's (measured on this machine)" in p.basis


def test_a_path_not_measured_yet_is_priced_as_plain_and_the_plan_says_so():
    p = _price("self-extend", "needle")
    assert p.seconds == pytest.approx(_search("needle", 4, 6, 1.0), rel=1e-12)
    assert "far attention priced as plain (its cost factor is not measured yet)" in p.basis


def test_a_method_of_the_models_own_attention_takes_no_factor():
    _seed("far", 2.0)
    p = _price("yarn", "both")
    assert p.seconds == pytest.approx(_search("both", 4, 6, 1.0), rel=1e-12) and "attention" not in p.basis


def test_an_export_that_cannot_express_a_searched_parameter_is_refused_before_the_search(tmp_path):
    """llama.cpp ignores yarn's attention factor: a winner holding one could not be exported, so the
    search is refused before it starts, naming the parameter and the --params that leave it out."""
    from ctxbench.errors import UserError
    from ctxbench.runner.grid import ModelConfig
    from ctxbench.tune.run import check

    settings = TuneSettings(method="yarn", target=16384, trials=4, out=str(tmp_path / "t"), export="llamacpp")
    with pytest.raises(UserError) as info:
        check(settings, ModelConfig())
    assert "attention_factor" in info.value.what and "--yarn-attn-factor" in info.value.what
    assert "--params beta_fast,beta_slow" in info.value.fix or "--params factor,beta_fast,beta_slow" in info.value.fix
    only = TuneSettings(method="yarn", target=16384, trials=4, out=str(tmp_path / "u"), export="llamacpp", only=("beta_fast", "beta_slow"))
    assert {d.name for d in check(only, ModelConfig()).dims} == {"beta_fast", "beta_slow"}
