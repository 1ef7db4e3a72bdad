"""Two processes (gloo, CPU) split a grid into one locked CSV; it equals a single-process run cell for cell."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import run_settings

from ctxbench.results.identity import row_key
from ctxbench.results.store import read_records

TIMING = {"tokens_per_s", "peak_mem_mb"}


def _args(model, corpus, out):
    return ["ppl", "--model", str(model), "--dataset", str(corpus), "--method", "none,yarn,dynamic-ntk,rerope",
            "--factor", "2,4", "--len", "32,64,100", "--docs", "2", "--out", str(out), "--device", "cpu"]  # fmt: skip


def _values(path):
    return {row_key(r): r["value"] for r in read_records(path) if r["metric"] not in TIMING}


@pytest.mark.integration
def test_two_ranks_merge_to_the_single_process_result(saved_model, corpus_dir, tmp_path):
    env = {**os.environ, "CTXBENCH_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    single = tmp_path / "single.csv"
    subprocess.run([sys.executable, "-m", "ctxbench", *_args(saved_model, corpus_dir, single)], env=env, check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    merged = tmp_path / "merged.csv"
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533",
              "-m", "ctxbench", *_args(saved_model, corpus_dir, merged)]  # fmt: skip
    proc = subprocess.run(launch, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _values(merged) == _values(single)
    records = read_records(merged)
    assert len({r["run_id"] for r in records}) == 1  # one launch, one run id
    assert {json.loads(r["extra"])["rank"] for r in records} == {0, 1}  # both ranks measured cells


def test_groups_are_dealt_to_ranks_whatever_is_already_done(tiny_lm, corpus_dir, tmp_path):
    from ctxbench.methods import resolve
    from ctxbench.tasks import ppl

    settings = ppl.Settings(methods=[resolve("none"), resolve("dynamic-ntk")], factors=[2.0], lengths=[32, 64],
                            dataset=str(corpus_dir), docs=1)  # fmt: skip
    rank0 = run_settings(tiny_lm, "ppl", settings, out=tmp_path / "r0.csv", shard=(0, 2))
    rank1 = run_settings(tiny_lm, "ppl", settings, out=tmp_path / "r1.csv", shard=(1, 2))
    cells0 = {(r["method"], r["length"]) for r in rank0.records}
    cells1 = {(r["method"], r["length"]) for r in rank1.records}
    assert not cells0 & cells1
    assert cells0 | cells1 == {("none", "32"), ("none", "64"), ("dynamic-ntk", "32"), ("dynamic-ntk", "64")}
