"""LongBench v2 (``ctxbench longbench2``): both public layouts, made in the test; the official prompt,
middle truncation and answer extraction (THUDM/LongBench ``pred.py``, restated below); both modes
through the runner; bad files as one line naming file and field, before any model loads."""

from __future__ import annotations

import json
import re

import pytest
from helpers import byte_tokenizer, cli_main, one_error_line, run_settings

from ctxbench.methods import resolve
from ctxbench.runner.settings import build_settings
from ctxbench.synthetic import longbench2 as lb
from ctxbench.tasks import get


def source_extract_answer(response):
    response = response.replace("*", "")
    match = re.search(r"The correct answer is \(([A-D])\)", response)
    if match:
        return match.group(1)
    match = re.search(r"The correct answer is ([A-D])", response)
    if match:
        return match.group(1)
    return None


ITEMS = [
    {"_id": f"i{i}", "domain": "d", "difficulty": "easy", "length": ["short", "medium"][i % 2],
     "question": f"Which color is item {i}?", "context": f"Item {i} is painted blue. " * 20,
     "choice_A": "red", "choice_B": "blue", "choice_C": "green", "choice_D": "white", "answer": "B"}
    for i in range(4)
]  # fmt: skip


def choices_layout(items):
    out = []
    for it in items:
        it = dict(it)
        it["choices"] = [it.pop(f"choice_{x}") for x in "ABCD"]
        out.append(it)
    return out


@pytest.fixture
def files(tmp_path):
    a = tmp_path / "lb2-fields.json"
    a.write_text(json.dumps(ITEMS))
    b = tmp_path / "lb2-choices.jsonl"
    b.write_text("\n".join(json.dumps(r) for r in choices_layout(ITEMS)))
    return a, b


def test_both_layouts_read_as_the_same_items(files):
    a, b = (lb.read_items(f.read_bytes(), str(f)) for f in files)
    assert a == b and a[1].choices == ("red", "blue", "green", "white") and a[1].bucket == "medium"


@pytest.mark.parametrize("response", ["The correct answer is (B)", "**The correct answer is (C)**", "The correct answer is D.",
                                      "I think (A)", "the correct answer is (A)", "", "The correct answer is (E)"])  # fmt: skip
def test_answer_extraction_is_pred_pys(response):
    assert lb.extract_answer(response) == source_extract_answer(response)


def test_the_prompt_is_the_official_template():
    item = lb.read_items(json.dumps(ITEMS[:1]).encode(), "x")[0]
    text = lb.prompt_text(item)
    assert text == ("Please read the following text and answer the question below.\n\n<text>\n" + ITEMS[0]["context"].strip()
                    + "\n</text>\n\nWhat is the correct answer to this question: Which color is item 0?\nChoices:\n(A) red\n(B) blue\n"
                    "(C) green\n(D) white\n\nFormat your response as follows: \"The correct answer is (insert answer here)\".")  # fmt: skip


def test_a_long_prompt_is_cut_in_the_middle_as_pred_py_cuts_it():
    ids = list(range(100))
    kept, cut = lb.truncate_middle(ids, 40)
    assert kept == ids[:20] + ids[-20:] and cut == 60
    assert lb.truncate_middle(ids, 100) == (ids, 0)


def test_the_cell_records_what_was_cut():
    from ctxbench.tasks.longbench2 import build

    tok = byte_tokenizer()
    item = lb.read_items(json.dumps(ITEMS[:1]).encode(), "x")[0]
    p = build(tok, False, item, 300, "generate")
    assert len(p.ids) <= 300 and p.extra["truncated"] == p.extra["prompt_tokens"] - len(p.ids)  # pred.py: the prompt's tokens only
    assert p.extra["truncated"] > 0
    mc = build(tok, False, item, 300, "mc")
    assert tok.decode(list(mc.ids)).endswith("The correct answer is (")


def _settings(path, **options):
    return build_settings(get("longbench2"), [resolve("none")], 2.0, "700", {"data": str(path), "trials": 2, **options})


@pytest.mark.parametrize("mode", ["mc", "generate"])
def test_both_modes_run_per_bucket_with_per_item_rows(files, tiny_lm, mode):
    records = run_settings(tiny_lm, "longbench2", _settings(files[1], mode=mode)).records
    scores = [r for r in records if r["metric"] == "score"]
    assert sorted({r["variant"] for r in scores}) == ["medium", "short"] and len(scores) == 4
    assert all(r["value"] in ("0.0", "1.0", 0.0, 1.0) for r in scores)
    assert {json.loads(r["options"])["mode"] for r in records} == {mode}  # the mode is in the cell identity
    if mode == "mc":
        assert all(set(json.loads(r["extra"])["letter_nll"]) == set("ABCD") for r in scores)


def test_mc_picks_the_most_likely_letter(files, tiny_lm):
    records = run_settings(tiny_lm, "longbench2", _settings(files[0], mode="mc", variants="short")).records
    for r in (r for r in records if r["metric"] == "score"):
        nll = json.loads(r["extra"])["letter_nll"]
        assert r["answer"] == min(nll, key=nll.get) and float(r["value"]) == float(r["answer"] == "B")


@pytest.mark.parametrize("mutate,words", [
    (lambda rows: rows[:0], ["no items"]),
    (lambda rows: [{k: v for k, v in rows[0].items() if k != "question"}], ["item 0", "'question'"]),
    (lambda rows: [{**rows[0], "answer": "E"}], ["item 0", "'answer'", "'E'"]),
    (lambda rows: [{k: v for k, v in rows[0].items() if k != "choice_C"}], ["item 0", "'choice_C'"]),
    (lambda rows: [{**rows[0], "length": "huge"}], ["item 0", "'length'"]),
])  # fmt: skip
def test_bad_files_are_one_line_naming_file_and_field(tmp_path, monkeypatch, capsys, mutate, words):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(mutate(ITEMS)))
    code, _, err = cli_main(["longbench2", "--data", str(path), "--len", "1k", "--trials", "1"], monkeypatch, capsys)
    one_error_line(code, err, [str(path), *words])


def test_an_empty_file_and_no_data_are_refused(tmp_path, monkeypatch, capsys):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    code, _, err = cli_main(["longbench2", "--data", str(path), "--len", "1k"], monkeypatch, capsys)
    one_error_line(code, err, ["is empty"])
    code, _, err = cli_main(["longbench2", "--len", "1k"], monkeypatch, capsys)
    one_error_line(code, err, ["no --data", "THUDM/LongBench-v2"])
