"""LongBench v2's reference modes (``ctxbench longbench2 --template longbench|lm-eval``): the token
ids ctxbench feeds equal those the reference would, built here from copies of the references (below,
written from the upstream files: THUDM/LongBench ``prompts/0shot.txt`` and ``pred.py`` at 2e00731;
lm-evaluation-harness ``lm_eval/tasks/longbench2/_longbench_common_yaml``, ``TemplateLM._encode_pair``
and ``HFLM._loglikelihood_tokens`` at 0.4.13.dev0, 4e7e0d4), on a fixture of items whose prompts are cut and not;
every item runs by default and the plan says how many; rows before ``--template`` read as ``legacy``."""

from __future__ import annotations

import json

import jinja2
import pytest
from helpers import byte_tokenizer, run_settings
from tokenizers import processors

from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.results.identity import complete_options
from ctxbench.runner.settings import build_settings
from ctxbench.synthetic import longbench2 as lb
from ctxbench.tasks import get, registry
from ctxbench.tasks.longbench2 import build

# --- THUDM/LongBench prompts/0shot.txt (2e00731), copied ---
TEMPLATE_0SHOT = ('Please read the following text and answer the question below.\n\n<text>\n$DOC$\n</text>\n\nWhat is the correct '
                  'answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\nFormat your response as '
                  'follows: "The correct answer is (insert answer here)".')  # fmt: skip


def pred_py_prompt(item: dict) -> str:
    """pred.py ``get_pred``: the template's ``replace`` calls."""
    return (TEMPLATE_0SHOT.replace('$DOC$', item['context'].strip()).replace('$Q$', item['question'].strip())
            .replace('$C_A$', item['choice_A'].strip()).replace('$C_B$', item['choice_B'].strip())
            .replace('$C_C$', item['choice_C'].strip()).replace('$C_D$', item['choice_D'].strip()))  # fmt: skip


def pred_py_ids(tokenizer, item: dict, max_len: int, chat: bool) -> list[int]:
    """pred.py ``query_llm``'s truncation (``model in model_map``), then what the server tokenises:
    the chat template around the decoded prompt (``messages=[{"role": "user", ...}]``), or the
    prompt as sent."""
    prompt = pred_py_prompt(item)
    input_ids = tokenizer.encode(prompt)
    if len(input_ids) > max_len:
        input_ids = input_ids[:max_len//2] + input_ids[-max_len//2:]  # noqa: E226
        prompt = tokenizer.decode(input_ids, skip_special_tokens=True)
    if chat:
        return list(tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=True, add_generation_prompt=True,
                                                  return_dict=True)["input_ids"])  # fmt: skip
    return tokenizer.encode(prompt)


# --- lm-evaluation-harness lm_eval/tasks/longbench2/_longbench_common_yaml (0.4.13.dev0, 4e7e0d4), copied ---
DOC_TO_TEXT = ("Please read the following text and answer the question below.\n\n<text>\n{{context}}\n</text>\n\nWhat is the correct "
               "answer to this question: {{question.strip()}}\nChoices:\n(A) {{choices[0]}}\n(B) {{choices[1]}}\n(C) {{choices[2]}}\n"
               "(D) {{choices[3]}}\n\nAnswer:")  # fmt: skip
DOC_TO_CHOICE = ["A", "B", "C", "D"]
TARGET_DELIMITER = " "


def lm_eval_requests(tokenizer, item: dict, max_length: int) -> list[tuple[list[int], list[int]]]:
    """Per choice: the tokens the model reads and the continuation's tokens it scores
    (``_encode_pair``, then ``_loglikelihood_tokens``' ``(context_enc + continuation_enc)
    [-(max_length + 1):][:-1]``)."""
    doc = {**item, "choices": [item[f"choice_{x}"] for x in "ABCD"]}
    context = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True).from_string(DOC_TO_TEXT).render(**doc)
    out = []
    for choice in DOC_TO_CHOICE:
        continuation = TARGET_DELIMITER + choice
        n_spaces = len(context) - len(context.rstrip())
        ctx, cont = (context[:-n_spaces], context[-n_spaces:] + continuation) if n_spaces else (context, continuation)
        whole_enc = tokenizer.encode(ctx + cont)
        context_enc = tokenizer.encode(ctx)
        continuation_enc = whole_enc[len(context_enc):]
        inp = (context_enc + continuation_enc)[-(max_length + 1):][:-1]  # what the model reads; its last len(cont) logits score cont
        out.append((inp, continuation_enc))
    return out


ITEMS = [
    {"_id": "short-plain", "length": "short", "question": "  Which colour is the door? ", "context": "  The door is painted blue.\n\n",
     "choice_A": " red", "choice_B": "blue ", "choice_C": "green", "choice_D": "white", "answer": "B"},
    {"_id": "long-cut", "length": "long", "question": "What does the ledger say on page 9?",
     "context": "".join(f"Page {i}: the ledger lists {i * 7} barrels of oil.\n" for i in range(60)),
     "choice_A": "63 barrels", "choice_B": "9 barrels", "choice_C": "none", "choice_D": "70 barrels", "answer": "A"},
]  # fmt: skip
CHAT = "{% for m in messages %}<|user|>\n{{ m['content'] }}<|end|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"


