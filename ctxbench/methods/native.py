"""``native``: the model's own RoPE scaling as shipped, computed by transformers' ``ROPE_INIT_FUNCTIONS``.
"""

from __future__ import annotations

import math

from ctxbench.errors import UserError
from ctxbench.methods.frequencies import factor_count_error, longrope_factors, none_freqs
from ctxbench.methods.params import Array, Namespace, Params
from ctxbench.model.geometry import RopeGeometry

# Rope types whose frequencies depend on the sequence length (transformers recomputes them per forward).
DYNAMIC_ROPE_TYPES = ("dynamic", "longrope")


class _RopeConfig:
    """The few config fields transformers' ``ROPE_INIT_FUNCTIONS`` read, rebuilt from a geometry."""

    def __init__(self, geom: RopeGeometry, rope: Params) -> None:
        partial = geom.rotary_dim / geom.head_dim
        if int(geom.head_dim * partial) != geom.rotary_dim:  # int() must give back the rotary dim
            partial = math.nextafter(partial, 2.0)
        self.rope_parameters = {"rope_theta": geom.base, "partial_rotary_factor": partial, **rope}
        self.head_dim = geom.head_dim
        self.num_attention_heads = 1
        self.hidden_size = geom.head_dim
        self.max_position_embeddings = geom.max_positions or geom.trained_len

    def standardize_rope_params(self) -> None:  # already standard
        pass


def native_rope(geom: RopeGeometry) -> Params:
    """The model config's own RoPE scaling: ``{"rope_type": ..., <its parameters>}`` (``default`` when none)."""
    rope = {k: v for k, v in geom.native.items() if k != "type"}
    rope_type = rope.get("rope_type") or geom.native.get("type") or "default"
    return {**rope, "rope_type": rope_type}


def native_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp: Namespace) -> tuple[Array, float]:
    """The model as shipped: the config's own RoPE scaling, computed by the installed transformers'
    ``ROPE_INIT_FUNCTIONS`` (linear, dynamic, yarn, longrope, llama3, and any other type it has) for
    a sequence of ``seq_len`` tokens, as the model's rotary module would; the given factor is not used."""
    rope = native_rope(geom)
    rope_type = rope["rope_type"]
    if rope_type == "default":
        return none_freqs(geom, factor, seq_len, xp=xp)
    from transformers.modeling_rope_utils import (  # start-up: transformers only where it runs
        ROPE_INIT_FUNCTIONS,  # start-up: transformers only where it runs
    )

    fn = ROPE_INIT_FUNCTIONS.get(rope_type)
    if fn is None:
        raise UserError(
            f"the model's config asks for RoPE type '{rope_type}', which the installed transformers does not have",
            f"it has: default, {', '.join(ROPE_INIT_FUNCTIONS)}; upgrade transformers or pick another method",
        )
    inv_freq, scale = fn(_RopeConfig(geom, rope), "cpu", seq_len=int(seq_len))
    return xp.asarray(inv_freq.float().numpy()), float(scale)  # torch or NumPy, as asked


def native_params(params: Params, geom: RopeGeometry, factor: float) -> Params:
    """What ``native`` uses: the config's own RoPE type and parameters, as shipped; on a model without
    RoPE, the kind of positions it has (``absolute``, ``alibi``)."""
    if not geom.has_rope:
        return {"position": geom.position}
    return {**params, **native_rope(geom)}


def native_dynamic(geom: RopeGeometry) -> bool:
    """``native`` depends on the sequence length only where the config's rope type does."""
    return geom.has_rope and native_rope(geom)["rope_type"] in DYNAMIC_ROPE_TYPES


def longrope_check(params: Params, geom: RopeGeometry) -> None:
    """LongRoPE factors the user gave must number ``d/2``, which only the geometry tells; factors and
    knots are not given together."""
    factors, knots = params.get("factors"), params.get("knots")
    if knots is not None:
        longrope_factors(geom, factors, knots)  # not both
    elif factors is not None and len(longrope_factors(geom, factors)[0]) != geom.pairs:
        raise factor_count_error(len(longrope_factors(geom, factors)[0]), geom)


# Engine exports (``ctxbench export``, :mod:`ctxbench.methods.export`): per engine, a function giving what the
# engine needs to compute the method, or the reason it cannot. export.py adds what every method shares
# (the base and partial rotary factor, the context length, the engine's own format).

