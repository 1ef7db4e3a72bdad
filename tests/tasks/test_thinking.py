"""``--think-budget`` and ``--prompt-mode``: a thinking budget apart from the answer budget, the reasoning
stripped before scoring, "ran out while thinking" counted apart, the length refusal, and the prompt
each row was scored on (its mode and the digest of its token ids).

No reasoning model can be downloaded here, so a scripted engine plays one: SmolLM2's tokenizer with
``<think>``/``</think>`` added as special tokens and a chat template whose generation prompt opens a
think block, and a model that thinks N tokens (the needle's text among them), closes the block and
answers, on ctxbench's real transformers decoding path (KV cache, shared prefixes). The tiny random
checkpoint holds the steered loop to a plain reference loop token for token."""

from __future__ import annotations

import hashlib
import json
import re
import struct
from types import SimpleNamespace

import pytest
import torch
from helpers import TRAINED, cli_main, one_error_line, run_settings, tiny_llama

from ctxbench.backends.hf import HfEngine as LoadedModel
from ctxbench.backends.hf import wrap
from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.model.decoding import decode_shared
from ctxbench.model.geometry import RopeGeometry
from ctxbench.model.thinking import Thinking, replay, split
from ctxbench.runner.settings import build_settings
from ctxbench.tasks import get, thinking
from ctxbench.tasks.trials import prompt_digest

THINK_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")  # fmt: skip
LENGTH = 1200


@pytest.fixture(scope="module")
def smol():
    """SmolLM2's tokenizer (read from the default model's GGUF file) with the two tags added as
    special tokens and a template that opens a think block, as DeepSeek-R1's does."""
    from transformers import AutoTokenizer

    from ctxbench.model.files import ALIASES

    path = ALIASES["smollm2-135m"]()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tok.add_special_tokens({"additional_special_tokens": ["<think>", "</think>"]})
    tok.chat_template = THINK_TEMPLATE
    return tok


class ThinkingLM(torch.nn.Module):
    """A scripted reasoning model. After a prompt of ``prompt_len`` tokens it writes ``thought``
    tokens of reasoning (``reasoning`` repeated: the needle's text), then ``</think>`` -- or, with
    ``close=False``, stops (EOS) inside the block -- and after any ``</think>`` it writes
    ``answer(prompt text)`` and EOS. Its "KV cache" is the token history in a real DynamicCache, so
    ctxbench's shared prefixes, cache copies and batches run as with a transformer."""

    def __init__(self, tok, prompt_len: int, thought: int, answer, close: bool = True) -> None:
        super().__init__()
        self.tok, self.prompt_len, self.thought, self.answer, self.close = tok, prompt_len, thought, answer, close
        self.config = SimpleNamespace(num_hidden_layers=1, num_key_value_heads=1, num_attention_heads=1, head_dim=1, hidden_size=1,
                                      vocab_size=len(tok), _attn_implementation="sdpa")  # fmt: skip
        self.rotary = torch.nn.Module()
        self.rotary.register_buffer("inv_freq", 1.0 / (10000.0 ** (torch.arange(0, 16, 2).float() / 16)))
        self.rotary.attention_scaling = 1.0
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.open_id, self.close_id = (tok.convert_tokens_to_ids(t) for t in ("<think>", "</think>"))
        self.seen: list[list[int]] = []  # each answer's tokens after the prompt, as fed back

    def _next(self, row: list[int]) -> int:
        prompt, gen = row[: self.prompt_len], row[self.prompt_len :]
        text = self.tok.decode(prompt)
        key = re.search(r"The pass key is (\d+)", text).group(1)
        if self.close_id in gen:
            after = gen[gen.index(self.close_id) + 1 :]
            want = self.tok(self.answer(key), add_special_tokens=False)["input_ids"]
            return want[len(after)] if len(after) < len(want) else self.tok.eos_token_id
        reasoning = self.tok(f" I read that the pass key is {key}.", add_special_tokens=False)["input_ids"]
        if len(gen) < self.thought:
            return reasoning[len(gen) % len(reasoning)]
        return self.close_id if self.close else self.tok.eos_token_id

    def forward(self, input_ids, past_key_values=None, use_cache=True, logits_to_keep=0, **kwargs):
        ids = input_ids.float()[:, None, :, None]
        history, _ = past_key_values.update(ids, ids, 0)
        rows = history[:, 0, :, 0].long().tolist()
        logits = torch.full((len(rows), 1, len(self.tok)), -1e4)
        for b, row in enumerate(rows):
            if len(row) >= self.prompt_len:
                logits[b, 0, self._next(row)] = 0.0
            else:
                logits[b, 0, self.tok.eos_token_id] = 0.0
        return SimpleNamespace(logits=logits)


