"""BABILong qa1-qa5 (``ctxbench babilong``): both scorers held to examples and code from their
sources (booydar/babilong ``babilong/metrics.py``; lm-evaluation-harness
``lm_eval/tasks/babilong/common_utils.py``), the stories' answers checked by replaying their facts,
the prompt word for word, the length accounting, the published-rows loader and its refusals."""

from __future__ import annotations

import json
import random
import re

import pytest
from helpers import byte_tokenizer, cli_main, one_error_line, run_settings

from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.runner.settings import build_settings
from ctxbench.synthetic import babilong as bl
from ctxbench.synthetic.haystack import load_haystack
from ctxbench.synthetic.pieces import frame
from ctxbench.tasks import get

# --- the sources' scorers, restated ---


def source_compare_answers(target, output, question, task_labels):
    output = output.lower()
    output = output.split(".")[0]
    output = output.split("<context>")[0]
    output = output.split("<example>")[0]
    output = output.split("Question")[0]
    target = target.lower()
    task_labels = {label.lower() for label in task_labels}
    labels_in_question = {label for label in task_labels if label in question.lower()}
    labels_in_output = {label for label in task_labels if label in output}
    labels_in_output = labels_in_output - labels_in_question
    return target in labels_in_output and len(labels_in_output) == 1


def source_lm_eval(target, result):
    pred = re.compile(r"[\x00-\x1f]").sub("\n", result.strip()).strip()
    return 1.0 if target.strip().lower() in pred.lower() else 0.0


EXAMPLES = [  # (variant, question, target, output, strict, lenient)
    ("qa1", "Where is Mary?", "bathroom", "The most recent location of Mary is bathroom.", 1.0, 1.0),
    ("qa1", "Where is Mary?", "bathroom", "Mary was in the kitchen, then the bathroom.", 0.0, 1.0),  # two rooms named
    ("qa1", "Where is Mary?", "bathroom", "The kitchen. Then the bathroom.", 0.0, 1.0),  # only the first sentence counts
    ("qa3", "Where was the apple before the kitchen?", "bathroom", "Before the kitchen the apple was in the bathroom.", 1.0, 1.0),
    ("qa4", "What is north of the bedroom?", "office", "office", 1.0, 1.0),
    ("qa4", "What is north of the bedroom?", "office", "bedroom", 0.0, 0.0),
    ("qa5", "Who gave the apple?", "Fred", "Fred", 1.0, 1.0),
    ("qa5", "Who did Fred give the apple to?", "Bill", "Fred gave it to Bill", 1.0, 1.0),  # Fred is in the question
    ("qa5", "Who received the milk?", "Jeff", "Jeff and Mary", 0.0, 1.0),
    ("qa2", "Where is the milk?", "office", "I don't know", 0.0, 0.0),
    ("qa2", "Where is the milk?", "office", "<example>office", 0.0, 1.0),
]


@pytest.mark.parametrize("variant,question,target,output,strict,lenient", EXAMPLES)
def test_the_strict_scorer_is_babilongs_compare_answers(variant, question, target, output, strict, lenient):
    assert bl.strict(output, target, question, variant) == strict
    assert strict == float(source_compare_answers(target, output, question, bl.TASK_LABELS[variant]))


@pytest.mark.parametrize("variant,question,target,output,strict,lenient", EXAMPLES)
def test_the_lenient_scorer_is_lm_evals_substring_match(variant, question, target, output, strict, lenient):
    assert bl.lenient(output, target) == lenient == source_lm_eval(target, output)


# --- stories: replaying the facts gives the answer ---


