"""Hostile inputs around results files and task options (issue 23): malformed CSVs given to
`report` and `compare`, hand-edited results files, bad values for every task option, odd
terminals and encodings. Each case: the exit code, at most one line on stderr (`error: ...` for
bad input, naming the problem), no traceback, and every file involved byte-identical afterwards.

Run in-process through ``ctxbench.cli.main`` (the CLI's one error path) for speed; no model loads.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import DATA, ROOT, cli_main, csv_text, read_csv

BASELINE = ROOT / "results" / "baseline-nightly.csv"
OLD = DATA / "results-0.1.0.csv"



def _header_and_rows() -> tuple[list[str], list[dict]]:
    return read_csv(BASELINE)



def _edit(column: str, value: str, where=lambda r: r["task"] == "ppl" and r["doc"] == "all") -> str:
    header, rows = _header_and_rows()
    hit = next(i for i, r in enumerate(rows) if where(r))
    rows[hit] = {**rows[hit], column: value}
    return csv_text(header, rows)


GOOD = BASELINE.read_text()
HEADER = GOOD.split("\n", 1)[0]

# name -> the file's content (str or bytes)
MALFORMED = {
    "empty": "",
    "only whitespace": "\n\n  \n",
    "a foreign CSV": "name,score\nfoo,1\n",
    "markdown notes": "# notes\n\nnot a csv at all\n",
    "a JSON file": '{"rows": []}\n',
    "binary garbage": bytes(range(256)) * 8,
    "UTF-16 text": GOOD[:2000].encode("utf-16"),
    "header without a needed column": HEADER.replace("run_id,", "") + "\n",
    "a column given twice": HEADER + ",metric\n",
    "a row with too few fields": HEADER + "\n" + "a,b,c\n",
    "a row with too many fields": GOOD.splitlines()[0] + "\n" + GOOD.splitlines()[1] + ",extra,fields\n",
    "cut off mid-row": GOOD[: len(GOOD) // 2].rsplit("\n", 1)[0] + "\n" + GOOD.splitlines()[5][:40],
    "no newline at the end": GOOD.rstrip("\n"),
    "length is text": _edit("length", "four k"),
    "length is a fraction": _edit("length", "4096.5"),
    "length is inf": _edit("length", "inf"),
    "seed is a fraction": _edit("seed", "0.5"),
    "seed is text": _edit("seed", "zero"),
    "factor is text": _edit("factor", "two", where=lambda r: r["factor"] != ""),
    "factor is nan": _edit("factor", "nan", where=lambda r: r["factor"] != ""),
    "depth is text": _edit("depth", "middle", where=lambda r: r["task"] == "passkey"),
    "stride is text": _edit("stride", "wide", where=lambda r: r["task"] == "ppl"),
}
WORDS = {
    "empty": "empty", "only whitespace": "empty", "a foreign CSV": "not a ctxbench results CSV",
    "markdown notes": "not a ctxbench results CSV", "a JSON file": "not a ctxbench results CSV",
    "binary garbage": "not a ctxbench results CSV", "UTF-16 text": "is UTF-16 text, not UTF-8",
    "header without a needed column": "missing columns: run_id", "a column given twice": "the column 'metric' twice",
    "a row with too few fields": "has 3 fields", "a row with too many fields": "fields, expected",
    "cut off mid-row": "truncated", "no newline at the end": "does not end with a newline",
    "length is text": "length 'four k' is not a whole number", "length is a fraction": "length '4096.5'",
    "length is inf": "length 'inf'", "seed is a fraction": "seed '0.5' is not a whole number",
    "seed is text": "seed 'zero'", "factor is text": "factor 'two' is not a number", "factor is nan": "factor 'nan'",
    "depth is text": "depth 'middle'", "stride is text": "stride 'wide'",
}  # fmt: skip


def _write(path: Path, content) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


COMMANDS = {
    "report": lambda bad: ["report", str(bad)],
    "report csv": lambda bad: ["report", str(bad), "--format", "csv"],
    "compare as NEW": lambda bad: ["compare", str(BASELINE), str(bad)],
    "compare as BASE": lambda bad: ["compare", str(bad), str(BASELINE)],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_results_file_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, name, command):
    bad = _write(tmp_path / "bad.csv", MALFORMED[name])
    before = bad.read_bytes()
    code, _, err = cli_main(COMMANDS[command](bad), monkeypatch, capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and " — " in lines[0], err
    assert WORDS[name] in lines[0]
    assert bad.read_bytes() == before


# Hand edits that leave a readable file: never a traceback, never a partial cell shown as whole.
def _drop(predicate) -> str:
    header, rows = _header_and_rows()
    return csv_text(header, [r for r in rows if not predicate(r)])


def _dup(predicate) -> str:
    header, rows = _header_and_rows()
    extra = [r for r in rows if predicate(r)][:1]
    return csv_text(header, rows + extra)


def _set(column: str, value: str, predicate) -> str:
    header, rows = _header_and_rows()
    return csv_text(header, [{**r, column: value} if predicate(r) else r for r in rows])


def _yarn_passkey_4k(r):
    return r["task"] == "passkey" and r["label"] == "yarn" and r["length"] == "4096"


EDITED = [
    # (name, content, exit code of report, words on stderr or "")
    ("a trial row deleted", _drop(lambda r: _yarn_passkey_4k(r) and r["trial"] == "2"), 0, "partial cell(s) left out"),
    ("an aggregate row deleted", _drop(lambda r: _yarn_passkey_4k(r) and r["metric"] == "accuracy"), 0, "partial cell(s) left out"),
    ("an interval row deleted", _drop(lambda r: _yarn_passkey_4k(r) and r["metric"] == "accuracy_lo"), 0, "partial cell(s) left out"),
    ("a document's rows deleted", _drop(lambda r: r["task"] == "ppl" and r["label"] == "ntk" and r["doc"] not in ("", "all") and r["length"] == "4096"), 0, "partial cell(s) left out"),
    ("a row duplicated", _dup(_yarn_passkey_4k), 0, ""),  # the same row twice is read once (issue 45), never "missing (a hand edit?)"
    ("a status edited to oom", _set("status", "oom", lambda r: _yarn_passkey_4k(r) and r["trial"] == "0"), 0, ""),
    ("a value edited to text", _set("value", "n/a", lambda r: _yarn_passkey_4k(r) and r["metric"] == "accuracy"), 2, "accuracy 'n/a' is not a number"),
    ("a value edited to nan", _set("value", "nan", lambda r: r["task"] == "ppl" and r["doc"] == "all" and r["metric"] == "ppl"), 0, ""),
    ("extra edited to invalid JSON", _set("extra", "{oops", _yarn_passkey_4k), 0, ""),
    ("extra edited to a JSON list", _set("extra", "[1, 2]", _yarn_passkey_4k), 0, ""),
    ("method_params edited to invalid JSON", _set("method_params", "{", _yarn_passkey_4k), 0, ""),
    ("a task renamed to one not installed", _set("task", "mytask", _yarn_passkey_4k), 0, ""),
    ("a method renamed to one not known", _set("method", "fancy", _yarn_passkey_4k), 0, ""),
    ("a label emptied", _set("label", "", lambda r: r["task"] == "ppl"), 0, ""),
    ("columns reordered", csv_text(list(reversed(_header_and_rows()[0])), _header_and_rows()[1]), 0, ""),
    ("a user's own column added", csv_text([*_header_and_rows()[0], "note"], _header_and_rows()[1]), 0, ""),
    ("Windows line endings", GOOD.replace("\n", "\r\n"), 0, ""),
    ("a byte-order mark", "\ufeff" + GOOD, 0, ""),
    ("latin-1 bytes in an answer", GOOD.replace(",12345,", ",caf\xe9,").encode("latin-1", errors="replace"), 0, ""),
    ("only the header", HEADER + "\n", 0, ""),
]


@pytest.mark.parametrize("name,content,code,words", EDITED, ids=[e[0] for e in EDITED])
def test_a_hand_edited_file_reports_without_a_traceback(tmp_path, monkeypatch, capsys, name, content, code, words):
    path = _write(tmp_path / "edited.csv", content)
    before = path.read_bytes()
    got, _, err = cli_main(["report", str(path), "--format", "markdown"], monkeypatch, capsys)
    assert got == code, err
    assert "Traceback" not in err
    assert (words in err) if words else err.strip() == ""
    assert path.read_bytes() == before


@pytest.mark.parametrize("name,content,code,words", EDITED, ids=[e[0] for e in EDITED])
def test_a_hand_edited_file_compares_without_a_traceback(tmp_path, monkeypatch, capsys, name, content, code, words):
    path = _write(tmp_path / "edited.csv", content)
    before = path.read_bytes()
    got, out, err = cli_main(["compare", str(BASELINE), str(path), "--format", "markdown"], monkeypatch, capsys)
    assert got in (0, 1), err  # a verdict, never a crash
    assert "Traceback" not in err and out.startswith("### ctxbench compare:")
    assert path.read_bytes() == before


def test_a_nan_headline_fails_compare(tmp_path, monkeypatch, capsys):
    path = _write(tmp_path / "nan.csv", dict((e[0], e[1]) for e in EDITED)["a value edited to nan"])
    code, out, _ = cli_main(["compare", str(BASELINE), str(path), "--format", "markdown"], monkeypatch, capsys)
    assert code == 1 and "**failed**" in out and "value is nan in NEW" in out


# Bad values for every task option, before anything loads (the CLI parses, then stops).
OPTION_CASES = [
    ("passkey", "--trials", "0", "--trials 0 must be >= 1"),
    ("passkey", "--trials", "-3", "must be >= 1"),
    ("passkey", "--trials", "four", "is not a whole number"),
    ("passkey", "--trials", "2.5", "is not a whole number"),
    ("passkey", "--trials", "", "--trials '' is empty"),
    ("passkey", "--digits", "0", "must be >= 1"),
    ("passkey", "--digits", "21", "between 1 and 20"),
    ("passkey", "--digits", "five", "is not a whole number"),
    ("passkey", "--depths", "0", "must be >= 1"),
    ("passkey", "--depths", "1.5", "outside [0, 1]"),
    ("passkey", "--depths", "-0.1,0.5", "outside [0, 1]"),
    ("passkey", "--depths", "0.5,0.5", "given twice"),
    ("passkey", "--depths", "a,b", "not a number"),
    ("passkey", "--depths", "nan,0.5", "outside [0, 1]"),
    ("passkey", "--depth", "1.5", "outside [0, 1]"),
    ("passkey", "--depth", "x", "not a number"),
    ("ppl", "--docs", "0", "must be >= 1"),
    ("ppl", "--docs", "many", "is not a whole number"),
    ("ppl", "--stride", "0", "bad --stride"),
    ("ppl", "--stride", "-512", "bad --stride"),
    ("ppl", "--stride", "1.5k", "bad --stride"),
    ("ppl", "--stride", "8k --len 4k", "longer than length"),
    ("ppl", "--bos", "maybe", "unknown --bos"),
    ("ppl", "--bos", "", "--bos '' is empty"),
    ("ppl", "--dataset", "./no/such/corpus", "not found"),
    ("niah", "--variant", "single_9", "unknown niah variant"),
    ("niah", "--variant", "single_1,single_1", "given twice"),
    ("niah", "--variant", "", "--variant '' is empty"),
    ("niah", "--trials", "0", "must be >= 1"),
    ("niah", "--depths", "2", "--protocol exact"),  # fixed depths need the exact protocol
    ("niah", "--depths", "1.01", "outside [0, 1]"),
    ("niah", "--depths", "0.5 --protocol exact", None),
    ("niah", "--protocol", "rulr", "did you mean 'ruler'"),
    ("vt", "--protocol", "RULER", "unknown --protocol"),
    ("cwe", "--protocol", "exact", None),
    ("niah", "--haystack", "./no/such/essays", "not found"),
    ("vt", "--trials", "zero", "is not a whole number"),
    ("cwe", "--trials", "-1", "must be >= 1"),
    ("fwe", "--trials", "1e3", "is not a whole number"),
    ("passkey", "--len", "0", "bad length"),
    ("passkey", "--len", "4k,,8k", "empty item"),
    ("passkey", "--len", "4k,4096", "given twice"),
    ("passkey", "--factor", "0.5", "must be >= 1"),
    ("passkey", "--factor", "inf", "not a finite number"),
    ("passkey", "--factor", "two", "not a number"),
    ("passkey", "--method", "yran", "did you mean 'yarn'"),
    ("passkey", "--method", "yarn,yarn", "given twice"),
    ("passkey", "--method", "", "empty"),
    ("passkey", "--seed", "x", "should be a valid integer"),
]


@pytest.mark.parametrize("task,flag,value,words", OPTION_CASES, ids=[f"{c[0]} {c[1]} {c[2]!r}" for c in OPTION_CASES])
def test_a_bad_task_option_is_one_line_before_anything_loads(tmp_path, monkeypatch, capsys, task, flag, value, words):
    out = tmp_path / "r.csv"
    out.write_bytes(OLD.read_bytes())
    before = out.read_bytes()
    code, stdout, err = cli_main([task, flag, *value.split(" ", 1)[:1], *value.split(" ")[1:], "--dry-run", "--out", str(out)], monkeypatch, capsys)
    if words is None:
        assert code == 0, err
        return
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert words in lines[0]
    assert "cells" not in stdout  # no plan printed before the error
    assert out.read_bytes() == before


def test_the_old_depth_spelling_is_an_explicit_list_with_a_deprecation_note(monkeypatch, capsys):
    code, out, err = cli_main(["passkey", "--depth", "1", "--len", "4k", "--dry-run"], monkeypatch, capsys)
    assert code == 0, err
    assert err.strip() == "note: --depth is deprecated and will be removed in a later release; use --depths"
    assert "5 cells" not in out  # one depth (1.0), not 5 evenly spaced


def test_the_old_and_new_depth_spellings_together_are_refused(monkeypatch, capsys):
    code, _, err = cli_main(["passkey", "--depth", "0.5", "--depths", "3", "--dry-run"], monkeypatch, capsys)
    assert code == 2 and "give --depths or --depth, not both" in err


def test_a_non_results_file_is_not_overwritten_even_with_no_resume(tmp_path, monkeypatch, capsys):
    notes = _write(tmp_path / "notes.md", "# my notes\n")
    code, _, err = cli_main(["passkey", "--len", "4k", "--out", str(notes), "--no-resume", "--model", "someorg/not-downloaded"],
                        monkeypatch, capsys)  # fmt: skip
    assert code == 2 and "not a ctxbench results CSV" in err and "never overwrites" in err
    assert notes.read_text() == "# my notes\n"


ENVIRONMENTS = {
    "an ASCII-only stdout": {"PYTHONIOENCODING": "ascii"},
    "the C locale": {"LC_ALL": "C", "LANG": "C"},
    "a 20-column terminal": {"COLUMNS": "20"},
    "a dumb terminal": {"TERM": "dumb"},
    "no colour": {"NO_COLOR": "1"},
    "a forced colour terminal": {"FORCE_COLOR": "1", "TERM": "xterm-256color"},
}
COMMAND_LINES = {
    "methods": (["methods"], 0),
    "report": (["report", str(BASELINE)], 0),
    "compare": (["compare", str(BASELINE), str(BASELINE)], 0),
    "a bad length": (["passkey", "--len", "x", "--dry-run"], 2),
}


@pytest.mark.integration
@pytest.mark.parametrize("command", list(COMMAND_LINES))
@pytest.mark.parametrize("env", list(ENVIRONMENTS))
def test_odd_terminals_and_encodings_never_turn_output_into_a_traceback(env, command):
    import os

    argv, code = COMMAND_LINES[command]
    proc = subprocess.run([sys.executable, "-m", "ctxbench", *argv], capture_output=True, timeout=60,
                          env={**os.environ, **ENVIRONMENTS[env]})  # fmt: skip
    err = proc.stderr.decode("utf-8", errors="replace")
    assert proc.returncode == code, err
    assert "Traceback" not in err
    if code == 2:
        assert len([ln for ln in err.splitlines() if ln.strip()]) == 1 and err.startswith("error: ")
