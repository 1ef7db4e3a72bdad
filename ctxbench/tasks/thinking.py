"""``--think-budget N`` and ``--think-tags OPEN,CLOSE`` for every task that generates: the options, the
tags found in the model's tokenizer, what changes in the prompt, the length a cell keeps for the
thinking, and what each trial row records.

The decoding rule itself (think up to N tokens, the end-of-think token put in where the budget runs
out, then the task's own answer budget) and the stripping are :mod:`ctxbench.model.thinking`, shared
by every backend. Qwen3's model card ("Thinking budget"; Qwen's two-step generation) describes the
rule; RULER's length accounting (``prepare.py``: prompt + ``tokens_to_generate`` <= the length) is
extended by the thinking: a cell of length L holds the prompt, up to N thinking tokens with their two
tags, and the answer budget."""

from __future__ import annotations

import sys
from dataclasses import replace

from ctxbench.errors import UserError
from ctxbench.model.thinking import Thinking
from ctxbench.tasks.base import Option
from ctxbench.tasks.options import parse_think_budget, parse_think_tags

TAGS = ("<think>", "</think>")  # Qwen3's, DeepSeek-R1's and their distills' tags
TAG_TOKENS = 2  # the open and close tag, kept in a cell's length beside the budget
SWITCH = "enable_thinking"  # the chat-template variable that turns thinking off (Qwen3)


def options() -> list[Option]:
    """The two options, part of a cell's identity only when given (rows written before them read as
    no thinking, the default)."""
    return [
        Option("think_budget", "for reasoning models: think up to N tokens, then the end-of-think tag is put in and the model answers "
               "with the task's own answer budget; the reasoning is stripped before scoring; 0: no thinking (the template's "
               "enable_thinking=False, else an immediately closed block); default: the model's own generation, unbounded by a budget",
               parse_think_budget, metavar="N", omit_default=True),
        Option("think_tags", "with --think-budget: the reasoning's tags, each one token of the tokenizer "
               "(default <think>,</think>)", parse_think_tags, metavar="OPEN,CLOSE", omit_default=True),
    ]  # fmt: skip


def reserve(settings) -> int:
    """Tokens of a cell's length kept for thinking: the budget and its two tags (0 without thinking)."""
    budget = getattr(settings, "think_budget", None)
    return 0 if budget is None else budget + TAG_TOKENS


def room(settings, length: int) -> int:
    """The length a cell's prompt and answer are built for: the cell's length less the thinking's share."""
    return length - reserve(settings)


def validate(settings, answer_budget: int | None = None) -> None:
    """Before any model loads: tags without a budget, and a budget that leaves a given length no room
    for the prompt and the answer (the numbers said)."""
    budget = getattr(settings, "think_budget", None)
    if budget is None:
        if getattr(settings, "think_tags", None) is not None:
            raise UserError("--think-tags names the tags --think-budget bounds, and no --think-budget is given",
                            "add --think-budget N, or drop --think-tags")  # fmt: skip
        return
    answer = answer_budget or 0
    for n in getattr(settings, "lengths", None) or ():
        if reserve(settings) + answer >= n:
            raise UserError(f"length {n} cannot hold a prompt, {budget} thinking tokens + {TAG_TOKENS} tags and "
                            f"{answer} answer tokens ({reserve(settings) + answer} before any prompt token)",
                            f"lower --think-budget below {max(0, n - answer - TAG_TOKENS - 1)}, or use a longer --len")  # fmt: skip


def too_short(settings, length: int, minimum: int) -> UserError:
    """The refusal of a cell whose prompt (``minimum`` tokens at least, with the answer budget) does
    not fit beside the thinking: every number said."""
    if reserve(settings):
        return UserError(f"length {length} is too short for a prompt of at least {minimum} tokens beside {settings.think_budget} "
                         f"thinking tokens and {TAG_TOKENS} tags (RULER's accounting: prompt + thinking + answer <= length)",
                         f"use --len of at least {minimum + reserve(settings)}, or a smaller --think-budget")  # fmt: skip
    return UserError(f"length {length} is too short (needs at least {minimum} tokens with this tokenizer)", f"use --len of at least {minimum}")


