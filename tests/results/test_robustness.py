"""Determinism, provenance on every row, and nothing lost when a run is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
import torch
import transformers
from helpers import run_settings

import ctxbench
from ctxbench.methods import resolve
from ctxbench.results.identity import row_key
from ctxbench.results.store import COLUMNS, ROW_KEY, read_records
from ctxbench.tasks import ppl

VOLATILE = {"run_id", "time", "seconds"}
TIMING_METRICS = {"tokens_per_s", "peak_mem_mb"}


def _settings(corpus_dir, methods=("none", "yarn", "dynamic-ntk", "ntk+logn")):
    return ppl.Settings(methods=[resolve(m) for m in methods], factors=[2.0], lengths=[32, 100], dataset=str(corpus_dir), docs=2)


def _stable(records):
    return [
        {k: v for k, v in r.items() if k not in VOLATILE}
        for r in records
        if r["metric"] not in TIMING_METRICS
    ]


def test_same_command_same_seed_gives_identical_values(tiny_lm, corpus_dir, tmp_path):
    first = run_settings(tiny_lm, "ppl", _settings(corpus_dir), out=tmp_path / "a.csv", seed=7)
    second = run_settings(tiny_lm, "ppl", _settings(corpus_dir), out=tmp_path / "b.csv", seed=7)
    assert _stable(read_records(tmp_path / "a.csv")) == _stable(read_records(tmp_path / "b.csv"))
    assert len(first.records) == len(second.records) > 0


def test_every_row_carries_full_provenance(tiny_lm, corpus_dir, tmp_path):
    run_settings(tiny_lm, "ppl", _settings(corpus_dir, methods=("yarn",)), out=tmp_path / "a.csv", seed=3)
    records = read_records(tmp_path / "a.csv")
    for r in records:
        assert list(r) == COLUMNS
        assert r["model_digest"] == "tiny-llama-seed0" and r["data_digest"].startswith("sha256:")
        assert r["ctxbench_version"] == ctxbench.__version__
        assert r["torch_version"] == torch.__version__ and r["transformers_version"] == transformers.__version__
        assert r["device"] == "cpu" and r["dtype"] == "float32" and r["seed"] == "3"
        assert json.loads(r["method_params"]) == {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True, "attention_factor": None}


def test_attention_method_rows_record_derived_defaults(tiny_lm, corpus_dir):
    records = run_settings(tiny_lm, "ppl", _settings(corpus_dir, methods=("self-extend",))).records
    params = json.loads(records[0]["method_params"])
    assert params == {"window": 16, "group": 3}  # w = L/4, G = ceil((s*L - w)/(L - w)) = ceil(112/48)


def _cli(model, corpus, out):
    methods = "none,linear,ntk,yarn,ntk-by-parts,llama3,dynamic-ntk,dynamic-yarn"
    return ["ctxbench", "ppl", "--model", str(model), "--dataset", str(corpus), "--method", methods,
            "--factor", "1,2,3,4,6,8", "--len", "32,64,100,200", "--docs", "3", "--out", str(out)]  # fmt: skip


@pytest.mark.integration
@pytest.mark.parametrize("cells_before_kill", [1, 15, 60])
def test_kill_9_mid_run_loses_and_duplicates_nothing(saved_model, corpus_dir, tmp_path, cells_before_kill):
    out = tmp_path / "out.csv"
    env = {**os.environ, "CTXBENCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen(_cli(saved_model, corpus_dir, out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    cells = 0
    while time.time() < deadline and proc.poll() is None:
        if out.exists():
            cells = len({tuple(r[c] for c in ("method", "factor", "length")) for r in read_records(out)})
            if cells >= cells_before_kill:
                break
        time.sleep(0.02)
    assert proc.poll() is None, f"run finished before the kill ({cells} cells): {proc.stderr.read().decode()[-500:]}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    survived = read_records(out)  # a valid CSV: header, whole rows, trailing newline
    kept = {row_key(r): r["value"] for r in survived}
    done = subprocess.run(_cli(saved_model, corpus_dir, out), env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    final = read_records(out)
    keys = [row_key(r) for r in final]
    assert len(keys) == len(set(keys)), "a cell was written twice"
    assert all(kept[k] == v for k, v in ((row_key(r), r["value"]) for r in final) if k in kept)
    assert kept.keys() <= set(keys), "a finished cell was lost"
    grid = 6 * 6 * 4 + 2 * 4  # none and dynamic-yarn ignore the factor: they run once per length
    assert len({tuple(r[c] for c in ROW_KEY[:-3]) for r in final}) == grid
    assert not list(tmp_path.glob(".out.csv.*.tmp"))


def test_a_forward_that_cannot_fit_becomes_an_oom_row_and_the_grid_goes_on(tiny_lm, corpus_dir, tmp_path):
    """An injected allocation failure: the model cannot hold a forward of more than 64 tokens."""
    from ctxbench.model.scoring import decoder

    def no_room(module, args, kwargs):
        if kwargs["input_ids"].shape[1] > 64:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    handle = decoder(tiny_lm.model).register_forward_pre_hook(no_room, with_kwargs=True)
    try:
        result = run_settings(tiny_lm, "ppl", _settings(corpus_dir, methods=("none", "yarn", "ntk")), out=tmp_path / "a.csv")
    finally:
        handle.remove()
    records = read_records(tmp_path / "a.csv")
    failed = [r for r in records if r["status"] != "ok"]
    assert {(r["method"], r["length"], r["status"]) for r in failed} == {(m, "100", "oom") for m in ("none", "yarn", "ntk")}
    assert result.failed == 3 and result.ran == 3  # the 32-token cells, retried alone after their group failed
    assert "out of memory" in json.loads(failed[0]["extra"])["error"]
    again = run_settings(tiny_lm, "ppl", _settings(corpus_dir, methods=("none", "yarn", "ntk")), out=tmp_path / "a.csv")
    assert again.ran == 3 and again.skipped == 3  # a later run retries the failed cells only
