"""``--dry-run`` refuses what the run refuses (issue 37): the rules between parameters that need the
model (a local span wider than its window or chunk, a layer past the model's, a factor whose s*L
passes 16m, a method left with nothing to rotate) ran only once the weights had loaded (25-30 s), or
in the first cell. They run now on the model's config before any plan, for a dry run and a run alike:
one line, exit 2, the same words both ways, the results file untouched, and the fix the line suggests
makes the dry run plan. Times are measured (time.perf_counter) and printed, not asserted tightly.

Also here: a NaN result is a failed cell (``status = non-finite``), never ``ok``, and the command
exits 1 with one line (a tiny model whose LM head holds a NaN: a real module, no patched internals)."""

from __future__ import annotations

import re
import sys
import time

import pytest
import torch
from helpers import byte_tokenizer, one_error_line, run_settings, save_with_tokenizer, tiny_llama

from ctxbench.results.store import COLUMNS


@pytest.fixture
def workdir(tmp_path, monkeypatch, saved_model):
    (tmp_path / "results.csv").write_text(",".join(COLUMNS) + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / ".cache"))
    return tmp_path


def _main(argv, monkeypatch, capsys) -> tuple[int, str, str, float]:
    from ctxbench.cli import main

    monkeypatch.setattr(sys, "argv", ["ctxbench", *argv])
    t0 = time.perf_counter()
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    seconds = time.perf_counter() - t0
    captured = capsys.readouterr()
    return code, captured.out, captured.err, seconds




def _fixed(line: str, params: list[str], factor: str) -> tuple[list[str], str]:
    """The parameters and factor with the line's fix applied: ``--param NAME=N with LOW <= N ...``
    (N = LOW), ``e.g. NAME=V``, or ``e.g. factor V``."""
    fix = line.split(" — ", 1)[1]
    if m := re.search(r"e\.g\. factor (\S+)$", fix):
        return params, m.group(1)
    if m := re.search(r"--param (\w+)=N with (\d+) <=", fix):
        name, value = m.groups()
    else:
        name, value = re.search(r"e\.g\. (\w+)=(\S+)$", fix).groups()
    return [p for p in params if p.split("=")[0] != name] + [f"{name}={value}"], factor


# (task, method, --param values, --factor, words); the tiny model: L = 64, 2 layers, d = 16
CASES = [
    ("ppl", "dca", ["chunk_size=32", "local_window=32"], "2", ["dca local_window 32 must be < chunk_size 32"]),
    ("ppl", "dca", ["local_window=50"], "2", ["dca local_window 50 must be < chunk_size 48"]),  # chunk_size auto: 3L/4
    ("ppl", "ntk+dca", ["chunk_size=16", "local_window=20"], "2", ["dca local_window 20 must be < chunk_size 16"]),
    ("passkey", "dca", ["chunk_size=24", "local_window=24"], "2", ["dca local_window 24 must be < chunk_size 24"]),
    ("ppl", "string", ["window=16", "local_value=20"], "2", ["string local_value 20 must be <= window 16"]),
    ("ppl", "string", ["local_value=30"], "2", ["string local_value 30 must be <= window 21"]),  # window auto: 0.33 L
    ("ppl", "yarn+string+logn", ["local_value=1k"], "2", ["string local_value 1024 must be <= window 21"]),
    ("niah", "string", ["window=8", "local_value=9"], "2", ["string local_value 9 must be <= window 8"]),
    ("ppl", "ms-poe", ["first_layer=5"], "2", ["ms-poe first_layer=5 leaves no layer of this 2-layer model"]),
    ("ppl", "ms-poe", ["first_layer=2"], "2", ["ms-poe first_layer=2 leaves no layer"]),
    ("ppl", "ntk+ms-poe", ["first_layer=3"], "2", ["ms-poe first_layer=3", "2-layer model"]),
    ("passkey", "ms-poe", ["first_layer=9"], "2", ["ms-poe first_layer=9"]),
    ("ppl", "yarn", [], "1e6", ["factor 1e+06 stretches the trained length L = 64", "for method 'yarn'"]),
    ("ppl", "none,ntk", [], "300000", ["factor 300000 stretches", "for method 'ntk'"]),
    ("passkey", "linear", [], "1e6", ["factor 1e+06 stretches", "for method 'linear'"]),
    ("ppl", "proportional", ["partial_rotary_factor=0.1"], "2", ["partial_rotary_factor=0.1 leaves nothing to rotate"]),
    ("ppl", "yarn", ["beta_slow=1e-320"], "2", ["cannot be computed: OverflowError", "beta_slow works from about"]),
]


def _argv(task, model, method, params, factor, dry):
    argv = [task, "--model", str(model), "--method", method, "--factor", factor, "--device", "cpu", "--len", "64",
            "--out", "results.csv", *[a for p in params for a in ("--param", p)]]  # fmt: skip
    return argv + (["--dry-run"] if dry else [])


