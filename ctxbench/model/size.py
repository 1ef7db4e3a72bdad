"""The size of a model: what its forwards cost, read from its config (layers, width, weights in
its layers, vocabulary), for a model spec before loading (cached per file) or a loaded model.
The one place ctxbench derives a model's size; :mod:`ctxbench.runner.costmodel` turns it into time."""

from __future__ import annotations

import re
from dataclasses import asdict, astuple, dataclass, replace
from typing import Any

from ctxbench.errors import UserError
from ctxbench.model.cache import BadEntry, JsonCache, Schema, dataclass_fields, positive_number
from ctxbench.model.files import ALIASES, file_key, hub_offline, load_config, locate

# Families whose MLP is two matrices (up, down) rather than three (gate, up, down).
NOT_GATED = ("gpt2", "gpt_neox", "gpt_neo", "gptj", "bloom", "opt", "falcon", "mpt", "codegen", "phi")


@dataclass(frozen=True)
class Flops:
    """FLOPs split by how their time grows: ``linear`` (the weights and the output head, in
    proportion to the tokens) and ``attention`` (QK^T and PV, with the square of the context) of
    forwards, and the same two parts of one-token decoding steps, which run at other rates."""

    linear: float = 0.0
    attention: float = 0.0
    decode_linear: float = 0.0
    decode_attention: float = 0.0

    @property
    def total(self) -> float:
        return self.linear + self.attention + self.decode_linear + self.decode_attention

    @property
    def decode(self) -> float:
        return self.decode_linear + self.decode_attention

    def __add__(self, other: Flops) -> Flops:
        return Flops(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __mul__(self, k: float) -> Flops:
        return Flops(*(k * a for a in astuple(self)))

    __rmul__ = __mul__


@dataclass(frozen=True)
class ModelSize:
    """What the FLOP count needs of a model: ``params`` are the weights of its layers (no
    embedding or head), ``hidden`` its width, ``vocab`` its output size."""

    name: str
    layers: int
    hidden: int
    params: float
    vocab: int
    source: str = "config"  # config | name (guessed from a size in the name) | assumed (the default model's)

    def forward_flops(self, n: int, head_tokens: int | None = None, cached: int = 0) -> float:
        """FLOPs of a forward of ``n`` tokens after ``cached`` tokens already in the KV cache; the
        output head on ``head_tokens`` of them (default all). The new tokens attend to the cache as
        well as to each other: causal attention over ``cached + n`` minus that over ``cached``."""
        return self.forward_parts(n, head_tokens, cached).total

    def forward_parts(self, n: int, head_tokens: int | None = None, cached: int = 0) -> Flops:
        """:meth:`forward_flops` split into its linear part (weights, head) and its attention."""
        head = n if head_tokens is None else head_tokens
        attention = 2 * self.layers * self.hidden * ((cached + n) ** 2 - cached**2)
        return Flops(linear=2 * self.params * n + 2 * self.vocab * self.hidden * head, attention=attention)

    def step_flops(self, context: int) -> float:
        """FLOPs of one decoding step with ``context`` cached tokens (one query, head on it)."""
        return self.step_parts(context).total

    def step_parts(self, context: int) -> Flops:
        """:meth:`step_flops` split into its linear part and its attention over the cache."""
        return Flops(decode_linear=2 * self.params + 2 * self.vocab * self.hidden,
                     decode_attention=4 * self.layers * self.hidden * context)  # fmt: skip

    @classmethod
    def from_config(cls, config, name: str = "") -> ModelSize:
        text = getattr(config, "text_config", None) or config
        get = lambda *keys, default=None: _first(text, keys, default)  # noqa: E731
        hidden = int(get("hidden_size", "n_embd", "d_model"))
        layers = int(get("num_hidden_layers", "n_layer", "num_layers"))
        gated = str(getattr(text, "model_type", "")) not in NOT_GATED  # gate, up and down projections

        def layer_params(c) -> float:
            look = lambda *keys, default=None: _first(c, keys, default)  # noqa: E731
            heads = int(look("num_attention_heads", "n_head"))
            head_dim = int(look("head_dim", default=hidden // heads))
            kv = int(look("num_key_value_heads", "multi_query_group_num", default=heads))
            inner = int(look("intermediate_size", "n_inner", "ffn_dim", default=4 * hidden))
            attention = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2  # q, o; k, v
            return attention + (3 if gated else 2) * hidden * inner

        # a config whose layers differ (Gemma 4: a head dim per layer type) refuses its global
        # head_dim; its per-layer views say each layer's
        per_layer = getattr(text, "per_layer_config", None)
        params = sum(layer_params(c) for c in per_layer) if per_layer else layers * layer_params(text)
        return cls(name, layers, hidden, float(params), int(get("vocab_size", default=32000)))

    @classmethod
    def from_name(cls, name: str) -> ModelSize | None:
        """A size read from a hub id such as ``meta-llama/Llama-2-7b-hf`` (7e9 weights), with
        Llama's proportions (``12 layers H^2`` weights, ``H = 128 layers``): for plans when the
        config cannot be read (offline)."""
        m = re.search(r"(\d+(?:\.\d+)?)\s*([bm])\b", name.lower().replace("-", " ").replace("_", " "))
        if not m:
            return None
        params = float(m.group(1)) * (1e9 if m.group(2) == "b" else 1e6)
        hidden = int(round((params * 128 / 12) ** (1 / 3)))
        return cls(name, max(1, hidden // 128), hidden, params, 32000, source="name")


# SmolLM2-135M-Instruct: 30 layers of width 576 (9 heads of 64, 3 KV heads, MLP 1536), vocab 49152.
DEFAULT_SIZE = ModelSize("smollm2-135m", 30, 576, 30 * (576 * 576 * 2 + 576 * 192 * 2 + 3 * 576 * 1536), 49152)


def _is_size(value: Any) -> None:
    """A size that can price a forward: every count a finite number > 0 (a zero or NaN would make
    every plan's time zero or NaN), read from a config."""
    dataclass_fields(ModelSize, value)
    for name in ("layers", "hidden", "params", "vocab"):
        positive_number(value[name], name)
    if value["source"] != "config":
        raise BadEntry(f"source is {value['source']!r}; only sizes read from a config are cached")


# Keyed by the config's (or GGUF file's) path, size and mtime. Bump the version when reading a size
# from a config changes: older entries are then rebuilt.
SIZES: JsonCache[dict[str, Any]] = JsonCache("sizes.json", Schema("model sizes", 2), _is_size, then="read again from the config")


def assumed_size(name: str) -> ModelSize:
    """For a model whose size cannot be read: the default model's, saying so."""
    return replace(DEFAULT_SIZE, name=name, source="assumed")


def model_size(spec: str, trust_remote_code: bool = False) -> ModelSize:
    """The size of model ``spec`` from its config (cached per file like the geometry), else from a
    size in its name, else the default model's (``source`` says which)."""

    if spec in ALIASES:  # every alias names the default model
        return DEFAULT_SIZE
    try:
        kind, path, gguf = locate(spec)
        if kind == "hub":
            if hub_offline():
                raise OSError("offline")  # no config to fetch: the name's size, without importing transformers
            return ModelSize.from_config(load_config(spec, trust_remote_code), spec)
        assert path is not None  # a local model: locate gives its folder
        source = path / gguf if gguf else path / "config.json"
        fields = SIZES.lookup(file_key(source), lambda: asdict(ModelSize.from_config(load_config(spec, trust_remote_code), spec)))
        return ModelSize(**fields)
    except (UserError, OSError, ValueError, TypeError, AttributeError):
        return ModelSize.from_name(spec) or assumed_size(spec)


def _first(config, keys, default=None):
    """The first of ``keys`` that ``config`` sets to something truthy (names differ by family)."""
    return next((getattr(config, k) for k in keys if getattr(config, k, None)), default)


def size_of(lm) -> ModelSize:
    """A loaded model's size from its config (never from the hub: it is already here)."""

    try:
        return ModelSize.from_config(lm.model.config, lm.name)
    except (AttributeError, TypeError, ValueError):
        return assumed_size(lm.name)  # a model without a transformers config