def _replay(story: bl.Story, variant: str) -> str:
    where, held, at, path, gifts = {}, {}, {}, {}, []
    for fact in story.facts:
        if m := re.fullmatch(r"(\w+) (?:moved to|went to|journeyed to|travelled to|went back to) the (\w+)\.", fact):
            where[m[1]] = m[2]
            for o, p in held.items():
                if p == m[1] and path.setdefault(o, [])[-1:] != [m[2]]:
                    path[o].append(m[2])
        elif m := re.fullmatch(r"(\w+) (?:got|grabbed|picked up|took) the (\w+) there\.", fact):
            held[m[2]] = m[1]
            at.pop(m[2], None)
            if m[1] in where and path.setdefault(m[2], [])[-1:] != [where[m[1]]]:
                path[m[2]].append(where[m[1]])
        elif m := re.fullmatch(r"(\w+) (?:dropped|discarded|put down|left) the (\w+)\.", fact):
            del held[m[2]]
            at[m[2]] = where[m[1]]
        elif m := re.fullmatch(r"(\w+) (?:gave|handed|passed) the (\w+) to (\w+)\.", fact):
            held[m[2]] = m[3]
            gifts.append((m[1], m[2], m[3]))
    q = story.question
    if variant == "qa1":
        return where[re.fullmatch(r"Where is (\w+)\?", q)[1]]
    if variant == "qa2":
        o = re.fullmatch(r"Where is the (\w+)\?", q)[1]
        return where[held[o]] if o in held else at[o]
    if variant == "qa3":
        o, room = re.fullmatch(r"Where was the (\w+) before the (\w+)\?", q).groups()
        assert path[o][-1] == room
        return path[o][-2]
    if variant == "qa4":
        rel = {}
        for fact in story.facts:
            a, d, b = re.fullmatch(r"The (\w+) is (\w+) of the (\w+)\.", fact).groups()
            rel[(d, b)], rel[(a, d)] = a, b
        if m := re.fullmatch(r"What is (\w+) of the (\w+)\?", q):
            return rel[(m[1], m[2])]
        m = re.fullmatch(r"What is the (\w+) (\w+) of\?", q)
        return rel[(m[1], m[2])]
    g, o, r = gifts[-1]
    return {f"Who gave the {o}?": g, f"Who received the {o}?": r, f"What did {g} give to {r}?": o, f"Who did {g} give the {o} to?": r}[q]


@pytest.mark.parametrize("variant", bl.VARIANTS)
def test_every_story_answer_follows_from_its_facts(variant):
    for seed in range(60):
        story = bl.story(variant, random.Random(seed))
        assert _replay(story, variant) == story.answer, (seed, story)


def test_the_answer_is_one_of_the_strict_scorers_labels():
    for v in bl.VARIANTS:
        for seed in range(20):
            assert bl.story(v, random.Random(seed)).answer.lower() in {x.lower() for x in bl.TASK_LABELS[v]}


# --- prompts ---


def test_the_prompt_is_babilongs_template_with_its_default_prompts():
    tok = byte_tokenizer()
    p = bl.build("qa1", tok, frame(tok, False), load_haystack(None), 3000, 0, 0)
    text = tok.decode(list(p.ids))
    d = bl.PROMPTS["qa1"]
    head = f"{d['instruction']}\n\n{d['examples']}\n\n{d['post_prompt']}\n\n<context>\n"
    assert text.startswith(head) and text.endswith(f"\n</context>\n\nQuestion: {p.extra['question']}")
    context = text[len(head): -len(f"\n</context>\n\nQuestion: {p.extra['question']}")]
    positions = [context.index(f) for f in p.extra["facts"]]
    assert positions == sorted(positions)  # the facts in story order among the background sentences


def test_prompt_and_answer_budget_fit_the_length():
    tok, hay = byte_tokenizer(), load_haystack(None)
    for v in bl.VARIANTS:
        p = bl.build(v, tok, frame(tok, False), hay, 2500, 1, 3, length_of="prompt")
        assert len(p.ids) + bl.MAX_NEW_TOKENS <= 2500 and p.extra["background_sentences"] > 0


# --- the task: rows, both scorers, the published rows ---


def _settings(length: str = "2500", **options):
    return build_settings(get("babilong"), [resolve("none")], 2.0, length, {"trials": 2, **options})


