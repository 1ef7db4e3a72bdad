"""``ctxbench compare --across-backends``: the same grid on two backends, paired cell by cell: for
retrieval the same answer per trial and McNemar's exact test on the discordant trials; for perplexity
and the answer NLL the relative difference against the bf16 tolerance."""

from __future__ import annotations

import pytest
from helpers import cli_main

from ctxbench.report.parity import RTOL, parity
from ctxbench.results.store import COLUMNS, write_records


def _row(**kw) -> dict:
    base = {c: "" for c in COLUMNS}
    base.update(run_id="r", time="t", model="m", model_digest="md", dataset="d", data_digest="dd", method="yarn", label="yarn", factor="2",
                length="4096", seed="0", method_params="{}", options="{}", status="ok", device="cpu", ctxbench_version="0",
                torch_version="0", transformers_version="0", extra="{}")  # fmt: skip
    base.update({k: str(v) for k, v in kw.items()})
    return base


def _passkey(backend, dtype, outcomes, answers=None):
    rows = [_row(task="passkey", trial=t, metric="correct", value=v, answer=(answers or {}).get(t, f"{v}"), backend=backend, dtype=dtype,
                 depth="0.5", options='{"chat": false, "digits": 5}') for t, v in enumerate(outcomes)]  # fmt: skip
    rows.append(_row(task="passkey", trial="all", metric="accuracy", value=sum(outcomes) / len(outcomes), backend=backend, dtype=dtype,
                     depth="0.5", options='{"chat": false, "digits": 5}', extra=f'{{"trials": {len(outcomes)}}}'))  # fmt: skip
    return rows


def _ppl(backend, dtype, value, length="4096"):
    return [_row(task="ppl", doc="all", metric="ppl", value=value, backend=backend, dtype=dtype, length=length, tokens=100)]


def _files(tmp_path, a, b):
    pa, pb = tmp_path / "hf.csv", tmp_path / "vllm.csv"
    write_records(pa, a)
    write_records(pb, b)
    return str(pa), str(pb)


def _verdicts(pairs):
    return {(p.task, p.length, p.metric): p.verdict for p in pairs}


def test_cells_pair_across_backend_and_dtype_and_same_answers_are_the_same(tmp_path):
    a, b = _files(tmp_path, _passkey("hf", "float32", [1] * 10) + _ppl("hf", "float32", 10.0),
                  _passkey("vllm 0.32.0", "bfloat16", [1] * 10) + _ppl("vllm 0.32.0", "bfloat16", 10.05))  # fmt: skip
    pairs, _ = parity(a, b)
    assert _verdicts(pairs) == {("passkey", "4096", "accuracy"): "same", ("ppl", "4096", "ppl"): "same"}
    [retrieval] = [p for p in pairs if p.metric == "accuracy"]
    assert "10/10 same answers" in retrieval.detail and "McNemar p = 1" in retrieval.detail


def test_six_trials_lost_on_one_backend_differ_by_mcnemar(tmp_path):
    # exact McNemar on 6 discordant trials all one way: p = 2 * 0.5^6 = 0.031 < 0.05; 5 ways: 0.0625
    a, b = _files(tmp_path, _passkey("hf", "float32", [1] * 10), _passkey("vllm 0.32.0", "bfloat16", [0] * 6 + [1] * 4))
    [pair] = parity(a, b)[0]
    assert pair.verdict == "differs" and "p = 0.0312" in pair.detail
    a, b = _files(tmp_path, _passkey("hf", "float32", [1] * 10), _passkey("vllm 0.32.0", "bfloat16", [0] * 5 + [1] * 5))
    assert parity(a, b)[0][0].verdict == "same"


def test_different_answers_that_score_the_same_are_counted_not_judged(tmp_path):
    # trial 0: the hf path stopped once its answer was found, the engine decoded on: the same greedy answer
    a, b = _files(tmp_path, _passkey("hf", "float32", [1, 1], {0: "71432.", 1: "5 is it"}),
                  _passkey("vllm 0.32.0", "bfloat16", [1, 1], {0: "71432. Remember", 1: "5 was it"}))  # fmt: skip
    [pair] = parity(a, b)[0]
    assert pair.verdict == "same" and "1/2 same answers" in pair.detail


@pytest.mark.parametrize(("ratio", "verdict"), [(1 + RTOL["ppl"] * 0.9, "same"), (1 + RTOL["ppl"] * 1.1, "differs"), (1 - RTOL["ppl"] * 1.1, "differs")])
def test_perplexity_is_judged_against_the_bf16_tolerance(tmp_path, ratio, verdict):
    a, b = _files(tmp_path, _ppl("hf", "float32", 10.0), _ppl("vllm 0.32.0", "bfloat16", 10.0 * ratio))
    assert parity(a, b)[0][0].verdict == verdict


def test_a_cell_in_one_file_only_is_unpaired_and_not_judged(tmp_path):
    a, b = _files(tmp_path, _ppl("hf", "float32", 10.0) + _ppl("hf", "float32", 12.0, length="8192"), _ppl("vllm 0.32.0", "bfloat16", 10.0))
    assert _verdicts(parity(a, b)[0]) == {("ppl", "4096", "ppl"): "same", ("ppl", "8192", "ppl"): "unpaired"}


def test_the_command_exits_1_when_a_cell_differs_and_0_when_all_agree(tmp_path, monkeypatch, capsys):
    a, b = _files(tmp_path, _ppl("hf", "float32", 10.0), _ppl("vllm 0.32.0", "bfloat16", 10.0))
    code, out, _ = cli_main(["compare", "--across-backends", a, b], monkeypatch, capsys)
    assert code == 0 and "1/1 paired cells the same" in out
    a, b = _files(tmp_path, _ppl("hf", "float32", 10.0), _ppl("vllm 0.32.0", "bfloat16", 11.0))
    code, out, _ = cli_main(["compare", "--across-backends", a, b, "--format", "markdown"], monkeypatch, capsys)
    assert code == 1 and "| ppl | yarn | 2 | 4096 | - | ppl | 10 | 11 | differs | +10.00% (tolerance 1%) |" in out


def test_each_depth_of_a_retrieval_grid_is_its_own_row(tmp_path, monkeypatch, capsys):
    hf = _passkey("hf", "float32", [1, 1]) + [{**r, "depth": "0.9"} for r in _passkey("hf", "float32", [1, 0])]
    vllm = _passkey("vllm 0.32.0", "bfloat16", [1, 1]) + [{**r, "depth": "0.9"} for r in _passkey("vllm 0.32.0", "bfloat16", [1, 0])]
    a, b = _files(tmp_path, hf, vllm)
    _, out, _ = cli_main(["compare", "--across-backends", a, b, "--format", "markdown"], monkeypatch, capsys)
    assert "| 0.5 | accuracy | 100% | 100% |" in out and "| 0.9 | accuracy | 50% | 50% |" in out


def test_two_different_wrong_answers_are_different_answers_with_the_same_score(tmp_path):
    a, b = _files(tmp_path, _passkey("hf", "float32", [0, 1, 0], {0: "is is is the", 1: "71432.", 2: "none"}),
                  _passkey("vllm 0.32.0", "bfloat16", [0, 1, 1], {0: "is is a is", 1: "71432.", 2: "71432."}))  # fmt: skip
    [pair] = parity(a, b)[0]
    assert (pair.same, pair.same_score, pair.trials) == (1, 2, 3)
    assert "1/3 same answers (2/3 same score), 1 discordant" in pair.detail
