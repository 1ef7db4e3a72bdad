"""The Python API returns tidy DataFrames; the CLI is a layer over it."""

from __future__ import annotations

import csv

import pytest

import ctxbench
from ctxbench.errors import UserError
from ctxbench.results.store import COLUMNS


def test_run_returns_a_dataframe_with_the_schema(tiny_lm, corpus_dir, tmp_path):
    df = ctxbench.run("ppl", tiny_lm, method="none,yarn", factor=2, length="32,64", dataset=str(corpus_dir), docs=1, out=tmp_path / "a.csv")
    assert list(df.columns) == COLUMNS
    agg = df[(df.doc == "all") & (df.metric == "ppl")]
    assert sorted(zip(agg.method, agg.length, strict=True)) == [("none", 32), ("none", 64), ("yarn", 32), ("yarn", 64)]
    assert df.value.dtype.kind == "f"


def test_load_results_reads_what_run_wrote(tiny_lm, corpus_dir, tmp_path):
    df = ctxbench.run("ppl", tiny_lm, method="ntk", factor=2, length="32", dataset=str(corpus_dir), docs=1, out=tmp_path / "a.csv")
    again = ctxbench.load_results(tmp_path / "a.csv")
    assert again.value.tolist() == df.value.tolist()


def test_load_results_refuses_a_value_no_run_can_produce_naming_the_file(tiny_lm, corpus_dir, tmp_path):
    """The API reads through the validated reader report and compare use: a perplexity no run can
    produce (below 1) is refused, naming the file."""
    ctxbench.run("ppl", tiny_lm, method="ntk", factor=2, length="32", dataset=str(corpus_dir), docs=1, out=tmp_path / "a.csv")
    rows = list(csv.DictReader((tmp_path / "a.csv").open()))
    next(r for r in rows if r["metric"] == "ppl")["value"] = "-3"
    with (tmp_path / "b.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(UserError, match="b.csv"):
        ctxbench.load_results(tmp_path / "b.csv")


def test_sweep_runs_a_suite_on_a_given_model(tiny_lm, corpus_dir, tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text(f'[[methods]]\nname = "none"\n[ppl]\nlengths = ["32"]\ndataset = "{corpus_dir}"\ndocs = 1\n'
                     '[passkey]\nlengths = ["300"]\ndepths = [0.5]\ntrials = 1\n')  # fmt: skip
    df = ctxbench.sweep(suite, out=tmp_path / "o.csv", model=tiny_lm)
    assert set(df.task) == {"ppl", "passkey"}