def _tokenizer(bos: bool = False, chat: bool = False):
    tok = byte_tokenizer()
    if bos:  # a tokenizer that adds BOS (Llama's): both references count it
        tok._tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 256)])
    if chat:
        tok.chat_template = CHAT
    return tok


def _item(raw: dict) -> lb.Item:
    return lb.read_items(json.dumps([raw]).encode(), "fixture")[0]


@pytest.mark.parametrize("bos", [False, True])
@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("length", [4000, 501, 400])  # uncut, cut at an odd and an even length
@pytest.mark.parametrize("raw", ITEMS, ids=[i["_id"] for i in ITEMS])
def test_the_longbench_template_feeds_pred_pys_tokens(raw, length, chat, bos):
    tok = _tokenizer(bos, chat)
    p = build(tok, chat, _item(raw), length, "generate", "longbench")
    assert list(p.ids) == pred_py_ids(tok, raw, length, chat)
    assert p.extra["truncated"] == max(0, len(tok.encode(pred_py_prompt(raw))) - length)


@pytest.mark.parametrize("bos", [False, True])
@pytest.mark.parametrize("length", [4000, 501, 400])
@pytest.mark.parametrize("raw", ITEMS, ids=[i["_id"] for i in ITEMS])
def test_the_lm_eval_template_scores_lm_evals_continuations_after_lm_evals_tokens(raw, length, bos):
    tok = _tokenizer(bos)
    p = build(tok, False, _item(raw), length, "mc", "lm-eval")
    for (prefix, continuation), (read, cont) in zip(p.choices, lm_eval_requests(tok, raw, length), strict=True):
        # ctxbench scores ``continuation`` after ``prefix``: the model reads prefix + continuation but its last token
        assert list(prefix) + list(continuation)[:-1] == read and list(continuation) == cont
        assert len(read) <= length
    assert tok.decode(list(p.choices[1][1])) == " B"


def test_the_longbench_mc_answer_prefix_follows_pred_pys_prompt_on_its_own_line():
    tok = _tokenizer()
    p = build(tok, False, _item(ITEMS[0]), 4000, "mc", "longbench")
    assert tok.decode(list(p.ids)) == pred_py_prompt(ITEMS[0]) + "\nThe correct answer is ("


def test_lm_eval_is_multiple_choice_on_raw_text(tmp_path):
    path = tmp_path / "items.json"
    path.write_text(json.dumps(ITEMS))
    task = get("longbench2")
    with pytest.raises(UserError, match="no --mode generate"):
        build_settings(task, [resolve("none")], 2.0, "1k", {"data": str(path), "template": "lm-eval", "mode": "generate"})
    with pytest.raises(UserError, match="raw text"):
        build_settings(task, [resolve("none")], 2.0, "1k", {"data": str(path), "template": "lm-eval", "chat": True})


def test_every_item_runs_by_default_and_the_plan_says_how_many(tmp_path, tiny_lm):
    path = tmp_path / "items.json"
    path.write_text(json.dumps([{**ITEMS[0], "_id": f"s{i}"} for i in range(3)] + [{**ITEMS[1], "_id": f"l{i}"} for i in range(2)]))
    task = get("longbench2")
    settings = build_settings(task, [resolve("none")], 2.0, "600", {"data": str(path), "template": "lm-eval"})
    assert settings.trials == "all" and task.items(settings) == {"short": 3, "long": 2}
    assert [i.what for i in task.cost(settings, 2048)] == ["short none (3 items)", "long none (2 items)"]
    records = run_settings(tiny_lm, "longbench2", settings).records
    scores = [r for r in records if r["metric"] == "score"]
    assert sorted((r["variant"], int(r["trial"])) for r in scores) == [("long", 0), ("long", 1), ("short", 0), ("short", 1), ("short", 2)]
    assert {json.loads(r["options"])["template"] for r in records} == {"lm-eval"}
    assert build_settings(task, [resolve("none")], 2.0, "600", {"data": str(path), "trials": 1}).trials == 1  # --trials N still takes N


def test_the_template_is_part_of_the_cell_and_rows_before_it_read_as_legacy():
    old = {"task": "longbench2", "options": '{"chat": true, "mode": "mc"}'}
    assert json.loads(complete_options(old, registry(), {})) == {"chat": True, "mode": "mc", "template": "legacy"}


def test_a_file_of_fewer_trials_resumes_into_every_item(tmp_path, tiny_lm):
    """``--trials all`` after ``--trials 1``: each cell runs the items it lacks (its own bucket's count)."""
    path = tmp_path / "items.json"
    path.write_text(json.dumps([{**ITEMS[0], "_id": f"s{i}"} for i in range(3)] + [{**ITEMS[1], "_id": f"l{i}"} for i in range(2)]))
    out = tmp_path / "out.csv"
    task = get("longbench2")
    run_settings(tiny_lm, "longbench2", build_settings(task, [resolve("none")], 2.0, "600", {"data": str(path), "template": "lm-eval",
                                                                                            "trials": 1}), out=out)  # fmt: skip
    records = run_settings(tiny_lm, "longbench2", build_settings(task, [resolve("none")], 2.0, "600", {"data": str(path), "template": "lm-eval"}),
                           out=out).records  # fmt: skip
    trials = {(r["variant"], int(r["trial"])) for r in records if r["metric"] == "score"}
    assert trials == {("short", 0), ("short", 1), ("short", 2), ("long", 0), ("long", 1)}
