"""The chat template by default as RULER prompts chat models: under ``--protocol ruler`` a model
whose tokenizer ships a chat template gets it, a model without one and the ``exact`` protocol get
raw prompts, ``--no-chat``/``--chat`` decide, and an implied choice is the same cell as the
explicit one (rows carry the settled value)."""

from __future__ import annotations

import json

import pytest
from helpers import byte_tokenizer, run_settings, tiny_llama

from ctxbench.backends.hf import wrap
from ctxbench.methods import resolve
from ctxbench.runner.settings import build_settings
from ctxbench.tasks import get
from ctxbench.tasks.common import parse_chat

TEMPLATE = "{% for m in messages %}<|user|>{{ m['content'] }}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"


def _lm(template: str | None):
    tok = byte_tokenizer()
    tok.chat_template = template
    return wrap(tiny_llama(), tok, name="tiny-llama", digest="tiny-llama-seed0")


def _run(lm, out=None, **options):
    settings = build_settings(get("niah"), [resolve("none")], 2.0, "700", {"variants": "single_1", "trials": 1, **options})
    records = run_settings(lm, "niah", settings, out=out).records
    return [r for r in records if r["metric"] == "score"]


def _chat(rows) -> set:
    return {json.loads(r["options"])["chat"] for r in rows}


def test_ruler_protocol_uses_the_chat_template_a_tokenizer_ships():
    rows = _run(_lm(TEMPLATE))
    assert _chat(rows) == {True}
    assert rows[0]["dataset"].endswith("-chat")


def test_a_tokenizer_without_a_chat_template_gets_raw_prompts():
    assert _chat(_run(_lm(None))) == {False}


def test_the_exact_protocol_stays_raw_by_default():
    assert _chat(_run(_lm(TEMPLATE), protocol="exact", depths="0.5")) == {False}


def test_no_chat_overrides_the_default():
    assert _chat(_run(_lm(TEMPLATE), chat=False)) == {False}


def test_the_default_prompt_is_the_chat_prompt():
    from ctxbench.synthetic import build

    lm = _lm(TEMPLATE)
    chat = build("niah", "single_1", lm.tokenizer, 700, None, 0, 0, True, protocol="ruler")
    raw = build("niah", "single_1", lm.tokenizer, 700, None, 0, 0, False, protocol="ruler")
    assert "<|user|>" in lm.tokenizer.decode(chat.ids) and len(chat.ids) != len(raw.ids)
    assert [int(r["tokens"]) for r in _run(lm)] == [len(chat.ids)]


def test_an_implied_chat_default_resumes_an_explicit_chat_run(tmp_path):
    lm, out = _lm(TEMPLATE), tmp_path / "r.csv"
    first = _run(lm, out=out, chat=True)
    again = run_settings(lm, "niah", build_settings(get("niah"), [resolve("none")], 2.0, "700", {"variants": "single_1", "trials": 1}), out=out)
    assert again.ran == 0 and again.skipped == 1
    assert _chat(first) == {True}


@pytest.mark.parametrize("raw,value", [("auto", None), ("true", True), ("false", False), (True, True)])
def test_chat_reads_auto_true_and_false(raw, value):
    assert parse_chat(raw) is value
