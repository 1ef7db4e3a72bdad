"""One contract, every backend: transformers (``hf``), vLLM (through a fake engine that answers as
vLLM's API does, :mod:`test_engine_mapping`) and a test fake that computes every number the plain,
obviously-correct way (one whole forward per scored token, :mod:`fake_backend`). Each implements all
of :class:`ctxbench.backends.base.Engine`, runs through the runner's one path (``execute``), and
gives the fake's numbers. A new engine is one module plus its entry in ``ENGINES`` below."""

from __future__ import annotations

import importlib
import inspect

import fake_backend
import pytest
from test_engine_mapping import FakeVllm

from ctxbench import backends
from ctxbench.backends.base import BackendModule, Engine, Session
from ctxbench.methods import resolve
from ctxbench.model.decoding import stop_tokens
from ctxbench.runner.grid import Job, execute
from ctxbench.tasks import get, passkey, ppl

pytestmark = pytest.mark.usefixtures("one_thread")


def _members(protocol) -> dict[str, inspect.Signature | None]:
    out = {}
    for name, value in vars(protocol).items():
        if name.startswith("_"):
            continue
        out[name] = inspect.signature(value) if inspect.isfunction(value) else None
    for name in getattr(protocol, "__annotations__", {}):
        out.setdefault(name, None)
    return out


def _parameters(sig: inspect.Signature, drop_self: bool) -> list[str]:
    names = list(sig.parameters)
    return names[1:] if drop_self else names


MODULES = [*(backends.BACKENDS.values()), "fake_backend"]


def _own(mod, base) -> list[type]:
    """The subclasses of ``base`` a module defines."""
    return [v for v in vars(mod).values() if inspect.isclass(v) and issubclass(v, base) and v is not base and v.__module__ == mod.__name__]


@pytest.mark.parametrize("module", MODULES)
def test_every_backend_module_gives_its_name_a_check_and_a_load(module):
    mod = importlib.import_module(module)
    for name, sig in _members(BackendModule).items():
        assert hasattr(mod, name), f"{module} lacks {name}"
        if sig is not None:
            assert _parameters(inspect.signature(getattr(mod, name)), False) == _parameters(sig, True), (module, name)
    assert backends.BACKENDS.get(mod.NAME, "fake_backend") == module


@pytest.mark.parametrize("module", MODULES)
def test_every_backend_defines_one_engine_that_implements_the_base_class(module):
    mod = importlib.import_module(module)
    [engine] = _own(mod, Engine)
    assert not engine.__abstractmethods__, f"{module}'s engine leaves {sorted(engine.__abstractmethods__)} abstract"
    for name, value in vars(Engine).items():
        if inspect.isfunction(value) and not name.startswith("_"):  # an override keeps the base's parameters
            assert _parameters(inspect.signature(getattr(engine, name)), True) == _parameters(inspect.signature(value), True), (module, name)


@pytest.mark.parametrize("module", MODULES)
def test_every_backends_session_implements_every_member_of_the_session_protocol(module):
    mod = importlib.import_module(module)
    sessions = [v for v in vars(mod).values() if inspect.isclass(v) and v.__name__.endswith("Session") and v.__module__ == mod.__name__]
    assert len(sessions) == 1, module
    for name, sig in _members(Session).items():
        assert callable(getattr(sessions[0], name, None)), f"{module}'s session lacks {name}"
        got = inspect.signature(getattr(sessions[0], name))
        if list(got.parameters) != ["self", "args", "kwargs"]:  # a refusal taking anything
            assert _parameters(got, True) == _parameters(sig, True), (module, name)


@pytest.fixture(params=["hf", "vllm", "fake"])
def engine(request, tiny_lm, monkeypatch):
    """The tiny model behind each backend."""
    if request.param == "hf":
        return tiny_lm
    if request.param == "vllm":
        lm = FakeVllm(tokenizer=tiny_lm.tokenizer, geometry=tiny_lm.geometry, name=tiny_lm.name, digest=tiny_lm.digest, device="cpu",
                      dtype="float32", checkpoint="", stop=stop_tokens(tiny_lm.model, tiny_lm.tokenizer), engine_version="fake",
                      sampling=__import__("types").SimpleNamespace)  # fmt: skip
        lm.hf = tiny_lm
        return lm
    monkeypatch.setitem(backends.BACKENDS, "fake", "fake_backend")
    return fake_backend.wrap(tiny_lm)


@pytest.fixture
def reference(tiny_lm, monkeypatch):
    monkeypatch.setitem(backends.BACKENDS, "fake", "fake_backend")
    return fake_backend.wrap(tiny_lm)


def _ppl(corpus_dir):
    return ppl.Settings(methods=[resolve("none"), resolve("yarn")], factors=[2.0], lengths=[32, 100], dataset=str(corpus_dir), docs=2)


def _nll(records):
    return {(r["method"], r["length"], r["doc"]): float(r["value"]) for r in records if r["metric"] == "nll"}


def test_perplexity_through_the_runner_equals_the_one_forward_per_token_reference(engine, reference, corpus_dir):
    got = _nll(execute([Job(get("ppl"), _ppl(corpus_dir))], engine).records)
    want = _nll(execute([Job(get("ppl"), _ppl(corpus_dir))], reference).records)
    assert got.keys() == want.keys() and len(want) == 2 * 2 * 3
    assert max(abs(got[k] - want[k]) for k in want) < 1e-4


def test_passkey_scores_and_answer_nll_equal_the_reference(engine, reference):
    settings = passkey.Settings(methods=[resolve("none"), resolve("yarn")], factors=[8.0], lengths=[300], depths=[0.0, 1.0], trials=2,
                                metrics=("answer_nll",))  # fmt: skip
    got, want = (execute([Job(get("passkey"), settings)], lm).records for lm in (engine, reference))
    key = lambda r: (r["method"], r["depth"], r["trial"])  # noqa: E731
    scores = lambda rs, m: {key(r): float(r["value"]) for r in rs if r["metric"] == m}  # noqa: E731
    assert scores(got, "correct") == scores(want, "correct") and len(scores(want, "correct")) == 8
    g, w = scores(got, "answer_nll"), scores(want, "answer_nll")
    assert g.keys() == w.keys() and max(abs(g[k] - w[k]) for k in w) < 1e-4


def test_rows_carry_the_backends_identity_and_the_run_reports_its_engine_starts(engine, corpus_dir):
    outcome = execute([Job(get("ppl"), _ppl(corpus_dir))], engine)
    assert {r["backend"] for r in outcome.records} == {engine.identity()}
    assert outcome.engine_starts == engine.start_seconds()
    assert all(s >= 0 for s in outcome.engine_starts)


def test_close_can_be_called_twice_and_watch_yields_whether_it_reports(engine):
    seen = []
    with engine.watch(seen.append) as reports:
        assert isinstance(reports, bool)
    engine.close()
    engine.close()


def test_every_engine_is_an_engine_and_names_itself_in_its_rows(engine):
    assert isinstance(engine, Engine)
    assert engine.identity() and engine.identity().split(" ")[0] in (*backends.BACKENDS, "fake")