def _lm(tok, **script) -> LoadedModel:
    model = ThinkingLM(tok, **script)
    return LoadedModel(model, tok, RopeGeometry(head_dim=16, rotary_dim=16, base=10000.0, trained_len=TRAINED),
                       name="scripted-thinker", digest="scripted-thinker", device="cpu", dtype="float32")  # fmt: skip


def _passkey(tok, budget: int | None = 200, thought: int = 300, answer=lambda key: f" {key}.", close: bool = True, **options):
    """One passkey cell in chat mode (the template opens the block): the scripted model's rows."""
    settings = build_settings(get("passkey"), [resolve("none")], 2.0, str(LENGTH),
                              {"trials": 2, "depths": "0.5", "chat": True, **({"think_budget": budget} if budget is not None else {}),
                               **options})  # fmt: skip
    settings = __import__("dataclasses").replace(settings, max_new_tokens=32)  # the answer budget of the acceptance
    prompt_len = LENGTH - thinking.reserve(settings)
    lm = _lm(tok, prompt_len=prompt_len, thought=thought, answer=answer, close=close)
    records = run_settings(lm, "passkey", settings).records
    return lm, [r for r in records if r["metric"] == "correct"], [r for r in records if r["metric"] == "accuracy"]


def test_a_budget_that_runs_out_forces_end_of_think_and_the_answer_is_scored_alone(smol):
    # acceptance: thinks 300, budget 200, answer budget 32 -> forced </think> at 200, the answer scored
    _, rows, [agg] = _passkey(smol, budget=200, thought=300)
    for r in rows:
        extra = json.loads(r["extra"])
        assert (extra["think_tokens"], extra["think_exhausted"], extra["think_closed"]) == (200, True, True)
        assert r["value"] == "1" and r["answer"] == f"{extra['key']}."
    assert json.loads(agg["extra"])["ran_out_thinking"] == 2


def test_the_answer_budget_is_intact_after_thinking(smol):
    long = lambda key: f" {key}" + " and more words" * 40  # noqa: E731  (far past the 32-token answer budget)
    _, rows, _ = _passkey(smol, budget=200, thought=300, answer=long)
    for r in rows:
        assert len(smol(" " + r["answer"], add_special_tokens=False)["input_ids"]) == 32
        assert r["value"] == "1"


def test_reasoning_that_holds_the_needle_is_never_scored(smol):
    # the reasoning repeats the key; the answer after </think> is wrong: 0 (it would be 1 if the reasoning were scored)
    _, rows, [agg] = _passkey(smol, budget=200, thought=300, answer=lambda key: " 11111.")
    assert [r["value"] for r in rows] == ["0", "0"]
    assert all("11111" in r["answer"] and "pass key" not in r["answer"] for r in rows)
    assert json.loads(agg["extra"])["ran_out_thinking"] == 2 and json.loads(agg["extra"])["wrong"] == 0


def test_a_model_that_closes_early_is_not_cut(smol):
    _, rows, [agg] = _passkey(smol, budget=200, thought=50)
    assert {(json.loads(r["extra"])["think_tokens"], json.loads(r["extra"])["think_exhausted"]) for r in rows} == {(50, False)}
    assert json.loads(agg["extra"])["right"] == 2 and json.loads(agg["extra"])["ran_out_thinking"] == 0


def test_an_answer_inside_a_block_that_never_closes_scores_zero(smol):
    _, rows, [agg] = _passkey(smol, budget=200, thought=40, close=False)
    assert [r["value"] for r in rows] == ["0", "0"] and all(r["answer"] == "" for r in rows)
    assert {json.loads(r["extra"])["think_closed"] for r in rows} == {False}
    assert json.loads(agg["extra"])["wrong"] == 2


def test_budget_zero_closes_the_block_at_once(smol):
    _, rows, _ = _passkey(smol, budget=0, thought=300)
    assert {(json.loads(r["extra"])["think_tokens"], r["value"]) for r in rows} == {(0, "1")}


