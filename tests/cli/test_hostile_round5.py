"""Hostile inputs, round 5 (issue 55), one table per mechanism (the model's identity and its config
values are in ``tests/model/test_model_identity.py`` and ``tests/model/test_config_values.py``):

- free text reaching an output: a label a spreadsheet would run as a formula, or markdown and HTML
  would render, is written as text in every CSV ctxbench writes and keeps every markdown table's shape;
- damaged values: ``report`` and ``rank`` name the file and the row of a value that is no number,
  where they showed a gap (``—``) and exited 0;
- write errors: a full disk (a tmpfs of 64 KiB) or a file-size limit (``ulimit -f``) is one line,
  exit 2, with no temp file and no truncated PNG left, and the rows written before kept;
- ``tune --out``: the folder is the search's own, checked by the dry run too; ``--no-resume``
  starts afresh; a resume appends nothing; two searches never share a folder at once; the command
  ``summary.json`` records reproduces the search;
- method specs: the label a report prints and the winner ``tune`` prints are one setting to
  ``export``, and ``tune`` says what to type instead;
- data files: a JSON-lines error names its line, a damaged Parquet file is one line, a suite value
  of the wrong type is named, not looked up on the hub.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import cli_main, one_error_line, save_with_tokenizer, tiny_llama

from ctxbench.results.store import COLUMNS, read_records, write_records
from ctxbench.textsafe import FORMULA_STARTS


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / ".cache"))
    return tmp_path


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    return save_with_tokenizer(tiny_llama(), tmp_path_factory.mktemp("round5") / "model")


def _docs(folder: Path, n: int = 3, words: int = 60) -> Path:
    """``n`` documents of ``words`` words each (the byte tokenizer: about 6 tokens a word)."""
    folder.mkdir(exist_ok=True)
    vocab = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    for i in range(n):
        (folder / f"d{i}.txt").write_text(" ".join(vocab[(i * 7 + j * 3) % len(vocab)] for j in range(words)))
    return folder


# ---- free text reaching an output -------------------------------------------------------------------


def _row(**kw) -> dict:
    base = {c: "" for c in COLUMNS}
    base.update(run_id="r", time="t", model="m", model_digest="md", dataset="d", data_digest="dd", method="yarn", label="yarn", factor="2",
                length="4096", seed="0", method_params="{}", options='{"chat": false, "digits": 5}', status="ok", device="cpu",
                ctxbench_version="0", torch_version="0", transformers_version="0", extra="{}", backend="hf", dtype="float32",
                task="passkey", depth="0.5")  # fmt: skip
    base.update({k: str(v) for k, v in kw.items()})
    return base


def _passkey_cell(label: str, outcomes, answer: str = "12345", method: str = "yarn") -> list[dict]:
    rows = [_row(label=label, method=method, trial=t, metric="correct", value=v, answer=answer) for t, v in enumerate(outcomes)]
    rows.append(_row(label=label, method=method, trial="all", metric="accuracy", value=sum(outcomes) / len(outcomes),
                     extra=json.dumps({"trials": len(outcomes)})))  # fmt: skip
    return rows


LABELS = [
    '=HYPERLINK("http://evil.example","click")',
    "=1+1",
    "+1+1",
    "-2+3",
    "@SUM(A1:A2)",
    "\t=1",
    "\r=1",
    "'already quoted",
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "a|b|c",
    "two\nlines",
    "&lt;b&gt;entity",
    "<!-- comment -->",
]


def _is_formula(cell: str) -> bool:
    if not cell.startswith(FORMULA_STARTS):
        return False
    try:
        float(cell)
    except ValueError:
        return True
    return False


def _hostile_file(work: Path, label: str) -> Path:
    path = work / "hostile.csv"
    write_records(path, _passkey_cell(label, [1, 0, 1, 1], answer="=cmd|' /C calc'!A0") + _passkey_cell("none", [0, 0, 1, 0], method="none"))
    return path


@pytest.mark.parametrize("label", LABELS, ids=range(len(LABELS)))
def test_a_results_file_holds_no_formula_and_reads_back_the_label_exactly(work, label):
    path = _hostile_file(work, label)
    with path.open(newline="") as f:  # as a spreadsheet reads it: a \r inside a quoted cell is the cell's
        cells = [cell for row in csv.reader(f) for cell in row]
    assert not [c for c in cells if _is_formula(c)]
    labels = {r["label"] for r in read_records(path)}
    assert labels == {label.replace("\r", "\n"), "none"}  # a carriage return is written as a line feed: csv quotes only that
    assert {r["answer"] for r in read_records(path) if r["label"] != "none" and r["trial"] not in ("", "all")} == {"=cmd|' /C calc'!A0"}


@pytest.mark.parametrize("label", LABELS, ids=range(len(LABELS)))
def test_report_csv_holds_no_formula_from_a_label(work, monkeypatch, capsys, label):
    path = _hostile_file(work, label)
    code, out, err = cli_main(["report", str(path), "--format", "csv"], monkeypatch, capsys)
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert not [c for row in rows for c in row if _is_formula(c)]
    assert len({len(r) for r in rows}) == 1  # every row as wide as the header


def _tables_keep_their_shape(markdown: str) -> None:
    """Every line of a markdown table has as many unescaped ``|`` as its header; no raw HTML."""
    width = None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            width = None
            continue
        n = len(re.findall(r"(?<!\\)\|", line))
        width = width or n
        assert n == width, line
    assert not re.search(r"<(script|img|!--)", markdown), markdown


MARKDOWN = {
    "report": lambda p: ["report", str(p), "--format", "markdown"],
    "report --baseline": lambda p: ["report", str(p), "--format", "markdown", "--baseline", "none"],
    "rank": lambda p: ["rank", str(p), "--len", "4k", "--format", "markdown"],
    "compare": lambda p: ["compare", str(p), str(p), "--format", "markdown"],
}


@pytest.mark.parametrize("command", MARKDOWN)
@pytest.mark.parametrize("label", LABELS, ids=range(len(LABELS)))
def test_markdown_keeps_its_table_shape_and_passes_no_html_for_any_label(work, monkeypatch, capsys, label, command):
    path = _hostile_file(work, label)
    code, out, err = cli_main(MARKDOWN[command](path), monkeypatch, capsys)
    assert code == 0, err
    assert out.count("|") > 4
    _tables_keep_their_shape(out)


@pytest.mark.parametrize("label", ["two\nlines", "tab\there", "cr\rhere", "bell\x07"])
def test_a_suite_label_with_a_control_character_is_refused(model_work, monkeypatch, capsys, label):
    (model_work / "s.toml").write_text(f'model = "model"\n[[methods]]\nname = "none"\nlabel = {json.dumps(label)}\n[ppl]\nlengths = ["32"]\n')
    code, _, err = cli_main(["sweep", "s.toml", "--out", "o.csv", "--dry-run"], monkeypatch, capsys)
    one_error_line(code, err, ["holds a line break or another control character"])


def test_a_model_answer_with_a_carriage_return_keeps_the_file_readable(work):
    """A model may answer with ``\r``: csv quotes a field with ``\n`` but not one with ``\r`` alone,
    which readers take for a row's end; written as ``\n``, the file reads back whole."""
    path = work / "cr.csv"
    write_records(path, _passkey_cell("yarn", [1, 0], answer="line one\rline two\r\nthree"))
    assert {r["answer"] for r in read_records(path) if r["trial"] in ("0", "1")} == {"line one\nline two\nthree"}


