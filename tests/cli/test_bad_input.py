"""Bad input across commands: one line `error: ... — ...`, exit code 2, no traceback, and every
existing result file byte-identical afterwards. Each case fails before any model weights load,
except the few that need the tokenizer to know (documents or prompt too short: a tiny model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import save_with_tokenizer, tiny_llama

from ctxbench.results.store import COLUMNS

_TYPED = {"length": "1024", "seed": "0", "factor": "2", "stride": "", "depth": ""}  # key columns read as numbers
GOOD_ROW = [_TYPED.get(c, "x") for c in COLUMNS]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A tiny model and tokenizer on disk, saved once for the cases that need a tokenizer."""
    return save_with_tokenizer(tiny_llama(), tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def workdir(tmp_path, tiny_model_dir):
    """A folder with a valid results CSV, a truncated one, a foreign one, and small datasets."""
    header = ",".join(COLUMNS)
    (tmp_path / "results.csv").write_text(header + "\n" + ",".join(GOOD_ROW) + "\n")
    (tmp_path / "truncated.csv").write_text(header + "\n" + ",".join(GOOD_ROW[:7]))
    (tmp_path / "foreign.csv").write_text("name,score\nfoo,1\n")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (tmp_path / "docs.jsonl").write_text(json.dumps({"body": "some text"}) + "\n")
    (tmp_path / "suite.toml").write_text('model = "smollm2-135m"\n[ppl]\nfactors = [2]\nlenghts = ["1k"]\n')
    (tmp_path / "badtask.toml").write_text('model = "smollm2-135m"\n[perplexity]\nfactors = [2]\n')
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 32, "n_head": 2, "n_layer": 1, "vocab_size": 10, "bos_token_id": 0, "eos_token_id": 0}))
    (tmp_path / "short.txt").write_text("a document of a few dozen tokens, far shorter than 1k")
    (tmp_path / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    # many-writers / corrupt-input cases (issue 15)
    rows = [",".join(GOOD_ROW)] * 2
    (tmp_path / "damaged.csv").write_text("\n".join([header, rows[0], ",".join(GOOD_ROW[:9]), rows[1]]) + "\n")
    (tmp_path / "broken.toml").write_text('model = "smollm2-135m"\n[ppl\nfactors = [2]\n')
    (tmp_path / "garbage.gguf").write_bytes(b"<html>404 Not Found</html>\n" * 40)
    (tmp_path / "truncated.gguf").write_bytes(_gguf_bytes()[:-100])
    noweights = tmp_path / "noweights"
    noweights.mkdir()
    (noweights / "config.json").write_bytes((tiny_model_dir / "config.json").read_bytes())
    return tmp_path


def _gguf_bytes() -> bytes:
    """A small valid GGUF file (one 32x32 float tensor) written by the gguf package."""
    import tempfile

    import numpy as np
    from gguf import GGUFWriter

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.gguf")
        writer = GGUFWriter(path, "llama")
        writer.add_tensor("token_embd.weight", np.ones((32, 32), dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        with open(path, "rb") as f:
            return f.read()


OUT = ["--out", "results.csv"]
GEOMETRY = ["--head-dim", "64", "--base", "1e4", "--trained-len", "4k"]

CASES = [
    # (name, argv, words the message must contain)
    ("length with a bad unit", ["ppl", "--len", "16q", *OUT], "bad length '16q'"),
    ("negative length", ["ppl", "--len=-1", *OUT], "bad length '-1'"),
    ("zero length", ["ppl", "--len", "0", *OUT], "at least 1 token"),
    ("fractional length", ["ppl", "--len", "1.5k", *OUT], "bad length '1.5k'"),
    ("zero factor", ["ppl", "--factor", "0", *OUT], "must be >= 1"),
    ("factor below one", ["ppl", "--factor", "0.5", *OUT], "must be >= 1"),
    ("factor not a number", ["ppl", "--factor", "abc", *OUT], "not a number"),
    ("unknown method", ["ppl", "--method", "ntkk", *OUT], "did you mean 'ntk'"),
    ("unknown param", ["ppl", "--method", "yarn", "--param", "beta_fats=16", *OUT], "did you mean 'beta_fast'"),
    ("param without value", ["ppl", "--method", "yarn", "--param", "beta_fast", *OUT], "key=value"),
    ("bad combination", ["ppl", "--method", "ntk+yarn", *OUT], "combine at most one"),
    ("zero stride", ["ppl", "--len", "1k", "--stride", "0", *OUT], "at least 1 token"),
    ("stride above length", ["ppl", "--len", "1k", "--stride", "2k", *OUT], "longer than length 1024"),
    ("zero docs", ["ppl", "--docs", "0", *OUT], "--docs 0"),
    ("missing dataset", ["ppl", "--dataset", "nope.txt", *OUT], "not found"),
    ("empty dataset", ["ppl", "--dataset", "empty.txt", *OUT], "empty"),
    ("dataset without the text column", ["ppl", "--dataset", "docs.jsonl", *OUT], "no text column 'text'"),
    ("output in a missing directory", ["ppl", "--out", "missing/dir/out.csv"], "does not exist"),
    ("output is a directory", ["ppl", "--out", "."], "is a directory"),
    ("missing model path", ["ppl", "--model", "./no/such/model", *OUT], "not found"),
    ("missing gguf file", ["ppl", "--model", "nothing.gguf", *OUT], "not found"),
    ("model without RoPE", ["freqs", "--method", "ntk", "--model", "gpt2"], "no rotary position embedding"),
    ("hub id offline and not cached", ["freqs", "--method", "ntk", "--model", "nobody/not-a-model-xyz"], "HF_HUB_OFFLINE"),
    ("unknown option", ["ppl", "--bogus", *OUT], "No such option"),
    ("theta without a base", ["freqs", "--method", "theta", "--head-dim", "64", "--base", "1e4", "--trained-len", "4k"], "needs parameter theta"),
    ("freqs without geometry", ["freqs", "--method", "ntk"], "needs a geometry"),
    ("depth above one", ["passkey", "--depths", "0.5,1.5", *OUT], "1.5"),
    ("zero trials", ["passkey", "--trials", "0", *OUT], "trials"),
    ("suite with a typo", ["sweep", "suite.toml", *OUT], "lenghts"),
    ("suite with an unknown task", ["sweep", "badtask.toml", *OUT], "perplexity"),
    ("compare a truncated CSV", ["compare", "results.csv", "truncated.csv"], "truncated"),
    ("compare a foreign CSV", ["compare", "results.csv", "foreign.csv"], "not a ctxbench results CSV"),
    ("report on a missing file", ["report", "missing.csv"], "not found"),
    ("compare a CSV with a damaged row", ["compare", "results.csv", "damaged.csv"], "line 3 has 9 fields"),
    ("report on a CSV with a damaged row", ["report", "damaged.csv"], "delete line 3"),
    ("suite with a TOML syntax error", ["sweep", "broken.toml", *OUT], "not valid TOML"),
    ("garbage gguf file", ["ppl", "--model", "garbage.gguf", "--device", "cpu", *OUT], "is not a GGUF file"),
    ("truncated gguf file", ["ppl", "--model", "truncated.gguf", "--device", "cpu", *OUT], "is truncated"),
    ("freqs on a garbage gguf file", ["freqs", "--method", "ntk", "--model", "garbage.gguf"], "is not a GGUF file"),
    ("model directory without weights", ["ppl", "--model", "noweights", "--device", "cpu", *OUT], "no weights"),
    ("documents shorter than every length", ["ppl", "--model", "tiny", "--dataset", "short.txt", "--len", "1k,2k", "--device", "cpu", *OUT],
     "shorter than every length"),
    ("empty item in a length list", ["ppl", "--len", "2k,,4k", *OUT], "empty item in length list '2k,,4k'"),
    ("empty item in a method list", ["ppl", "--method", "none,,yarn", *OUT], "empty item"),
    ("trailing comma", ["ppl", "--method", "none,yarn,", *OUT], "empty item"),
    ("length given twice", ["ppl", "--len", "2k,2048", *OUT], "given twice"),
    ("factor given twice", ["ppl", "--factor", "2,2.0", *OUT], "given twice"),
    ("method given twice", ["ppl", "--method", "yarn,ntk,yarn", *OUT], "given twice"),
    ("unknown RULER variant", ["niah", "--variant", "single1", *OUT], "did you mean 'single_1'"),
    ("missing haystack file", ["niah", "--haystack", "nope.txt", *OUT], "not found"),
    ("binary haystack file", ["niah", "--haystack", "image.txt", *OUT], "is binary, not text"),
    ("empty haystack file", ["niah", "--haystack", "empty.txt", *OUT], "is empty"),
    ("threshold above one", ["report", "results.csv", "--threshold", "1.5"], "threshold 1.5"),
    ("threshold zero", ["compare", "results.csv", "results.csv", "--threshold", "0"], "threshold 0"),
    ("freqs with an unknown x axis", ["freqs", "--method", "ntk", "--x", "freq", *GEOMETRY], "unknown --x 'freq'"),
    ("freqs plot that is not a PNG", ["freqs", "--method", "ntk", "--plot", "f.jpg", *GEOMETRY], "not a .png"),
    ("niah length too short for the needles", ["niah", "--model", "tiny", "--variant", "multikey_3", "--len", "64", "--device", "cpu", *OUT],
     "too short"),
    ("export to an unknown engine", ["export", "--method", "yarn", "--factor", "4", "--to", "tensorrt", *GEOMETRY], "did you mean"),
    ("export a method the engine lacks", ["export", "--method", "rerope", "--to", "vllm", *GEOMETRY], "vllm"),
    ("export native from a model without RoPE", ["export", "--method", "native", "--model", "gpt2", "--to", "transformers"], "RoPE"),
    ("unknown proxy metric", ["ppl", "--metrics", "longpl", *OUT], "unknown --metrics metric 'longpl' — did you mean 'longppl'?"),
    ("proxy metric of another task", ["passkey", "--metrics", "answer_nl,kl", *OUT], "did you mean 'answer_nll'?"),
    ("proxy metric given twice", ["ppl", "--metrics", "kl,kl", *OUT], "given twice"),
    ("proxy metrics with sliding windows", ["ppl", "--len", "1k", "--stride", "512", "--metrics", "kl", *OUT], "--stride 512"),
    ("proxy metric on a RULER task without one", ["vt", "--metrics", "answer_nll", *OUT], "No such option"),
    ("passkey length below the fixed text", ["passkey", "--model", "tiny", "--len", "32", "--device", "cpu", *OUT], "shorter than the passkey prompt's fixed text"),
]


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def _check(code, stderr, words, workdir, before):
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    assert words in lines[0]
    assert " — " in lines[0]  # says how to fix it
    assert _snapshot(workdir) == before  # no result file touched, none created


@pytest.mark.parametrize("name,argv,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_one_line_and_exit_2(workdir, monkeypatch, capsys, name, argv, words):
    from ctxbench.cli import main

    before = _snapshot(workdir)
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CTXBENCH_CACHE", str(workdir / ".cache"))
    monkeypatch.setattr(sys, "argv", ["ctxbench", *argv])
    with pytest.raises(SystemExit) as exit_info:
        main()
    _check(exit_info.value.code, capsys.readouterr().err, words, workdir, before)


@pytest.mark.integration
@pytest.mark.parametrize("name,argv,words", [CASES[0], CASES[21]], ids=["length", "no-rope"])
def test_installed_command_reports_bad_input_the_same_way(workdir, name, argv, words):
    before = _snapshot(workdir)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CTXBENCH_CACHE": str(workdir / ".cache")}
    proc = subprocess.run(["ctxbench", *argv], cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    _check(proc.returncode, proc.stderr, words, workdir, before)
