"""`ctxbench report`: one pivot in every format, labels that never merge, plots that are written."""

from __future__ import annotations

import csv
import io
import json
import subprocess

import pytest
from helpers import run_settings

from ctxbench.methods import resolve
from ctxbench.report.formats import pivots, to_csv, to_json, to_markdown
from ctxbench.results.store import write_records
from ctxbench.runner.settings import build_settings, resolve_methods
from ctxbench.tasks import get


def _records(tiny_lm, corpus_dir):
    p = build_settings(get("ppl"), resolve_methods("none,yarn,theta", {"theta": [1e5, 1e6]}), "2,4", "32,64,128",
                       {"dataset": str(corpus_dir), "docs": "1"})  # fmt: skip
    k = build_settings(get("passkey"), [resolve("none")], 2.0, "300,400", {"depths": "0,1", "trials": "2"})
    return run_settings(tiny_lm, "ppl", p).records + run_settings(tiny_lm, "passkey", k).records


def test_plots_are_written_and_not_empty(tiny_lm, corpus_dir, tmp_path):
    from ctxbench.tasks.plots import write_plots

    paths = write_plots(_records(tiny_lm, corpus_dir), tmp_path / "plots")
    names = sorted(p.name for p in paths)
    assert "ppl-tiny-llama-x2.png" in names and "passkey-tiny-llama-none-xany.png" in names
    assert "nll-position-tiny-llama-128-x4.png" in names
    for path in paths:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_parameter_settings_never_merge_and_factor_free_methods_join_every_factor(tiny_lm, corpus_dir):
    ps = pivots(_records(tiny_lm, corpus_dir))
    ppl = [p for p in ps if p.task == "ppl"]
    assert [p.factor for p in ppl] == ["2", "4"]
    for p in ppl:
        assert sorted(p.rows) == ["none", "theta(theta=100000)", "theta(theta=1000000)", "yarn"]
        assert p.rows["theta(theta=100000)"][64].value != p.rows["theta(theta=1000000)"][64].value


@pytest.mark.integration
def test_the_four_formats_give_the_same_numbers(tiny_lm, corpus_dir, tmp_path):
    records = _records(tiny_lm, corpus_dir)
    ps = pivots(records)
    rows = list(csv.DictReader(io.StringIO(to_csv(ps))))
    js = json.loads(to_json(ps))
    md = to_markdown(ps)
    for p, j in zip(ps, js, strict=True):
        for label, cells in p.rows.items():
            jrow = next(r for r in j["rows"] if r["method"] == label)
            for n, cell in cells.items():
                crow = next(r for r in rows if r["task"] == p.task and r["factor"] == p.factor and r["method"] == label and r["length"] == str(n))
                assert float(crow["value"]) == cell.value == jrow["cells"][str(n)]["value"]
                shown = f"{cell.value:.0%}" if p.higher_is_better else f"{cell.value:.4g}"
                assert shown in md
    out = tmp_path / "r.csv"
    write_records(out, records)
    for fmt, word in (("table", "effective length"), ("markdown", "| method |"), ("csv", "model,task,variant"), ("json", '"lengths"')):
        proc = subprocess.run(["ctxbench", "report", str(out), "--format", fmt], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and word in proc.stdout, proc.stderr


def test_baseline_and_filters(tiny_lm, corpus_dir):
    ps = pivots(_records(tiny_lm, corpus_dir), task=["ppl"], factor=[2.0], length=[64], baseline="none")
    assert len(ps) == 1 and ps[0].lengths == [64]
    p = ps[0]
    assert p.rows["none"][64].change is None
    assert p.rows["yarn"][64].change == p.rows["yarn"][64].value / p.rows["none"][64].value - 1


def _accuracy_row(depth, value, trials, **extra):
    return {"model": "m", "task": "passkey", "variant": "", "label": "yarn", "method": "yarn", "factor": "2.0", "length": "4096",
            "depth": str(depth), "doc": "", "trial": "all", "status": "ok", "metric": "accuracy", "value": str(value),
            "extra": json.dumps({"trials": trials, "correct": value * trials, **extra} if trials else extra)}  # fmt: skip


def test_a_length_pools_every_trial_of_every_depth_with_one_wilson_interval():
    from ctxbench.report import pivot
    from ctxbench.stats import wilson

    records = [_accuracy_row(0.1, 1.0, 4), _accuracy_row(0.5, 0.5, 4), _accuracy_row(0.9, 0.0, 2)]
    (p,) = pivot.build(records)
    cell = p.rows["yarn"][4096]
    assert (cell.value, cell.n) == (6 / 10, 10)  # 4 + 2 + 0 right of 10 trials, not the last depth's 0%
    assert (cell.lo, cell.hi) == wilson(6, 10)


def test_old_rows_without_a_trial_count_pool_the_trial_rows_they_have():
    from ctxbench.report import pivot

    records = [_accuracy_row(d, v, None) for d, v in ((0.1, 1.0), (0.5, 0.0), (0.9, 1.0))]
    records += [{**r, "trial": "0", "metric": "correct", "value": r["value"][0]} for r in records]
    (p,) = pivot.build(records)
    assert (p.rows["yarn"][4096].value, p.rows["yarn"][4096].n) == (2 / 3, 3)


def test_perplexity_effective_length_stops_at_a_rise_beyond_tolerance_and_noise():
    from ctxbench.report.effective import effective_length

    ppl = {1024: 7.6, 2048: 7.4, 4096: 8.3, 8192: 6.7, 16384: 21.7}  # 4k: 12% above the best shorter one
    assert effective_length(ppl, higher_is_better=False) == 2048  # no intervals: the rise counts
    noisy = {1024: (4.5, 13.4), 2048: (4.5, 11.8), 4096: (5.7, 11.5), 8192: (5.5, 8.1), 16384: (13.0, 37.2)}
    assert effective_length(ppl, higher_is_better=False, intervals=noisy) == 8192  # 4k is within noise; 16k is not
    tight = {**noisy, 2048: (7.3, 7.5), 4096: (8.2, 8.4)}
    assert effective_length(ppl, higher_is_better=False, intervals=tight) == 2048


@pytest.mark.integration
def test_a_piped_report_shows_every_cell_whole(tmp_path):
    """Rich fits tables to 80 columns off a terminal; a report piped to a log must not cut cells."""
    import os

    lengths = [1024, 2048, 4096, 8192, 16384, 32768]
    records = [{**_accuracy_row(depth, value, 5), "label": label, "method": label.split("(")[0], "length": str(n)}
               for label in ("yarn(beta_fast=16)", "dynamic-ntk") for n in lengths for depth, value in ((0.1, 0.8), (0.9, 0.6))]  # fmt: skip
    write_records(tmp_path / "r.csv", records)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(["ctxbench", "report", str(tmp_path / "r.csv")], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout and proc.stdout.count("70% [40%–89%] n=10") == 2 * len(lengths)


def test_up_to_forty_plot_series_never_share_a_color_and_line_style():
    """Twelve methods in one perplexity plot drew dca and yarn in the same blue: past ten colors the
    style changes."""
    from ctxbench.tasks.plots import series_style

    styles = [tuple(sorted(series_style(i).items())) for i in range(40)]
    assert len(set(styles)) == 40
    assert series_style(0) == {"color": "C0", "linestyle": "-"} and series_style(10) == {"color": "C0", "linestyle": "--"}
