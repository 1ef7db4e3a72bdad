"""``--backend hf|vllm``: what each backend refuses, before the plan and before any model loads, in
one line that names the backend that can run it; and a cell's backend is part of its identity."""

from __future__ import annotations

import importlib.util

import pytest
from helpers import cli_main, one_error_line

from ctxbench.results.identity import cell_key, normalise

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_an_unknown_backend_is_refused_naming_the_closest(monkeypatch, capsys):
    code, _, err = cli_main(["ppl", "--backend", "vlm", "--dry-run"], monkeypatch, capsys)
    one_error_line(code, err, ["vlm", "vllm"])


@pytest.mark.parametrize("method", ["rerope", "self-extend", "dynamic-ntk", "dca"])
def test_vllm_refuses_a_method_it_cannot_run_naming_hf(method, monkeypatch, capsys):
    code, out, err = cli_main(["passkey", "--backend", "vllm", "--method", f"none,{method}"], monkeypatch, capsys)
    one_error_line(code, err, [method, "--backend hf"])
    assert "plan" not in out  # refused before the plan


def test_vllm_refuses_ntk_mixed_outside_float32_naming_the_dtype_that_runs_it(monkeypatch, capsys):
    # the engine check found vLLM 0.32 computing ln(s) in bf16 (docs/backends.md); refused before the plan
    code, _, err = cli_main(["ppl", "--backend", "vllm", "--method", "ntk-mixed", "--param", "mixed_b=0.625"], monkeypatch, capsys)
    one_error_line(code, err, ["ntk-mixed", "bfloat16", "--dtype float32"])


def test_vllm_refuses_metrics_that_need_hidden_states(monkeypatch, capsys):
    code, _, err = cli_main(["ppl", "--backend", "vllm", "--metrics", "kl"], monkeypatch, capsys)
    one_error_line(code, err, ["kl", "--backend hf"])


def test_vllm_refuses_a_transformers_only_option(monkeypatch, capsys):
    code, _, err = cli_main(["ppl", "--backend", "vllm", "--attn", "eager"], monkeypatch, capsys)
    one_error_line(code, err, ["--attn", "--backend hf"])


def test_a_suite_names_its_backend_and_an_unknown_one_is_refused(tmp_path, monkeypatch, capsys):
    suite = tmp_path / "s.toml"
    suite.write_text('backend = "vllm"\n[[methods]]\nname = "rerope"\n[ppl]\nlengths = [1024]\n')
    code, _, err = cli_main(["sweep", str(suite), "--dry-run"], monkeypatch, capsys)
    one_error_line(code, err, ["rerope", "--backend hf"])  # the suite's backend refuses the method
    suite.write_text('backend = "vlm"\n[ppl]\nlengths = [1024]\n')
    code, _, err = cli_main(["sweep", str(suite), "--dry-run"], monkeypatch, capsys)
    one_error_line(code, err, ["backend", "vllm"])


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
def test_vllm_not_installed_is_one_line_with_the_install_command(monkeypatch, capsys):
    code, _, err = cli_main(["ppl", "--backend", "vllm", "--dry-run"], monkeypatch, capsys)
    one_error_line(code, err, ["not installed", "CTXBENCH_VLLM=1"])


def test_a_vllm_cell_is_not_the_transformers_cell():
    row = {"task": "ppl", "method": "yarn", "label": "yarn", "factor": "2", "length": "4096", "dtype": "float32", "options": "{}"}
    assert cell_key({**row, "backend": "vllm 0.32.0"}) != cell_key({**row, "backend": "hf"})
    assert cell_key({**row, "backend": "vllm 0.32.0"}) != cell_key({**row, "backend": "vllm 0.33.0"})


def test_rows_written_before_backends_read_as_transformers():
    row = {"task": "ppl", "method": "none", "label": "none", "factor": "", "length": "4096", "options": "{}"}
    assert normalise(dict(row))["backend"] == "hf"
    assert cell_key(row) == cell_key({**row, "backend": "hf"})
