"""Passkey task: prompt builder properties, scoring, prefix-cache reuse, decoding, rows."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from helpers import run_settings

from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.methods.patching import applied
from ctxbench.model.decoding import decode_shared, greedy, plan
from ctxbench.model.decoding import extend as prefix_cache
from ctxbench.results.store import read_records
from ctxbench.tasks import passkey
from ctxbench.tasks.base import Context
from ctxbench.tasks.common import parse_depths
from ctxbench.tasks.passkey import build_prompt, draw_key, first_integer, fixed_tokens

LENGTHS = [260, 300, 457, 1000, 1500, 2048, 3333, 5000]
DEPTHS = [i / 20 for i in range(21)]


@pytest.mark.parametrize("length", LENGTHS)
def test_prompt_has_the_requested_length(tokenizer, length):
    for depth in DEPTHS:
        assert len(build_prompt(tokenizer, length, depth, 54321).ids) == length


@pytest.mark.parametrize("length", [1000, 2048, 5000])
def test_needle_sits_at_the_requested_depth_of_the_filler(tokenizer, length):
    fixed = fixed_tokens(tokenizer)
    room = length - fixed
    intro = build_prompt(tokenizer, length, 0.0, 54321).needle_pos  # needle right after the instruction
    longest_sentence = 22  # "There and back again. " in bytes
    for depth in DEPTHS:
        p = build_prompt(tokenizer, length, depth, 54321)
        filler_before = p.needle_pos - intro
        assert abs(filler_before - depth * room) <= longest_sentence / 2 + 1
        assert abs(p.depth - p.needle_pos / length) < 1e-12


def test_everything_before_the_key_is_the_same_for_every_key(tokenizer):
    prompts = [build_prompt(tokenizer, 1500, 0.4, key) for key in (10000, 54321, 99999)]
    assert len({p.ids[: p.prefix_len] for p in prompts}) == 1
    assert all(p.prefix_len == p.key_span[0] for p in prompts)


def test_key_span_decodes_to_the_key_and_text_follows_the_protocol(tokenizer):
    p = build_prompt(tokenizer, 800, 0.5, 48213)
    assert tokenizer.decode(list(p.ids[p.key_span[0] : p.key_span[1]])).strip() == "48213"
    text = tokenizer.decode(list(p.ids))
    assert text.startswith(passkey.INSTRUCTION + "\nThe grass is green.")
    assert "\nThe pass key is 48213. Remember it. 48213 is the pass key.\n" in text
    assert text.endswith("\nWhat is the pass key? The pass key is")


def test_length_shorter_than_the_fixed_text_is_a_user_error(tokenizer):
    with pytest.raises(UserError, match="shorter than the passkey prompt's fixed text"):
        build_prompt(tokenizer, 100, 0.5, 12345)


@pytest.mark.parametrize(
    "answer,key,correct",
    [
        (" 12345. Remember it.", 12345, True),
        ("12345", 12345, True),
        (" 123456", 12345, False),  # extra digits
        (" one two three", 12345, False),  # no digits
        (" 012345", 12345, True),  # leading zero: the integer is the same
        (" 1234 5", 12345, False),  # split by a space
        ("The key is 54321 not 12345", 12345, False),  # the first integer counts
    ],
)
def test_first_integer_in_the_answer_is_compared_with_the_key(answer, key, correct):
    assert (first_integer(answer) == key) is correct


def test_key_split_across_tokens_is_reassembled_by_decoding(tokenizer):
    ids = tokenizer(" 98765.", add_special_tokens=False)["input_ids"]
    assert len(ids) > 2  # one token per digit with the byte tokenizer
    assert first_integer(tokenizer.decode(ids)) == 98765


def test_keys_are_seeded_and_have_the_requested_digits():
    keys = [draw_key(0, 4096, 0.5, t, 5) for t in range(50)]
    assert keys == [draw_key(0, 4096, 0.5, t, 5) for t in range(50)]
    assert all(10000 <= k <= 99999 for k in keys) and len(set(keys)) > 40
    assert draw_key(1, 4096, 0.5, 0, 5) != draw_key(0, 4096, 0.5, 0, 5)


@pytest.mark.parametrize("method,params", [("none", {}), ("yarn", {}), ("rerope", {"window": 16}), ("dynamic-ntk", {})])
def test_prefix_cache_reuse_equals_a_full_forward(tiny_lm, method, params):
    model = tiny_lm.model
    p = build_prompt(tiny_lm.tokenizer, 300, 0.5, 24680)
    with applied(model, tiny_lm.geometry, resolve(method, params), 2.0, len(p.ids) + 10), torch.no_grad():
        full = model(torch.tensor([p.ids])).logits[0, -1]
        cache = prefix_cache(model, list(p.ids[: p.prefix_len]))
        reused = model(torch.tensor([p.ids[p.prefix_len :]]), past_key_values=copy.deepcopy(cache), use_cache=True).logits[0, -1]
    assert torch.allclose(full, reused, atol=1e-5)


def test_greedy_loop_equals_generate(tiny_lm):
    model = tiny_lm.model
    ids = torch.tensor([build_prompt(tiny_lm.tokenizer, 300, 0.5, 13579).ids])
    ours = greedy(model, ids, 10, eos=None)[0]
    theirs = model.generate(ids, max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0)[0, ids.shape[1] :]
    assert ours == theirs.tolist()


def test_decoding_stops_where_generate_does_when_the_tokenizer_names_another_eos(tiny_lm):
    """transformers 5.17 gives SmolLM2's GGUF tokenizer <|im_start|> as eos while the generation
    config says <|im_end|>: decoding stops at the generation config's eos, as generate does."""
    from types import SimpleNamespace

    from ctxbench.model.decoding import stop_tokens

    model = tiny_lm.model
    ids = torch.tensor([build_prompt(tiny_lm.tokenizer, 300, 0.5, 13579).ids])
    free = greedy(model, ids, 10, eos=None)[0]
    k = next(i for i in range(2, 10) if free[i] not in free[:i])  # a token first produced at step k >= 2
    tokenizer = SimpleNamespace(eos_token_id=next(t for t in range(300) if t not in free))  # never produced
    model.generation_config.eos_token_id = free[k]
    ours = greedy(model, ids, 10, eos=stop_tokens(model, tokenizer))[0]
    theirs = model.generate(ids, max_new_tokens=10, do_sample=False, pad_token_id=0)[0, ids.shape[1] :]
    assert ours == theirs.tolist() == free[: k + 1]
    assert stop_tokens(model, tokenizer) == (free[k], tokenizer.eos_token_id)