@pytest.mark.parametrize("task,method,params,factor,words", CASES, ids=[f"{t}-{m}:{'&'.join(p) or f}" for t, m, p, f, _ in CASES])
def test_dry_run_refuses_what_the_run_refuses_in_the_same_words(workdir, saved_model, monkeypatch, capsys, task, method, params,
                                                                factor, words):  # fmt: skip
    before = (workdir / "results.csv").read_bytes()
    code, out, err, seconds = _main(_argv(task, saved_model, method, params, factor, dry=True), monkeypatch, capsys)
    line = one_error_line(code, err, words)
    assert "cells" not in out and "results ->" not in out  # refused before the plan
    code, out, err, run_seconds = _main(_argv(task, saved_model, method, params, factor, dry=False), monkeypatch, capsys)
    assert one_error_line(code, err, words) == line and out == ""  # the run: the same line, before loading anything
    assert (workdir / "results.csv").read_bytes() == before
    fixed, fixed_factor = _fixed(line, params, factor)
    code, out, err, _ = _main(_argv(task, saved_model, method, fixed, fixed_factor, dry=True), monkeypatch, capsys)
    assert code == 0 and "cells" in out, (line, err)
    print(f"\nrefused in {seconds:.3f} s (dry run), {run_seconds:.3f} s (run): {line[:100]}")


def test_a_suite_dry_run_refuses_before_its_plan_table(workdir, saved_model, monkeypatch, capsys):
    suite = workdir / "s.toml"
    text = (f'model = "{saved_model}"\ndevice = "cpu"\n[[methods]]\nname = "dca"\nparams = {{ chunk_size = 32, local_window = 40 }}\n'
            '[ppl]\nlengths = [64]\nfactors = [2]\n')  # fmt: skip
    suite.write_text(text)
    code, out, err, seconds = _main(["sweep", str(suite), "--dry-run", "--out", "results.csv"], monkeypatch, capsys)
    one_error_line(code, err, ["dca local_window 40 must be < chunk_size 32"])
    assert out == ""  # no plan table
    suite.write_text(text.replace("local_window = 40", "local_window = 0"))
    assert _main(["sweep", str(suite), "--dry-run", "--out", "results.csv"], monkeypatch, capsys)[0] == 0
    print(f"\nsuite refused in {seconds:.3f} s")


def test_the_api_refuses_before_loading(saved_model):
    import ctxbench
    from ctxbench.errors import UserError

    t0 = time.perf_counter()
    with pytest.raises(UserError, match="ms-poe first_layer=4 leaves no layer of this 2-layer model"):
        ctxbench.run("ppl", model=str(saved_model), method="ms-poe", params={"first_layer": 4}, length="64", device="cpu")
    print(f"\napi refused in {time.perf_counter() - t0:.3f} s")


# ---- a NaN result is a failed cell, never ok --------------------------------------------------------


def _nan_model():
    """The tiny Llama with one row of its LM head NaN: every forward's logits hold a NaN, as a model
    whose activations overflowed would."""
    model = tiny_llama()
    with torch.no_grad():
        model.lm_head.weight[5] = float("nan")
    return model


def test_a_nan_perplexity_is_a_failed_cell_and_resume_runs_it_again(tmp_path, corpus_dir):
    from ctxbench.backends.hf import wrap
    from ctxbench.methods import resolve
    from ctxbench.results.store import read_records
    from ctxbench.tasks import ppl

    lm = wrap(_nan_model(), byte_tokenizer(), name="nan-llama", digest="nan-llama")
    settings = ppl.Settings(methods=(resolve("none"), resolve("yarn")), factors=(2.0,), lengths=(32, 64), dataset=str(corpus_dir), docs=1)
    outcome = run_settings(lm, "ppl", settings, out=tmp_path / "r.csv")
    records = read_records(tmp_path / "r.csv")
    assert outcome.failed == 4 and outcome.ran == 0
    assert {r["status"] for r in records} == {"non-finite"} and not any(r["metric"] == "ppl" for r in records)
    assert len(outcome.failures) == 4 and all("is nan" in f and "\n" not in f for f in outcome.failures)
    again = run_settings(lm, "ppl", settings, out=tmp_path / "r.csv")
    assert again.failed == 4 and again.skipped == 0  # a failed cell is not done: resume runs it again


def test_a_run_with_a_nan_cell_exits_1_withone_error_line(tmp_path, corpus_dir, monkeypatch, capsys):
    model = save_with_tokenizer(_nan_model(), tmp_path / "nan-model")
    capsys.readouterr()  # the save's progress bar
    out = tmp_path / "r.csv"
    argv = ["ppl", "--model", str(model), "--method", "none", "--len", "32", "--device", "cpu", "--dataset", str(corpus_dir),
            "--docs", "1", "--out", str(out)]  # fmt: skip
    code, _, err, _ = _main(argv, monkeypatch, capsys)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("note", "warning"))]
    assert code == 1, err
    assert len(lines) == 1 and lines[0].startswith("failed: 1 cell(s): ") and "nll doc" in lines[0] and "is nan" in lines[0], err
    from ctxbench.results.store import read_records

    assert [r["status"] for r in read_records(out)] == ["non-finite"]
