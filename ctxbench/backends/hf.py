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


def check_layouts(lm, jobs) -> None:
    """Refuse a method whose frequencies do not fit the model's rotary tables (one line, before the plan)."""
    from ctxbench.methods.patching import check_layout

    for job in jobs:
        for method in getattr(job.settings, "methods", ()):
            for factor in getattr(job.settings, "factors", ()) or (1.0,):
                check_layout(lm.model, lm.geometry, method, factor)


def num_layers(lm) -> int | None:
    from ctxbench.model.geometry import layers_of

    return layers_of(getattr(lm.model, "config", None))


def size(lm):
    from ctxbench.model.size import size_of

    return size_of(lm)


def own_attention(lm) -> str:
    return str(getattr(getattr(lm.model, "config", None), "_attn_implementation", None) or "")


def reserve(lm, longest: int) -> None:
    """The model is in-process: nothing is started for a length."""


def engine_starts(lm, cells) -> int:
    return 0


def start_seconds(lm) -> list[float]:
    return []


def calibration(lm):
    from ctxbench.model.measure import time_forwards

    return lm.torch_device.type, lambda lengths, steps: time_forwards(lm.model, lengths, steps)


@contextlib.contextmanager
def watch(lm, advance):
    """A forward pre-hook on every decoder layer advances by ``batch x tokens / layers`` as each starts."""
    from ctxbench.model.measure import decoder_layers

    layers = decoder_layers(lm.model)

    def hook(module, args, kwargs):
        hidden = args[0] if args else kwargs.get("hidden_states")  # (batch, seq, hidden)
        if hidden is not None:
            advance(hidden.shape[0] * hidden.shape[1] / len(layers))

    hooks = [layer.register_forward_pre_hook(hook, with_kwargs=True) for layer in layers]
    try:
        yield bool(hooks)
    finally:
        for h in hooks:
            h.remove()


def close(lm) -> None:
    """Nothing to shut down: the model stays loaded for the caller (the Python API reuses it)."""


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

    def answers(self, prompts, max_new_tokens: int, finished=None, share: bool = True, continuations=None, think=None):
        from ctxbench.model.decoding import decode_shared, stop_tokens

        return decode_shared(self.lm.model, prompts, max_new_tokens, stop_tokens(self.lm.model, self.lm.tokenizer),
                             finished=finished, share=share, continuations=continuations, think=think)  # fmt: skip

    def scores(self, prompts, continuations, share: bool = True):
        from ctxbench.model.decoding import score_shared

        return score_shared(self.lm.model, prompts, continuations, share=share)

    def hidden(self, ids):
        from ctxbench.model.scoring import final_hidden

        return final_hidden(self.lm.model, ids)

    def nll_from_hidden(self, hidden, ids, chunk: int = 1024):
        from ctxbench.model.scoring import nll_from_hidden

        return nll_from_hidden(self.lm.model, hidden, ids, chunk=chunk)

    def kl_from_hidden(self, reference, hidden, chunk: int = 1024):
        from ctxbench.model.scoring import kl_from_hidden

        return kl_from_hidden(self.lm.model, reference, hidden, chunk=chunk)


@contextlib.contextmanager
def session(lm, method, factor: float, seq_len: int):
    from ctxbench.methods.patching import applied

    with applied(lm.model, lm.geometry, method, factor, seq_len):
        yield HfSession(lm)
