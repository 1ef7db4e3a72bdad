"""Hostile inputs, round 4 (issue 45), one table per mechanism:

- the one results reader behind every mode of the gate (``compare``, ``compare --across-backends``,
  ``report``, ``rank``): kind and size, domains, conflicts, dtypes kept apart, options that apply or
  are refused, nothing paired is a failure;
- validation before the plan, once for every path: ``--dry-run`` and the run refuse the same input in
  the same line (both are run on each refused input, the run on the tiny model saved to disk), and
  the fix each refusal names is run too;
- suites: a path is a path, a bare name a built-in;
- caches that are files: a FIFO, ``/dev/zero``, a sparse file, a link out of the cache are dropped
  with one note naming the reason, never a hang or a MemoryError;
- engine failures said as one ctxbench line (a stand-in engine that fails as vLLM does);
- messages that name the input at fault, shortened, with a fix that passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import cli_main, one_error_line

from ctxbench.errors import UserError
from ctxbench.results.store import COLUMNS, write_records

BIG = str(2**64)


# ---- results files --------------------------------------------------------------------------------


def _row(**kw) -> dict:
    base = {c: "" for c in COLUMNS}
    base.update(run_id="r", time="t", model="m", model_digest="md", dataset="d", data_digest="dd", method="yarn", label="yarn", factor="2",
                length="4096", seed="0", method_params="{}", options="{}", status="ok", device="cpu", ctxbench_version="0",
                torch_version="0", transformers_version="0", extra="{}", backend="hf", dtype="float32")  # fmt: skip
    base.update({k: str(v) for k, v in kw.items()})
    return base


PASSKEY_OPTIONS = '{"chat": false, "digits": 5}'


def _passkey(outcomes, backend="hf", dtype="float32", model="m", extra=None, values=None):
    values = values or {}
    rows = [_row(task="passkey", trial=t, metric="correct", value=values.get(t, v), answer=str(v), backend=backend, dtype=dtype, model=model,
                 depth="0.5", options=PASSKEY_OPTIONS, extra=(extra or {}).get(t, "{}")) for t, v in enumerate(outcomes)]  # fmt: skip
    rows.append(_row(task="passkey", trial="all", metric="accuracy", value=sum(outcomes) / len(outcomes), backend=backend, dtype=dtype,
                     model=model, depth="0.5", options=PASSKEY_OPTIONS, extra=f'{{"trials": {len(outcomes)}}}'))  # fmt: skip
    return rows


def _ppl(value, backend="hf", dtype="float32", model="m", length="4096", metric="ppl"):
    return [_row(task="ppl", doc="all", metric=metric, value=value, backend=backend, dtype=dtype, model=model, length=length, tokens=100)]


def _write(path: Path, rows) -> str:
    write_records(path, rows)
    return str(path)


def _append_raw(path: str, rows) -> None:
    """Rows appended as text (a file concatenated by hand): the writer would replace the cell."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    for r in rows:
        writer.writerow(r)
    with open(path, "a") as f:
        f.write(buf.getvalue())


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / ".cache"))
    return tmp_path


MODES = {"compare": [], "parity": ["--across-backends"]}


def _gate(work, monkeypatch, capsys, a_rows, b_rows, mode, *extra):
    a, b = _write(work / "a.csv", a_rows), _write(work / "b.csv", b_rows)
    return cli_main(["compare", a, b, *MODES[mode], *extra], monkeypatch, capsys)


# A value no run writes, in both files: refused by the one reader (exit 2, one line naming the cell)
# in every mode of the gate. (id, rows, words of the line)
OUT_OF_DOMAIN = [
    ("trial score inf", lambda: _passkey([1, 1], values={0: "inf"}), ["correct inf is outside"]),
    ("trial score 7", lambda: _passkey([1, 1], values={0: "7"}), ["correct 7 is outside"]),
    ("trial score -1", lambda: _passkey([1, 1], values={0: "-1"}), ["correct -1 is outside"]),
    ("trial score 0.5", lambda: _passkey([1, 1], values={0: "0.5"}), ["correct 0.5 is outside"]),
    ("trial score -inf", lambda: _passkey([1, 1], values={0: "-inf"}), ["correct -inf is outside"]),
    ("perplexity 0.5", lambda: _ppl("0.5"), ["ppl 0.5 is outside"]),
    ("perplexity -5", lambda: _ppl("-5"), ["ppl -5 is outside"]),
    ("perplexity 0", lambda: _ppl("0"), ["ppl 0 is outside"]),
    ("perplexity -inf", lambda: _ppl("-inf"), ["ppl -inf is outside"]),
    ("answer_nll -1", lambda: _passkey([1, 1]) + [dict(_passkey([1, 1])[-1], metric="answer_nll", value="-1", extra="{}")], ["answer_nll -1 is outside"]),
    ("extra not JSON", lambda: _passkey([1, 1], extra={0: '{"answer_nll": 0.3'}), ["extra is not valid JSON"]),
    ("extra answer_nll text", lambda: _passkey([1, 1], extra={0: '{"answer_nll": "abc"}'}), ["extra.answer_nll \"abc\" is not a number"]),
    ("extra answer_nll NaN", lambda: _passkey([1, 1], extra={0: '{"answer_nll": NaN}'}), ["extra.answer_nll nan is not a finite number"]),
    ("extra answer_nll negative", lambda: _passkey([1, 1], extra={0: '{"answer_nll": -2}'}), ["extra.answer_nll -2 is outside"]),
    ("extra answer_nll a list", lambda: _passkey([1, 1], extra={0: '{"answer_nll": [1]}'}), ["extra.answer_nll [1] is not a number"]),
    ("extra a list", lambda: _passkey([1, 1], extra={0: '["answer_nll"]'}), ["extra is a JSON list"]),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("rows", "words"), [c[1:] for c in OUT_OF_DOMAIN], ids=[c[0] for c in OUT_OF_DOMAIN])