def test_rows_hold_both_scorers(tiny_lm):
    records = run_settings(tiny_lm, "babilong", _settings(variants="qa1,qa4")).records
    metrics = {r["metric"] for r in records}
    assert metrics == {"score", "accuracy", "accuracy_lo", "accuracy_hi", "accuracy_lenient", "accuracy_lenient_lo", "accuracy_lenient_hi"}
    for r in records:
        if r["metric"] == "score":
            extra = json.loads(r["extra"])
            assert set(extra["scores"]) == {"strict", "lenient"} and float(r["value"]) == extra["scores"]["strict"]


def _write_rows(path, rows, jsonl=True):
    path.write_text("\n".join(json.dumps(r) for r in rows) if jsonl else json.dumps(rows))
    return path


ROWS = [{"input": "Mary went to the office. Some prose here.", "question": "Where is Mary?", "target": "office"},
        {"input": "John went to the garden.", "question": "Where is John?", "target": "garden"}]  # fmt: skip


def test_published_rows_make_the_prompts(tmp_path, tiny_lm):
    path = _write_rows(tmp_path / "qa1.jsonl", ROWS)
    settings = _settings("32", variants="qa1", data=str(path))  # the rows' own length: 24-41 byte tokens of context
    records = run_settings(tiny_lm, "babilong", settings).records
    scores = [r for r in records if r["metric"] == "score"]
    assert [json.loads(r["extra"])["answers"] for r in scores] == [["office"], ["garden"]]
    assert {r["dataset"] for r in records} == {"babilong:qa1.jsonl-chat"} or {r["dataset"] for r in records} == {"babilong:qa1.jsonl"}


@pytest.mark.parametrize("length", ["1k", "16"])
def test_published_rows_far_from_the_length_are_refused_naming_the_len_they_hold(tmp_path, monkeypatch, capsys, length):
    """Rows of another of BABILong's length configurations (here about 40 tokens of context) would be
    recorded as cells of --len: refused once the tokenizer counts them, before any trial runs."""
    from helpers import save_with_tokenizer, tiny_llama

    path = _write_rows(tmp_path / "qa1.jsonl", ROWS)
    save_with_tokenizer(tiny_llama(), tmp_path / "model")
    capsys.readouterr()  # the save's progress bar
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / ".cache"))
    code, out, err = cli_main(["babilong", "--variant", "qa1", "--data", str(path), "--len", length, "--model", "model",
                               "--device", "cpu", "--out", "r.csv"], monkeypatch, capsys)  # fmt: skip
    one_error_line(code, err, ["--data row 0 of qa1 holds 41 tokens of context, far from --len", "pass --len 41"])
    assert not (tmp_path / "r.csv").exists()


def test_a_directory_of_published_files_serves_each_variant(tmp_path):
    _write_rows(tmp_path / "qa1.jsonl", ROWS)
    _write_rows(tmp_path / "qa2.json", [{"input": "x", "question": "Where is the milk?", "target": "office"}] * 2, jsonl=False)
    _settings(variants="qa1,qa2", data=str(tmp_path))  # validates both


@pytest.mark.parametrize("content,words", [
    ("", ["is empty"]), ("{not json", ["not JSON"]), ('[{"input": "x", "question": "Where?"}]', ["row 0", "'target'"]),
    ('{"input": "x", "question": "q", "target": "t"}\n{"input": "x", "target": "t"}', ["row 1", "'question'"]),
])  # fmt: skip
def test_bad_published_files_are_one_line_naming_file_and_field(tmp_path, monkeypatch, capsys, content, words):
    path = tmp_path / "qa1.jsonl"
    path.write_text(content)
    code, _, err = cli_main(["babilong", "--variant", "qa1", "--data", str(path), "--len", "1k"], monkeypatch, capsys)
    one_error_line(code, err, [str(path), *words])


def test_one_file_for_several_variants_is_refused(tmp_path):
    path = _write_rows(tmp_path / "qa1.jsonl", ROWS)
    with pytest.raises(UserError, match="one --data file for 5 variants"):
        _settings(data=str(path))
