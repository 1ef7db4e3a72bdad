"""A thinking budget apart from the answer budget, and the reasoning stripped by ctxbench itself.

A reasoning model (Qwen3, DeepSeek-R1 distills) writes ``<think> ... </think>`` before it answers.
Qwen's documentation describes a two-step generation for a bounded budget: let the model think up
to N tokens; if it has not closed the block by then, append the end-of-think token and let it
answer. :class:`Steer` is that rule for one answer, token by token, so every decoder applies the
same one: the transformers loop (:func:`ctxbench.model.decoding.greedy`) continues one generation on
one KV cache and replaces the model's next token by the end-of-think token where the budget is
spent; an engine that cannot be stopped mid-generation (vLLM) generates up to the budget, replays
its tokens through a :class:`Steer`, and continues the prompt plus what it kept
(:func:`replay`).

:func:`split` strips the reasoning from the new tokens by the tags' token ids alone: an engine's own
reasoning parser is never asked, and whatever it stripped is recorded (its token count). Pure
Python: no torch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

START, THINK, ANSWER = "start", "think", "answer"
TAIL = 64  # the generation prompt a chat template appends is shorter: where an open think block is looked for


@dataclass(frozen=True)
class Thinking:
    """``budget``: the most tokens the model thinks (between the tags, the tags not counted);
    ``open``/``close``: the token ids of ``<think>`` and ``</think>``."""

    budget: int
    open: int
    close: int

    def steps(self, answer_budget: int) -> int:
        """The most new tokens of one answer: the open tag, the budget, the close tag, the answer."""
        return self.budget + 2 + answer_budget

    def opened(self, prompt: Sequence[int]) -> bool:
        """Whether the prompt leaves a think block open (a template whose generation prompt opens
        it, as DeepSeek-R1's does): the model then thinks from its first token."""
        tail = [int(t) for t in prompt[-TAIL:]]
        last_open = max((i for i, t in enumerate(tail) if t == self.open), default=-1)
        return last_open >= 0 and self.close not in tail[last_open:]

    def steer(self, prompt: Sequence[int], answer_budget: int) -> Steer:
        return Steer(self, answer_budget, THINK if self.opened(prompt) else START)


class Steer:
    """One answer's phases: before any block (``start``: a first token that is the open tag starts
    one, anything else is the answer), thinking (the close tag ends it; a token past the budget is
    replaced by the close tag, ``forced``), answering (up to ``answer_budget`` tokens)."""

    def __init__(self, thinking: Thinking, answer_budget: int, phase: str) -> None:
        self.thinking, self.answer_budget, self.phase = thinking, answer_budget, phase
        self.thought = self.answered = 0
        self.forced = False

    def take(self, token: int) -> int:
        """The token that goes into the answer in place of the model's ``token``."""
        t = self.thinking
        if self.phase == START:
            if token == t.open:
                self.phase = THINK
                return token
            self.phase = ANSWER
        if self.phase == THINK:
            if token == t.close:
                self.phase = ANSWER
                return token
            if self.thought >= t.budget:
                self.phase, self.forced = ANSWER, True
                return t.close
            self.thought += 1
            return token
        self.answered += 1
        return token

    @property
    def spent(self) -> bool:
        """The answer budget is used up (decoding of this answer ends)."""
        return self.phase == ANSWER and self.answered >= self.answer_budget

    def answer(self, tokens: Sequence[int]) -> tuple[int, ...]:
        """The answer part of ``tokens`` so far (what a task's early stop may look at)."""
        return tuple(tokens[len(tokens) - self.answered :]) if self.answered else ()


@dataclass(frozen=True)
class Split:
    """An answer's new tokens, cut at the tags: ``reasoning`` (between them, tags excluded) is never
    scored; ``answer`` (after the close tag) is. ``closed``: the block was closed (by the model or
    forced); an unclosed block leaves no answer."""

    reasoning: tuple[int, ...]
    answer: tuple[int, ...]
    closed: bool
    thought: bool  # a think block was open (in the prompt or by the model's first token)


def split(tokens: Sequence[int], thinking: Thinking, prompt: Sequence[int]) -> Split:
    """``tokens`` (an answer's new tokens) into reasoning and answer by the tags' ids alone. A model
    that does not open a block answers with all of them; one that never closes it answers nothing
    (its reasoning is not scored, even when it holds the needle)."""
    tokens = tuple(int(t) for t in tokens)
    if thinking.opened(prompt):
        body = tokens
    elif tokens and tokens[0] == thinking.open:
        body = tokens[1:]
    else:
        return Split((), tokens, False, False)
    if thinking.close in body:
        cut = body.index(thinking.close)
        return Split(body[:cut], body[cut + 1 :], True, True)
    return Split(body, (), False, True)


def replay(thinking: Thinking, prompt: Sequence[int], answer_budget: int, tokens: Sequence[int], stops: Sequence[int]):
    """An engine's first step (``tokens``, generated up to ``thinking.steps`` with the close tag
    among its stop tokens) through a :class:`Steer`: ``(kept, steer, ended)``, the tokens the answer
    keeps (the close tag forced in where the budget ran out), the steer and whether the answer is
    over (a stop token, or the answer budget spent). An answer not over continues from
    ``prompt + kept`` for ``answer_budget - steer.answered`` more tokens."""
    steer, kept = thinking.steer(prompt, answer_budget), []
    for token in tokens:
        fed = steer.take(int(token))
        kept.append(fed)
        if fed in stops or steer.spent:
            return kept, steer, True
        if fed != token:  # the close tag forced in: what the model wrote after it is not its answer
            break
    return kept, steer, False