def test_a_value_no_run_writes_is_refused_in_every_mode_of_the_gate(work, monkeypatch, capsys, rows, words, mode):
    code, _, err = _gate(work, monkeypatch, capsys, rows(), rows(), mode)
    one_error_line(code, err, words)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("first", "second"), [("1", "0"), ("0", "1"), ("1", "")], ids=["right then wrong", "wrong then right", "right then blank"])
def test_a_row_given_twice_with_another_value_is_a_named_conflict(work, monkeypatch, capsys, mode, first, second):
    rows = _passkey([1, 1], values={0: first})
    a = _write(work / "a.csv", rows)
    _append_raw(a, [dict(rows[0], value=second)])
    b = _write(work / "b.csv", _passkey([1, 1]))
    code, _, err = cli_main(["compare", a, b, *MODES[mode]], monkeypatch, capsys)
    one_error_line(code, err, ["given twice with different values", "passkey yarn x2 at length 4096", "trial 0", "a conflict"])


@pytest.mark.parametrize("mode", MODES)
def test_rows_given_twice_with_the_same_values_are_read_once_not_partial(work, monkeypatch, capsys, mode):
    rows = _passkey([1, 0, 1])
    a = _write(work / "a.csv", rows)
    _append_raw(a, rows)  # the file appended to itself
    code, out, err = cli_main(["compare", a, _write(work / "b.csv", rows), *MODES[mode]], monkeypatch, capsys)
    assert code == 0, err
    assert "a hand edit" not in out + err and "partial" not in out + err


def test_rows_given_twice_are_said_given_twice_by_report_too(work, monkeypatch, capsys):
    rows = _passkey([1, 1])
    a = _write(work / "a.csv", rows)
    _append_raw(a, [dict(rows[1], value="0")])
    code, _, err = cli_main(["report", a], monkeypatch, capsys)
    one_error_line(code, err, ["given twice"])


# ---- parity: nothing paired, dtypes and models apart, options ------------------------------------

NOTHING_PAIRED = [
    ("two models", _ppl("10", model="m1") + _passkey([1, 1], model="m1"), _ppl("10", backend="vllm 0.32.0", model="m2"), "holds model m1"),
    ("two tasks", _ppl("10"), _passkey([1, 1], backend="vllm 0.32.0"), "holds task ppl"),
    ("two grids", _ppl("10", length="4096"), _ppl("10", backend="vllm 0.32.0", length="8192"), "run the same grid"),
    ("two datasets", _ppl("10"), [dict(r, dataset="other") for r in _ppl("10", backend="vllm 0.32.0")], "holds dataset d"),
]


@pytest.mark.parametrize(("a_rows", "b_rows", "why"), [c[1:] for c in NOTHING_PAIRED], ids=[c[0] for c in NOTHING_PAIRED])
def test_nothing_paired_fails_the_parity_gate_saying_why(work, monkeypatch, capsys, a_rows, b_rows, why):
    code, out, err = _gate(work, monkeypatch, capsys, a_rows, b_rows, "parity")
    assert code == 1, out + err
    assert "Traceback" not in err and "nothing paired" in err and why in err, err
    assert "unpaired:" in err  # each unpaired cell is listed


def test_two_dtypes_in_one_file_stay_two_cells(work):
    from ctxbench.report.parity import parity

    a = _write(work / "a.csv", _ppl("10", dtype="float32") + _ppl("20", dtype="bfloat16"))
    b = _write(work / "b.csv", _ppl("10", backend="vllm 0.32.0", dtype="float32") + _ppl("20.1", backend="vllm 0.32.0", dtype="bfloat16"))
    pairs, _ = parity(a, b)
    assert sorted((p.a, p.b, p.verdict) for p in pairs) == [(10.0, 10.0, "same"), (20.0, 20.1, "same")]


def test_a_file_of_two_dtypes_against_one_of_a_third_is_unpaired_not_merged(work):
    from ctxbench.report.parity import parity

    a = _write(work / "a.csv", _ppl("10", dtype="float32") + _ppl("20", dtype="bfloat16"))
    b = _write(work / "b.csv", _ppl("10", backend="vllm 0.32.0", dtype="float16"))
    assert sorted(p.verdict for p in parity(a, b)[0]) == ["unpaired"] * 3


