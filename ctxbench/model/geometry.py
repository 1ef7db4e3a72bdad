"""RoPE geometry of a model: the only place that reads HF config fields about position encodings.

Those fields moved between transformers versions (``rope_theta``/``rope_scaling`` before v5,
``rope_parameters`` since), so everything else in ctxbench reads a :class:`RopeGeometry`.

Models without RoPE are read too, as baselines: ``position`` is ``"alibi"`` (BLOOM, MPT, Falcon
with ``alibi``) or ``"absolute"`` (a learned position table: GPT-2, OPT, GPT-Neo, ...). Only
``none`` and ``native`` apply to them (see :func:`ctxbench.methods.check_applicable`). A rotary
layout ctxbench cannot drive (GPT-J/CodeGen's interleaved pairs) is a :class:`UserError` here,
never a silent mis-patch later.

Per-layer-type RoPE (Gemma 3 and later: ``rope_parameters`` keyed by layer type, e.g.
``{"full_attention": {...}, "sliding_attention": {...}}``) is read for the full-attention layers
(:data:`LONG_LAYER_TYPE`), the type whose parameters carry the model's long-context scaling — as
transformers' ``Gemma3TextConfig.convert_rope_params_to_dict`` puts a legacy ``rope_scaling`` on
``full_attention`` only and Gemma 3 ships ``linear`` factor 8 there, its sliding layers unscaled at
base 10k. The geometry is that type's: its base, its parameters as ``native``, its trained length;
``layer_type`` names it, and :mod:`ctxbench.methods.patching` rewrites that type's rotary table only,
keeping every other type's as shipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ctxbench.errors import UserError

POSITIONS = ("rope", "alibi", "absolute")
# Config keys that mean a rotary embedding of a kind ctxbench does not read (GPT-J, CodeGen: interleaved pairs).
_OTHER_ROTARY_KEYS = ("rotary_dim", "rotary_emb_dim", "rotary", "rope_ratio")
# Per-layer-type RoPE: the layer type a method applies to (the others keep their shipped rotary).
LONG_LAYER_TYPE = "full_attention"


# The largest rotary head ctxbench computes: released models use 64 to 256 (an MLA head 576 in
# all); 2e9 filled 7.45 GiB in ``freqs`` before anything was said.
MOST_HEAD_DIM = 8192


@dataclass(frozen=True)
class RopeGeometry:
    """Rotary geometry: head dim, rotated dims ``d``, base ``b`` and trained context ``L``.

    ``native`` holds the model's own scaling parameters (e.g. LongRoPE's per-pair factors), so a
    method can fall back to them.
    """

    head_dim: int
    rotary_dim: int
    base: float
    trained_len: int
    model_type: str = ""
    native: dict = field(default_factory=dict, compare=False, hash=False)
    position: str = "rope"  # rope | alibi | absolute
    max_positions: int = field(default=0, compare=False)  # config's max_position_embeddings (0: unknown)
    # per-layer-type RoPE: the layer type this geometry describes and methods rewrite ("": one RoPE for all layers)
    layer_type: str = ""
    # per-layer-type RoPE: the shipped rope parameters (``rope_theta`` included) of every other layer
    # type, which methods leave as they are (an engine told the method is told these too)
    other_layers: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.position not in POSITIONS:
            raise ValueError(f"position must be one of {POSITIONS}, got {self.position!r}")
        if self.position != "rope":
            if self.trained_len < 1:
                raise UserError(f"trained length {self.trained_len} must be >= 1", "pass e.g. --trained-len 4096")
            return
        if self.rotary_dim <= 2 or self.rotary_dim % 2:
            raise UserError(
                f"rotary dim {self.rotary_dim} is not an even number > 2",
                "check --head-dim (and the model's partial_rotary_factor)",
            )
        if self.rotary_dim > MOST_HEAD_DIM:
            raise UserError(f"rotary dim {self.rotary_dim} is above the largest head ctxbench takes, {MOST_HEAD_DIM:,}",
                            "check --head-dim (the models released use 64 to 256), e.g. --head-dim 128")  # fmt: skip
        if not math.isfinite(self.base):
            raise UserError(f"rope base {self.base} is not a finite number", "pass the model's rope_theta, e.g. --base 10000")
        if self.base <= 1:
            raise UserError(f"rope base {self.base} must be > 1", "pass the model's rope_theta, e.g. --base 10000")
        if self.trained_len < 1:
            raise UserError(f"trained length {self.trained_len} must be >= 1", "pass e.g. --trained-len 4096")

    @property
    def pairs(self) -> int:
        return self.rotary_dim // 2

    @property
    def has_rope(self) -> bool:
        return self.position == "rope"

    @classmethod
    def from_config(cls, config) -> RopeGeometry:
        """Build from any HF config (v5 ``rope_parameters`` or older ``rope_scaling``/``rope_theta``)."""
        text = getattr(config, "text_config", None)
        if text is not None and getattr(config, "rope_parameters", None) is None:
            config = text
        params = getattr(config, "rope_parameters", None) or {}
        if not isinstance(params, dict):
            params = dict(params)
        layer_types = tuple(getattr(config, "layer_types", None) or ())
        layer_type = ""
        legacy = getattr(config, "rope_scaling", None) or {}
        other_layers: dict = {}
        if params and any(key in layer_types for key in params):
            other_layers = {k: dict(v) for k, v in params.items() if k != LONG_LAYER_TYPE and isinstance(v, dict)}
            params, layer_type, legacy = _long_layer_params(config, params, layer_types), LONG_LAYER_TYPE, {}
            per_layer = getattr(config, "per_layer_config", None)  # Gemma 4: that type's head dim lives there
            if per_layer is not None:
                config = per_layer[LONG_LAYER_TYPE]
        base = (
            params.get("rope_theta")
            or getattr(config, "rope_theta", None)
            or getattr(config, "rotary_emb_base", None)
        )
        if base is None or _uses_alibi(config):
            return _without_rope(config)
        partial = (
            params.get("partial_rotary_factor")
            or getattr(config, "partial_rotary_factor", None)
            or getattr(config, "rotary_pct", None)
            or 1.0
        )
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        trained = (
            params.get("original_max_position_embeddings")
            or legacy.get("original_max_position_embeddings")
            or getattr(config, "original_max_position_embeddings", None)
            or config.max_position_embeddings
        )
        native = {k: v for k, v in {**legacy, **params}.items() if k not in ("rope_theta", "partial_rotary_factor")}
        return cls(
            head_dim=int(head_dim),
            rotary_dim=int(head_dim * partial),
            base=float(base),
            trained_len=int(trained),
            model_type=str(getattr(config, "model_type", "")),
            native=native,
            max_positions=int(getattr(config, "max_position_embeddings", None) or 0),
            layer_type=layer_type,
            other_layers=other_layers,
        )


def _long_layer_params(config, params: dict, layer_types: tuple) -> dict:
    """The rope parameters of the full-attention layers of a per-layer-type config, or one error."""
    long = params.get(LONG_LAYER_TYPE)
    if LONG_LAYER_TYPE not in layer_types or not isinstance(long, dict) or not long.get("rope_theta"):
        raise UserError(
            f"model type '{config.model_type}' keys its RoPE by layer type ({', '.join(sorted(set(layer_types)))}) "
            f"with no '{LONG_LAYER_TYPE}' layers or no rope_theta for them",
            f"ctxbench applies a method to the '{LONG_LAYER_TYPE}' layers' RoPE and keeps the other layer types as shipped",
        )
    return dict(long)


def _uses_alibi(config) -> bool:
    attn = getattr(config, "attn_config", None)
    attn_alibi = attn.get("alibi") if isinstance(attn, dict) else getattr(attn, "alibi", None)
    return getattr(config, "model_type", "") == "bloom" or bool(getattr(config, "alibi", False)) or bool(attn_alibi)


# BLOOM's configs carry no trained length; BLOOM (and MPT-7B) were trained at 2048 tokens.
ALIBI_DEFAULT_LEN = 2048


def _without_rope(config) -> RopeGeometry:
    """Geometry of a model without RoPE: ALiBi or a learned absolute-position table, else an error."""
    model_type = str(getattr(config, "model_type", "?"))
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None) or getattr(config, "n_heads", None)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None) or getattr(config, "d_model", None)
    head_dim = int(hidden // heads) if hidden and heads else 0
    if _uses_alibi(config):
        trained = (
            getattr(config, "max_seq_len", None) or getattr(config, "seq_length", None)
            or getattr(config, "max_position_embeddings", None) or ALIBI_DEFAULT_LEN
        )  # fmt: skip
        return RopeGeometry(head_dim=head_dim, rotary_dim=0, base=0.0, trained_len=int(trained), model_type=model_type, position="alibi")
    keys = [k for k in _OTHER_ROTARY_KEYS if getattr(config, k, None)]
    if keys or getattr(config, "position_embedding_type", None) == "rotary":
        raise UserError(
            f"model type '{model_type}' uses a rotary layout ctxbench does not support ({', '.join(keys) or 'position_embedding_type=rotary'})",
            "ctxbench patches transformers' rotary modules with an inv_freq buffer (Llama, Mistral, Qwen2/3, Phi-3, GPT-NeoX, StableLM, Gemma, OLMo)",
        )
    table = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    if not table:
        raise UserError(
            f"model type '{model_type}' has no rotary position embedding (RoPE), no ALiBi and no position table ctxbench can read",
            "pick a RoPE model such as Llama, Mistral, Qwen or SmolLM2",
        )
    return RopeGeometry(
        head_dim=head_dim, rotary_dim=0, base=0.0, trained_len=int(table), model_type=model_type,
        position="absolute", max_positions=int(table),
    )  # fmt: skip


def layers_of(config) -> int | None:
    """``num_hidden_layers`` (or ``n_layer``, ``num_layers``) of a config object or dict, looking
    inside ``text_config`` for a multimodal one; None when it says nothing."""
    return _count(config, ("num_hidden_layers", "n_layer", "num_layers"))


def heads_of(config) -> int | None:
    """``num_attention_heads`` (or ``n_head``, ``n_heads``) of a config object or dict, looking
    inside ``text_config`` for a multimodal one; None when it says nothing."""
    return _count(config, ("num_attention_heads", "n_head", "n_heads"))


def _count(config, keys: tuple[str, ...]) -> int | None:
    if config is None:
        return None
    get = config.get if isinstance(config, dict) else (lambda key, default=None: getattr(config, key, default))
    for key in keys:
        value = get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    text = get("text_config")
    return _count(text, keys) if text is not None and text is not config else None
