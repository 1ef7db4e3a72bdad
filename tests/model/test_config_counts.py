"""A model's decoder layers and attention heads, read before the plan without weights (ms-poe's
``first_layer`` past the last layer, ``--tensor-parallel`` dividing the heads). A GGUF file's config
takes ~13 s to read, so one read fills the geometry and the counts caches together: CI's plan-scale
test went past its 15 s once because a plan re-read the default model's config for its layers."""

from __future__ import annotations

import json

import pytest
from helpers import save_with_tokenizer, tiny_llama

from ctxbench.model.files import COUNTS, GEOMETRY, file_key, load_config, load_counts, load_geometry, locate
from ctxbench.model.geometry import heads_of, layers_of


def test_a_model_folders_counts_are_those_of_its_config(tmp_path):
    model = save_with_tokenizer(tiny_llama(num_hidden_layers=3, num_attention_heads=8), tmp_path / "m")
    assert load_counts(str(model)) == (3, 8)


def test_a_config_without_counts_gives_none(tmp_path):
    model = save_with_tokenizer(tiny_llama(), tmp_path / "m")
    config = json.loads((model / "config.json").read_text())
    del config["num_hidden_layers"], config["num_attention_heads"]
    (model / "config.json").write_text(json.dumps(config))
    assert load_counts(str(model)) == (None, None)


def test_counts_look_inside_a_multimodal_text_config():
    config = {"model_type": "gemma3", "text_config": {"num_hidden_layers": 26, "num_attention_heads": 4}}
    assert (layers_of(config), heads_of(config)) == (26, 4)
    assert (layers_of({"n_layer": 6, "n_head": 2}), heads_of({"n_layer": 6, "n_head": 2})) == (6, 2)


@pytest.mark.slow
def test_reading_the_default_models_geometry_also_caches_its_counts(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / "cache"))
    _, path, gguf = locate("smollm2-135m")
    key = file_key(path / gguf)
    load_geometry("smollm2-135m")
    assert key in GEOMETRY.entries() and key in COUNTS.entries()  # one read of the header filled both
    config = load_config("smollm2-135m")  # the reference: transformers' own reading of the header
    assert load_counts("smollm2-135m") == (config.num_hidden_layers, config.num_attention_heads) == (30, 9)