@pytest.mark.parametrize(("value", "shown"), [("nan", "is nan"), ("", "is blank")], ids=["nan", "blank"])
def test_a_trial_that_is_not_a_number_fails_the_pair(work, monkeypatch, capsys, value, shown):
    code, out, err = _gate(work, monkeypatch, capsys, _passkey([1, 1]), _passkey([1, 1], backend="vllm 0.32.0", values={1: value}), "parity")
    assert code == 1 and "failed" in out and shown in out, out + err


# (id, extra argv, B's perplexity against A's 10, exit code, words in the output)
PARITY_OPTIONS = [
    ("default tolerance 1%", [], "10.05", 0, "1/1 paired"),
    ("rtol 0 applies", ["--rtol", "0"], "10.05", 1, "differs"),
    ("rtol 0.1 applies", ["--rtol", "0.1"], "10.5", 0, "tolerance 10%"),
    ("rtol 0 exact is same", ["--rtol", "0"], "10", 0, "1/1 paired"),
    ("strict with nothing unpaired", ["--strict"], "10", 0, "1/1 paired"),
]


@pytest.mark.parametrize(("argv", "b_value", "code", "words"), [c[1:] for c in PARITY_OPTIONS], ids=[c[0] for c in PARITY_OPTIONS])
def test_every_option_applies_in_parity_mode(work, monkeypatch, capsys, argv, b_value, code, words):
    got, out, err = _gate(work, monkeypatch, capsys, _ppl("10"), _ppl(b_value, backend="vllm 0.32.0"), "parity", *argv)
    assert got == code and words in out, out + err


def test_strict_fails_an_unpaired_cell_in_parity_mode(work, monkeypatch, capsys):
    a = _ppl("10") + _ppl("12", length="8192")
    code, _, err = _gate(work, monkeypatch, capsys, a, _ppl("10", backend="vllm 0.32.0"), "parity")
    assert code == 0, err
    code, _, err = _gate(work, monkeypatch, capsys, a, _ppl("10", backend="vllm 0.32.0"), "parity", "--strict")
    assert code == 1 and "unpaired: ppl yarn x2 at length 8192" in err, err


def test_strict_fails_any_discordant_trial_in_parity_mode(work, monkeypatch, capsys):
    a, b = _passkey([1, 1, 1, 1]), _passkey([1, 1, 1, 0], backend="vllm 0.32.0")
    assert _gate(work, monkeypatch, capsys, a, b, "parity")[0] == 0
    code, out, _ = _gate(work, monkeypatch, capsys, a, b, "parity", "--strict")
    assert code == 1 and "differs" in out


# (id, argv, words, the fix's argv) — refused with exit 2 before either file is read
REFUSED_OPTIONS = [
    ("threshold in parity", ["--across-backends", "--threshold", "0.5"], ["--threshold does not apply with --across-backends"], ["--across-backends"]),
    ("across-dtypes in parity", ["--across-backends", "--across-dtypes"], ["--across-dtypes does not apply"], ["--across-backends"]),
    ("rtol negative in parity", ["--across-backends", "--rtol", "-1"], ["--rtol -1.0 must be a finite number >= 0"], ["--across-backends", "--rtol", "0.02"]),
    ("rtol nan in parity", ["--across-backends", "--rtol", "nan"], ["--rtol nan"], ["--across-backends", "--rtol", "0.02"]),
    ("rtol inf in parity", ["--across-backends", "--rtol", "inf"], ["--rtol inf"], ["--across-backends", "--rtol", "0.02"]),
    ("rtol negative in compare", ["--rtol", "-1"], ["--rtol -1.0"], ["--rtol", "0.02"]),
    ("rtol nan in compare", ["--rtol", "nan"], ["--rtol nan"], ["--rtol", "0.02"]),
    ("threshold nan in parity", ["--across-backends", "--threshold", "nan"], ["--threshold"], ["--across-backends"]),
]


@pytest.mark.parametrize(("argv", "words", "fixed"), [c[1:] for c in REFUSED_OPTIONS], ids=[c[0] for c in REFUSED_OPTIONS])
def test_an_option_that_does_not_apply_is_refused_and_the_fix_runs(work, monkeypatch, capsys, argv, words, fixed):
    a = _write(work / "a.csv", _ppl("10"))
    b = _write(work / "b.csv", _ppl("10", backend="vllm 0.32.0")) if "--across-backends" in argv else a
    code, _, err = cli_main(["compare", a, b, *argv], monkeypatch, capsys)
    one_error_line(code, err, words)
    code, _, err = cli_main(["compare", a, b, *fixed], monkeypatch, capsys)
    assert code == 0, err


# ---- results files that are not files -----------------------------------------------------------


def _fifo(work):
    os.mkfifo(work / "x.csv")


def _dev_zero(work):
    (work / "x.csv").symlink_to("/dev/zero")


def _folder(work):
    (work / "x.csv").mkdir()


def _dangling(work):
    (work / "x.csv").symlink_to(work / "nowhere.csv")


