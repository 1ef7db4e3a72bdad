"""The interface every engine backend implements, and what tasks may ask of it.

A task never touches a model: it asks the backend of the loaded model (:func:`ctxbench.backends.of`)
for a :class:`Session` -- one method setting at one factor, for sequences of up to ``seq_len``
tokens -- and asks that session for per-token losses and greedy answers. A backend module has:

- ``NAME``: what ``--backend`` calls it, and the ``backend`` column of its rows (with its version);
- ``check(methods, metrics, config)``: before the plan, refuse in one line what it cannot run
  (a method, a metric, a model option);
- ``load(config)``: a loaded model (tokenizer, geometry, name, digest, device, dtype, ``backend``);
- ``session(lm, method, factor, seq_len)``: a context manager yielding a :class:`Session`;
- ``identity(lm)``: the ``backend`` column: ``hf`` for transformers (its version is provenance,
  as before), ``<engine> <version>`` for an engine (a cell of vLLM 0.32 is not a cell of 0.33).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol


class Session(Protocol):
    """One method setting applied for sequences of up to ``seq_len`` tokens."""

    def token_nll(self, ids, chunk: int = 1024):
        """(n - 1,) float32 NLL of tokens 1..n-1 of ``ids`` (a (n,) tensor), each given all before it."""

    def sliding_nll(self, ids, window: int, stride: int, chunk: int = 1024):
        """(n - 1,) float32 NLL with windows of ``window`` tokens advancing by ``stride``
        (:func:`ctxbench.model.scoring.sliding_nll`'s protocol)."""

    def answers(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, finished=None, share: bool = True,
                continuations=None) -> Iterator:  # fmt: skip
        """Greedy answers (:class:`ctxbench.model.decoding.Answer`, any order) of every prompt, stopping
        at the model's stop tokens; with ``continuations``, each answer's ``nll`` is the teacher-forced
        NLL of its expected continuation after the prompt."""

    def scores(self, prompts: Sequence[Sequence[int]], continuations, share: bool = True) -> Iterator:
        """Teacher-forced NLL of ``continuations[i]`` after ``prompts[i]``
        (:class:`ctxbench.model.decoding.Scored`, any order). No decoding."""
