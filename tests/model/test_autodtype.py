"""``--dtype auto`` on a CPU: bfloat16 only where a probe shows it faster on this machine and the
committed parity verdict holds; else float32. The choice is cached per machine and model, said in
the plan, and recorded in every row."""

from __future__ import annotations

import io
import json

import pytest
from helpers import cli_main, read_csv, save_with_tokenizer, tiny_llama

from ctxbench.model import autodtype
from ctxbench.model.autodtype import PROBES, Parity, choose, parity_of, probe_key
from ctxbench.model.cache import digest

HELD = Parity("smollm2-135m", ppl_cells=6, ppl_max_rel_diff=0.0008, trials=100, answers_equal=1.0)
FASTER = {"tokens": 1024, "float32": 3.1, "bfloat16": 1.0}
SLOWER = {"tokens": 1024, "float32": 1.0, "bfloat16": 1.6}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_bfloat16_only_where_it_is_faster_and_parity_holds():
    assert choose(HELD, FASTER) == (
        "bfloat16", "auto: 3.1x faster than float32 on this CPU, parity held: ppl within 0.08%, answers 100% equal")
    assert choose(HELD, SLOWER) == ("float32", "auto: bfloat16 0.62x the speed of float32 on this CPU, under 1.1x")
    assert choose(HELD, {**FASTER, "float32": 1.05})[0] == "float32"  # faster, but by less than the rounding is worth
    failed = Parity("smollm2-135m", 6, 0.009, 100, 1.0)  # perplexity 0.9% away
    assert choose(failed, FASTER) == ("float32", "auto: bfloat16 failed parity with float32 (ppl within 0.90%, answers 100% equal)")
    assert choose(Parity("smollm2-135m", 6, 0.001, 100, 0.97), FASTER)[0] == "float32"  # 3 answers in 100 differ
    assert choose(Parity("smollm2-135m", 6, 0.001, 0, 0.0), FASTER)[0] == "float32"  # no retrieval trials compared
    assert choose(None, FASTER) == ("float32", "auto: bfloat16's parity with float32 is not measured for this model")
    assert choose(HELD, None) == (None, "auto: bfloat16 held parity; its speed on this CPU is probed at load")