def _loop(work):
    (work / "x.csv").symlink_to(work / "y.csv")
    (work / "y.csv").symlink_to(work / "x.csv")


def _sparse(work):
    with open(work / "x.csv", "wb") as f:
        f.truncate(8 << 30)  # 8 GB, no block written


KINDS = {"a FIFO": (_fifo, "a FIFO"), "/dev/zero": (_dev_zero, "a character device"), "a folder": (_folder, "directory"),
         "a dangling link": (_dangling, "a dangling symlink"), "a link loop": (_loop, "a symlink loop"),
         "an 8 GB sparse file": (_sparse, "above the ceiling")}  # fmt: skip
READERS = {"report": ["report", "x.csv"], "rank": ["rank", "x.csv", "--len", "4k"], "compare": ["compare", "x.csv", "good.csv"],
           "parity": ["compare", "--across-backends", "good.csv", "x.csv"]}  # fmt: skip


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_results_path_that_is_not_a_regular_file_is_one_line_at_once(work, monkeypatch, capsys, kind, reader):
    make, words = KINDS[kind]
    make(work)
    _write(work / "good.csv", _ppl("10"))
    t0 = time.perf_counter()
    code, _, err = cli_main(READERS[reader], monkeypatch, capsys)
    assert time.perf_counter() - t0 < 10  # never a hang, never 8 GB read
    one_error_line(code, err, [words])


# ---- validation before the plan: the dry run and the run refuse alike ---------------------------

# (id, argv, words of the line, the argv of the fix the line names)
BEFORE_THE_PLAN = [
    *[(f"dtype {d!r}", ["--dtype", d], ["dtype", repr(d)], ["--dtype", fix]) for d, fix in (
        ("fp32", "float32"), ("bf16", "bfloat16"), ("FLOAT32", "float32"), ("half", "float16"), ("torch.float32", "float32"),
        ("float32 ", "float32"), ("fp16", "float16"), ("torch.bfloat16", "bfloat16"), ("Float16", "float16"))],
    *[(f"dtype {d!r} unsupported", ["--dtype", d], [repr(d), "does not run models in"], ["--dtype", "float32"])
      for d in ("float64", "int8", "double", "float8")],
    ("dtype two at once", ["--dtype", "auto,float32"], ["names more than one dtype"], ["--dtype", "float32"]),
    ("tensor parallel 2 on hf", ["--tensor-parallel", "2"], ["--tensor-parallel 2 needs --backend vllm"], []),
    ("tensor parallel 0", ["--tensor-parallel", "0"], ["--tensor-parallel 0 is not a whole number from 1"], []),
    ("tensor parallel -5", ["--tensor-parallel", "-5"], ["--tensor-parallel -5"], []),
    ("tensor parallel 1e9 as a number", ["--tensor-parallel", "1000000000"], ["--tensor-parallel 1000000000"], []),
    ("seed 2^64", ["--seed", BIG], ["--seed 18446744073709551616", "2^63 - 1"], ["--seed", "0"]),
    ("seed 2^63", ["--seed", str(2**63)], ["--seed 9223372036854775808"], ["--seed", "0"]),
    ("seed -1", ["--seed", "-1"], ["--seed -1"], ["--seed", "0"]),
    ("device unknown", ["--device", "gpu"], ["unknown device"], ["--device", "cpu"]),
    ("device cuda:x", ["--device", "cuda:x"], ["unknown device"], ["--device", "cpu"]),
    ("grid past the ceiling", ["--trials", "10000", "--depths", "1000", "--len", "64,96"], ["the grid is", "above the most one run takes"],
     ["--trials", "10000", "--depths", "5", "--len", "64,96"]),
]


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.fixture
def model_work(work, saved_model):
    return saved_model


@pytest.mark.parametrize(("argv", "words", "fixed"), [c[1:] for c in BEFORE_THE_PLAN], ids=[c[0] for c in BEFORE_THE_PLAN])
def test_the_dry_run_and_the_run_refuse_alike_and_the_fix_plans(work, model_work, monkeypatch, capsys, argv, words, fixed):
    base = ["passkey", "--model", str(model_work), "--len", "64", "--trials", "1", "--depths", "1"]
    code, out, err = cli_main([*base, *argv, "--dry-run"], monkeypatch, capsys)
    dry = one_error_line(code, err, words)
    assert "plan " not in out
    code, out, err = cli_main([*base, *argv, "--out", "run.csv"], monkeypatch, capsys)
    assert one_error_line(code, err, words) == dry  # the same line, exit 2, before the model loads
    assert not (work / "run.csv").exists()
    code, _, err = cli_main([*base, *fixed, "--dry-run"], monkeypatch, capsys)
    assert code == 0, err


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_a_gpu_asked_for_on_a_machine_without_one_is_refused_by_the_dry_run_too(work, model_work, monkeypatch, capsys, device):
    base = ["passkey", "--model", str(model_work), "--len", "64", "--trials", "1", "--device", device]
    lines = []
    for extra in (["--dry-run"], ["--out", "run.csv"]):
        code, _, err = cli_main([*base, *extra], monkeypatch, capsys)
        lines.append(one_error_line(code, err, [f"--device {device} asks for a CUDA GPU and none is visible"]))
    assert lines[0] == lines[1]
    code, _, err = cli_main([*base[:-2], "--device", "cpu", "--dry-run"], monkeypatch, capsys)
    assert code == 0, err


