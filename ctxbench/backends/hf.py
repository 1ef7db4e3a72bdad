"""The transformers backend (``--backend hf``, the default and the reference): the method is patched
into the loaded model in place (:func:`ctxbench.methods.patching.applied`) and ctxbench's own
scoring and decoding run on it (:mod:`ctxbench.model.scoring`, :mod:`ctxbench.model.decoding`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

NAME = "hf"


def check(methods, metrics, config) -> None:
    """transformers runs every method and metric."""


def check_cells(lm, jobs, contexts) -> None:
    """transformers computes any position of every method."""


def load(config):
    from ctxbench.model.load import load as load_model

    return load_model(config.model, device=config.device, dtype=config.dtype, trust_remote_code=config.trust_remote_code,
                      attn=config.attn, device_map=config.device_map, quantization=config.quantization)  # fmt: skip


def identity(lm) -> str:
    return NAME


@dataclass(frozen=True)
class HfSession:
    """The loaded model with the method applied (the context of :func:`session` holds the patch)."""

    lm: object

    def token_nll(self, ids, chunk: int = 1024):
        from ctxbench.model.scoring import token_nll

        return token_nll(self.lm.model, ids, chunk=chunk)

    def sliding_nll(self, ids, window: int, stride: int, chunk: int = 1024):
        from ctxbench.model.scoring import sliding_nll

        return sliding_nll(self.lm.model, ids, window, stride, chunk)

    def answers(self, prompts, max_new_tokens: int, finished=None, share: bool = True, continuations=None):
        from ctxbench.model.decoding import decode_shared, stop_tokens

        return decode_shared(self.lm.model, prompts, max_new_tokens, stop_tokens(self.lm.model, self.lm.tokenizer),
                             finished=finished, share=share, continuations=continuations)  # fmt: skip

    def scores(self, prompts, continuations, share: bool = True):
        from ctxbench.model.decoding import score_shared

        return score_shared(self.lm.model, prompts, continuations, share=share)


@contextlib.contextmanager
def session(lm, method, factor: float, seq_len: int):
    from ctxbench.methods.patching import applied

    with applied(lm.model, lm.geometry, method, factor, seq_len):
        yield HfSession(lm)
