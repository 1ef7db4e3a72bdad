"""BABILong's reference modes (``ctxbench babilong --prompts current|2024-05``, ``--length-of``): the
prompt's token ids equal those of BABILong's own formatting, built here from a copy of upstream's
``babilong/prompts.py`` at both versions (below, as the file has it: the test's reference, never
imported by ctxbench), raw and through a chat template as its ``run_model_on_babilong.py`` sends it;
``--len`` measures the context by default; rows written before the options read as the old mode."""

from __future__ import annotations

import json

import pytest
from helpers import byte_tokenizer, run_settings

from ctxbench.methods import resolve
from ctxbench.results.identity import complete_options
from ctxbench.runner.settings import build_settings
from ctxbench.synthetic import babilong as bl
from ctxbench.synthetic.haystack import load_haystack, sentences
from ctxbench.synthetic.pieces import encode, frame
from ctxbench.tasks import get, registry

# fmt: off
# --- booydar/babilong babilong/prompts.py at 7a6efee (current; the file last changed in ffa075f), qa1-qa5, copied ---

TASK_TEMPLATE = '{instruction}\n\n{examples}\n\n{post_prompt}'
USER_TEMPLATE = '<context>\n{context}\n</context>\n\nQuestion: {question}'
DEFAULT_TEMPLATE = f'{TASK_TEMPLATE}\n\n{USER_TEMPLATE}'


def get_formatted_input(context, question, examples, instruction, post_prompt, template=DEFAULT_TEMPLATE):
    # instruction - task instruction
    # examples - in-context examples
    # post_prompt - any additional instructions after examples
    # context - text to use for qa
    # question - question to answer based on context
    formatted_input = template.format(instruction=instruction, examples=examples, post_prompt=post_prompt,
                                      context=context.strip(), question=question)
    return formatted_input.strip()


DEFAULT_PROMPTS = {
    'qa1': {
        'instruction':
            'I will give you context with the facts about positions of different persons hidden in some random text '
            'and a question. You need to answer the question based only on the information from the facts. '
            'If a person was in different locations, use the latest location to answer the question.',
        'examples':
            '<example>\n'
            'Charlie went to the hallway. Judith come back to the kitchen. Charlie travelled to balcony. '
            'Where is Charlie?\n'
            'Answer: The most recent location of Charlie is balcony.\n'
            '</example>\n\n'
            '<example>\n'
            'Alan moved to the garage. Charlie went to the beach. Alan went to the shop. Rouse '
            'travelled to balcony. Where is Alan?\n'
            'Answer: The most recent location of Alan is shop.\n'
            '</example>',
        'post_prompt':
            'Always return your answer in the following format: '
            'The most recent location of ’person’ is ’location’. Do not write anything else after that.'
    },
    'qa2': {
        'instruction':
            'I give you context with the facts about locations and actions of different persons '
            'hidden in some random text and a question.'
            'You need to answer the question based only on the information from the facts.\n'
            'If a person got an item in the first location and travelled to the second location '
            'the item is also in the second location. '
            'If a person dropped an item in the first location and moved to the second location '
            'the item remains in the first location.',
        'examples':
            '<example>\n'
            'Charlie went to the kitchen. Charlie got a bottle. Charlie moved to the balcony. '
            'Where is the bottle?\n'
            'Answer: The bottle is in the balcony.\n'
            '</example>\n'
            '<example>\n'
            'Alan moved to the garage. Alan got a screw driver. Alan moved to the kitchen. Where '
            'is the screw driver?\n'
            'Answer: The screw driver is in the kitchen.\n'
            '</example>',
        'post_prompt':
            'Always return your answer in the following format: The ’item’ is in ’location’. '
            'Do not write anything else after that.'
    },
    'qa3': {
        'instruction':
            'I give you context with the facts about locations and actions of different persons '
            'hidden in some random text and a question. '
            'You need to answer the question based only on the information from the facts.\n'
            'If a person got an item in the first location and travelled to the second location '
            'the item is also in the second location. '
            'If a person dropped an item in the first location and moved to the second location '
            'the item remains in the first location.',
        'examples':
            '<example>\n'
            'John journeyed to the bedroom. Mary grabbed the apple. Mary went back to the bathroom. '
            'Daniel journeyed to the bedroom. Daniel moved to the garden. Mary travelled to the kitchen. '
            'Where was the apple before the kitchen?\n'
            'Answer: Before the kitchen the apple was in the bathroom.\n'
            '</example>\n'
            '<example>\n'
            'John went back to the bedroom. John went back to the garden. John went back to the kitchen. '
            'Sandra took the football. Sandra travelled to the garden. Sandra journeyed to the bedroom. '
            'Where was the football before the bedroom?\n'
            'Answer: Before the bedroom the football was in the garden.\n'
            '</example>',
        'post_prompt':
            'Always return your answer in the following format: '
            'Before the $location_1$ the $item$ was in the $location_2$. Do not write anything else after that.'
    },
    'qa4': {
        'instruction':
            'I will give you context with the facts about different people, their location and actions, hidden in '
            'some random text and a question. '
            'You need to answer the question based only on the information from the facts.',
        'examples':
            '<example>\n'
            'The hallway is south of the kitchen. The bedroom is north of the kitchen. '
            'What is the kitchen south of?\n'
            'Answer: bedroom\n'
            '</example>\n'
            '<example>\n'
            'The garden is west of the bedroom. The bedroom is west of the kitchen. What is west of the bedroom?\n'
            'Answer: garden\n'
            '</example>',
        'post_prompt':
            'Your answer should contain only one word - location. Do not write anything else after that.'
    },
    'qa5': {
        'instruction':
            'I will give you context with the facts about locations and their relations hidden in some random text '
            'and a question. You need to answer the question based only on the information from the facts.',
        'examples':
            '<example>\n'
            'Mary picked up the apple there. Mary gave the apple to Fred. Mary moved to the bedroom. '
            'Bill took the milk there. Who did Mary give the apple to?\n'
            'Answer: Fred\n'
            '</example>\n'
            '<example>\n'
            'Jeff took the football there. Jeff passed the football to Fred. Jeff got the milk there. '
            'Bill travelled to the bedroom. Who gave the football?\n'
            'Answer: Jeff\n'
            '</example>\n'
            '<example>\n'
            'Fred picked up the apple there. Fred handed the apple to Bill. Bill journeyed to the bedroom. '
            'Jeff went back to the garden. What did Fred give to Bill?\n'
            'Answer: apple\n'
            '</example>',
        'post_prompt':
            'Your answer should contain only one word. Do not write anything else after that. '
            'Do not explain your answer.'
    },
}


