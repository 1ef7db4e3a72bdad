"""A cell's identity (issue 23): every option that changes a number is part of the key that
resume, compare, the pivot and report share; a cell is finished only when whole; files from the
previous release still load, resume and compare."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess

import pytest
from helpers import DATA, run_settings

from ctxbench.errors import UserError
from ctxbench.results.identity import cell_key, finished
from ctxbench.results.store import COLUMNS, ResultsFile, read_records
from ctxbench.runner.settings import build_settings
from ctxbench.tasks import get

OLD = DATA / "results-0.1.0.csv"  # written by ctxbench 0.1.0 (commit 3c62b43)
CHAT_TEMPLATE = "{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"


def _passkey(**options):
    options = {"depths": "0.25,0.75", "trials": 2, **options}
    return build_settings(get("passkey"), "none,yarn", [2.0], "300,400", options)


def _ppl(corpus_dir, **options):
    return build_settings(get("ppl"), "none,ntk", [2.0], "64,128", {"dataset": str(corpus_dir), "docs": 2, **options})


@pytest.fixture
def chat_lm(copying_lm):
    copying_lm.tokenizer.chat_template = CHAT_TEMPLATE
    return copying_lm


def test_a_chat_run_after_a_raw_run_into_one_file_runs_its_own_cells(chat_lm, tmp_path):
    out = tmp_path / "r.csv"
    raw = run_settings(chat_lm, "passkey", _passkey(), out=out)
    chat = run_settings(chat_lm, "passkey", _passkey(chat=True), out=out)
    assert raw.ran == chat.ran == 8 and chat.skipped == 0
    assert {json.loads(r["options"])["chat"] for r in read_records(out)} == {False, True}


def test_another_digits_count_runs_its_own_cells(copying_lm, tmp_path):
    out = tmp_path / "r.csv"
    run_settings(copying_lm, "passkey", _passkey(), out=out)
    again = run_settings(copying_lm, "passkey", _passkey(digits=6), out=out)
    assert again.ran == 8 and again.skipped == 0


def test_the_same_options_resume(copying_lm, tmp_path):
    out = tmp_path / "r.csv"
    run_settings(copying_lm, "passkey", _passkey(), out=out)
    again = run_settings(copying_lm, "passkey", _passkey(), out=out)
    assert again.ran == 0 and again.skipped == 8


def test_options_that_are_cell_columns_or_resumed_by_count_are_not_in_the_key():
    assert get("passkey").identity(_passkey()) == {"chat": False, "digits": 5}
    assert get("passkey").identity(_passkey(trials=7, depths="0.5")) == {"chat": False, "digits": 5}


def test_deleting_any_row_of_a_finished_cell_makes_the_next_run_redo_that_cell(copying_lm, tmp_path):
    out = tmp_path / "r.csv"
    run_settings(copying_lm, "passkey", _passkey(), out=out)
    header, *lines = out.read_text().splitlines(keepends=True)
    for i in range(len(lines)):
        edited = tmp_path / f"edited{i}.csv"
        edited.write_text(header + "".join(lines[:i] + lines[i + 1 :]))
        gone = cell_key(next(csv.DictReader(io.StringIO(header + lines[i]))))
        outcome = run_settings(copying_lm, "passkey", _passkey(), out=edited)
        assert outcome.ran == 1, f"row {i} deleted: {outcome.ran} cells ran"
        assert gone in finished(read_records(edited))


def test_deleting_a_document_row_of_a_perplexity_cell_redoes_it(tiny_lm, corpus_dir, tmp_path):
    out = tmp_path / "r.csv"
    run_settings(tiny_lm, "ppl", _ppl(corpus_dir), out=out)
    header, *lines = out.read_text().splitlines(keepends=True)
    doc_row = next(i for i, line in enumerate(lines) if ",nll," in line and ",all," not in line)
    out.write_text(header + "".join(lines[:doc_row] + lines[doc_row + 1 :]))
    assert run_settings(tiny_lm, "ppl", _ppl(corpus_dir), out=out).ran == 1


@pytest.mark.integration
def test_report_leaves_a_partial_cell_out_and_says_so(copying_lm, tmp_path):
    out = tmp_path / "r.csv"
    run_settings(copying_lm, "passkey", _passkey(), out=out)
    header, *lines = out.read_text().splitlines(keepends=True)
    trial = next(i for i, line in enumerate(lines) if ",correct," in line)
    out.write_text(header + "".join(lines[:trial] + lines[trial + 1 :]))
    proc = subprocess.run(["ctxbench", "report", str(out), "--format", "csv"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "1 partial cell(s) left out" in proc.stderr
    n = {row["method"]: row["n"] for row in csv.DictReader(io.StringIO(proc.stdout)) if row["length"] == "300"}
    assert n == {"none": "2", "yarn": "4"}  # none at 300 pools only its whole depth cell


def test_columns_the_user_added_are_kept_on_every_write(copying_lm, tmp_path):
    out = tmp_path / "r.csv"
    run_settings(copying_lm, "passkey", build_settings(get("passkey"), "none", [2.0], "300", {"depths": "0.5", "trials": 1}), out=out)
    rows = list(csv.DictReader(out.open()))
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*COLUMNS, "my_note"], lineterminator="\n")
        writer.writeheader()
        writer.writerows({**r, "my_note": "checked"} for r in rows)
    run_settings(copying_lm, "passkey", _passkey(), out=out)
    kept = list(csv.DictReader(out.open()))
    assert list(kept[0])[-1] == "my_note"
    assert [r["my_note"] for r in kept[: len(rows)]] == ["checked"] * len(rows)
    assert len(kept) > len(rows)


@pytest.mark.parametrize("resume", [True, False])
def test_a_file_that_is_not_a_results_file_is_never_overwritten(tmp_path, resume):
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n\nnothing to do with ctxbench\n")
    with pytest.raises(UserError, match="not a ctxbench results CSV"):
        ResultsFile(notes, resume=resume)
    assert notes.read_text() == "# my notes\n\nnothing to do with ctxbench\n"


def test_an_empty_file_is_filled(copying_lm, tmp_path):
    out = tmp_path / "r.csv"
    out.touch()
    assert run_settings(copying_lm, "passkey", _passkey(), out=out).ran == 8


def test_a_symlinked_out_is_written_through_the_link(copying_lm, tmp_path):
    (tmp_path / "runs").mkdir()
    real = tmp_path / "runs" / "today.csv"
    link = tmp_path / "latest.csv"
    link.symlink_to(real)
    run_settings(copying_lm, "passkey", _passkey(), out=link)
    assert link.is_symlink() and real.is_file()
    assert len(read_records(real)) == 40


def test_a_file_of_the_previous_release_reads_its_options_as_that_release_ran_them():
    records = read_records(OLD)
    assert {r["options"] for r in records if r["task"] == "passkey"} == {'{"chat": false, "digits": 5}'}
    assert {r["options"] for r in records if r["task"] == "ppl"} == {"{}"}
    assert len(finished(records)) == 8 + 4  # passkey: 2 methods x 2 lengths x 2 depths; ppl: 2 methods x 2 lengths


def test_a_file_of_the_previous_release_resumes(copying_lm, tiny_lm, corpus_dir, tmp_path):
    out = tmp_path / "old.csv"
    shutil.copy(OLD, out)
    assert run_settings(copying_lm, "passkey", _passkey(), out=out).ran == 0
    assert run_settings(tiny_lm, "ppl", _ppl(corpus_dir), out=out).ran == 0


@pytest.mark.integration
def test_a_file_of_the_previous_release_compares_clean_with_itself():
    proc = subprocess.run(["ctxbench", "compare", str(OLD), str(OLD), "--strict"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
