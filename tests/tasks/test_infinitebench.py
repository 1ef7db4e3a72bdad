"""InfiniteBench's kv_retrieval and number_string (``ctxbench kv-retrieval``, ``ctxbench number-string``):
the key draw, the prompt text and the scorers held to OpenBMB/InfiniteBench's
``data/construct_synthetic_dataset.py``, ``src/prompt.py`` and ``src/compute_scores.py`` (the
reference functions below restate the source's code), RULER's length accounting, and the rows."""

from __future__ import annotations

import json
import random
import re

import pytest
from helpers import byte_tokenizer, run_settings

from ctxbench.methods import resolve
from ctxbench.runner.settings import build_settings
from ctxbench.synthetic import infinitebench as ib
from ctxbench.synthetic.pieces import TooShort, frame
from ctxbench.tasks import get

# --- the source, restated (compute_scores.py, construct_synthetic_dataset.py) ---


def source_first_int_match(prediction):
    pred_list = re.split("[^0-9]", prediction)
    pred_value = ""
    for item in pred_list:
        if item != "":
            pred_value = item
            break
    return pred_value


def source_kv(pred, label):
    for c in ["\n", ":", '"', "'", ".", ",", "?", "!", "{", "}"]:
        pred = pred.replace(c, " ")
    words = pred.split()
    return label in words


def source_number_key(rng):
    keys = []
    for _ in range(5):
        keys.append(str(rng.randint(0, 9)))
    for k in range(5):
        pos = rng.randint(0, 5 + k - 1)
        keys.insert(pos, keys[pos])
    return "".join(keys)


def test_the_number_key_is_drawn_as_the_source_draws_it():
    for seed in range(50):
        assert ib.number_key(random.Random(seed)) == source_number_key(random.Random(seed))
    assert all(len(ib.number_key(random.Random(s))) == 10 for s in range(50))


@pytest.mark.parametrize("prediction,label", [
    (" 1123456678.", "1123456678"), ("The sequence of digits is 1123456678", "1123456678"),
    ("11234 56678", "1123456678"), ("1123456678 is it", "112345667"), ("no digits", "1"), ("", "1"),
    ("x1123456678y", "1123456678"), ("The sequence of digits is 12.", "1123456678"),
])  # fmt: skip
def test_number_string_scorer_is_the_sources(prediction, label):
    assert ib.score_number_string(prediction, label) == float(label == source_first_int_match(prediction))


@pytest.mark.parametrize("prediction,label", [
    ('"a282e143-21ee-46de-9e8a-8509510bfe3b"', "a282e143-21ee-46de-9e8a-8509510bfe3b"),
    ("The value is a282e143-21ee-46de-9e8a-8509510bfe3b.", "a282e143-21ee-46de-9e8a-8509510bfe3b"),
    ("a282e143-21ee-46de-9e8a-8509510bfe3bX", "a282e143-21ee-46de-9e8a-8509510bfe3b"),
    ("{'k': 'a282e143-21ee-46de-9e8a-8509510bfe3b'}", "a282e143-21ee-46de-9e8a-8509510bfe3b"),
    ("a282e143-21ee-46de", "a282e143-21ee-46de-9e8a-8509510bfe3b"), ("", "x"),
])  # fmt: skip
def test_kv_retrieval_scorer_is_the_sources(prediction, label):
    assert ib.score_kv_retrieval(prediction, label) == float(source_kv(prediction, label))
    assert ib.score_kv_retrieval('"a282e143-21ee-46de-9e8a-8509510bfe3b"', "a282e143-21ee-46de-9e8a-8509510bfe3b") == 1.0


def _text(prompt, tok):
    return tok.decode(list(prompt.ids))


def test_number_string_prompt_is_the_open_model_template_word_for_word():
    tok = byte_tokenizer()
    p = ib.build("number_string", tok, frame(tok, False), 3000, 0, 0)
    key, n, j = p.extra["key"], p.extra["noise_lines"], p.extra["needle_line"]
    context = ib.NOISE * j + f"The sequence of digits is {key}. Remember it. {key} is the sequence of digits.\n" + ib.NOISE * (n - j)
    expected = ("There is an important info hidden inside a lot of irrelevant text. Find it. I will quiz you about the important "
                f"information there.\n\n{context}\n\nWhat is the sequence of digits?\n\nThe sequence of digits is")  # fmt: skip
    assert _text(p, tok) == expected and p.answers == (key,) and p.max_new_tokens == 12