def test_the_probe_runs_once_per_machine_and_model_and_a_bad_entry_is_probed_again(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(autodtype, "parity_for", lambda spec: HELD)
    monkeypatch.setattr(autodtype, "probe", lambda model: calls.append(model) or dict(FASTER))
    assert autodtype.chosen("m", object())[0] == "bfloat16" and len(calls) == 1
    assert autodtype.chosen("m", object())[0] == "bfloat16" and len(calls) == 1  # cached
    assert PROBES.get(probe_key("m")) == FASTER and autodtype.planned("m")[0] == "bfloat16"
    assert autodtype.chosen("other", object())[0] == "bfloat16" and len(calls) == 2  # another model: its own probe
    for bad in ({**FASTER, "bfloat16": 0}, {**FASTER, "float32": "fast"}, {"float32": 1.0, "bfloat16": 2.0},
                {**FASTER, "tokens": True}, [3.1, 1.0]):  # fmt: skip
        data = json.loads(PROBES.path.read_text())
        canonical = json.dumps(bad, sort_keys=True, separators=(",", ":")).encode()
        data["entries"][probe_key("m")] = {"value": bad, "sha256": digest(canonical)}  # the digest matches: the check must catch it
        PROBES.path.write_text(json.dumps(data))
        assert autodtype.planned("m") == ("float32", "auto: bfloat16 held parity; its speed on this CPU is probed at load "
                                                     "(not yet: float32 until the first run probes it)")  # fmt: skip
        assert "note: ignored a bad cache entry" in capsys.readouterr().err
        assert autodtype.chosen("m", object())[0] == "bfloat16" and PROBES.get(probe_key("m")) == FASTER


def test_no_probe_where_parity_does_not_hold(monkeypatch):
    monkeypatch.setattr(autodtype, "parity_for", lambda spec: None)
    monkeypatch.setattr(autodtype, "probe", lambda model: pytest.fail("probed a model without a parity verdict"))
    assert autodtype.chosen("m", object())[0] == "float32"


def test_the_probe_times_the_model_in_both_dtypes_and_leaves_it_in_float32():
    import torch

    model = tiny_llama()
    timing = autodtype.probe(model, tokens=64)
    assert set(timing) == {"tokens", "float32", "bfloat16"} and timing["tokens"] == 64
    assert timing["float32"] > 0 and timing["bfloat16"] > 0
    assert next(model.parameters()).dtype == torch.float32


def test_the_committed_verdict_is_the_one_the_committed_results_give():
    data = json.loads(autodtype.PARITY_FILE.read_text())
    assert data["limits"] == {"ppl_rel_diff": autodtype.PPL_LIMIT, "answers_equal": autodtype.ANSWERS_LIMIT}
    (verdict,) = data["verdicts"]
    from helpers import ROOT

    found = parity_of(ROOT / verdict["results"])
    assert autodtype.committed_parity() == {"smollm2-135m": found}
    assert verdict["holds"] == found.holds and found.ppl_cells >= 6 and found.trials >= 40
    assert autodtype.parity_for("smollm2") == autodtype.parity_for("smollm2-135m") == found
    assert autodtype.parity_for("meta-llama/Llama-2-7b-hf") is None  # measured on the default model only


def test_parity_is_read_from_rows_of_both_dtypes(tmp_path):
    rows = []
    for dtype, ppl, answers in (("float32", 8.0, ["12", "34", "56\nThe pass"]), ("bfloat16", 8.02, ["12", "34\n\nThe", "57"])):
        base = {"task": "ppl", "label": "none", "length": "1024", "status": "ok", "dtype": dtype, "trial": "", "answer": ""}
        rows += [{**base, "metric": "ppl", "doc": "all", "value": ppl}, {**base, "metric": "ppl", "doc": "a.txt", "value": 99}]
        rows += [{**base, "task": "passkey", "metric": "correct", "doc": "", "trial": str(i), "answer": a, "value": 1}
                 for i, a in enumerate(answers)]  # fmt: skip
    rows.append({**rows[-1], "trial": "7", "answer": "1"})  # only in one dtype: not compared
    path = tmp_path / "p.csv"
    import csv

    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
        w.writeheader()
        w.writerows(rows)
    found = parity_of(path)
    assert (found.ppl_cells, found.trials) == (1, 3)
    assert found.ppl_max_rel_diff == pytest.approx(0.0025) and found.answers_equal == pytest.approx(2 / 3)
    assert found.texts_equal == pytest.approx(1 / 3)  # "34" and "34\n\nThe": the same answer, decoded on differently
    assert not found.holds


def _plan_text(plan) -> str:
    from rich.console import Console

    from ctxbench.runner.plan import print_plan

    shown = io.StringIO()
    print_plan(Console(file=shown, width=400), plan)
    return shown.getvalue()


def test_the_plan_says_which_dtype_auto_is_and_why(monkeypatch):
    from ctxbench.runner.grid import Job
    from ctxbench.runner.plan import plan_table
    from ctxbench.runner.settings import build_settings
    from ctxbench.tasks import get

    job = Job(get("ppl"), build_settings(get("ppl"), "none", 2.0, "1k", {"docs": 1}))
    monkeypatch.setattr(autodtype, "parity_for", lambda spec: HELD)
    monkeypatch.setattr(autodtype, "probe", lambda model: dict(FASTER))
    before = plan_table([job], "smollm2-135m", device="cpu", dtype="auto")
    assert before.dtype == "float32" and "dtype float32 (auto: bfloat16 held parity; its speed on this CPU is probed at load" in _plan_text(before)
    autodtype.chosen("smollm2-135m", object())  # a run probed this machine
    plan = plan_table([job], "smollm2-135m", device="cpu", dtype="auto")
    assert plan.dtype == "bfloat16" and plan.basis.startswith("smollm2-135m, cpu bfloat16")
    assert ("dtype bfloat16 (auto: 3.1x faster than float32 on this CPU, parity held: ppl within 0.08%, answers 100% equal)"
            in _plan_text(plan).splitlines())  # fmt: skip
    assert "dtype" not in _plan_text(plan_table([job], "smollm2-135m", device="cpu", dtype="float32"))  # asked for: no line


@pytest.mark.parametrize("timing, dtype", [(FASTER, "bfloat16"), (SLOWER, "float32")])
def test_a_row_of_an_auto_run_records_the_dtype_that_ran(timing, dtype, tmp_path, corpus_dir, monkeypatch, capsys):
    model = save_with_tokenizer(tiny_llama(), tmp_path / "tiny")
    monkeypatch.setattr(autodtype, "parity_for", lambda spec: HELD)
    monkeypatch.setattr(autodtype, "probe", lambda m: dict(timing))
    out = tmp_path / "r.csv"
    argv = ["ppl", "--model", str(model), "--dataset", str(corpus_dir), "--len", "128", "--docs", "1", "--device", "cpu",
            "--dtype", "auto", "--out", str(out)]  # fmt: skip
    code, stdout, stderr = cli_main(argv, monkeypatch, capsys)
    assert code == 0, stderr
    _, rows = read_csv(out)
    assert rows and {r["dtype"] for r in rows} == {dtype}
    assert f"dtype {dtype} (auto: " in " ".join(stdout.split())
    # the same command again: the cell is in the file (its identity holds the resolved dtype), nothing runs
    code, stdout, _ = cli_main(argv, monkeypatch, capsys)
    assert code == 0 and len(read_csv(out)[1]) == len(rows)


def test_a_loaded_model_is_in_the_dtype_auto_chose(tmp_path, monkeypatch):
    import torch

    from ctxbench.backends.hf import load_model as load

    model = save_with_tokenizer(tiny_llama(), tmp_path / "tiny")
    monkeypatch.setattr(autodtype, "parity_for", lambda spec: HELD)
    monkeypatch.setattr(autodtype, "probe", lambda m: dict(FASTER))
    lm = load(str(model), device="cpu", dtype="auto")
    assert lm.dtype == "bfloat16" and next(lm.model.parameters()).dtype == torch.bfloat16 and "3.1x faster" in lm.dtype_note
    monkeypatch.setattr(autodtype, "probe", lambda m: pytest.fail("probed again"))
    again = load(str(model), device="cpu", dtype="auto")  # cached: loaded in bfloat16 directly, the same weights
    assert again.dtype == "bfloat16"
    for a, b in zip(lm.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert load(str(model), device="cpu", dtype="float32").dtype == "float32"  # asked for: no choice


def test_the_docs_quote_the_committed_parity():
    from helpers import ROOT

    found = autodtype.committed_parity()["smollm2-135m"]
    equal = round(found.answers_equal * found.trials)
    page = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    assert f"perplexity within **{found.ppl_max_rel_diff:.2%}** in all {found.ppl_cells} cells" in page
    assert f"**{equal} of {found.trials}** answers equal" in page
    readme = " ".join((ROOT / "results" / "README.md").read_text().split())
    assert f"perplexity within {found.ppl_max_rel_diff:.2%} in all {found.ppl_cells} cells, {equal} of {found.trials} retrieval answers equal" in readme