# ---- damaged values ---------------------------------------------------------------------------------

DAMAGED = [("text", "abc", "'abc' is not a number"), ("empty", "", "is empty"), ("decimal comma", "0,5", "a decimal comma"),
           ("a space", " ", "is not a number"), ("two points", "1.2.3", "'1.2.3' is not a number")]  # fmt: skip
WHERE = {"a trial's score": lambda r: r["trial"] == "1", "the cell's accuracy": lambda r: r["trial"] == "all"}


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case,value,words", DAMAGED, ids=[d[0] for d in DAMAGED])
@pytest.mark.parametrize("command", ["report", "rank"])
def test_a_value_that_is_no_number_is_named_by_report_and_rank(work, monkeypatch, capsys, case, value, words, where, command):
    rows = _passkey_cell("yarn", [1, 0, 1, 1]) + _passkey_cell("none", [0, 0, 1, 0], method="none")
    for r in rows:
        if r["label"] == "yarn" and WHERE[where](r):
            r["value"] = value
    path = work / "damaged.csv"
    write_records(path, rows)
    argv = ["report", str(path)] if command == "report" else ["rank", str(path), "--len", "4k"]
    code, _, err = cli_main(argv, monkeypatch, capsys)
    one_error_line(code, err, ["damaged.csv", "yarn", words])