@pytest.mark.parametrize(("key", "value", "words"), [("dtype", '"fp32"', "dtype"), ("seed", str(2**63), "seed"), ("tensor_parallel", "2", "tensor")])
def test_the_api_and_a_suite_refuse_what_the_cli_refuses(work, key, value, words):
    """One parser per option: the Python API runs through the same checks (a config is checked before the plan)."""
    import ctxbench
    from ctxbench.runner.suite import load_suite

    (work / "s.toml").write_text(f"{key} = {value}\n[passkey]\ntrials = 1\n")
    with pytest.raises(UserError) as info:
        spec = load_suite("s.toml")
        ctxbench.sweep("s.toml", out=str(work / "o.csv"), show=False) if spec else None
    assert words in str(info.value)
    kw = {"dtype": "fp32"} if key == "dtype" else {}
    if kw:
        with pytest.raises(UserError, match="did you mean --dtype float32"):
            ctxbench.run(task="passkey", dtype="fp32", length="64", trials=1)


def test_a_35_million_trial_grid_is_refused_in_under_a_second(work, monkeypatch, capsys):
    """4 methods x 59 factors x 200 lengths x 1000 trials: refused from the counts, never listed."""
    factors = ",".join(str(1 + i / 4) for i in range(59))
    lengths = ",".join(str(1024 + 8 * i) for i in range(200))
    argv = ["passkey", "--method", "none,yarn,ntk,linear", "--factor", factors, "--len", lengths, "--trials", "1000", "--depths", "1",
            "--dry-run"]  # fmt: skip
    cli_main(["passkey", "--dry-run", "--len", "64"], monkeypatch, capsys)  # imports warmed
    t0 = time.perf_counter()
    code, _, err = cli_main(argv, monkeypatch, capsys)
    assert time.perf_counter() - t0 < 1.0
    one_error_line(code, err, ["35,600,000 trials and documents", "10,000,000"])


def test_the_grid_size_is_o1_in_the_trial_count():
    from ctxbench.runner.grid import Job
    from ctxbench.runner.settings import build_settings, grid_size
    from ctxbench.tasks import registry

    task = registry()["passkey"]
    small, huge = (Job(task, build_settings(task, "none,yarn", "2,4", "2k,4k", {"trials": n})) for n in (4, 10_000))
    assert grid_size(small)[0] == grid_size(huge)[0] == 3 * 2 * 5
    assert grid_size(huge)[1] == 30 * 10_000


# ---- suites: a path is a path ---------------------------------------------------------------------


SUITE_PATHS = [
    ("dangling link with a suffix", lambda w: (w / "nightly.toml").symlink_to(w / "gone.toml"), "nightly.toml", "is a dangling symlink"),
    ("dangling link, bare name", lambda w: (w / "nightly").symlink_to(w / "gone.toml"), "nightly", "is a dangling symlink"),
    ("link loop", lambda w: ((w / "quick.toml").symlink_to(w / "q2.toml"), (w / "q2.toml").symlink_to(w / "quick.toml")), "quick.toml",
     "is a symlink loop"),
    ("folder with a suffix", lambda w: (w / "quick.toml").mkdir(), "quick.toml", "is a folder"),
    ("folder, bare name", lambda w: (w / "quick").mkdir(), "quick", "is a folder"),
    ("FIFO nobody writes", lambda w: os.mkfifo(w / "quick.toml"), "quick.toml", "a FIFO (named pipe) with nothing written to it"),
    ("FIFO, bare name", lambda w: os.mkfifo(w / "nightly"), "nightly", "a FIFO (named pipe) with nothing written to it"),
    ("dot slash name", lambda w: None, "./nightly", "suite file './nightly' not found"),
    ("trailing slash", lambda w: None, "nightly/", "suite file 'nightly/' not found"),
    ("missing with suffix", lambda w: None, "nightly.toml", "suite file 'nightly.toml' not found"),
    ("dev null", lambda w: None, "/dev/null", "a character device with nothing written to it"),
    ("unknown bare name", lambda w: None, "nighty", "unknown suite 'nighty'"),
]


@pytest.mark.parametrize(("make", "typed", "words"), [c[1:] for c in SUITE_PATHS], ids=[c[0] for c in SUITE_PATHS])
def test_a_suite_path_is_the_file_meant_never_a_built_in(work, monkeypatch, capsys, make, typed, words):
    make(work)
    t0 = time.perf_counter()
    code, out, err = cli_main(["sweep", typed, "--dry-run"], monkeypatch, capsys)
    assert time.perf_counter() - t0 < 10
    line = one_error_line(code, err, [words])
    assert "plan " not in out
    if "not found" in words or "unknown" in words:
        assert "nightly" in line  # the built-in of that name is named in the fix


