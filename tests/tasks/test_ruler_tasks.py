"""RULER tasks on the task protocol: a perfect retriever scores every trial, every method sees the
same prompts, prefix reuse answers as single prompts, and bad input is one clear error."""

from __future__ import annotations

import json

import pytest
from helpers import run_settings, scripted_lm

from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.runner.settings import build_settings
from ctxbench.tasks import get


def _settings(task, **options):
    if "depths" in options:  # fixed depths are the exact protocol's knob
        options.setdefault("protocol", "exact")
    return build_settings(get(task), [resolve("none")], 2.0, options.pop("lengths", "800"), options)


def _scripted(tokenizer, task, variant, length, depths, trials, answer):
    from ctxbench.synthetic import build

    script = {}
    for d in depths:
        for t in range(trials):
            p = build(task, variant, tokenizer, length, d, 0, t)
            script[p.ids] = tuple(tokenizer(answer(p.answers), add_special_tokens=False)["input_ids"])
    return scripted_lm(tokenizer, script)


@pytest.mark.parametrize("variant", ["single_1", "multikey_3", "multivalue", "multiquery"])
def test_a_model_that_gives_every_answer_scores_one_and_half_the_answers_scores_half(tokenizer, variant):
    settings = _settings("niah", variants=variant, depths="0.2,0.8", trials=2, lengths="900")
    lm = _scripted(tokenizer, "niah", variant, 900, (0.2, 0.8), 2, lambda answers: " " + ", ".join(answers) + ".")
    records = run_settings(lm, "niah", settings).records
    assert [float(r["value"]) for r in records if r["metric"] == "score"] == [1.0] * 4
    assert {r["value"] for r in records if r["metric"] == "accuracy"} == {"1.0"}
    if variant in ("multivalue", "multiquery"):  # string_match_all: the fraction of answers found
        half = _scripted(tokenizer, "niah", variant, 900, (0.2, 0.8), 2, lambda answers: " " + ", ".join(answers[:2]))
        scores = [float(r["value"]) for r in run_settings(half, "niah", settings).records if r["metric"] == "score"]
        assert scores == [0.5] * 4


def test_decoding_stops_once_the_score_cannot_change_and_scores_as_the_full_budget_would(tokenizer):
    from ctxbench.synthetic import TOKENS_TO_GENERATE

    settings = _settings("niah", variants="multivalue", depths="0.5", trials=2, lengths="900")
    tail = " and then it keeps talking" * 20  # far past RULER's 128-token budget, no EOS
    full = _scripted(tokenizer, "niah", "multivalue", 900, (0.5,), 2, lambda answers: " " + ", ".join(answers) + tail)
    rows = [r for r in run_settings(full, "niah", settings).records if r["metric"] == "score"]
    assert [float(r["value"]) for r in rows] == [1.0, 1.0]
    for r in rows:  # stopped right after the last expected answer
        assert r["answer"] == ", ".join(json.loads(r["extra"])["answers"])
    half = _scripted(tokenizer, "niah", "multivalue", 900, (0.5,), 2, lambda answers: " " + ", ".join(answers[:2]) + tail)
    rows = [r for r in run_settings(half, "niah", settings).records if r["metric"] == "score"]
    assert [float(r["value"]) for r in rows] == [0.5, 0.5]  # could still find the others: the whole budget
    assert all(len(tokenizer(" " + r["answer"], add_special_tokens=False)["input_ids"]) == TOKENS_TO_GENERATE["niah"] for r in rows)


def test_an_answer_ends_at_the_models_end_of_turn_even_when_the_tokenizer_names_another_eos(tokenizer):
    """A wrong answer, the model's own end of turn (its generation config's eos, not the
    tokenizer's), then the needle: the text after the end of turn is not the answer."""
    from types import SimpleNamespace

    settings = _settings("niah", variants="single_1", depths="0.5", trials=2, lengths="900")
    turn_end = tokenizer.convert_tokens_to_ids("<s>")  # not the tokenizer's eos (</s>)
    assert turn_end != tokenizer.eos_token_id
    lm = _scripted(tokenizer, "niah", "single_1", 900, (0.5,), 2, lambda answers: " no idea<s> " + ", ".join(answers))
    assert all(turn_end in answer for answer in lm.model.script.values())
    lm.model.generation_config = SimpleNamespace(eos_token_id=[turn_end])
    rows = [r for r in run_settings(lm, "niah", settings).records if r["metric"] == "score"]
    assert [(float(r["value"]), r["answer"]) for r in rows] == [(0.0, "no idea")] * 2