# construct_synthetic_dataset.py build_kv_retrieval (88b3daa), the sample's text and question, copied
def source_kv_sample(records, ans_id):
    text = "JSON data:\n{"
    for item in records:
        text += "\"" + item[0] + "\": \"" + item[1] + "\", "
    text = text[:-2] + '}'
    question = "\nKey: \"" + records[ans_id][0] + "\"\nThe value associated with the specified key is: "
    return text, question


# src/prompt.py yarn_mistral_templates["kv_retrieval"] (88b3daa), copied
SOURCE_KV_TEMPLATE = "Extract the value corresponding to the specified key in the JSON object below.\n\n{context}\n\n{input}"


def test_kv_prompt_is_the_sources_json_and_question_byte_for_byte():
    tok = byte_tokenizer()
    p = ib.build("kv_retrieval", tok, frame(tok, False), 2000, 0, 1)
    text = _text(p, tok)
    head = "Extract the value corresponding to the specified key in the JSON object below.\n\nJSON data:\n"
    pairs = json.loads(text[len(head): text.index("}") + 1])  # the source writes valid JSON
    assert len(pairs) == p.extra["pairs"] and pairs[p.extra["key"]] == p.answers[0]
    records = list(pairs.items())
    context, question = source_kv_sample(records, p.extra["asked_index"])
    assert text == SOURCE_KV_TEMPLATE.format(context=context, input=question)
    assert "}\n\n\nKey: " in text
    assert all(re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", s) for kv in pairs.items() for s in kv)


@pytest.mark.parametrize("task", ["number_string", "kv_retrieval"])
def test_the_prompt_and_the_answer_budget_fit_and_one_more_unit_would_not(task):
    """RULER's accounting: the most noise lines (pairs) whose prompt + new tokens fit the length."""
    tok = byte_tokenizer()
    for length in (1500, 2500):
        p = ib.build(task, tok, frame(tok, False), length, 3, 2)
        assert len(p.ids) + p.max_new_tokens <= length
        unit = len(ib.NOISE) if task == "number_string" else len('"", ""') + 2 * 36 + 2
        assert len(p.ids) + p.max_new_tokens + unit > length


def test_a_length_too_short_for_the_fixed_text_names_its_minimum():
    tok = byte_tokenizer()
    with pytest.raises(TooShort) as err:
        ib.build("number_string", tok, frame(tok, False), 200, 0, 0)
    assert err.value.minimum > 200


def test_every_method_sees_the_same_prompts_and_trials_differ():
    tok = byte_tokenizer()
    a = [ib.build("kv_retrieval", tok, frame(tok, False), 1500, 0, t).ids for t in range(3)]
    assert a == [ib.build("kv_retrieval", tok, frame(tok, False), 1500, 0, t).ids for t in range(3)]
    assert len(set(a)) == 3


def _settings(task, **options):
    return build_settings(get(task), [resolve("none")], 2.0, "1500", {"trials": 3, **options})


def test_a_model_that_copies_the_needle_passes_number_string(copying_lm):
    """The copying model continues "The sequence of digits is" with the needle's own key."""
    records = run_settings(copying_lm, "number-string", _settings("number-string")).records
    scores = [r for r in records if r["metric"] == "score"]
    assert [float(r["value"]) for r in scores] == [1.0, 1.0, 1.0]
    acc = next(r for r in records if r["metric"] == "accuracy")
    assert float(acc["value"]) == 1.0 and {r["metric"] for r in records} >= {"accuracy_lo", "accuracy_hi"}


def test_kv_rows_carry_the_answer_the_scorer_and_an_interval(tiny_lm):
    records = run_settings(tiny_lm, "kv-retrieval", _settings("kv-retrieval")).records
    scores = [r for r in records if r["metric"] == "score"]
    assert len(scores) == 3 and all(json.loads(r["extra"])["scorer"] == "infinitebench" for r in scores)
    assert {r["dataset"] for r in records} == {"infinitebench-kv_retrieval"}
    assert {r["metric"] for r in records} == {"score", "accuracy", "accuracy_lo", "accuracy_hi"}
