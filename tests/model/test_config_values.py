"""Hostile ``config.json`` values (issue 55, round 5): each is refused once, at the model check that
runs before any plan (so ``--dry-run`` refuses what the run would), in one line naming the file and
the key, exit 2, no traceback, the results file untouched. Before, a text ``rope_theta`` was a
traceback at load, ``rope_theta: 0`` ran as a model without RoPE and ``factor: 0`` divided positions
by zero."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
from helpers import save_with_tokenizer, tiny_llama

from ctxbench.model.configcheck import REQUIRED
from ctxbench.results.store import COLUMNS


def _params(**kw):
    return lambda c: c["rope_parameters"].update(kw)


def _top(**kw):
    return lambda c: c.update(kw)


def _legacy(**kw):
    """A config written before transformers v5: rope_theta and rope_scaling at the top level."""

    def edit(c):
        c.pop("rope_parameters")
        c.update(kw)

    return edit


# (case, edit of the parsed config.json, the key the line must name, words it must hold)
CASES = [
    ("rope_theta as text", _params(rope_theta="abc"), "rope_parameters.rope_theta", "not text"),
    ("rope_theta as numeric text", _params(rope_theta="10000"), "rope_parameters.rope_theta", "not text"),
    ("rope_theta 0", _params(rope_theta=0), "rope_parameters.rope_theta", "above 1"),
    ("rope_theta 1", _params(rope_theta=1), "rope_parameters.rope_theta", "above 1"),
    ("rope_theta 0.5", _params(rope_theta=0.5), "rope_parameters.rope_theta", "above 1"),
    ("rope_theta negative", _params(rope_theta=-5), "rope_parameters.rope_theta", "above 1"),
    ("rope_theta true", _params(rope_theta=True), "rope_parameters.rope_theta", "not text"),
    ("rope_theta a list", _params(rope_theta=[10000]), "rope_parameters.rope_theta", "not text"),
    ("rope_theta infinite", _params(rope_theta=1e999), "rope_parameters.rope_theta", "finite"),
    ("legacy rope_theta as text", _legacy(rope_theta="abc"), "rope_theta", "not text"),
    ("legacy rope_theta 0", _legacy(rope_theta=0), "rope_theta", "above 1"),
    ("rotary_emb_base 0", _top(rotary_emb_base=0), "rotary_emb_base", "above 1"),
    ("max_position_embeddings 0", _top(max_position_embeddings=0), "max_position_embeddings", "whole number >= 1"),
    ("max_position_embeddings negative", _top(max_position_embeddings=-1), "max_position_embeddings", "whole number >= 1"),
    ("max_position_embeddings as text", _top(max_position_embeddings="64"), "max_position_embeddings", "whole number >= 1"),
    ("max_position_embeddings fractional", _top(max_position_embeddings=64.5), "max_position_embeddings", "whole number >= 1"),
    ("max_position_embeddings true", _top(max_position_embeddings=True), "max_position_embeddings", "whole number >= 1"),
    ("head_dim 0", _top(head_dim=0), "head_dim", "whole number >= 1"),
    ("head_dim as text", _top(head_dim="16"), "head_dim", "whole number >= 1"),
    ("hidden_size 0", _top(hidden_size=0), "hidden_size", "whole number >= 1"),
    ("num_attention_heads 0", _top(num_attention_heads=0), "num_attention_heads", "whole number >= 1"),
    ("num_key_value_heads negative", _top(num_key_value_heads=-2), "num_key_value_heads", "whole number >= 1"),
    ("num_hidden_layers 0", _top(num_hidden_layers=0), "num_hidden_layers", "whole number >= 1"),
    ("vocab_size 0", _top(vocab_size=0), "vocab_size", "whole number >= 1"),
    ("partial_rotary_factor 0", _top(partial_rotary_factor=0), "partial_rotary_factor", "(0, 1]"),
    ("partial_rotary_factor 2", _top(partial_rotary_factor=2), "partial_rotary_factor", "(0, 1]"),
    ("partial_rotary_factor as text", _top(partial_rotary_factor="half"), "partial_rotary_factor", "(0, 1]"),
    ("rope_parameters a list", _top(rope_parameters=[1]), "rope_parameters", "not an object"),
    ("rope_parameters text", _top(rope_parameters="yarn"), "rope_parameters", "not an object"),
    ("unknown rope_type", _params(rope_type="yarnn"), "rope_parameters.rope_type", "did you mean 'yarn'"),
    ("rope_type a number", _params(rope_type=3), "rope_parameters.rope_type", "a rope type is a name"),
    ("rope_type empty", _params(rope_type=""), "rope_parameters.rope_type", "a rope type is a name"),
    ("yarn without factor", _params(rope_type="yarn"), "rope_parameters.factor", "which that type requires"),
    ("linear without factor", _params(rope_type="linear"), "rope_parameters.factor", "which that type requires"),
    ("llama3 without its band", _params(rope_type="llama3", factor=8.0), "rope_parameters.low_freq_factor", "which that type requires"),
    ("longrope without factors", _params(rope_type="longrope"), "rope_parameters.short_factor", "which that type requires"),
    ("factor 0", _params(rope_type="linear", factor=0), "rope_parameters.factor", ">= 1"),
    ("factor 0.5", _params(rope_type="linear", factor=0.5), "rope_parameters.factor", ">= 1"),
    ("factor as text", _params(rope_type="linear", factor="2"), "rope_parameters.factor", ">= 1"),
    ("factor NaN", _params(rope_type="dynamic", factor=float("nan")), "rope_parameters.factor", ">= 1"),
    ("yarn beta_fast as text", _params(rope_type="yarn", factor=2.0, beta_fast="32"), "rope_parameters.beta_fast", "not a finite number"),
    ("yarn original length 0", _params(rope_type="yarn", factor=2.0, original_max_position_embeddings=0),
     "rope_parameters.original_max_position_embeddings", "whole number >= 1"),
    ("longrope factor list with text", _params(rope_type="longrope", short_factor=["1"] * 8, long_factor=[1.0] * 8),
     "rope_parameters.short_factor", "list of positive numbers"),
    ("longrope empty factors", _params(rope_type="longrope", short_factor=[], long_factor=[]), "rope_parameters.short_factor", "list of positive numbers"),
    ("legacy rope_scaling unknown type", _legacy(rope_theta=10000.0, rope_scaling={"type": "dynamik", "factor": 2.0}),
     "rope_scaling.type", "did you mean 'dynamic'"),
    ("legacy rope_scaling factor text", _legacy(rope_theta=10000.0, rope_scaling={"type": "linear", "factor": "x2"}), "rope_scaling.factor", ">= 1"),
    ("per-layer rope_theta 0", _top(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 0}}),
     "rope_parameters.full_attention.rope_theta", "above 1"),
    ("text_config rope_theta as text", _top(text_config={"rope_theta": "abc"}), "text_config.rope_theta", "not text"),
]

OUT = ["--out", "results.csv", "--device", "cpu"]
GOOD_ROW = ",".join({"length": "1024", "seed": "0", "factor": "2", "stride": "", "depth": ""}.get(c, "x") for c in COLUMNS)


@pytest.fixture(scope="module")
def good_model(tmp_path_factory):
    return save_with_tokenizer(tiny_llama(), tmp_path_factory.mktemp("good") / "model")


@pytest.fixture
def workdir(tmp_path, good_model, monkeypatch):
    (tmp_path / "results.csv").write_text(",".join(COLUMNS) + "\n" + GOOD_ROW + "\n")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("the quick brown fox jumps over the lazy dog. " * 20)
    shutil.copytree(good_model, tmp_path / "model")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / ".cache"))
    return tmp_path


def _damage(workdir, edit):
    file = workdir / "model" / "config.json"
    config = json.loads(file.read_text())
    edit(config)
    file.write_text(json.dumps(config))


def _refused(argv, workdir, monkeypatch, capsys, key, words):
    from ctxbench.cli import main

    before = (workdir / "results.csv").read_bytes()
    monkeypatch.setattr(sys, "argv", ["ctxbench", *argv])
    with pytest.raises(SystemExit) as exit_info:
        main()
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert exit_info.value.code == 2, captured.err
    assert "Traceback" not in captured.err
    assert len(lines) == 1 and lines[0].startswith("error: ") and " — " in lines[0], captured.err
    assert "config.json" in lines[0] and f'"{key}"' in lines[0] and words in lines[0], lines[0]
    assert "--trained-len" not in lines[0] and "--base" not in lines[0]  # options the task commands do not have
    assert "results ->" not in captured.out  # before the plan
    assert (workdir / "results.csv").read_bytes() == before


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("case,edit,key,words", CASES, ids=[c[0] for c in CASES])
def test_a_bad_config_value_is_one_line_naming_the_file_and_key(workdir, monkeypatch, capsys, case, edit, key, words, dry):
    _damage(workdir, edit)
    argv = ["ppl", "--model", "model", "--dataset", "corpus", "--len", "32", "--docs", "1", *OUT, *(["--dry-run"] if dry else [])]
    _refused(argv, workdir, monkeypatch, capsys, key, words)


@pytest.mark.parametrize("case,edit,key,words", CASES[::6], ids=[c[0] for c in CASES[::6]])
def test_freqs_refuses_a_bad_config_value_the_same_way(workdir, monkeypatch, capsys, case, edit, key, words):
    _damage(workdir, edit)
    _refused(["freqs", "--method", "ntk", "--factor", "2", "--model", "model"], workdir, monkeypatch, capsys, key, words)


# Values from released models' configs that must pass (the check refuses the kind, not the model).
ACCEPTED = [
    ("legacy top-level theta with dynamic scaling", _legacy(rope_theta=10000.0, rope_scaling={"type": "dynamic", "factor": 2.0})),
    ("llama3 scaling", _params(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=32)),
    ("yarn with betas and truncate", _params(rope_type="yarn", factor=2.0, beta_fast=32, beta_slow=1, truncate=False)),
    ("a null rope_scaling", _top(rope_scaling=None)),
    ("partial rotary 0.5", _top(partial_rotary_factor=0.5)),
]


@pytest.mark.parametrize("case,edit", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_a_released_models_values_pass_the_check(workdir, case, edit):
    from ctxbench.model.files import check_model

    _damage(workdir, edit)
    check_model("model")  # no UserError


def test_the_rope_types_checked_are_transformers_own():
    """The table of types and their required keys against the installed transformers'
    ``ROPE_INIT_FUNCTIONS`` (plus ``default``; ``mrope`` is Qwen2-VL's legacy name for it): a type
    transformers adds or drops shows here first."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    assert set(REQUIRED) - {"mrope"} == set(ROPE_INIT_FUNCTIONS) | {"default"}
