"""A model is its weights and the files that change what it computes (issue 55, round 5).

Two copies of one model folder share an identity (``model_digest``, the key of every cell and of
every ``tune`` evaluation) exactly when their weights, their ``config.json`` (less where and with
what it was saved), their generation config and their tokenizer are the same. The reference is the
plain rule: change one computation-relevant value, the identity changes; change only bookkeeping,
it does not."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
from helpers import save_with_tokenizer, tiny_llama

from ctxbench.model.files import dir_digest


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_with_tokenizer(tiny_llama(), tmp_path_factory.mktemp("identity") / "model")


@pytest.fixture
def copy(saved, tmp_path):
    return shutil.copytree(saved, tmp_path / "copy")


def _edit_json(file, edit):
    value = json.loads(file.read_text())
    edit(value)
    file.write_text(json.dumps(value, indent=2))


# (what changes, the edit on a copy of the folder): each changes what the model computes.
COMPUTING = [
    ("rope_theta", lambda d: _edit_json(d / "config.json", lambda c: c["rope_parameters"].update(rope_theta=500000.0))),
    ("max_position_embeddings", lambda d: _edit_json(d / "config.json", lambda c: c.update(max_position_embeddings=128))),
    ("a shipped rope scaling", lambda d: _edit_json(d / "config.json", lambda c: c["rope_parameters"].update(rope_type="linear", factor=2.0))),
    ("a shipped yarn scaling", lambda d: _edit_json(d / "config.json", lambda c: c["rope_parameters"].update(
        rope_type="yarn", factor=4.0, original_max_position_embeddings=64))),
    ("partial_rotary_factor", lambda d: _edit_json(d / "config.json", lambda c: c.update(partial_rotary_factor=0.5))),
    ("rms_norm_eps", lambda d: _edit_json(d / "config.json", lambda c: c.update(rms_norm_eps=1e-5))),
    ("eos_token_id", lambda d: _edit_json(d / "config.json", lambda c: c.update(eos_token_id=256))),
    ("the generation config's stop tokens", lambda d: (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [256, 257]}))),
    ("the tokenizer's chat template", lambda d: _edit_json(d / "tokenizer_config.json", lambda c: c.update(chat_template="{{ messages[0]['content'] }}"))),
    ("the tokenizer's vocabulary", lambda d: (d / "tokenizer.json").write_text((d / "tokenizer.json").read_text().replace('"a"', '"b"', 1))),
    ("the weights", lambda d: save_with_tokenizer(tiny_llama(seed=1), d)),
]

# (what changes, the edit): where or with what the files were saved, never what they compute.
BOOKKEEPING = [
    ("config.json re-indented", lambda d: _edit_json(d / "config.json", lambda c: None)),
    ("keys in another order", lambda d: (d / "config.json").write_text(json.dumps(dict(reversed(json.loads((d / "config.json").read_text()).items()))))),
    ("saved by another transformers", lambda d: _edit_json(d / "config.json", lambda c: c.update(transformers_version="9.9.9"))),
    ("a _name_or_path", lambda d: _edit_json(d / "config.json", lambda c: c.update(_name_or_path="/somewhere/else"))),
    ("a README beside it", lambda d: (d / "README.md").write_text("# my copy")),
]


@pytest.mark.parametrize("what,edit", COMPUTING, ids=[c[0] for c in COMPUTING])
def test_a_copy_that_computes_differently_is_another_model(saved, copy, what, edit):
    edit(copy)
    assert dir_digest(copy) != dir_digest(saved), what


@pytest.mark.parametrize("what,edit", BOOKKEEPING, ids=[c[0] for c in BOOKKEEPING])
def test_a_copy_that_differs_only_in_bookkeeping_is_the_same_model(saved, copy, what, edit):
    edit(copy)
    assert dir_digest(copy) == dir_digest(saved), what


def test_an_identical_copy_elsewhere_is_the_same_model(saved, copy):
    assert dir_digest(copy) == dir_digest(saved)


def _ppl(model, workdir, monkeypatch, capsys) -> str:
    from ctxbench.cli import main

    monkeypatch.chdir(workdir)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CTXBENCH_CACHE", str(workdir / ".cache"))
    monkeypatch.setattr(sys, "argv", ["ctxbench", "ppl", "--model", model, "--dataset", "corpus", "--len", "32", "--docs", "1",
                                      "--method", "none,linear", "--factor", "2", "--out", "results.csv", "--device", "cpu"])  # fmt: skip
    main()
    return capsys.readouterr().out


@pytest.mark.parametrize("what,edit", COMPUTING[:3], ids=[c[0] for c in COMPUTING[:3]])
def test_a_config_changed_copy_never_resumes_the_first_models_cells(saved, tmp_path, monkeypatch, capsys, what, edit):
    """The user's case: the same command on a copy of the model with another config, into the same
    results file, runs every cell again and keeps both models' rows."""
    from ctxbench.results.store import read_records

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("the quick brown fox jumps over the lazy dog. " * 20)
    shutil.copytree(saved, tmp_path / "first")
    shutil.copytree(saved, tmp_path / "second")
    edit(tmp_path / "second")
    assert "2 cell(s) run, 0 resumed" in _ppl("first", tmp_path, monkeypatch, capsys)
    assert "2 cell(s) run, 0 resumed" in _ppl("second", tmp_path, monkeypatch, capsys), what
    digests = {r["model_digest"] for r in read_records(tmp_path / "results.csv")}
    assert len(digests) == 2
    assert "0 cell(s) run, 2 resumed" in _ppl("second", tmp_path, monkeypatch, capsys)  # the copy's own cells do resume