# --- the same file at d796183 (2024-05-15, its first version), qa1-qa5, copied ---

DEFAULT_TEMPLATE_2024_05 = '{instruction}\n{examples}\n{post_prompt}\n<context>\n{context}\n</context>\nQuestion: {question}'


def get_formatted_input_2024_05(context, question, examples, instruction, post_prompt, template=DEFAULT_TEMPLATE_2024_05):
    # pre_prompt - general instruction
    # examples - in-context examples
    # post_prompt - any additional instructions after examples
    # context - text to use for qa
    # question - question to answer based on context
    formatted_input = template.format(instruction=instruction, examples=examples, post_prompt=post_prompt,
                                      context=context, question=question)
    return formatted_input.strip()


DEFAULT_PROMPTS_2024_05 = {
    'qa1': {
        'instruction':
            'I will give you context with the facts about positions of different persons hidden in some random text '
            'and a question. You need to answer the question based only on the information from the facts. '
            'If a person was in different locations, use the latest location to answer the question.',
        'examples':
            '<example>\n'
            'Charlie went to the hallway. Judith come back to the kitchen. Charlie travelled to balcony. '
            'Where is Charlie?\n'
            'Answer: The most recent location of Charlie is balcony.\n'
            '</example>\n\n'
            '<example>\n'
            'Alan moved to the garage. Charlie went to the beach. Alan went to the shop. Rouse '
            'travelled to balcony. Where is Alan?\n'
            'Answer: The most recent location of Alan is shop.\n'
            '</example>',
        'post_prompt':
            'Always return your answer in the following format: '
            'The most recent location of ’person’ is ’location’. Do not write anything else after that. '
    },
    'qa2': {
        'instruction':
            'I give you context with the facts about locations and actions of different persons '
            'hidden in some random text and a question.'
            'You need to answer the question based only on the information from the facts.\n'
            'If a person got an item in the first location and travelled to the second location '
            'the item is also in the second location. '
            'If a person dropped an item in the first location and moved to the second location '
            'the item remains in the first location.',
        'examples':
            '<example>\n'
            'Charlie went to the kitchen. Charlie got a bottle. Charlie moved to the balcony. '
            'Where is the bottle?\n'
            'Answer: The bottle is in the balcony.\n'
            '</example>\n'
            '<example>\n'
            'Alan moved to the garage. Alan got a screw driver. Alan moved to the kitchen. Where '
            'is the screw driver?\n'
            'Answer: The screw driver is in the kitchen.\n'
            '</example>',
        'post_prompt':
            'Always return your answer in the following format: The ’item’ is in ’location’. '
            'Do not write anything else after that.'
    },
    'qa3': {
        'instruction':
            'I give you context with the facts about locations and actions of different persons '
            'hidden in some random text and a question. '
            'You need to answer the question based only on the information from the facts.\n'
            'If a person got an item in the first location and travelled to the second location '
            'the item is also in the second location. '
            'If a person dropped an item in the first location and moved to the second location '
            'the item remains in the first location',
        'examples':
            '<example>\n'
            'John journeyed to the bedroom.Mary grabbed the apple. Mary went back to the bathroom. '
            'Daniel journeyed to the bedroom. Daniel moved to the garden. Mary travelled to the kitchen. '
            'Where was the apple before the kitchen?\n'
            'Answer: Before the kitchen the apple was in the bathroom.\n'
            '</example>\n'
            '<example>\n'
            'John went back to the bedroom. John went back to the garden. John went back to the kitchen. '
            'Sandra took the football. Sandra travelled to the garden. Sandra journeyed to the bedroom. '
            'Where was the football before the bedroom?\n'
            'Answer: Before the kitchen the football was in the garden.\n'
            '</example>',
        'post_prompt':
            'Always return your answer in the following format: '
            'Before the $location_1& the $item$ was in the $location_2$. Do not write anything else after that.'
    },
    'qa4': {
        'instruction':
            'I will give you context with the facts about different people, their location and actions, hidden in '
            'some random text and a question. '
            'You need to answer the question based only on the information from the facts.',
        'examples':
            '<example>\n'
            'The hallway is south of the kitchen. The bedroom is north of the kitchen. '
            'What is the kitchen south of?\n'
            'Answer: bedroom\n'
            '</example>\n'
            '<example>\n'
            'The garden is west of the bedroom. The bedroom is west of the kitchen. What is west of the bedroom?\n'
            'Answer: garden\n'
            '</example>',
        'post_prompt':
            'Your answer should contain only one word - location. Do not write anything else after that.'
    },
    'qa5': {
        'instruction':
            'I will give you context with the facts about locations and their relations hidden in some random text '
            'and a question. You need to answer the question based only on the information from the facts.',
        'examples':
            '<example>\n'
            'Mary picked up the apple there. Mary gave the apple to Fred. Mary moved to the bedroom. '
            'Bill took the milk there. Who did Mary give the apple to?\n'
            'Answer: Fred\n'
            '</example>\n'
            '<example>\n'
            'Jeff took the football there. Jeff passed the football to Fred. Jeff got the milk there. '
            'Bill travelled to the bedroom. Who gave the football?\n'
            'Answer: Jeff\n'
            '</example>\n'
            '<example>\n'
            'Fred picked up the apple there. Fred handed the apple to Bill. Bill journeyed to the bedroom. '
            'Jeff went back to the garden. What did Fred give to Bill?\n'
            'Answer: apple\n'
            '</example>',
        'post_prompt':
            'Your answer should contain only one word. Do not write anything else after that. '
            'Do not explain your answer.'
    }
}
# fmt: on

