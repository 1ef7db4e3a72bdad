"""A third backend for the contract test: the obviously-correct way, one whole forward per question.

Its model is a transformers model it wraps (``FakeModel.hf``), with the method patched in for each
session, but it scores every token with a forward of the prefix up to it, and decodes with a whole
forward per new token: no cache, no chunks, no sharing. It is slow and plainly right, so the real
backends are held to it. Registered under the name ``fake`` by the contract test."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from ctxbench.backends.base import Engine

NAME = "fake"


def check(methods, metrics, config) -> None:
    pass


def load(config):
    raise NotImplementedError("built by the test from a loaded tiny model")


@dataclass
class FakeEngine(Engine):
    hf: object  # a ctxbench.backends.hf.HfEngine
    tokenizer: object
    geometry: object
    name: str
    digest: str
    device: str = "cpu"
    dtype: str = "float32"
    dtype_note: str = ""
    reserved: int = 0
    starts: list = field(default_factory=list)
    closed: int = 0

    def identity(self) -> str:
        return "fake 0"

    @contextlib.contextmanager
    def session(self, method, factor: float, seq_len: int):
        from ctxbench.methods.patching import applied

        self.starts.append((method.label, factor))
        with applied(self.hf.model, self.geometry, method, factor, seq_len):
            yield FakeSession(self)

    def size(self):
        from ctxbench.model.size import size_of

        return size_of(self.hf)

    def num_layers(self) -> int | None:
        return self.hf.model.config.num_hidden_layers

    def reserve(self, longest: int) -> None:
        self.reserved = longest

    def engine_starts(self, cells) -> int:
        return len({(c.method, c.factor) for c in cells})

    def start_seconds(self) -> list[float]:
        return [0.0 for _ in self.starts]

    def close(self) -> None:
        self.closed += 1


def wrap(hf) -> FakeEngine:
    return FakeEngine(hf, hf.tokenizer, hf.geometry, hf.name, hf.digest)


@dataclass(frozen=True)
class FakeSession:
    lm: FakeEngine

    @torch.inference_mode()
    def _logp(self, ids: list[int]):
        """log-probabilities (vocab,) of the token after ``ids``, from a forward of ``ids`` alone."""
        return self.lm.hf.model(torch.tensor([ids])).logits[0, -1].double().log_softmax(-1)

    def token_nll(self, ids, chunk: int = 1024):
        ids = [int(t) for t in ids]
        return torch.tensor([-float(self._logp(ids[:t])[ids[t]]) for t in range(1, len(ids))], dtype=torch.float32)

    def sliding_nll(self, ids, window: int, stride: int, chunk: int = 1024):
        raise NotImplementedError

    def answers(self, prompts, max_new_tokens: int, finished=None, share: bool = True, continuations=None, think=None):
        from ctxbench.model.decoding import Answer, stop_tokens

        stop = stop_tokens(self.lm.hf.model, self.lm.hf.tokenizer)
        nlls = {s.index: s.nll for s in self.scores(prompts, continuations)} if continuations is not None else {}
        for i, p in enumerate(prompts):
            cur, new = [int(t) for t in p], []
            steer = None if think is None else think.steer(p, max_new_tokens)  # the budget's rule, token by token
            for _ in range(max_new_tokens if think is None else think.steps(max_new_tokens)):
                token = int(self._logp(cur).argmax())
                token = token if steer is None else steer.take(token)
                new.append(token)
                seen = tuple(new) if steer is None else steer.answer(new)
                if token in stop or (finished is not None and seen and finished(i, seen)) or (steer is not None and steer.spent):
                    break
                cur.append(token)
            yield Answer(i, tuple(new), 0.0, nlls.get(i), forced=bool(steer and steer.forced))

    def scores(self, prompts, continuations, share: bool = True):
        from ctxbench.model.decoding import Scored

        for i, (p, c) in enumerate(zip(prompts, continuations, strict=True)):
            full = [int(t) for t in p] + [int(t) for t in c]
            n = len(p)
            yield Scored(i, torch.tensor([-float(self._logp(full[:t])[full[t]]) for t in range(n, len(full))], dtype=torch.float32), 0.0)

    def hidden(self, ids):
        raise NotImplementedError

    def nll_from_hidden(self, hidden, ids, chunk: int = 1024):
        raise NotImplementedError

    def kl_from_hidden(self, reference, hidden, chunk: int = 1024):
        raise NotImplementedError