def test_batched_trials_decode_like_single_trials(tiny_lm):
    model = tiny_lm.model
    prompts = [build_prompt(tiny_lm.tokenizer, 300, 0.5, key) for key in (11111, 22222, 33333)]
    base = prefix_cache(model, list(prompts[0].ids[: prompts[0].prefix_len]))
    cache = copy.deepcopy(base)
    cache.batch_repeat_interleave(3)
    batched = greedy(model, torch.tensor([p.ids[p.prefix_len :] for p in prompts]), 10, None, cache)
    single = [greedy(model, torch.tensor([p.ids]), 10, None)[0] for p in prompts]
    assert batched == single


def _settings(**kw):
    base = dict(methods=[resolve("none"), resolve("yarn")], factors=[2.0], lengths=[300, 400], depths=[0.0, 1.0], trials=2)
    return passkey.Settings(**{**base, **kw})


def test_rows_per_trial_and_accuracy_per_cell(tiny_lm, tmp_path):
    result = run_settings(tiny_lm, "passkey", _settings(), out=tmp_path / "pk.csv", seed=5)
    records = read_records(tmp_path / "pk.csv")
    trials = [r for r in records if r["metric"] == "correct"]
    cells = [r for r in records if r["metric"] == "accuracy"]
    assert len(trials) == 2 * 2 * 2 * 2 and len(cells) == 8
    assert {r["value"] for r in trials} <= {"0", "1"}
    again = run_settings(tiny_lm, "passkey", _settings(), out=tmp_path / "pk.csv", seed=5)
    assert result.ran == 8 and again.ran == 0 and again.skipped == 8


def test_more_trials_rerun_the_cells_that_hold_fewer_and_keep_the_old_trials(tiny_lm, tmp_path):
    out = tmp_path / "pk.csv"
    few = _settings(methods=[resolve("none")], trials=2)
    run_settings(tiny_lm, "passkey", few, out=out, seed=5)
    before = {(r["length"], r["depth"], r["trial"]): r["answer"] for r in read_records(out) if r["metric"] == "correct"}
    more = run_settings(tiny_lm, "passkey", _settings(methods=[resolve("none")], trials=3), out=out, seed=5)
    records = read_records(out)
    after = {(r["length"], r["depth"], r["trial"]): r["answer"] for r in records if r["metric"] == "correct"}
    assert more.ran == 4 and more.skipped == 0
    assert len(after) == 4 * 3 and {k: after[k] for k in before} == before  # trial i is the same trial
    assert {json.loads(r["extra"])["trials"] for r in records if r["metric"] == "accuracy"} == {3}
    assert any("fewer than --trials 3" in n for n in more.notes)


def test_fewer_trials_keep_the_cells_that_hold_more(tiny_lm, tmp_path):
    out = tmp_path / "pk.csv"
    run_settings(tiny_lm, "passkey", _settings(methods=[resolve("none")], trials=3), out=out, seed=5)
    again = run_settings(tiny_lm, "passkey", _settings(methods=[resolve("none")], trials=2), out=out, seed=5)
    assert again.ran == 0 and again.skipped == 4
    assert len([r for r in read_records(out) if r["metric"] == "correct"]) == 4 * 3


