"""The interface every engine backend implements, and what tasks may ask of it.

A task never touches a model: it asks the backend of the loaded model (:func:`ctxbench.backends.of`)
for a :class:`Session` -- one method setting at one factor, for sequences of up to ``seq_len``
tokens -- and asks that session for per-token losses and greedy answers. The runner asks the
backend, never the model, for everything else (checks, plan costs, engine starts, progress, close):
every backend module implements all of :class:`Backend`, so neither the runner nor a task ever asks
which backend it holds or touches a torch module. ``tests/backends/test_engine_contract.py`` holds
every backend (transformers, vLLM through a fake engine, and a test fake) to this contract.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol


class Session(Protocol):
    """One method setting applied for sequences of up to ``seq_len`` tokens."""

    def token_nll(self, ids, chunk: int = 1024):
        """(n - 1,) float32 NLL of tokens 1..n-1 of ``ids`` (a (n,) tensor), each given all before it."""

    def sliding_nll(self, ids, window: int, stride: int, chunk: int = 1024):
        """(n - 1,) float32 NLL with windows of ``window`` tokens advancing by ``stride``
        (:func:`ctxbench.model.scoring.sliding_nll`'s protocol)."""

    def answers(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, finished=None, share: bool = True,
                continuations=None, think=None) -> Iterator:  # fmt: skip
        """Greedy answers (:class:`ctxbench.model.decoding.Answer`, any order) of every prompt, stopping
        at the model's stop tokens; with ``continuations``, each answer's ``nll`` is the teacher-forced
        NLL of its expected continuation after the prompt. ``think``
        (:class:`ctxbench.model.thinking.Thinking`): each answer thinks up to its budget, the
        end-of-think token put in where the budget runs out (``Answer.forced``), then answers with
        up to ``max_new_tokens``; ``Answer.tokens`` holds all new tokens, reasoning included (the
        caller strips it, :func:`ctxbench.model.thinking.split`)."""

    def scores(self, prompts: Sequence[Sequence[int]], continuations, share: bool = True) -> Iterator:
        """Teacher-forced NLL of ``continuations[i]`` after ``prompts[i]``
        (:class:`ctxbench.model.decoding.Scored`, any order). No decoding."""

    def hidden(self, ids):
        """(1, n, hidden) final hidden states of ``ids`` (a (n,) tensor): what the proxy metrics read
        (LongPPL's key tokens, the KL to the unscaled model). A backend that returns none refuses
        those metrics before the plan (``check``)."""

    def nll_from_hidden(self, hidden, ids, chunk: int = 1024):
        """(n - 1,) NLL of tokens 1..n-1 from the final hidden states (the head in chunks)."""

    def kl_from_hidden(self, reference, hidden, chunk: int = 1024):
        """Per position KL(reference || this) of the next-token distributions from two models'
        final hidden states, and whether the greedy tokens agree (:func:`ctxbench.model.scoring.kl_from_hidden`)."""


class Backend(Protocol):
    """What every backend module (``ctxbench.backends.<name>``) implements; ``lm`` is what its
    ``load`` returned. The runner calls these and nothing else of a loaded model but its
    provenance (name, digest, device, dtype, tokenizer, geometry)."""

    NAME: str

    def check(self, methods, metrics, config) -> None:
        """Before the plan: refuse in one line what it cannot run (a method, a metric, a model option)."""

    def load(self, config):
        """A loaded model: tokenizer, geometry, name, digest, device, dtype, ``backend``, ``dtype_note``."""

    def identity(self, lm) -> str:
        """The ``backend`` column: ``hf`` for transformers (its version is provenance, as before),
        ``<engine> <version>`` for an engine (a cell of vLLM 0.32 is not a cell of 0.33)."""

    def check_layouts(self, lm, jobs) -> None:
        """Before the plan: refuse a method whose frequencies do not fit the model's rotary tables."""

    def check_cells(self, lm, jobs, contexts) -> None:
        """Before the plan: refuse a cell the backend cannot compute (past an engine's rotary table)."""

    def num_layers(self, lm) -> int | None:
        """Decoder layers of the loaded model (a per-layer method's parameters are checked against them)."""

    def size(self, lm):
        """:class:`ctxbench.model.size.ModelSize` of the loaded model, for the plan."""

    def own_attention(self, lm) -> str:
        """The attention implementation the model runs where ctxbench's own attention does not."""

    def reserve(self, lm, longest: int) -> None:
        """The longest sequence the run will ask for (an engine is started for it)."""

    def engine_starts(self, lm, cells) -> int:
        """How many engines the backend starts for these cells (0: none, the model is in-process)."""

    def start_seconds(self, lm) -> list[float]:
        """Seconds of each engine start so far."""

    def calibration(self, lm) -> tuple[str, Callable] | None:
        """``(device type, timed)``: ``timed(lengths, steps)`` yields ``(n, seconds of a forward of n
        tokens, seconds of steps decoding steps on its cache)`` for the plan's rates
        (:func:`ctxbench.runner.costmodel.measured_rate`); None where the backend cannot time its own."""

    def watch(self, lm, advance: Callable[[float], None]) -> AbstractContextManager[bool]:
        """A context in which ``advance(tokens)`` is called as forwards progress; yields whether it
        will be (else the progress bar moves a cell's share at each cell)."""

    def session(self, lm, method, factor: float, seq_len: int) -> AbstractContextManager[Session]:
        """``method`` at ``factor`` applied for sequences of up to ``seq_len`` tokens."""

    def close(self, lm) -> None:
        """Shut down what the run started (an engine's reserved memory)."""