def test_a_model_that_answers_nothing_scores_zero(copying_lm):
    copying_lm.model.match = 10_000
    records = run_settings(copying_lm, "niah", _settings("niah", variants="single_1", depths="0.5", trials=2)).records
    assert {r["value"] for r in records if r["metric"] == "score"} == {"0.0"}


@pytest.mark.parametrize("task,options", [("niah", dict(variants="multivalue", depths="0.5")), ("vt", dict(depths="0.5", lengths="1400")),
                                          ("cwe", dict(lengths="2100")), ("fwe", dict(lengths="600"))])  # fmt: skip
def test_every_method_sees_the_same_prompts(tiny_lm, task, options):
    from ctxbench.synthetic import build

    a = [build(task, None if task != "niah" else "multivalue", tiny_lm.tokenizer, int(options.get("lengths", 800)), 0.5, 0, t).ids for t in range(3)]
    b = [build(task, None if task != "niah" else "multivalue", tiny_lm.tokenizer, int(options.get("lengths", 800)), 0.5, 0, t).ids for t in range(3)]
    assert a == b
    if "depths" in options:
        options["protocol"] = "exact"
    settings = build_settings(get(task), [resolve("none"), resolve("yarn")], 2.0, options.pop("lengths", "800"), {**options, "trials": 2})
    records = run_settings(tiny_lm, task, settings).records
    lengths = {(r["method"], r["depth"], r["trial"]): r["tokens"] for r in records if r["metric"] == "score"}
    assert {k[1:]: v for k, v in lengths.items() if k[0] == "none"} == {k[1:]: v for k, v in lengths.items() if k[0] == "yarn"}


def test_shared_prefix_decoding_answers_as_each_prompt_alone(tiny_lm):
    import torch

    from ctxbench.model.decoding import decode_shared, greedy
    from ctxbench.synthetic import build

    prompts = [build("niah", "multikey_2", tiny_lm.tokenizer, 900, d, 0, t).ids for d in (0.2, 0.8) for t in range(2)]
    shared = {a.index: a.tokens for a in decode_shared(tiny_lm.model, prompts, 8, None)}
    alone = [tuple(greedy(tiny_lm.model, torch.tensor([p]), 8, None)[0]) for p in prompts]
    assert [shared[i] for i in range(len(prompts))] == alone


@pytest.mark.parametrize(
    "task,options,message",
    [
        ("niah", dict(variants="single_4"), "unknown niah variant 'single_4' — did you mean"),
        ("niah", dict(haystack="/does/not/exist.txt"), "haystack '/does/not/exist.txt' not found"),
        ("niah", dict(trials="0"), "--trials 0"),
        ("niah", dict(variants="single_1,,single_2"), "empty item"),
    ],
)
def test_bad_ruler_options_are_one_clear_error(task, options, message):
    with pytest.raises(UserError, match=message):
        _settings(task, **options)


def test_a_length_too_short_for_the_needles_names_the_minimum(tiny_lm):
    with pytest.raises(UserError, match="too short for niah multiquery .* at least"):
        get("niah").prepare(tiny_lm, _settings("niah", variants="multiquery", lengths="300"))


def test_decoding_passes_the_cache_without_a_deprecation_warning(tiny_lm):
    """transformers 5.24 renamed ``past_key_values`` to ``cache`` and warns on every call with the
    old name: a user's run must not print that warning once per decoding step."""
    import warnings

    from ctxbench.model.decoding import decode_shared
    from ctxbench.synthetic import build

    prompts = [build("niah", "single_1", tiny_lm.tokenizer, 600, None, 0, t, protocol="ruler").ids for t in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(decode_shared(tiny_lm.model, prompts, 4, None))


def test_a_dynamic_method_takes_the_cells_length_whichever_trials_run(tiny_lm):
    # RULER's prompts differ in length from trial to trial and prompt + budget <= length: the
    # frequencies a dynamic method decodes with are those of the cell's length, so a trial scores
    # the same in a run of 1 trial as of 6 (not those of the group's longest prompt)
    import torch

    from ctxbench.methods import frequencies
    from ctxbench.methods.patching import rotary_modules

    seen = []
    handle = rotary_modules(tiny_lm.model)[0].register_forward_pre_hook(lambda m, args: seen.append(m.inv_freq.clone()))
    try:
        for trials in (1, 6):
            settings = build_settings(get("niah"), [resolve("dynamic-ntk")], 2.0, "900", {"variants": "multivalue", "trials": trials})
            run_settings(tiny_lm, "niah", settings)
    finally:
        handle.remove()
    want, _ = frequencies(resolve("dynamic-ntk"), tiny_lm.geometry, 2.0, 900)
    assert seen and all(torch.equal(f, want) for f in seen)