def test_rows_record_the_prompt_mode_and_the_digest_of_its_token_ids(smol):
    lm, rows, _ = _passkey(smol, budget=200)
    from ctxbench.tasks.passkey import build_prompt

    for r in rows:
        extra = json.loads(r["extra"])
        ids = build_prompt(smol, LENGTH - 202, 0.5, extra["key"], True).ids
        assert len(ids) == LENGTH - 202  # RULER's accounting: the cell's length holds prompt + budget + 2 tags
        assert extra["prompt_mode"] == "chat"
        assert extra["prompt_sha256"] == "sha256:" + hashlib.sha256(struct.pack(f"<{len(ids)}I", *ids)).hexdigest()


def test_the_prompt_digest_is_sha256_of_little_endian_uint32_ids():
    assert prompt_digest([1, 2, 258]) == "sha256:" + hashlib.sha256(bytes([1, 0, 0, 0, 2, 0, 0, 0, 2, 1, 0, 0])).hexdigest()


def test_the_think_options_are_identity_only_when_given(smol):
    _, plain, _ = _passkey(smol, budget=None, thought=0)
    _, thought, _ = _passkey(smol, budget=200)
    assert "think_budget" not in json.loads(plain[0]["options"])  # rows before the option read as the default
    assert json.loads(thought[0]["options"])["think_budget"] == 200


# ---- the real decoding path: the steered loop is one generation on one cache ----


def test_the_steered_loop_equals_a_plain_reference_loop_on_a_random_checkpoint():
    """tiny random Llama: a prompt that opens a block (id 60), budget 3, close id 61. The reference:
    greedy on the whole sequence each step, the close put in after 3 reasoning tokens."""
    model = tiny_llama()
    think = Thinking(budget=3, open=60, close=61)
    prompt = list(range(100, 130)) + [60, 10]
    got = next(decode_shared(model, [prompt], 5, None, think=think))

    def argmax(seq):
        with torch.no_grad():
            return int(model(torch.tensor([seq])).logits[0, -1].argmax())

    seq, want = list(prompt), []
    for step in range(3 + 1 + 5):
        t = argmax(seq)
        t = 61 if step == 3 and t != 61 else t
        want.append(t)
        seq.append(t)
        if t == 61 and step < 3:
            break
    want = want[: len(got.tokens)] if 61 in want[:3] else want
    assert list(got.tokens) == want
    assert split(got.tokens, think, prompt).reasoning == tuple(want[:3])
    assert got.forced == (61 not in want[:3])


def test_an_engine_s_two_step_generation_is_replayed_by_ctxbench_s_own_rule():
    """vLLM's path: the first step stops at the budget; ctxbench replays it, puts the close in and
    asks for the rest of the answer budget on the prompt plus what it kept."""
    from ctxbench.backends.vllm import VllmSession

    think = Thinking(budget=4, open=7, close=8)
    calls = []

    class Llm:
        def generate(self, prompts, params, use_tqdm=False):
            calls.append(([p["prompt_token_ids"] for p in prompts], params.max_tokens))
            outs = []
            for p in prompts:
                ids = p["prompt_token_ids"]
                new = [5] * params.max_tokens if 8 not in ids else [1, 2, 3, 9][: params.max_tokens]
                outs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=new, stop_reason=None)]))
            return outs

    lm = SimpleNamespace(stop=(9,), sampling=SimpleNamespace)
    [a] = list(VllmSession(lm, Llm()).answers([[100, 7]], 3, think=think))
    assert a.tokens == (5, 5, 5, 5, 8, 1, 2, 3) and a.forced
    assert calls == [([[100, 7]], 6), ([[100, 7, 5, 5, 5, 5, 8]], 3)]
    kept, steer, ended = replay(think, [100, 7], 3, [5, 5, 8, 1, 2, 3, 4], (9,))
    assert kept == [5, 5, 8, 1, 2, 3] and ended and not steer.forced


# ---- bad input: one line before the plan ----


def test_a_negative_budget_is_one_line(monkeypatch, capsys):
    code, _, err = cli_main(["niah", "--think-budget", "-5", "--dry-run"], monkeypatch, capsys)
    one_error_line(code, err, ["--think-budget -5"])


