"""The transformers backend (``--backend hf``, the default and the reference): the method is patched
into the loaded model in place (:func:`ctxbench.methods.patching.applied`) and ctxbench's own
scoring and decoding run on it (:mod:`ctxbench.model.scoring`, :mod:`ctxbench.model.decoding`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ctxbench.backends.base import Engine, Finished, ModelOptions, Timed
from ctxbench.defaults import DEFAULT_MODEL
from ctxbench.errors import UserError
from ctxbench.model.decoding import decode_shared, score_shared, stop_tokens
from ctxbench.model.geometry import layers_of
from ctxbench.model.load import LoadedModel
from ctxbench.model.load import wrap as wrap_model
from ctxbench.model.measure import decoder_layers, time_forwards
from ctxbench.model.scoring import final_hidden, kl_from_hidden, nll_from_hidden, sliding_nll, token_nll
from ctxbench.model.size import size_of

if TYPE_CHECKING:
    import torch

    from ctxbench.methods.setting import MethodSetting
    from ctxbench.model.decoding import Answer, Scored
    from ctxbench.model.size import ModelSize
    from ctxbench.model.thinking import Thinking

NAME = "hf"


def check(methods: Sequence[MethodSetting], metrics: Sequence[str], config: ModelOptions) -> None:
    """transformers runs every method and metric, in one process: tensor parallelism is an engine's."""
    tp = config.tensor_parallel
    if tp != 1:
        raise UserError(f"--tensor-parallel {tp} needs --backend vllm: the transformers backend runs one process "
                        "(it spreads a model over GPUs with --device-map auto)", "drop --tensor-parallel, or add --backend vllm")  # fmt: skip


def load(config: ModelOptions) -> HfEngine:
    return load_model(config.model, device=config.device, dtype=config.dtype, trust_remote_code=config.trust_remote_code,
                      attn=config.attn, device_map=config.device_map, quantization=config.quantization)  # fmt: skip


def load_model(spec: str = DEFAULT_MODEL, **options: Any) -> HfEngine:
    """A model by name or path as an engine: :func:`ctxbench.model.load.load` (its ``options``:
    device, dtype, trust_remote_code, attn, device_map, quantization) without a run's config."""
    from ctxbench.model.load import load as load_model  # looked up when called (tests replace it)

    return HfEngine.of(load_model(spec, **options))


def wrap(model: torch.nn.Module, tokenizer: object, name: str = "in-memory", digest: str = "in-memory") -> HfEngine:
    """An already-built transformers model (tests, notebooks) as an engine (:func:`ctxbench.model.load.wrap`)."""
    return HfEngine.of(wrap_model(model, tokenizer, name=name, digest=digest))


@dataclass
class HfEngine(LoadedModel, Engine):
    """A transformers model in this process: the method is patched into it for each session."""

    @classmethod
    def of(cls, loaded: LoadedModel) -> HfEngine:
        """The engine of what :func:`ctxbench.model.load.load` returned (the same objects, not copies)."""
        return cls(**{f.name: getattr(loaded, f.name) for f in fields(loaded)})

    def identity(self) -> str:
        return NAME

    @contextlib.contextmanager
    def session(self, method: MethodSetting, factor: float, seq_len: int) -> Iterator[HfSession]:
        from ctxbench.methods.patching import applied  # start-up: loads accelerate, filelock, huggingface_hub

        with applied(self.model, self.geometry, method, factor, seq_len):
            yield HfSession(self)

    def size(self) -> ModelSize:
        return size_of(self)

    def num_layers(self) -> int | None:
        return layers_of(getattr(self.model, "config", None))

    def check_layouts(self, jobs: Sequence[Any]) -> None:
        """Refuse a method whose frequencies do not fit the model's rotary tables (one line, before the plan)."""
        from ctxbench.methods.patching import (  # start-up: loads accelerate, filelock, huggingface_hub
            check_layout,  # start-up: loads accelerate, filelock, huggingface_hub
        )

        for job in jobs:
            for method in getattr(job.settings, "methods", ()):
                for factor in getattr(job.settings, "factors", ()) or (1.0,):
                    check_layout(self.model, self.geometry, method, factor)

    def own_attention(self) -> str:
        return str(getattr(getattr(self.model, "config", None), "_attn_implementation", None) or "")

    def calibration(self) -> tuple[str, Timed]:
        return self.torch_device.type, lambda lengths, steps: time_forwards(self.model, lengths, steps)

    @contextlib.contextmanager
    def watch(self, advance: Callable[[float], None]) -> Iterator[bool]:
        """A forward pre-hook on every decoder layer advances by ``batch x tokens / layers`` as each starts."""
        layers = decoder_layers(self.model)

        def hook(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            hidden = args[0] if args else kwargs.get("hidden_states")  # (batch, seq, hidden)
            if hidden is not None:
                advance(hidden.shape[0] * hidden.shape[1] / len(layers))

        hooks = [layer.register_forward_pre_hook(hook, with_kwargs=True) for layer in layers]
        try:
            yield bool(hooks)
        finally:
            for h in hooks:
                h.remove()


@dataclass(frozen=True)
class HfSession:
    """The loaded model with the method applied (the context of :meth:`HfEngine.session` holds the patch)."""

    lm: HfEngine

    def token_nll(self, ids: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
        return token_nll(self.lm.model, ids, chunk=chunk)

    def sliding_nll(self, ids: torch.Tensor, window: int, stride: int, chunk: int = 1024) -> torch.Tensor:
        return sliding_nll(self.lm.model, ids, window, stride, chunk)

    def answers(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, finished: Finished | None = None, share: bool = True,
                continuations: Sequence[Sequence[int]] | None = None, think: Thinking | None = None) -> Iterator[Answer]:  # fmt: skip

        return decode_shared(self.lm.model, prompts, max_new_tokens, stop_tokens(self.lm.model, self.lm.tokenizer),
                             finished=finished, share=share, continuations=continuations, think=think)  # fmt: skip

    def scores(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]], share: bool = True) -> Iterator[Scored]:
        return score_shared(self.lm.model, prompts, continuations, share=share)

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        return final_hidden(self.lm.model, ids)

    def nll_from_hidden(self, hidden: torch.Tensor, ids: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
        return nll_from_hidden(self.lm.model, hidden, ids, chunk=chunk)

    def kl_from_hidden(self, reference: torch.Tensor, hidden: torch.Tensor, chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
        return kl_from_hidden(self.lm.model, reference, hidden, chunk=chunk)

