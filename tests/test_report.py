"""`ctxbench report`: plots are written, tables render, formats work."""

from __future__ import annotations

import subprocess

from ctxbench.methods import resolve
from ctxbench.report import to_markdown, write_plots
from ctxbench.runner import run_task
from ctxbench.tasks import passkey, ppl


def _records(tiny_lm, corpus_dir):
    p = ppl.Settings(methods=[resolve("none"), resolve("yarn")], factors=[2.0], lengths=[32, 64, 128], dataset=str(corpus_dir), docs=1)
    k = passkey.Settings(methods=[resolve("none")], factors=[2.0], lengths=[300, 400], depths=[0.0, 1.0], trials=1)
    return run_task(tiny_lm, "ppl", p).records + run_task(tiny_lm, "passkey", k).records


def test_plots_are_written_and_not_empty(tiny_lm, corpus_dir, tmp_path):
    paths = write_plots(_records(tiny_lm, corpus_dir), tmp_path / "plots")
    names = sorted(p.name for p in paths)
    assert names == ["passkey-tiny-llama-none-x2.png", "ppl-tiny-llama-x2.png"]
    for path in paths:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_markdown_pivots_methods_by_length(tiny_lm, corpus_dir):
    text = to_markdown(_records(tiny_lm, corpus_dir))
    assert "#### ppl — tiny-llama, factor 2" in text
    assert "| method | 32 | 64 | 128 |" in text
    assert text.count("| yarn |") == 1


def test_report_command_formats(tiny_lm, corpus_dir, tmp_path):
    from ctxbench.results import write_records

    out = tmp_path / "r.csv"
    write_records(out, _records(tiny_lm, corpus_dir))
    for fmt, word in (("table", "perplexity"), ("markdown", "| method |"), ("csv", "method,32,64,128")):
        proc = subprocess.run(["ctxbench", "report", str(out), "--format", fmt], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and word in proc.stdout, proc.stderr