def test_a_budget_that_does_not_fit_the_length_is_one_line_with_the_numbers(monkeypatch, capsys):
    code, _, err = cli_main(["niah", "--think-budget", "4096", "--len", "4k", "--dry-run"], monkeypatch, capsys)
    one_error_line(code, err, ["length 4096", "4096 thinking tokens", "128 answer tokens"])


def test_a_cell_too_short_for_prompt_and_thinking_is_refused_with_the_numbers(smol):
    settings = build_settings(get("passkey"), [resolve("none")], 2.0, "400", {"trials": 1, "depths": "0.5", "think_budget": 350})
    with pytest.raises(UserError, match=r"length 400 is too short for a prompt of at least \d+ tokens beside 350 thinking tokens"):
        run_settings(_lm(smol, prompt_len=48, thought=0, answer=str), "passkey", settings)


def test_tags_the_tokenizer_cannot_encode_as_one_token_are_one_line(smol):
    settings = build_settings(get("passkey"), [resolve("none")], 2.0, str(LENGTH),
                              {"trials": 1, "depths": "0.5", "think_budget": 10, "think_tags": "<reason>,</reason>"})  # fmt: skip
    with pytest.raises(UserError, match="'<reason>' is .* tokens for this model's tokenizer, not one tag token"):
        run_settings(_lm(smol, prompt_len=LENGTH - 12, thought=0, answer=str), "passkey", settings)


def test_a_model_without_thinking_is_unchanged_and_told_so(tokenizer, capsys):
    lm = wrap(tiny_llama(), tokenizer, name="tiny-llama", digest="tiny-llama-seed0")
    settings = build_settings(get("passkey"), [resolve("none")], 2.0, "300", {"trials": 1, "depths": "0.5", "think_budget": 64})
    rows = [r for r in run_settings(lm, "passkey", settings).records if r["metric"] == "correct"]
    assert "think_budget" not in json.loads(rows[0]["options"]) and "think_tokens" not in json.loads(rows[0]["extra"])
    assert capsys.readouterr().err.count("--think-budget changes nothing") == 1


# ---- the prompt mode ----


def test_prompt_mode_completion_is_no_chat_and_rows_say_so(tokenizer):
    lm = wrap(tiny_llama(), tokenizer, name="tiny-llama", digest="tiny-llama-seed0")
    lm.tokenizer.chat_template = THINK_TEMPLATE
    settings = build_settings(get("niah"), [resolve("none")], 2.0, "700", {"variants": "single_1", "trials": 1, "prompt_mode": "completion"})
    rows = [r for r in run_settings(lm, "niah", settings).records if r["metric"] == "score"]
    assert json.loads(rows[0]["options"])["chat"] is False and json.loads(rows[0]["extra"])["prompt_mode"] == "completion"


def test_prompt_mode_and_chat_that_disagree_are_one_line(monkeypatch, capsys):
    code, _, err = cli_main(["niah", "--prompt-mode", "completion", "--chat", "--dry-run"], monkeypatch, capsys)
    one_error_line(code, err, ["--prompt-mode completion", "--chat"])


def test_an_unknown_prompt_mode_suggests_the_closest(monkeypatch, capsys):
    code, _, err = cli_main(["niah", "--prompt-mode", "chatt", "--dry-run"], monkeypatch, capsys)
    one_error_line(code, err, ["did you mean 'chat'"])


def _both_modes(tokenizer, trials: int = 3):
    """A niah grid of ``--prompt-mode chat,completion`` on the tiny model (a chat template set), as
    the CLI runs it (``execute``: one run per mode, into one grid)."""
    from ctxbench.runner.grid import Job, execute

    lm = wrap(tiny_llama(), tokenizer, name="tiny-llama", digest="tiny-llama-seed0")
    lm.tokenizer.chat_template = THINK_TEMPLATE
    settings = build_settings(get("niah"), [resolve("none")], 2.0, "700",
                              {"variants": "single_1", "trials": trials, "prompt_mode": "chat,completion"})  # fmt: skip
    return lm, settings, execute([Job(get("niah"), settings)], lm).records