def test_a_bare_name_with_nothing_there_is_the_built_in(work, monkeypatch, capsys):
    code, out, err = cli_main(["sweep", "quick", "--dry-run"], monkeypatch, capsys)
    assert code == 0 and "quick: " in out, err


SUITE = "[passkey]\ntrials = 1\nlengths = [64]\ndepths = 1\n"


@pytest.mark.parametrize("how", ["stdin redirect", "stdin pipe", "process substitution"])
def test_a_suite_through_a_pipe_is_read(work, saved_model, how):
    (work / "s.toml").write_text(f'model = "{saved_model}"\n' + SUITE)
    cmd = {"stdin redirect": "ctxbench sweep /dev/stdin --dry-run < s.toml",
           "stdin pipe": "cat s.toml | ctxbench sweep /dev/stdin --dry-run",
           "process substitution": "ctxbench sweep <(cat s.toml) --dry-run"}[how]  # fmt: skip
    cmd = cmd.replace("ctxbench", f"{sys.executable} -m ctxbench")
    done = subprocess.run(["bash", "-c", cmd], cwd=work, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CTXBENCH_CACHE": str(work / ".cache"), "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "plan passkey" in done.stdout


def test_a_fifo_with_a_writer_is_read_to_its_end(work, saved_model):
    from ctxbench.runner.suite import load_suite

    os.mkfifo(work / "s.toml")

    def write():
        with open(work / "s.toml", "w") as f:
            f.write(f'model = "{saved_model}"\n' + SUITE)

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.2)  # the writer is waiting for a reader
    suite = load_suite("s.toml")
    writer.join(5)
    assert [job.task.name for job in suite.jobs] == ["passkey"]


# ---- caches that are files ------------------------------------------------------------------------


def _caches():
    from ctxbench.model.autodtype import PROBES
    from ctxbench.model.files import DIGESTS, GEOMETRY
    from ctxbench.model.size import SIZES
    from ctxbench.runner.costmodel import RATES

    return {"rates.json": RATES, "geometry.json": GEOMETRY, "sizes.json": SIZES, "digests.json": DIGESTS, "dtype-probes.json": PROBES}


def _outside(path: Path) -> None:
    other = path.parent.parent / "elsewhere.json"
    other.write_text('{"schema": "x", "version": 1, "entries": {}}')
    path.symlink_to(other)


CACHE_POISONS = {
    "/dev/zero": (lambda p: p.symlink_to("/dev/zero"), "outside"),
    "a FIFO": (lambda p: os.mkfifo(p), "a FIFO (named pipe) where a file should be"),
    "an 8 GB sparse file": (lambda p: open(p, "wb").truncate(8 << 30), "above the ceiling"),
    "a link out of the cache": (_outside, "outside"),
    "a folder": (lambda p: p.mkdir(), "a folder where a file should be"),
}


@pytest.mark.parametrize("poison", CACHE_POISONS)
@pytest.mark.parametrize("name", ["rates.json", "geometry.json", "sizes.json", "digests.json", "dtype-probes.json"])
def test_a_cache_that_is_not_a_regular_file_is_dropped_with_one_note(work, capsys, name, poison):
    cache = _caches()[name]
    path = cache.path
    path.parent.mkdir(parents=True, exist_ok=True)
    make, words = CACHE_POISONS[poison]
    make(path)
    t0 = time.perf_counter()
    assert cache.entries() == {}
    assert time.perf_counter() - t0 < 5
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"note: ignored a bad cache entry {path}") and words in err[0], err
    assert not os.path.lexists(path) or path.is_dir()  # dropped (a folder is moved aside when rewritten)
    assert cache.entries() == {}  # and the next read is silent
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name", ["rates.json", "geometry.json", "sizes.json", "digests.json", "dtype-probes.json"])
def test_a_digest_mismatch_is_named_as_one(work, capsys, name):
    from ctxbench.model.cache import digest

    cache = _caches()[name]
    cache.path.parent.mkdir(parents=True, exist_ok=True)
    table = {"k": {"value": {"x": 1}, "sha256": digest(b"something else")}}
    cache.path.write_text(json.dumps({**cache.schema.stamp(), "entries": table}))
    assert cache.entries() == {}
    err = capsys.readouterr().err
    assert "digest mismatch" in err and "NaN" not in err, err
    assert json.loads(cache.path.read_text())["entries"] == {}  # the damaged entry replaced


@pytest.mark.parametrize("rate", [1e-300, 1.0, 1e300, 1e19])
def test_an_implausible_sealed_rate_is_dropped(work, capsys, rate):
    from ctxbench.model.cache import _canonical, digest
    from ctxbench.runner.costmodel import RATES

    value = {"linear": rate, "attention": 1e11, "decode_linear": 1e10, "decode_attention": 1e10}
    RATES.path.parent.mkdir(parents=True, exist_ok=True)
    RATES.path.write_text(json.dumps({**RATES.schema.stamp(), "entries": {"k": {"value": value, "sha256": digest(_canonical(value))}}}))
    assert RATES.entries() == {}
    assert "implausible" in capsys.readouterr().err