def test_same_seed_same_keys_and_answers(tiny_lm, tmp_path):
    runs = [run_settings(tiny_lm, "passkey", _settings(), out=tmp_path / f"{i}.csv", seed=3).records for i in range(2)]
    strip = [[(r["method"], r["depth"], r["trial"], r["value"], r["answer"], r["extra"]) for r in rs if r["metric"] == "correct"] for rs in runs]
    assert strip[0] == strip[1]


def test_a_model_that_copies_the_key_passes_every_trial_with_the_key_as_answer(copying_lm):
    """Scoring end to end on a fake model that retrieves perfectly (an ideal induction head)."""
    records = run_settings(copying_lm, "passkey", _settings(methods=[resolve("none")]), seed=7).records
    trials = [r for r in records if r["metric"] == "correct"]
    assert len(trials) == 8 and {r["value"] for r in trials} == {"1"}
    for r in trials:
        key = json.loads(r["extra"])["key"]
        assert r["answer"].startswith(f"{key}.")  # 10 new byte tokens: the key and ". Re"
    accuracy = {r["metric"]: float(r["value"]) for r in records if r["trial"] == "all" and r["length"] == "300" and r["depth"] == "0.0"}
    assert accuracy["accuracy"] == 1.0 and accuracy["accuracy_lo"] == pytest.approx(0.3424, abs=1e-4) and accuracy["accuracy_hi"] == 1.0


def test_a_model_that_answers_nothing_fails_every_trial(copying_lm):
    copying_lm.model.match = 10_000  # never finds an earlier occurrence: answers EOS at once
    records = run_settings(copying_lm, "passkey", _settings(methods=[resolve("none")])).records
    assert {r["value"] for r in records if r["metric"] == "correct"} == {"0"}


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: parse_depths(None, "0.5,1.5"), "outside"),
        (lambda: parse_depths(None, "-0.1"), "outside"),
        (lambda: parse_depths(0, None), "--depths 0"),
        (lambda: parse_depths(3, "0.5"), "not both"),
        (lambda: passkey.validate(_settings(trials=0)), "--trials 0"),
    ],
)
def test_bad_passkey_settings_raise_one_clear_error(call, message):
    with pytest.raises(UserError, match=message):
        call()


def test_default_depths_are_five_evenly_spaced():
    assert parse_depths() == [0.0, 0.25, 0.5, 0.75, 1.0]


@pytest.mark.parametrize("length", [300, 1000, 3333])
def test_every_depth_and_key_of_a_length_starts_with_one_shared_stream(tokenizer, length):
    prompts = [build_prompt(tokenizer, length, d, key) for d in DEPTHS for key in (10000, 99999, 54321)]
    longest = max(prompts, key=lambda p: p.shared_len)
    for p in prompts:
        assert p.ids[: p.shared_len] == longest.ids[: p.shared_len]
        assert p.shared_len < p.prefix_len  # the needle's head follows the shared stream


def _answers(lm, settings, groups):
    ctx = Context("passkey", "x", state=tuple(settings.lengths))
    out = {}
    for group in groups:
        for cell, rows in passkey.run_group(lm, ctx, group, settings):
            out.update({(cell.depth, r.trial): (r.answer, r.value) for r in rows})
    return out


@pytest.mark.parametrize("method,params", [("none", {}), ("dynamic-ntk", {}), ("self-extend", {"window": 16, "group": 4})])
def test_depths_run_together_on_one_running_prefix_answer_as_if_run_alone(counting_lm, method, params):
    settings = passkey.Settings(methods=(resolve(method, params),), factors=(2.0,), lengths=(400,), depths=(0.0, 0.3, 0.7, 1.0), trials=3)
    cells = passkey.cells(settings, Context("passkey", "x", state=(400,)))
    assert passkey.groups(cells, settings) == [cells]  # one group: every depth of the length
    together = _answers(counting_lm, settings, [cells])
    fed_together = sum(b * n for b, n in counting_lm.forwards if n > 1)  # prompt tokens, not decoding steps
    counting_lm.forwards.clear()
    alone = _answers(counting_lm, settings, [[c] for c in cells])
    fed_alone = sum(b * n for b, n in counting_lm.forwards if n > 1)
    assert together == alone
    prompts = [build_prompt(counting_lm.tokenizer, 400, c.depth, draw_key(0, 400, c.depth, t, 5)).ids for c in cells for t in range(3)]
    # forwards of one token are left out of both counts: they cannot be told from decoding steps
    assert fed_together == sum(n for n in plan(prompts).pieces(prompts) if n > 1) < fed_alone


def test_shared_decoding_equals_decoding_each_prompt_alone(tiny_lm):
    prompts = [build_prompt(tiny_lm.tokenizer, 300, d, key).ids for d in (0.0, 0.5, 1.0) for key in (11111, 22222, 31313)]
    shared = {a.index: a.tokens for a in decode_shared(tiny_lm.model, prompts, 10, None)}
    single = [tuple(greedy(tiny_lm.model, torch.tensor([p]), 10, None)[0]) for p in prompts]
    assert [shared[i] for i in range(len(prompts))] == single
