"""Everything a run can reject is rejected before its plan is printed (issue 23): a model path
that is not there, and a length the task's prompt cannot fit (which needs the tokenizer, so it
comes right after the model loads)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # runs the CLI or Python in a subprocess


def test_a_length_too_short_for_the_prompt_fails_before_the_plan(tmp_path, saved_model):
    out = tmp_path / "r.csv"
    proc = subprocess.run([sys.executable, "-m", "ctxbench", "passkey", "--model", str(saved_model), "--len", "10", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.startswith("error: length 10 is shorter than the passkey prompt")
    assert "cells" not in proc.stdout and "results ->" not in proc.stdout  # no plan was printed
    assert not out.exists()


def test_a_missing_model_directory_fails_before_the_plan(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ctxbench", "ppl", "--model", "./no/such/dir", "--out", str(tmp_path / "r.csv")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "model path './no/such/dir' not found" in proc.stderr
    assert proc.stdout == ""