def test_a_list_of_prompt_modes_runs_each_and_rank_pairs_them_trial_by_trial(tokenizer):
    from ctxbench.report.paired import rank
    from ctxbench.tasks import registry

    _, _, records = _both_modes(tokenizer)
    score = {(json.loads(r["options"])["chat"], int(r["trial"])): float(r["value"]) for r in records if r["metric"] == "score"}
    assert sorted(score) == [(False, t) for t in range(3)] + [(True, t) for t in range(3)]
    (ranking,) = rank(records, 700, tasks=registry())
    assert sorted(ranking.labels) == ["none (chat)", "none (completion)"] and ranking.n == 3
    i, j = ranking.labels.index("none (chat)"), ranking.labels.index("none (completion)")
    # the paired difference is completion minus chat, trial by trial (the same needles in both)
    assert ranking.delta[i][j] == pytest.approx(sum(score[(False, t)] - score[(True, t)] for t in range(3)) / 3)


def test_each_mode_s_rows_carry_their_mode_and_the_digest_of_the_prompt_they_were_scored_on(tokenizer):
    from ctxbench.runner.showprompt import prompt_ids
    from ctxbench.tasks import registry

    lm, _, records = _both_modes(tokenizer, trials=2)
    rows = [r for r in records if r["metric"] == "score"]
    assert {json.loads(r["extra"])["prompt_mode"] for r in rows} == {"chat", "completion"}
    for r in rows:
        ids = prompt_ids(r, lm, registry())  # the trial's prompt rebuilt from the row, as show-prompt does
        assert json.loads(r["extra"])["prompt_mode"] == ("chat" if json.loads(r["options"])["chat"] else "completion")
        assert json.loads(r["extra"])["prompt_sha256"] == "sha256:" + hashlib.sha256(struct.pack(f"<{len(ids)}I", *ids)).hexdigest()


@pytest.mark.parametrize(("template", "said"), [
    (THINK_TEMPLATE, "prompt mode chat (auto: the model's tokenizer ships a chat template, RULER's protocol)"),
    (None, "prompt mode completion (auto: the model's tokenizer ships no chat template)"),
])  # fmt: skip
def test_prompt_mode_auto_says_its_choice_and_why_once_in_the_run_s_notes(tokenizer, template, said):
    from ctxbench.runner.grid import Job, execute

    lm = wrap(tiny_llama(), tokenizer, name="tiny-llama", digest="tiny-llama-seed0")
    lm.tokenizer.chat_template = template
    settings = build_settings(get("niah"), [resolve("none")], 2.0, "700", {"variants": "single_1", "trials": 1, "prompt_mode": "auto"})
    outcome = execute([Job(get("niah"), settings)], lm)
    assert [n for n in outcome.notes if n.startswith("prompt mode")] == [said]
    assert json.loads(next(r for r in outcome.records if r["metric"] == "score")["extra"])["prompt_mode"] == said.split()[2]


def test_compare_says_when_the_two_files_ran_other_prompt_modes_and_pairs_none(tokenizer, tmp_path):
    from ctxbench.report.compare import compare
    from ctxbench.results.store import write_records

    _, _, records = _both_modes(tokenizer, trials=1)
    base, new = tmp_path / "a.csv", tmp_path / "b.csv"
    write_records(base, [r for r in records if json.loads(r["options"])["chat"]])
    write_records(new, [r for r in records if not json.loads(r["options"])["chat"]])
    changes, notes = compare(str(base), str(new))
    assert [n for n in notes if "prompt mode" in n] == [
        "niah single_1: BASE ran prompt mode chat, NEW completion; those cells are not paired "
        "(compare runs of one mode, or rank both modes of one file)"]  # fmt: skip
    assert {c.status for c in changes} == {"missing", "new"}  # not paired: each file's cell is missing from the other


@pytest.mark.parametrize(("budget", "thought", "ran_out"), [(200, 300, 2), (200, 100, 0), (None, 0, None)])
def test_the_report_counts_ran_out_while_thinking_apart_only_when_a_trial_did(smol, budget, thought, ran_out):
    from ctxbench.parsing import len_label
    from ctxbench.report.formats import pivots, to_markdown
    from ctxbench.tasks import registry

    _, rows, accuracy = _passkey(smol, budget=budget, thought=thought)
    # the reference: the trial rows whose budget ran out
    assert sum(bool(json.loads(r["extra"]).get("think_exhausted")) for r in rows) == (ran_out or 0)
    text = to_markdown(pivots(rows + accuracy, registry()))
    said = [line for line in text.splitlines() if line.startswith("ran out while thinking")]
    assert said == ([f"ran out while thinking (not counted as wrong answers): none {len_label(LENGTH)} {ran_out}/2"] if ran_out else [])
