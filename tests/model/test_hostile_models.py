"""Broken model directories and files: each is answered with one line `error: ... — ...`, exit
code 2, no traceback, nothing printed before it (no plan, no "results ->"), and the results file
byte-identical. The damaged files are made from the tiny model the way real damage happens: a
download cut short, a file overwritten by an HTML error page, a config edited by hand, a partial
save, the weights of another model."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
import torch
from helpers import save_with_tokenizer, tiny_llama
from safetensors.torch import load_file, save_file

from ctxbench.errors import UserError
from ctxbench.model.files import check_safetensors
from ctxbench.results.store import COLUMNS


def _weights(d):
    return d / "model.safetensors"


def _config(d):
    return d / "config.json"


def _edit_config(d, **changes):
    cfg = json.loads(_config(d).read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    _config(d).write_text(json.dumps(cfg))


def _cut(file, keep):
    file.write_bytes(file.read_bytes()[:keep] if keep >= 0 else file.read_bytes()[:keep])


def _half_the_tensors(d):
    tensors = load_file(_weights(d))
    kept = sorted(tensors)[: len(tensors) // 2]
    save_file({k: tensors[k] for k in kept}, _weights(d), metadata={"format": "pt"})


def _another_vocab(d):
    tensors = load_file(_weights(d))
    tensors["model.embed_tokens.weight"] = torch.zeros(10, 64)
    save_file(tensors, _weights(d), metadata={"format": "pt"})


def _as_bin(d):
    tensors = load_file(_weights(d))
    _weights(d).unlink()
    torch.save(tensors, d / "pytorch_model.bin")


def _as_cut_bin(d):
    _as_bin(d)
    _cut(d / "pytorch_model.bin", 2000)


def _no_tokenizer(d):
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (d / name).unlink(missing_ok=True)


def _index_naming_a_missing_shard(d):
    shard_map = {"model.embed_tokens.weight": "model-00001-of-00002.safetensors", "lm_head.weight": "model-00002-of-00002.safetensors"}
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": shard_map}))
    _weights(d).rename(d / "model-00002-of-00002.safetensors")


DIRS = [
    # (name, damage done to a copy of a good model directory, words the message must contain)
    ("safetensors overwritten by an HTML page", lambda d: _weights(d).write_bytes(b"<html>404 Not Found</html>\n" * 20),
     "is not a safetensors file or is truncated"),
    ("safetensors cut to half", lambda d: _cut(_weights(d), _weights(d).stat().st_size // 2), "is truncated: its tensors need"),
    ("safetensors cut inside its header", lambda d: _cut(_weights(d), 100), "header is longer than the file"),
    ("safetensors of 2 bytes", lambda d: _weights(d).write_bytes(b"\x01\x02"), "too short to be a safetensors file"),
    ("empty safetensors", lambda d: _weights(d).write_bytes(b""), "0 bytes long"),
    ("safetensors header not a tensor table", lambda d: _weights(d).write_bytes((7).to_bytes(8, "little") + b'["x", 1]'),
     "header is not the JSON table of tensors"),
    ("weights lacking half the tensors", _half_the_tensors, "lack 11 tensor(s)"),
    ("weights of another vocabulary", _another_vocab, "model.embed_tokens.weight is [10, 64] in the file, [258, 64] in the config"),
    ("torch checkpoint cut short", _as_cut_bin, "pytorch_model.bin' is truncated or damaged"),
    ("torch checkpoint that is text", lambda d: (_as_bin(d), (d / "pytorch_model.bin").write_text("oops")), "is not a PyTorch checkpoint"),
    ("shard index naming a missing shard", _index_naming_a_missing_shard, "model-00001-of-00002.safetensors' is missing"),
    ("shard index that is not JSON", lambda d: (d / "model.safetensors.index.json").write_text("{"), "not a valid shard index"),
    ("no weights", lambda d: _weights(d).unlink(), "no weights"),
    ("no tokenizer", _no_tokenizer, "has no tokenizer"),
    ("tokenizer.json that is not JSON", lambda d: (d / "tokenizer.json").write_text("{ not json"), "cannot load the tokenizer"),
    ("config.json cut short", lambda d: _cut(_config(d), 40), "is not valid JSON at line"),
    ("empty config.json", lambda d: _config(d).write_text(""), "is not valid JSON at line 1, column 1"),
    ("binary config.json", lambda d: _config(d).write_bytes(b"\xff\xfe\x00garbage"), "is not text"),
    ("config.json holding a list", lambda d: _config(d).write_text("[1, 2]"), "holds a JSON list"),
    ("config.json without model_type", lambda d: _edit_config(d, model_type=None, architectures=None), 'has no "model_type"'),
    ("config.json of an unknown architecture", lambda d: _edit_config(d, model_type="nosuchmodel"), "cannot read the config"),
    ("config.json with a setting of the wrong type", lambda d: _edit_config(d, num_attention_heads="four"), "num_attention_heads"),
    ("no config.json", lambda d: _config(d).unlink(), "is a directory without config.json"),
]

OUT = ["--out", "results.csv", "--device", "cpu"]
GOOD_ROW = ",".join({"length": "1024", "seed": "0", "factor": "2", "stride": "", "depth": ""}.get(c, "x") for c in COLUMNS)


@pytest.fixture(scope="module")
def good_model(tmp_path_factory):
    return save_with_tokenizer(tiny_llama(), tmp_path_factory.mktemp("good") / "model")


@pytest.fixture
def workdir(tmp_path, good_model):
    (tmp_path / "results.csv").write_text(",".join(COLUMNS) + "\n" + GOOD_ROW + "\n")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("the quick brown fox jumps over the lazy dog. " * 20)
    (tmp_path / "notes.txt").write_text("not a model")
    shutil.copytree(good_model, tmp_path / "model")
    return tmp_path


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def _run(argv, workdir, monkeypatch, capsys):
    from ctxbench.cli import main

    monkeypatch.chdir(workdir)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CTXBENCH_CACHE", str(workdir / ".cache"))
    monkeypatch.setattr(sys, "argv", ["ctxbench", *argv])
    with pytest.raises(SystemExit) as exit_info:
        main()
    return exit_info.value.code, capsys.readouterr()


def _one_clean_line(code, captured, words, workdir, before):
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, captured.err
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err
    assert words in lines[0], lines[0]
    assert " — " in lines[0]  # says how to fix it
    assert "results ->" not in captured.out  # failed before the plan
    assert _snapshot(workdir) == before


@pytest.mark.parametrize("name,damage,words", DIRS, ids=[c[0] for c in DIRS])
def test_a_broken_model_directory_gives_one_line_and_exit_2(workdir, monkeypatch, capsys, name, damage, words):
    damage(workdir / "model")
    before = _snapshot(workdir)
    argv = ["ppl", "--model", "model", "--dataset", "corpus", "--len", "32", "--docs", "1", *OUT]
    code, captured = _run(argv, workdir, monkeypatch, capsys)
    _one_clean_line(code, captured, words, workdir, before)


def test_a_file_that_is_not_a_model_is_named_as_such(workdir, monkeypatch, capsys):
    before = _snapshot(workdir)
    code, captured = _run(["ppl", "--model", "notes.txt", *OUT], workdir, monkeypatch, capsys)
    _one_clean_line(code, captured, "'notes.txt' is a file, not a model", workdir, before)


@pytest.mark.parametrize("name,damage,words", [c for c in DIRS if "config" in c[0]], ids=[c[0] for c in DIRS if "config" in c[0]])
def test_freqs_on_a_broken_config_gives_one_line(workdir, monkeypatch, capsys, name, damage, words):
    damage(workdir / "model")
    before = _snapshot(workdir)
    code, captured = _run(["freqs", "--method", "ntk", "--factor", "2", "--model", "model"], workdir, monkeypatch, capsys)
    _one_clean_line(code, captured, words, workdir, before)


def test_the_undamaged_model_runs(workdir, monkeypatch, capsys):
    """The control: the same command on the undamaged copy succeeds, so each case above fails
    for its damage alone."""
    from ctxbench.cli import main

    monkeypatch.chdir(workdir)
    monkeypatch.setenv("CTXBENCH_CACHE", str(workdir / ".cache"))
    monkeypatch.setattr(sys, "argv", ["ctxbench", "ppl", "--model", "model", "--dataset", "corpus", "--len", "32", "--docs", "1", *OUT])
    main()  # no SystemExit: exit code 0
    assert "1 cell(s) run" in capsys.readouterr().out


def test_safetensors_check_agrees_with_the_safetensors_library_at_every_cut(good_model, tmp_path):
    """Reference: safetensors' own reader. A file cut at any byte is refused by the header check
    exactly when the library cannot open it or read its tensors."""
    from safetensors import safe_open

    data = _weights(good_model).read_bytes()
    header_end = 8 + int.from_bytes(data[:8], "little")
    cuts = sorted({0, 1, 7, 8, 9, header_end - 1, header_end, header_end + 1, len(data) - 1, len(data)} | set(range(0, len(data), 9973)))
    for cut in cuts:
        file = tmp_path / f"cut{cut}.safetensors"
        file.write_bytes(data[:cut])
        try:
            with safe_open(str(file), "pt") as f:
                for key in f.keys():
                    f.get_tensor(key)
            library_ok = True
        except Exception:
            library_ok = False
        try:
            check_safetensors(file)
            ours_ok = True
        except UserError:
            ours_ok = False
        assert ours_ok == library_ok, f"cut at {cut} of {len(data)} bytes"