# ---- write errors -----------------------------------------------------------------------------------


def _ctxbench(argv, cwd, limit: int | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    def fsize():  # Python ignores SIGXFSZ: a write past the limit fails with EFBIG, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CTXBENCH_CACHE": str(cwd / ".cache")}
    return subprocess.run([sys.executable, "-m", "ctxbench", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=fsize if limit else None)  # fmt: skip


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if p.name.endswith(".tmp")]


def _one_write_error(proc, words: str) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines and lines[-1].startswith("error: cannot write") and words in lines[-1] and " — " in lines[-1], proc.stderr
    return lines[-1]


PPL = ["ppl", "--model", "model", "--dataset", "docs", "--len", "16,32", "--docs", "1", "--method", "none,linear", "--factor", "2", "--device", "cpu"]


@pytest.fixture
def model_work(work, saved_model):
    shutil.copytree(saved_model, work / "model")
    _docs(work / "docs")
    return work


@pytest.mark.integration
def test_a_file_size_limit_in_a_task_run_keeps_every_row_before_and_leaves_no_temp_file(model_work):
    first = _ctxbench([*PPL[:6], "16", *PPL[7:], "--out", "r.csv"], model_work)  # the 16-token cells, whole
    assert first.returncode == 0, first.stderr
    before = (model_work / "r.csv").read_bytes()
    proc = _ctxbench([*PPL, "--out", "r.csv"], model_work, limit=len(before) + 200)
    _one_write_error(proc, "File too large")
    assert (model_work / "r.csv").read_bytes() == before  # the rows written before, byte for byte
    assert not _leftovers(model_work)
    again = _ctxbench([*PPL, "--out", "r.csv"], model_work)  # the fix: the same command without the limit resumes
    assert again.returncode == 0 and "resumed" in again.stdout


@pytest.mark.integration
def test_a_file_size_limit_in_report_plot_leaves_no_truncated_png(model_work):
    assert _ctxbench([*PPL, "--out", "r.csv"], model_work).returncode == 0
    proc = _ctxbench(["report", "r.csv", "--plot", "plots"], model_work, limit=4000)
    _one_write_error(proc, "File too large")
    assert not list((model_work / "plots").glob("*.png")) and not _leftovers(model_work)


@pytest.mark.integration
def test_a_file_size_limit_in_tune_leaves_its_trials_valid_and_no_temp_file(model_work):
    argv = ["tune", "--method", "yarn", "--target", "128", "--budget", "2", "--model", "model", "--dataset", "docs", "--docs", "2",
            "--out", "t", "--device", "cpu"]  # fmt: skip
    proc = _ctxbench(argv, model_work, limit=1500)
    _one_write_error(proc, "File too large")
    assert not _leftovers(model_work)
    if (model_work / "t" / "trials.csv").exists():  # what was written before the limit is a whole, readable file
        text = (model_work / "t" / "trials.csv").read_text()
        assert text.endswith("\n") and list(csv.DictReader(io.StringIO(text)))


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs, filled: writes there fail with ENOSPC (needs root and mount; skipped without)."""
    where = tmp_path / "full"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        (where / "fill").write_bytes(b"\0" * 60 * 1024)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.mark.integration
@pytest.mark.parametrize("what", ["task run", "tune"])
def test_a_full_disk_is_one_line_and_leaves_no_temp_file(model_work, full_disk, what):
    if what == "task run":
        proc = _ctxbench([*PPL, "--out", str(full_disk / "r.csv")], model_work)
    else:
        proc = _ctxbench(["tune", "--method", "yarn", "--target", "128", "--budget", "2", "--model", "model", "--dataset", "docs",
                          "--docs", "2", "--out", str(full_disk / "t"), "--device", "cpu"], model_work)  # fmt: skip
    line = _one_write_error(proc, "No space left on device")
    assert "free some space" in line
    assert not _leftovers(full_disk)


@pytest.fixture
def read_only(tmp_path):
    """A read-only tmpfs (EROFS: refused to root too, unlike a chmod; needs root and mount)."""
    where = tmp_path / "ro"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(where)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("what", ["task run", "tune"])
def test_a_read_only_folder_is_refused_before_the_load(model_work, read_only, monkeypatch, capsys, what, dry):
    argv = [*PPL, "--out", str(read_only / "r.csv")] if what == "task run" else [*TUNE, "--out", str(read_only / "t")]
    code, _, err = cli_main([*argv, *(["--dry-run"] if dry else [])], monkeypatch, capsys)
    one_error_line(code, err, ["cannot write", "ro"])


# ---- tune --out: the search's own folder ------------------------------------------------------------

TUNE = ["tune", "--method", "yarn", "--target", "128", "--budget", "2", "--model", "model", "--dataset", "docs", "--docs", "2",
        "--device", "cpu"]  # fmt: skip


def _trials_of(search: dict) -> str:
    from ctxbench.tune.store import COLUMNS as TUNE_COLUMNS

    row = {c: "" for c in TUNE_COLUMNS} | {"kind": "instance", "split": "tune", "candidate": "c", "instance": "i", "units": "[]",
                                           "guard_units": "[]", "model_digest": "m", "data_digest": "d", "backend": "hf",
                                           "dtype": "float32", "trained_len": "64", "seed": "0", "method": "yarn",
                                           "objective": "nll", "target": "128"} | search  # fmt: skip
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=TUNE_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerow(row)
    return buf.getvalue()


def _make_out(kind: str, work: Path) -> str:
    if kind == "a file":
        (work / "t").write_text("x")
    elif kind == "under a file":
        (work / "f").write_text("x")
        return "f/t"
    elif kind == "a dangling link":
        (work / "t").symlink_to(work / "gone")
    elif kind == "another tool's trials.csv":
        (work / "t").mkdir()
        (work / "t" / "trials.csv").write_text("epoch,loss\n1,0.5\n")
    elif kind == "a trials.csv that is a folder":
        (work / "t" / "trials.csv").mkdir(parents=True)
    elif kind.startswith("another search"):
        (work / "t").mkdir()
        other = {"another search: method": {"method": "self-extend"}, "another search: objective": {"objective": "needle"},
                 "another search: target": {"target": "256"}, "another search: seed": {"seed": "7"},
                 "another search: trained length": {"trained_len": "32"}}[kind]  # fmt: skip
        (work / "t" / "trials.csv").write_text(_trials_of(other))
    return "t"


BAD_OUTS = [
    ("a file", "is a file, not a folder"),
    ("under a file", "a file, not a folder"),
    ("a dangling link", "which does not exist"),
    ("another tool's trials.csv", "is not a ctxbench tune trials file"),
    ("a trials.csv that is a folder", "is not a regular file"),
    ("another search: method", "holds another search: self-extend"),
    ("another search: objective", "holds another search: yarn (needle)"),
    ("another search: target", "at 256 tokens"),
    ("another search: seed", "seed 7"),
    ("another search: trained length", "holds another search"),
]


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("kind,words", BAD_OUTS, ids=[b[0] for b in BAD_OUTS])
def test_a_tune_out_that_is_not_the_searchs_own_is_refused_before_the_load(model_work, monkeypatch, capsys, kind, words, dry):
    out = _make_out(kind, model_work)
    before = sorted(str(p) for p in model_work.rglob("*") if ".cache" not in p.parts)
    code, _, err = cli_main([*TUNE, "--out", out, *(["--dry-run"] if dry else [])], monkeypatch, capsys)
    one_error_line(code, err, [words])
    assert sorted(str(p) for p in model_work.rglob("*") if ".cache" not in p.parts) == before  # nothing made, nothing changed


def test_no_resume_replaces_another_search_and_plans(model_work, monkeypatch, capsys):
    _make_out("another search: method", model_work)
    code, out, err = cli_main([*TUNE, "--out", "t", "--no-resume", "--dry-run"], monkeypatch, capsys)
    assert code == 0, err and "plan:" in out


def _tune(model_work, monkeypatch, capsys, *extra) -> tuple[int, str, str]:
    return cli_main([*TUNE, "--out", "t", *extra], monkeypatch, capsys)


def _rows(work: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO((work / "t" / "trials.csv").read_text())))


@pytest.fixture
def tuned(model_work, monkeypatch, capsys):
    code, out, err = _tune(model_work, monkeypatch, capsys)
    assert code == 0, err
    return model_work


def test_a_resumed_search_computes_nothing_and_appends_no_row(tuned, monkeypatch, capsys):
    before = _rows(tuned)
    code, out, err = _tune(tuned, monkeypatch, capsys)
    assert code == 0, err
    assert "0 evaluation(s) computed" in out
    after = _rows(tuned)
    key = lambda r: (r["split"], r["kind"], r["trial"], r["candidate"], r["instance"])  # noqa: E731
    assert sorted(map(key, after)) == sorted(map(key, before))


def test_no_resume_starts_afresh_and_keeps_no_old_evaluation(tuned, monkeypatch, capsys):
    before = _rows(tuned)
    code, out, err = _tune(tuned, monkeypatch, capsys, "--no-resume")
    assert code == 0, err
    assert "0 taken from the trials file" in out
    after = _rows(tuned)
    assert not {r["run_id"] for r in after} & {r["run_id"] for r in before}
    assert len(after) == len(before)


def test_a_second_search_on_the_same_out_stops_at_once(tuned, monkeypatch, capsys):
    from ctxbench.tune.store import OutLock

    with OutLock(tuned / "t"):  # a search running there now
        code, _, err = _tune(tuned, monkeypatch, capsys)
    one_error_line(code, err, ["another ctxbench tune is running on --out"])


def test_the_summarys_command_names_the_model_and_seed_and_reproduces_the_search(tuned, monkeypatch, capsys):
    import shlex

    command = json.loads((tuned / "t" / "summary.json").read_text())["command"]
    argv = shlex.split(command)
    assert argv[:2] == ["ctxbench", "tune"]
    assert argv[argv.index("--model") + 1] == "model" and argv[argv.index("--seed") + 1] == "0"
    code, out, err = cli_main([*argv[1:], "--device", "cpu"], monkeypatch, capsys)
    assert code == 0, err
    assert "0 evaluation(s) computed" in out  # the same search: every value from its trials


def test_no_partial_file_is_left_in_a_finished_search(tuned):
    assert not _leftovers(tuned)
    for name in ("trials.csv", "verdict.csv", "summary.json", "niah.toml", "trials.png"):
        assert (tuned / "t" / name).stat().st_size > 0


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_tune_refuses_documents_too_short_for_the_target_in_the_dry_run_as_in_the_run(model_work, monkeypatch, capsys, dry):
    _docs(model_work / "short", n=3, words=10)  # 60 bytes each: no document of 128 tokens
    code, _, err = cli_main([*TUNE[:10], "short", *TUNE[11:], "--out", "t", *(["--dry-run"] if dry else [])], monkeypatch, capsys)
    one_error_line(code, err, ["of at least 128 bytes", "tuning needs two"])


# ---- method specs -----------------------------------------------------------------------------------

GEOMETRY = ["--head-dim", "64", "--base", "10000", "--trained-len", "4k", "--factor", "2"]


@pytest.mark.parametrize("engine", ["transformers", "vllm", "llamacpp", "json"])
def test_a_label_as_reports_print_it_exports_as_the_same_setting_given_by_param(work, monkeypatch, capsys, engine):
    code, spec, err = cli_main(["export", "--method", "yarn(beta_fast=16,beta_slow=2)", "--to", engine, *GEOMETRY], monkeypatch, capsys)
    assert code == 0, err
    code, flags, err = cli_main(["export", "--method", "yarn", "--param", "beta_fast=16", "--param", "beta_slow=2", "--to", engine, *GEOMETRY],
                                monkeypatch, capsys)  # fmt: skip
    assert code == 0 and spec == flags


SPECS = [
    (["export", "--method", "yarn(beta_fast=16,32)", "--to", "vllm", *GEOMETRY], "beta_fast: [16, 32] is not a number"),
    (["export", "--method", "yarn(beta_fast=16)", "--param", "beta_fast=8", "--to", "vllm", *GEOMETRY], "given in --method yarn(...) and in --param"),
    (["export", "--method", "yarn(beta_fst=16)", "--to", "vllm", *GEOMETRY], "did you mean 'beta_fast'"),
    (["export", "--method", "yarn(beta_fast=16", "--to", "vllm", *GEOMETRY], "bad method spec"),
    (["tune", "--method", "yarn(beta_fast=16)", "--target", "128", "--budget", "2", "--out", "t", "--dry-run"],
     "tune searches yarn's parameters itself"),
]


@pytest.mark.parametrize("argv,words", SPECS, ids=range(len(SPECS)))
def test_a_method_spec_that_is_not_one_setting_is_one_line(work, monkeypatch, capsys, argv, words):
    code, _, err = cli_main(argv, monkeypatch, capsys)
    one_error_line(code, err, [words])


# ---- data files -------------------------------------------------------------------------------------


def _jsonl_with_a_bad_third_line(path: Path, good: dict) -> None:
    path.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n" + '{"oops": ' + "\n")


DATA_FILES = {
    "ppl --dataset": (lambda p: _jsonl_with_a_bad_third_line(p, {"text": "hello world " * 20}),
                      ["ppl", "--dataset", "data.jsonl", "--len", "32"]),
    "babilong --data": (lambda p: _jsonl_with_a_bad_third_line(p, {"input": "Mary went home.", "question": "Where is Mary?", "target": "home"}),
                        ["babilong", "--data", "data.jsonl", "--variant", "qa1", "--len", "1k"]),
    "longbench2 --data": (lambda p: _jsonl_with_a_bad_third_line(p, {"question": "q", "context": "c", "answer": "A", "choice_A": "a",
                                                                     "choice_B": "b", "choice_C": "c", "choice_D": "d"}),
                          ["longbench2", "--data", "data.jsonl", "--len", "1k"]),
}


@pytest.mark.parametrize("case", DATA_FILES)
def test_a_json_lines_error_names_its_own_line(model_work, monkeypatch, capsys, case):
    make, argv = DATA_FILES[case]
    make(model_work / "data.jsonl")
    code, _, err = cli_main([*argv, "--model", "model", "--device", "cpu", "--dry-run"], monkeypatch, capsys)
    one_error_line(code, err, ["line 3", "data.jsonl"])


@pytest.mark.parametrize("damage", ["cut short", "not parquet at all", "empty"])
def test_a_damaged_parquet_dataset_is_one_line(model_work, monkeypatch, capsys, damage):
    import pandas as pd

    pd.DataFrame({"text": ["hello world " * 30] * 3}).to_parquet(model_work / "docs.parquet")
    raw = (model_work / "docs.parquet").read_bytes()
    (model_work / "docs.parquet").write_bytes({"cut short": raw[: len(raw) // 2], "not parquet at all": b"PAR1 garbage" * 50, "empty": b""}[damage])
    code, _, err = cli_main(["ppl", "--model", "model", "--dataset", "docs.parquet", "--len", "32", "--dry-run"], monkeypatch, capsys)
    one_error_line(code, err, ["docs.parquet"])


SUITE_VALUES = [
    ("ppl", "dataset = 42", "dataset is a number (42), not text"),
    ("ppl", "dataset = true", "dataset is true/false (true), not text"),
    ("ppl", 'dataset = ["a", "b"]', "dataset is a list"),
    ("babilong", "data = 42", "data is a number (42), not text"),
    ("babilong", 'data = ["qa1.jsonl"]', "data is a list"),
    ("babilong", "haystack = 3.5", "haystack is a number (3.5), not text"),
    ("longbench2", "data = { path = \"x\" }", "data is a table"),
    ("niah", "haystack = false", "haystack is true/false (false), not text"),
]


@pytest.mark.parametrize("task,line,words", SUITE_VALUES, ids=[f"{t}: {v}" for t, v, _ in SUITE_VALUES])
def test_a_suite_value_of_the_wrong_type_is_named_not_looked_up(model_work, monkeypatch, capsys, task, line, words):
    (model_work / "s.toml").write_text(f'model = "model"\n[[methods]]\nname = "none"\n[{task}]\nlengths = ["1k"]\n{line}\n')
    code, _, err = cli_main(["sweep", "s.toml", "--out", "o.csv", "--dry-run"], monkeypatch, capsys)
    line = one_error_line(code, err, [words, "s.toml"])
    assert "network" not in line and "hub" not in line


# ---- advice that names what the user typed ----------------------------------------------------------

LB2_ITEM = {"domain": "d", "sub_domain": "s", "difficulty": "easy", "length": "short", "question": "q?", "choice_A": "a",
            "choice_B": "b", "choice_C": "c", "choice_D": "d", "answer": "A", "context": "Some context. "}  # fmt: skip
QA_MINI = str(Path(__file__).resolve().parents[1] / "data" / "qa" / "squad-dev-v2.0-mini.json")

ADVICE = [
    (["longbench2", "--data", "lb.jsonl", "--variant", "long"], ["holds no long items (it holds: short 2)", "drop long from --variant"]),
    (["longbench2", "--data", "lb.jsonl", "--variant", "short,long", "--trials", "1"], ["holds no long items", "e.g. --variant short"]),
    (["longbench2", "--data", "lb.jsonl", "--variant", "short", "--trials", "auto"],
     ["--trials auto (up to --max-trials 50) is more than the 2 short items", "pass --max-trials 2 or fewer"]),
    (["longbench2", "--data", "lb.jsonl", "--variant", "short", "--trials", "5"], ["--trials 5 is more than the 2 short items", "use --trials 2 or fewer"]),
    (["qa", "--qa-data", QA_MINI, "--variant", "qa_1", "--trials", "auto"],
     ["--trials auto (up to --max-trials 50) is more than the 35 answerable questions", "pass --max-trials 35 or fewer"]),
    (["babilong", "--data", "bl.jsonl", "--variant", "qa1", "--trials", "auto"],
     ["--trials auto (up to --max-trials 50) is more than the 2 rows", "pass --max-trials 2 or fewer"]),
]


@pytest.mark.parametrize("argv,words", ADVICE, ids=range(len(ADVICE)))
def test_a_refusal_names_the_option_as_typed_and_a_fix_that_runs(model_work, monkeypatch, capsys, argv, words):
    (model_work / "lb.jsonl").write_text("\n".join(json.dumps(LB2_ITEM | {"_id": str(i)}) for i in range(2)) + "\n")
    (model_work / "bl.jsonl").write_text("\n".join(json.dumps({"input": "Mary went home.", "question": "Where is Mary?", "target": "home"})
                                                   for _ in range(2)) + "\n")  # fmt: skip
    code, _, err = cli_main([*argv, "--model", "model", "--len", "1k", "--dry-run"], monkeypatch, capsys)
    line = one_error_line(code, err, words)
    assert "--trials 0" not in line and "--trials 50 " not in line
