"""The vLLM backend describes a model from its files (:func:`ctxbench.model.describe.describe`) and
never builds a transformers model: host memory before the engine starts does not grow with the
parameter count. What it reads is what ctxbench's own loader gives the same model, so prompts are
the same token for token and rows pair across backends."""

from __future__ import annotations

import pytest
import transformers
from helpers import save_with_tokenizer, tiny_llama

from ctxbench.backends import vllm
from ctxbench.backends.hf import load_model as load
from ctxbench.model.decoding import stop_tokens
from ctxbench.model.describe import describe
from ctxbench.runner.grid import ModelConfig


@pytest.fixture
def folder(tmp_path):
    return save_with_tokenizer(tiny_llama(), tmp_path / "model")


@pytest.fixture
def no_model_built(monkeypatch):
    """A spy: every transformers model constructed or loaded is recorded."""
    built = []
    init = transformers.PreTrainedModel.__init__

    def spy(self, *args, **kwargs):
        built.append(type(self).__name__)
        init(self, *args, **kwargs)

    monkeypatch.setattr(transformers.PreTrainedModel, "__init__", spy)
    return built


def test_a_folder_is_described_as_the_loader_sees_it(folder):
    loaded, seen = load(str(folder), device="cpu", dtype="float32"), describe(str(folder))
    assert seen.digest == loaded.digest
    assert seen.geometry == loaded.geometry
    assert seen.stop == stop_tokens(loaded.model, loaded.tokenizer)
    text = "the quick brown fox"
    assert seen.tokenizer(text)["input_ids"] == loaded.tokenizer(text)["input_ids"]
    assert seen.checkpoint == str(folder)


def test_the_vllm_backend_loads_a_model_without_building_a_transformers_model(folder, no_model_built):
    lm = vllm.load(ModelConfig(model=str(folder), backend="vllm", dtype="float32"))
    assert no_model_built == []
    assert lm.checkpoint == str(folder) and lm.digest.startswith("sha256:")


def test_the_spy_sees_a_model_built(folder, no_model_built):
    """The spy itself works: the transformers loader builds one model."""
    load(str(folder), device="cpu", dtype="float32")
    assert "LlamaForCausalLM" in no_model_built


@pytest.mark.slow
def test_the_default_model_is_described_as_the_loader_sees_it_and_a_warm_cache_builds_nothing(monkeypatch):
    from ctxbench.defaults import DEFAULT_MODEL

    loaded = load(DEFAULT_MODEL, device="cpu", dtype="float32")  # writes the float32 dequantised checkpoint if absent
    built = []
    init = transformers.PreTrainedModel.__init__
    monkeypatch.setattr(transformers.PreTrainedModel, "__init__", lambda self, *a, **k: (built.append(1), init(self, *a, **k))[1])
    seen = describe(DEFAULT_MODEL)
    assert built == []
    assert (seen.digest, seen.geometry, seen.stop) == (loaded.digest, loaded.geometry, stop_tokens(loaded.model, loaded.tokenizer))
    assert seen.checkpoint == loaded.checkpoint
