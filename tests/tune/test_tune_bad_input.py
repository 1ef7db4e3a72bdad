"""Bad input to ``ctxbench tune``: one line ``error: ... — ...``, exit 2, no traceback, before any
model loads (the model here is a config without weights: loading it would fail differently) and
before the output directory is made."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import save_with_tokenizer, tiny_llama

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def config_only(tmp_path_factory):
    """The tiny model's config alone (trained length 64), no weights."""
    full = save_with_tokenizer(tiny_llama(), tmp_path_factory.mktemp("tiny"))
    bare = tmp_path_factory.mktemp("bare")
    (bare / "config.json").write_bytes((full / "config.json").read_bytes())
    return bare


CASES = {
    "target below L": (["--method", "yarn", "--target", "32", "--budget", "3"], "not past the model's trained length L = 64"),
    "target equal to L": (["--method", "yarn", "--target", "64", "--budget", "3"], "not past the model's trained length"),
    "method without ranges": (["--method", "logn", "--target", "128", "--budget", "3"], "method 'logn' declares no tuning range"),
    "unknown objective": (["--method", "yarn", "--target", "128", "--objective", "ppl", "--budget", "3"], "unknown --objective 'ppl'"),
    "budget 0": (["--method", "yarn", "--target", "128", "--budget", "0"], "--budget 0 must be a whole number of trials >= 1"),
    "no budget": (["--method", "yarn", "--target", "128"], "give the search a budget"),
    "minutes 0": (["--method", "yarn", "--target", "128", "--minutes", "0"], "--minutes 0 must be > 0"),
    "negative guard": (["--method", "yarn", "--target", "128", "--budget", "2", "--guard", "-1"], "--guard -1.0 must be a number >= 0"),
    "parameter without range": (["--method", "yarn", "--target", "128", "--budget", "2", "--params", "truncate"],
                                "'truncate' declares no tuning range"),
    "unknown export engine": (["--method", "yarn", "--target", "128", "--budget", "2", "--export", "vlm"], "unknown engine 'vlm'"),
    "export the method cannot take": (["--method", "self-extend", "--target", "128", "--budget", "2", "--export", "vllm"],
                                      "--export vllm: vllm cannot express method 'self-extend'"),
    "defaults the model lacks": (["--method", "longrope", "--target", "128", "--budget", "2"],
                                 "longrope's published defaults cannot run on"),
    "missing local file": (["--method", "yarn", "--target", "128", "--budget", "2", "--dataset", "./no-such-docs.jsonl"],
                           "no-such-docs.jsonl"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_exit_2_before_the_model_loads(case, config_only, tmp_path):
    args, message = CASES[case]
    out = tmp_path / "tune-out"
    proc = subprocess.run([sys.executable, "-m", "ctxbench", "tune", *args, "--model", str(config_only), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip  (a loaded shared machine)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and " — " in lines[0], proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stderr
    assert not out.exists()  # nothing written: it failed before the search began