@pytest.mark.parametrize("poison", ["/dev/zero", "a FIFO", "an 8 GB sparse file"])
def test_a_token_cache_that_is_not_a_regular_file_is_dropped_and_the_run_goes_on(work, capsys, poison):
    from helpers import byte_tokenizer

    from ctxbench.tasks.corpus import Tokenized, _corpus

    corpus = _corpus("three", ["a.txt", "b.txt"], ["the cat sat " * 10, "lorem ipsum " * 10])
    tokens = Tokenized(corpus, byte_tokenizer())
    path = tokens.cache_path
    path.parent.mkdir(parents=True, exist_ok=True)
    CACHE_POISONS[poison][0](path)
    t0 = time.perf_counter()
    again = Tokenized(corpus, byte_tokenizer())
    assert time.perf_counter() - t0 < 5 and again.ids == {}
    assert len(again[0]) > 0  # tokenised afresh: the run goes on
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a token cache file" in err[0], err


@pytest.mark.parametrize("poison", ["/dev/zero", "a FIFO", "an 8 GB sparse file"])
def test_a_model_folders_manifest_that_is_not_a_file_is_a_bad_entry(work, poison):
    from ctxbench.model.cache import MANIFEST, BadEntry, Schema, verify_dir

    folder = work / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    CACHE_POISONS[poison][0](folder / MANIFEST)
    with pytest.raises(BadEntry, match="outside|FIFO|above the ceiling"):
        verify_dir(folder, Schema("model", 1))


# ---- engine failures ------------------------------------------------------------------------------


def _engine_lm(make_engine, device="cpu", tensor_parallel=1):
    from ctxbench.backends.vllm import VllmEngine
    from ctxbench.model.geometry import RopeGeometry

    geom = RopeGeometry(head_dim=64, rotary_dim=64, base=10000.0, trained_len=2048)
    return VllmEngine(tokenizer=None, geometry=geom, name="m", digest="d", device=device, dtype="bfloat16", checkpoint="ckpt", stop=(),
                     engine_version="fake", tensor_parallel=tensor_parallel, make_engine=make_engine)  # fmt: skip


def _failing(message: str, kind=RuntimeError):
    def make(**kw):
        raise kind(message)

    return make


ENGINE_FAILURES = [
    ("KV cache on a CPU", "cpu", "[rank0]: ValueError: No available memory for the cache blocks. Try increasing `VLLM_CPU_KVCACHE_SPACE`",
     ["KV cache does not fit", "cache blocks"], "CTXBENCH_VLLM_KV_GIB"),
    ("KV cache too small for the length", "cpu",
     "To serve at least one request with the models's max seq len (16385), (3.0 GiB KV cache is needed, which is larger than the "
     "available KV cache memory (1.0 GiB)", ["KV cache does not fit"], "CTXBENCH_VLLM_KV_GIB"),
    ("KV cache on a GPU", "cuda", "ValueError: No available memory for the cache blocks.", ["KV cache does not fit"], "free GPU memory"),
    ("out of memory", "cuda", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", ["out of memory"], "shorter lengths"),
    ("heads against tensor parallel", "cuda", "ValueError: Total number of attention heads (9) must be divisible by tensor parallel size (2).",
     ["--tensor-parallel 2 does not divide", "attention heads (9)"], "divides the model's number of heads"),
    ("dtype the device lacks", "cuda", "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0.",
     ["does not run bfloat16"], "--dtype float32"),
]


@pytest.mark.parametrize(("device", "message", "words", "fix"), [c[1:] for c in ENGINE_FAILURES], ids=[c[0] for c in ENGINE_FAILURES])
def test_an_engine_failure_is_one_ctxbench_line(device, message, words, fix):
    from ctxbench.backends.vllm import start_engine
    from ctxbench.methods import resolve

    lm = _engine_lm(_failing(message), device=device, tensor_parallel=2 if "tensor" in message else 1)
    with pytest.raises(UserError) as info:
        start_engine(lm, resolve("yarn"), 2.0, 4096)
    line = info.value.line()
    assert "\n" not in line and "[rank0]" not in line and "Traceback" not in line
    for word in words:
        assert word in info.value.what, (word, info.value.what)
    assert fix in info.value.fix


def test_an_engine_failure_ctxbench_does_not_know_is_kept_as_it_is():
    from ctxbench.backends.vllm import start_engine
    from ctxbench.methods import resolve

    with pytest.raises(KeyError):
        start_engine(_engine_lm(_failing("something new", KeyError)), resolve("yarn"), 2.0, 4096)


def test_tensor_parallel_against_the_heads_is_refused_from_the_config_before_the_engine(tmp_path):
    from ctxbench.backends.vllm import check_heads

    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 9}))
    with pytest.raises(UserError) as info:
        check_heads(2, str(tmp_path), False)
    assert "9 attention heads do not divide among 2 GPUs" in info.value.what and "--tensor-parallel 1" in info.value.fix
    check_heads(3, str(tmp_path), False)


# ---- messages that name the input at fault, shortened, with a fix that passes --------------------