def tag_id(tokenizer, tag: str) -> int | None:
    """The one token id of ``tag`` in ``tokenizer``, or None when it is not a single token."""
    ids = tokenizer(tag, add_special_tokens=False)["input_ids"]
    return int(ids[0]) if len(ids) == 1 else None


def thinking_of(tokenizer, settings):
    """The :class:`ctxbench.model.thinking.Thinking` of settled ``settings`` (None: no thinking)."""
    budget = getattr(settings, "think_budget", None)
    if budget is None:
        return None
    tags = settings.think_tags or TAGS
    ids = [tag_id(tokenizer, tag) for tag in tags]
    if None in ids:
        bad = tags[ids.index(None)]
        n = len(tokenizer(bad, add_special_tokens=False)["input_ids"])
        raise UserError(f"--think-tags: '{bad}' is {n} tokens for this model's tokenizer, not one tag token",
                        "pass the tags the tokenizer holds as single tokens (its added special tokens), e.g. --think-tags '<think>,</think>'")  # fmt: skip
    return Thinking(budget, ids[0], ids[1])


def settle(lm, settings):
    """``--think-budget`` on a model that has no thinking (its tokenizer has no single-token default
    tags, and none were given) changes nothing, said in one line: the settings go back to the
    default, so its rows are the default run's cells. Given tags are checked here (one line)."""
    if getattr(settings, "think_budget", None) is None:
        return settings
    if settings.think_tags is None and None in (tag_id(lm.tokenizer, t) for t in TAGS):
        print(f"note: --think-budget changes nothing: {lm.name}'s tokenizer has no {TAGS[0]}/{TAGS[1]} tokens (its template does not "
              "think); pass --think-tags OPEN,CLOSE if its reasoning has other tags", file=sys.stderr)  # fmt: skip
        return replace(settings, think_budget=None)
    thinking_of(lm.tokenizer, settings)  # bad tags: one line, before the plan
    return settings


class _Switched:
    """A tokenizer whose chat template is rendered with ``enable_thinking=False`` (Qwen3's switch)."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer

    def apply_chat_template(self, *args, **kwargs):
        return self._tokenizer.apply_chat_template(*args, **{SWITCH: False, **kwargs})

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)


def prompt_tokenizer(tokenizer, settings):
    """The tokenizer prompts are built with: under ``--think-budget 0`` a template that has the
    ``enable_thinking`` switch is rendered with it off; any other is the tokenizer itself (a
    template without the switch gets an immediately closed block when decoding, from the budget)."""
    if getattr(settings, "think_budget", None) == 0 and SWITCH in str(getattr(tokenizer, "chat_template", None) or ""):
        return _Switched(tokenizer)
    return tokenizer


def row_extra(split, forced: bool) -> dict:
    """What a trial row records of its thinking: the reasoning's token count (stripped, never
    scored), whether the budget ran out (the end-of-think tag put in by ctxbench) and whether the
    block was closed at all (a model that answers inside it and stops has no answer)."""
    return {"think_tokens": len(split.reasoning), "think_exhausted": bool(forced), "think_closed": split.closed}


def outcomes(rows) -> dict:
    """A cell's trials by outcome when they thought (``extra`` of its ``accuracy`` row): right, wrong,
    and ``ran_out_thinking`` (the budget ran out: a wrong answer then says the budget was too small,
    not that the model could not find the needle) counted apart from ``wrong``; {} without thinking."""
    thought = [r for r in rows if "think_exhausted" in r.extra]
    if not thought:
        return {}
    out = [r for r in thought if r.extra["think_exhausted"]]
    right = sum(1 for r in thought if not r.extra["think_exhausted"] and float(r.value) >= 1.0)
    return {"right": right, "wrong": len(thought) - len(out) - right, "ran_out_thinking": len(out),
            "think_tokens": sum(int(r.extra["think_tokens"]) for r in thought)}  # fmt: skip