REFERENCE = {"current": (get_formatted_input, DEFAULT_PROMPTS), "2024-05": (get_formatted_input_2024_05, DEFAULT_PROMPTS_2024_05)}
CHAT = "{% for m in messages %}<|user|>\n{{ m['content'] }}<|end|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
ROW = {"input": "  Mary went to the office.  Some prose here.\n", "question": "Where is Mary?", "target": "office"}


def reference_ids(tokenizer, version: str, variant: str, context: str, question: str, chat: bool) -> list[int]:
    """BABILong's prompt: ``get_formatted_input`` with the task's default prompts; raw, or the
    user's message of the chat template (``apply_chat_template(..., add_generation_prompt=True)``)."""
    fmt, prompts = REFERENCE[version]
    p = prompts[variant]
    text = fmt(context, question, p["examples"], p["instruction"], p["post_prompt"])
    if chat:
        return list(tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"])
    return list(tokenizer(text)["input_ids"])


def _tokenizer(chat: bool):
    tok = byte_tokenizer()
    if chat:
        tok.chat_template = CHAT
    return tok


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("version", bl.PROMPT_VERSIONS)
@pytest.mark.parametrize("variant", bl.VARIANTS)
def test_a_published_rows_prompt_is_babilongs_to_the_token(variant, version, chat):
    tok = _tokenizer(chat)
    p = bl.from_record(variant, tok, frame(tok, chat), ROW, version)
    assert list(p.ids) == reference_ids(tok, version, variant, ROW["input"], ROW["question"], chat)


@pytest.mark.parametrize("version", bl.PROMPT_VERSIONS)
@pytest.mark.parametrize("variant", ["qa1", "qa3"])
def test_a_generated_prompt_is_babilongs_formatting_of_its_context(variant, version):
    tok = byte_tokenizer()
    p = bl.build(variant, tok, frame(tok, False), load_haystack(None), 4000, 0, 1, version, "context")
    text = tok.decode(list(p.ids))
    context = text[text.index("<context>\n") + len("<context>\n"): text.index("\n</context>")]
    assert list(p.ids) == reference_ids(tok, version, variant, context, p.extra["question"], False)


def test_the_current_prompts_differ_from_the_first_version_in_five_strings():
    changed = [(v, k) for v in bl.VARIANTS for k in ("instruction", "examples", "post_prompt")
               if DEFAULT_PROMPTS[v][k] != DEFAULT_PROMPTS_2024_05[v][k]]  # fmt: skip
    assert changed == [("qa1", "post_prompt"), ("qa3", "instruction"), ("qa3", "examples"), ("qa3", "post_prompt")]
    assert "$location_1$" in bl.PROMPTS["qa3"]["post_prompt"] and "bedroom. Mary" in bl.PROMPTS["qa3"]["examples"]


@pytest.mark.parametrize("length", [3000, 6000])
def test_by_default_the_length_is_the_contexts(length):
    """``--len 1k``: 1k tokens of context (whole sentences: within one sentence of it), the
    instruction and question on top, as BABILong's "1k" means."""
    tok, hay = byte_tokenizer(), load_haystack(None)
    longest = max(len(encode(tok, " " + s)) for s in sentences(hay.text))
    for v in bl.VARIANTS:
        p = bl.build(v, tok, frame(tok, False), hay, length, 0, 2)
        assert length - longest < p.extra["context_tokens"] <= length < len(p.ids)
        q = bl.build(v, tok, frame(tok, False), hay, length, 0, 2, length_of="prompt")
        assert len(q.ids) + bl.MAX_NEW_TOKENS <= length


def _settings(**options):
    return build_settings(get("babilong"), [resolve("none")], 2.0, "1k", {"trials": 1, "variants": "qa1", **options})


def test_a_run_at_1k_puts_1k_tokens_of_context_in_each_prompt(tiny_lm):
    records = run_settings(tiny_lm, "babilong", _settings()).records
    scores = [r for r in records if r["metric"] == "score"]
    assert scores and all(900 < json.loads(r["extra"])["context_tokens"] <= 1024 < int(r["tokens"]) for r in scores)
    assert {json.loads(r["options"])["prompts"] for r in records} == {"current"}
    assert {json.loads(r["options"])["length_of"] for r in records} == {"context"}


def test_the_mode_is_part_of_the_cell_and_old_rows_read_as_the_first_version():
    task = get("babilong")
    assert task.identity(_settings(prompts="2024-05")) != task.identity(_settings())
    old = {"task": "babilong", "options": '{"chat": true}'}
    assert json.loads(complete_options(old, registry(), {})) == {"chat": True, "prompts": "2024-05", "length_of": "prompt"}


def test_with_published_rows_every_row_runs_by_default(tmp_path):
    path = tmp_path / "qa1.jsonl"
    path.write_text("\n".join(json.dumps({**ROW, "question": f"Where is Mary {i}?"}) for i in range(7)))
    settings = build_settings(get("babilong"), [resolve("none")], 2.0, "1k", {"variants": "qa1", "data": str(path)})
    assert settings.trials == "all" and get("babilong").trials_asked(settings) == 7
    assert build_settings(get("babilong"), [resolve("none")], 2.0, "1k", {"variants": "qa1"}).trials == 4