GEOMETRY = ["--base", "1e4", "--trained-len", "4k"]
MESSAGES = [
    ("factor of 400 digits", ["freqs", "--method", "yarn", "--head-dim", "64", *GEOMETRY, "--factor", "9" * 400], ["<= 16,777,216 (2^24)", "…"],
     ["freqs", "--method", "yarn", "--head-dim", "64", *GEOMETRY, "--factor", "8"]),
    ("length of 5000 digits", ["ppl", "--len", "9" * 5000, "--dry-run"], ["above the longest ctxbench takes", "…"], ["ppl", "--len", "128k", "--dry-run"]),
    ("max-trials of 5000 digits", ["passkey", "--trials", "auto", "--max-trials", "9" * 5000, "--dry-run"], ["--max-trials", "above the most", "…"],
     ["passkey", "--trials", "auto", "--max-trials", "10000", "--dry-run"]),
    ("trials of 30 digits", ["passkey", "--trials", "9" * 30, "--dry-run"], ["--trials", "above the most"], ["passkey", "--trials", "10000", "--dry-run"]),
    ("base nan", ["freqs", "--method", "yarn", "--head-dim", "64", "--base", "nan", "--trained-len", "4k"], ["rope base nan is not a finite number"],
     ["freqs", "--method", "yarn", "--head-dim", "64", "--base", "10000", "--trained-len", "4k"]),
    ("base inf", ["freqs", "--method", "yarn", "--head-dim", "64", "--base", "inf", "--trained-len", "4k"], ["rope base inf is not a finite number"],
     ["freqs", "--method", "yarn", "--head-dim", "64", "--base", "10000", "--trained-len", "4k"]),
    ("head dim 2e9", ["freqs", "--method", "yarn", "--head-dim", "2000000000", *GEOMETRY], ["rotary dim 2000000000", "8,192"],
     ["freqs", "--method", "yarn", "--head-dim", "128", *GEOMETRY]),
    ("head dim 1e30", ["freqs", "--method", "yarn", "--head-dim", "1" + "0" * 30, *GEOMETRY], ["rotary dim", "8,192"],
     ["freqs", "--method", "yarn", "--head-dim", "128", *GEOMETRY]),
    ("export head dim 2e9", ["export", "--method", "yarn", "--to", "json", "--head-dim", "2000000000", *GEOMETRY], ["rotary dim 2000000000"],
     ["export", "--method", "yarn", "--to", "json", "--head-dim", "128", *GEOMETRY]),
    ("factor list with a huge one", ["ppl", "--factor", "2," + "1" * 100, "--dry-run"], ["2^24", "…"], ["ppl", "--factor", "2", "--dry-run"]),
]


@pytest.mark.parametrize(("argv", "words", "fixed"), [c[1:] for c in MESSAGES], ids=[c[0] for c in MESSAGES])
def test_a_message_names_the_input_shortened_and_its_fix_runs(work, monkeypatch, capsys, argv, words, fixed):
    t0 = time.perf_counter()
    code, _, err = cli_main(argv, monkeypatch, capsys)
    line = one_error_line(code, err, words)
    assert len(line) < 400 and time.perf_counter() - t0 < 10, line
    assert "rope base and trained length" not in line
    code, _, err = cli_main(fixed, monkeypatch, capsys)
    assert code == 0, err


@pytest.mark.parametrize("most", [10, 60, 200])
def test_short_keeps_a_line_short_and_says_how_long_the_input_was(most):
    from ctxbench.parsing import short

    text = "x" * 5000
    assert len(short(text, most)) <= most + 30 and "(5000 characters)" in short(text, most)
    assert short("abc", most) == "abc"


def test_reading_a_file_never_blocks_on_a_fifo_nobody_writes(tmp_path):
    from ctxbench.parsing import NotAFile, read_bounded

    os.mkfifo(tmp_path / "f")
    t0 = time.perf_counter()
    assert read_bounded(tmp_path / "f", 100, streams=True) == b""  # no writer: empty at once
    with pytest.raises(NotAFile, match="FIFO"):
        read_bounded(tmp_path / "f", 100)
    assert time.perf_counter() - t0 < 2


@pytest.mark.parametrize(("make", "words"), [(lambda w: os.mkfifo(w / "o.csv"), "a FIFO"), (lambda w: (w / "o.csv").symlink_to("/dev/null"),
                                             "a character device"), (lambda w: (w / "o.csv").symlink_to("/dev/zero"), "a character device")],
                         ids=["FIFO", "/dev/null", "/dev/zero"])  # fmt: skip
def test_an_out_that_is_not_a_regular_file_is_refused_by_the_dry_run_and_the_run(work, model_work, monkeypatch, capsys, make, words):
    make(work)
    base = ["passkey", "--model", str(model_work), "--len", "64", "--trials", "1", "--out", "o.csv"]
    lines = []
    for extra in (["--dry-run"], []):
        t0 = time.perf_counter()
        code, _, err = cli_main([*base, *extra], monkeypatch, capsys)
        assert time.perf_counter() - t0 < 30
        lines.append(one_error_line(code, err, [words, "not a results file"]))
    assert lines[0] == lines[1]
