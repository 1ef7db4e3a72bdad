"""Suite files: validation errors name file, key and fix; dry runs; a whole sweep on a tiny model."""

from __future__ import annotations

import os
import subprocess

import pytest

from ctxbench.errors import UserError
from ctxbench.results.identity import row_key
from ctxbench.results.store import read_records
from ctxbench.runner.plan import plan_table
from ctxbench.runner.suite import load_suite

GOOD = """
model = "{model}"
out = "out.csv"
[[methods]]
name = "none"
[[methods]]
name = "yarn"
params = {{ beta_fast = 16 }}
[ppl]
factors = [2]
lengths = ["32", "64"]
dataset = "{corpus}"
docs = 2
[passkey]
methods = ["none"]
factors = [2]
lengths = ["300"]
depths = [0.5]
trials = 1
"""


def _write(tmp_path, text):
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return path


def test_shipped_suites_are_valid(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # yarn-paper's hub model is not cached here: planned without asking the hub
    for name in ("quick", "nightly", "yarn-paper"):
        suite = load_suite(f"tasks/{name}.toml")
        assert suite.jobs and all(j.cells > 0 for j in plan_table(suite.jobs, suite.model).jobs)


def test_suite_builds_each_task_with_its_methods_and_params(tmp_path, corpus_dir):
    suite = load_suite(_write(tmp_path, GOOD.format(model="m", corpus=corpus_dir)))
    (job1, job2) = suite.jobs
    assert (job1.task.name, job2.task.name) == ("ppl", "passkey")
    ppl_settings, pk_settings = job1.settings, job2.settings
    assert [m.name for m in ppl_settings.methods] == ["none", "yarn"]
    assert dict(ppl_settings.methods[1].params)["beta_fast"] == 16
    assert [m.name for m in pk_settings.methods] == ["none"] and pk_settings.depths == (0.5,)


GRID = """
[[methods]]
name = "yarn"
params = {{ beta_fast = [16, 32] }}
[[methods]]
name = "self-extend"
params = {{ group = [2, 4], window = 16 }}
[ppl]
factors = [2]
lengths = ["32", "64"]
dataset = "{corpus}"
docs = 1
"""


def test_list_parameters_expand_to_labelled_entries(tmp_path, corpus_dir):
    suite = load_suite(_write(tmp_path, GRID.format(corpus=corpus_dir)))
    labels = [m.label for m in suite.jobs[0].settings.methods]
    assert labels == ["yarn(beta_fast=16)", "yarn", "self-extend(group=2,window=16)", "self-extend(group=4,window=16)"]


@pytest.mark.integration
def test_a_parameter_grid_gives_distinct_methods_in_csv_report_and_compare(tmp_path, corpus_dir, saved_model):
    path = _write(tmp_path, f'model = "{saved_model}"\n' + GRID.format(corpus=corpus_dir))
    out = tmp_path / "grid.csv"
    proc = subprocess.run(["ctxbench", "sweep", str(path), "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    labels = {r["label"] for r in read_records(out)}
    assert len(labels) == 4
    for fmt in ("table", "markdown", "csv"):
        text = subprocess.run(["ctxbench", "report", str(out), "--format", fmt], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "COLUMNS": "250"}).stdout  # fmt: skip
        assert all(label in text for label in ("yarn(beta_fast=16)", "self-extend(group=2,window=16)", "self-extend(group=4,window=16)"))
    text = subprocess.run(["ctxbench", "compare", str(out), str(out), "--format", "markdown"], capture_output=True, text=True, timeout=120).stdout
    assert text.count("| ppl | self-extend(group=4,window=16) |") == 3  # two lengths and its effective length


def test_two_entries_with_the_same_label_are_an_error_naming_both(tmp_path):
    text = '[[methods]]\nname = "yarn"\nlabel = "y"\n[[methods]]\nname = "ntk"\nlabel = "y"\n[ppl]\nlengths = ["1k"]\n'
    with pytest.raises(UserError, match="two method entries are labelled 'y': yarn .* and ntk"):
        load_suite(_write(tmp_path, text))


@pytest.mark.parametrize(
    "text,words",
    [
        ('[ppl]\nlenghts = ["1k"]\n', ["unknown key 'lenghts' in [ppl]", "did you mean 'lengths'"]),
        ('modle = "x"\n[ppl]\nlengths = ["1k"]\n', ["unknown key 'modle' in the top level", "did you mean 'model'"]),
        ('[[methods]]\nname = "ntkk"\n[ppl]\nlengths = ["1k"]\n', ["[[methods]] entry 1", "did you mean 'ntk'"]),
        ('[[methods]]\nname = "yarn"\nparams = { beta_fats = 1 }\n[ppl]\nlengths = ["1k"]\n', ["beta_fats", "did you mean 'beta_fast'"]),
        ('[perplexity]\nlengths = ["1k"]\n', ["unknown key 'perplexity'"]),
        ('[ppl]\nlengths = ["16q"]\n', ["bad lengths in [ppl]", "16q"]),
        ('[ppl]\nfactors = [0.5]\nlengths = ["1k"]\n', ["bad factors in [ppl]", ">= 1"]),
        ('[passkey]\ndepths = [1.5]\nlengths = ["1k"]\n', ["bad depths in [passkey]", "outside [0, 1]"]),
        ('[ppl]\nmethods = ["yarn"]\nlengths = ["1k"]\n', ["uses method 'yarn' that has no [[methods]] entry"]),
        ("[ppl\n", ["not valid TOML"]),
        ('model = "x"\n', ["no task section"]),
    ],
)
def test_suite_errors_name_the_file_the_key_and_the_fix(tmp_path, text, words):
    path = _write(tmp_path, text)
    with pytest.raises(UserError) as info:
        load_suite(path)
    message = info.value.line()
    assert str(path) in message or "not found" in message
    assert " — " in message
    for word in words:
        assert word in message


@pytest.mark.integration
def test_dry_run_prints_the_grid_without_loading_a_model(tmp_path, corpus_dir):
    # a hub id that is not downloaded: a dry run needs no model files (a missing local path is an error, see test_bad_input)
    path = _write(tmp_path, GOOD.format(model="someorg/not-downloaded", corpus=corpus_dir))
    # offline, as CI is: without it each hub lookup waits out its network timeouts (~50 s here)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(["ctxbench", "sweep", str(path), "--dry-run"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "yarn" in proc.stdout and "cells" in proc.stdout


@pytest.mark.integration
def test_sweep_runs_every_cell_once_and_resumes(tmp_path, corpus_dir, saved_model):
    path = _write(tmp_path, GOOD.format(model=saved_model, corpus=corpus_dir))
    out = tmp_path / "out.csv"
    first = subprocess.run(["ctxbench", "sweep", str(path), "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    records = read_records(out)
    assert {r["task"] for r in records} == {"ppl", "passkey"}
    assert len({(r["task"], r["method"], r["length"], r["depth"]) for r in records}) == 2 * 2 + 1
    again = subprocess.run(["ctxbench", "sweep", str(path), "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "0 cell(s) run" in again.stdout
    keys = [row_key(r) for r in read_records(out)]
    assert len(keys) == len(set(keys)) == len(records)
