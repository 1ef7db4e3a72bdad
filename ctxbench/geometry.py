"""RoPE geometry of a model: the only place that reads HF config fields about rotary embeddings.

Those fields moved between transformers versions (``rope_theta``/``rope_scaling`` before v5,
``rope_parameters`` since), so everything else in ctxbench reads a :class:`RopeGeometry`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import UserError


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

    def __post_init__(self) -> None:
        if self.rotary_dim <= 2 or self.rotary_dim % 2:
            raise UserError(
                f"rotary dim {self.rotary_dim} is not an even number > 2",
                "check --head-dim (and the model's partial_rotary_factor)",
            )
        if self.base <= 1:
            raise UserError(f"rope base {self.base} must be > 1", "pass the model's rope_theta, e.g. --base 10000")
        if self.trained_len < 1:
            raise UserError(f"trained length {self.trained_len} must be >= 1", "pass e.g. --trained-len 4096")

    @property
    def pairs(self) -> int:
        return self.rotary_dim // 2

    @classmethod
    def from_config(cls, config) -> RopeGeometry:
        """Build from any HF config (v5 ``rope_parameters`` or older ``rope_scaling``/``rope_theta``)."""
        text = getattr(config, "text_config", None)
        if text is not None and getattr(config, "rope_parameters", None) is None:
            config = text
        params = getattr(config, "rope_parameters", None) or {}
        if not isinstance(params, dict):
            params = dict(params)
        layer_types = getattr(config, "layer_types", None) or ()
        if params and any(key in layer_types for key in params):
            raise UserError(
                f"model type '{config.model_type}' uses a different RoPE per layer type",
                "ctxbench supports models with one RoPE configuration (Llama, Mistral, Qwen2/3, Phi-3, GPT-NeoX, ...)",
            )
        legacy = getattr(config, "rope_scaling", None) or {}
        base = (
            params.get("rope_theta")
            or getattr(config, "rope_theta", None)
            or getattr(config, "rotary_emb_base", None)
        )
        if base is None:
            raise UserError(
                f"model type '{getattr(config, 'model_type', '?')}' has no rotary position embedding (RoPE)",
                "ctxbench evaluates RoPE scaling methods; pick a RoPE model such as Llama, Mistral, Qwen or SmolLM2",
            )
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
        )
