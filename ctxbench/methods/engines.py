"""How each method is written for serving engines (``ctxbench export``): per engine, a function giving what
the engine needs, or the reason it cannot run the method.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ctxbench.errors import UserError
from ctxbench.methods.frequencies import alpha_base, longrope_factors, ntk_base, yarn_mscale
from ctxbench.methods.native import native_rope
from ctxbench.methods.params import Params
from ctxbench.model.geometry import RopeGeometry

# What the attention-level methods tell every engine.
ATTENTION_REFUSAL = "it changes attention itself (ctxbench's own attention function), which no serving engine has"
# vLLM's rope types ctxbench exports for ``native`` (each checked against transformers' computation
# of the same type; ``ntk-mixed`` exports vLLM's own ``ntk`` type, checked against vLLM's code).
VLLM_ROPE_TYPES = ("default", "linear", "yarn", "llama3", "longrope")
DYNAMIC_IN_VLLM = "vLLM's 'dynamic' fixes the base once, at s*L tokens, instead of per sequence length"


@dataclass(frozen=True)
class Exports:
    """How ``ctxbench export`` writes one method for each serving engine. Each field is a function,
    or the reason the engine cannot express the method (``""``: it cannot, no reason given):

    * ``transformers(params, geom, factor) -> (fields, max_position_embeddings or None)``: the
      ``rope_parameters`` fields over ``{"rope_theta": b}`` (v5; the 4.x ``rope_scaling`` is derived);
    * ``vllm(rope_parameters, factor) -> rope_parameters``: transformers' fields as vLLM's
      ``--hf-overrides`` reads them (the same dict where the two agree);
    * ``llamacpp(params, geom, factor) -> {flag: value}``: ``llama-server`` flags but ``--ctx-size``.

    ``fields`` stands in for ``transformers`` where transformers cannot express the method but
    vLLM can: the same ``(params, geom, factor) -> (fields, max_position_embeddings or None)``,
    of a rope type only vLLM has (``ntk-mixed``: vLLM's ``ntk`` with ``mixed_b``).

    An attention-level method an engine runs itself (``dca`` in vLLM) gives, for that engine,
    ``vllm(rope_parameters, params, geom, factor) -> {"hf_overrides": {...}, "env": {...}, "flags": [...]}``:
    what it adds to its frequency part's export (``rope_parameters``, which it may refuse), with
    ``params`` every parameter after defaults (:func:`effective_params`).
    """

    transformers: Callable[..., Any] | str = ""
    vllm: Callable[..., Any] | str = ""
    llamacpp: Callable[..., Any] | str = ""
    fields: Callable[..., Any] | None = None
    # where the running vLLM computes the method right only in float32, why (``--backend vllm`` refuses
    # it in another dtype before the plan; its engine check would refuse the engine)
    vllm_float32_only: str = ""

    @classmethod
    def refused(cls, reason: str) -> Exports:
        """No engine can express it, for one reason."""
        return cls(reason, reason, reason)

    def refusal(self, engine: str) -> str | None:
        """None when ``engine`` can express the method, else why not (``""``: no reason given)."""
        how = getattr(self, engine)
        return None if callable(how) else how


def vllm_table_positions(rope: dict[str, Any]) -> int | None:
    """How many positions vLLM (0.32) builds the rotary table of these ``rope_parameters`` for, where
    ``max_position_embeddings`` does not size it (``--backend vllm`` raises that one to the run's
    length), else None. vLLM's ``YaRNScalingRotaryEmbedding`` sizes its cos/sin cache as
    ``original_max_position_embeddings * factor``, whatever ``max_position_embeddings`` says."""
    if rope.get("rope_type") == "yarn":
        return int(rope["original_max_position_embeddings"] * rope["factor"])
    return None


def vllm_longrope_switch(rope: dict[str, Any], tokens: int) -> str | None:
    """Where vLLM and transformers pick different LongRoPE factors for a sequence of ``tokens``, why;
    else None. transformers uses the long factors for a sequence longer than
    ``original_max_position_embeddings``; vLLM (``Phi3LongRoPEScaledRotaryEmbedding``) for every
    sequence once ``max_model_len`` passes it, and an engine for ``n`` tokens has ``max_model_len``
    ``n + 1`` (room for the one sampled token). They differ at exactly ``n = original``: the engine
    check found it on Phi-3.5 (sin -1.19 where transformers has +1.19 at position 2933)."""
    original = rope.get("original_max_position_embeddings")
    if rope.get("rope_type") != "longrope" or original is None or int(tokens) != int(original):
        return None
    return (f"a sequence of exactly the original {original} tokens takes LongRoPE's short factors in transformers (long past it) "
            f"and the long ones in vLLM, whose max_model_len of {original + 1} passes the original length")  # fmt: skip


def same_in_vllm(rope: dict[str, Any], factor: float) -> dict[str, Any]:
    """vLLM reads these ``rope_parameters`` as transformers does."""
    return dict(rope)


def _rebased_rope(base_of: Callable[[Params, RopeGeometry, float], float], params: Params, geom: RopeGeometry, factor: float) -> tuple[dict[str, Any], None]:
    return {"rope_type": "default", "rope_theta": base_of(params, geom, factor)}, None


def _rebased_flags(base_of: Callable[[Params, RopeGeometry, float], float], params: Params, geom: RopeGeometry, factor: float) -> dict[str, Any]:
    return {"--rope-scaling": "none", "--rope-freq-base": base_of(params, geom, factor)}


def rebased(base_of: Callable[[Params, RopeGeometry, float], float]) -> Exports:
    """A method that is plain RoPE with the base ``base_of(params, geom, factor)`` (``none``, ``ntk``,
    ``ntk-alpha``, ``theta``): every engine takes it as a new base, no rope type."""
    return Exports(partial(_rebased_rope, base_of), same_in_vllm, partial(_rebased_flags, base_of))


def base_of_none(params: Params, geom: RopeGeometry, factor: float) -> float:
    return geom.base


def base_of_ntk(params: Params, geom: RopeGeometry, factor: float) -> float:
    return ntk_base(geom, factor)


def base_of_ntk_alpha(params: Params, geom: RopeGeometry, factor: float) -> float:
    return alpha_base(geom, params.get("scaling_alpha"))


def base_of_theta(params: Params, geom: RopeGeometry, factor: float) -> float:
    if params.get("theta") is None:
        raise UserError("method 'theta' needs a new base", "pass --param theta=1000000")
    return float(params["theta"])


def linear_rope(params: Params, geom: RopeGeometry, factor: float) -> tuple[dict[str, Any], None]:
    return {"rope_type": "linear", "factor": factor}, None


def linear_flags(params: Params, geom: RopeGeometry, factor: float) -> dict[str, Any]:
    return {"--rope-scaling": "linear", "--rope-scale": factor, "--rope-freq-base": geom.base}


def dynamic_ntk_rope(params: Params, geom: RopeGeometry, factor: float) -> tuple[dict[str, Any], int]:
    """transformers' ``dynamic`` takes ``L`` from ``max_position_embeddings``."""
    return {"rope_type": "dynamic", "factor": factor}, geom.trained_len


def yarn_rope(params: Params, geom: RopeGeometry, factor: float) -> tuple[dict[str, Any], int]:
    """transformers' ``yarn``, whose ``attention_factor`` replaces ``0.1 ln s + 1`` as ctxbench's does."""
    L = geom.trained_len
    rope = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": L,
            "beta_fast": float(params["beta_fast"]), "beta_slow": float(params["beta_slow"]), "truncate": bool(params["truncate"])}  # fmt: skip
    if params.get("attention_factor") is not None:
        rope["attention_factor"] = float(params["attention_factor"])
    return rope, int(round(factor * L))


def yarn_vllm(rope: dict[str, Any], factor: float) -> dict[str, Any]:
    """vLLM's yarn: its ``attn_factor`` (as the yarn repository's) *multiplies* ``0.1 ln s + 1`` where
    transformers' ``attention_factor`` replaces it, so ``a`` is written ``a / (0.1 ln s + 1)``;
    ``truncate=true`` is its default and left out."""
    rope = dict(rope)
    a = rope.pop("attention_factor", None)
    if a is not None:
        rope["attn_factor"] = a / yarn_mscale(factor)
    if rope.get("truncate", True):
        rope.pop("truncate", None)  # the default everywhere
    return rope


def yarn_flags(params: Params, geom: RopeGeometry, factor: float) -> dict[str, Any]:
    """llama.cpp's yarn: its ramp floors/ceils the correction dims (``truncate``), and its attention
    factor is always ``0.1 ln s + 1``: the ``llama_context`` constructor (``src/llama-context.cpp`` of
    the llama.cpp that llama-cpp-python 0.3.36 vendors; its comment cites ggml-org/llama.cpp#17945)
    replaces ``yarn_attn_factor`` by ``(0.1 ln s + 1) / (0.1 ln s + 1)`` whenever yarn extrapolates
    (ggml's rope multiplies ``0.1 ln s + 1`` back), so ``--yarn-attn-factor`` is ignored: on
    ``--backend llamacpp``, ``yarn(attention_factor=1.3)`` gave plain yarn's perplexity to 7 digits."""
    if not params.get("truncate", True):
        raise UserError(
            "llamacpp cannot express yarn with truncate=false: it always rounds the correction range to whole dims",
            "export yarn with the default truncate=true, or --to transformers",
        )
    a = params.get("attention_factor")
    if a is not None and not math.isclose(float(a), yarn_mscale(factor), rel_tol=1e-12):
        raise UserError(
            f"llamacpp cannot express yarn with attention_factor={float(a):g}: llama.cpp sets yarn's attention factor to "
            f"0.1 ln s + 1 (= {yarn_mscale(factor):.6g} at x{factor:g}) itself and ignores --yarn-attn-factor",
            "export yarn without attention_factor, or --to transformers",
        )
    return {
        "--rope-scaling": "yarn", "--rope-scale": factor, "--rope-freq-base": geom.base,
        "--yarn-orig-ctx": geom.trained_len, "--yarn-ext-factor": "1", "--yarn-attn-factor": 1.0,
        "--yarn-beta-fast": float(params["beta_fast"]), "--yarn-beta-slow": float(params["beta_slow"]),
    }  # fmt: skip


def llama3_rope(params: Params, geom: RopeGeometry, factor: float) -> tuple[dict[str, Any], int]:
    L = geom.trained_len
    return {"rope_type": "llama3", "factor": factor, "original_max_position_embeddings": L,
            "low_freq_factor": float(params["low_freq_factor"]), "high_freq_factor": float(params["high_freq_factor"])}, int(round(factor * L))  # fmt: skip


def longrope_rope(params: Params, geom: RopeGeometry, factor: float) -> tuple[dict[str, Any], int]:
    L = geom.trained_len
    long, short = longrope_factors(geom, params.get("factors"), params.get("knots"))
    rope = {"rope_type": "longrope", "factor": factor, "original_max_position_embeddings": L,
            "long_factor": [float(x) for x in long], "short_factor": [float(x) for x in short]}  # fmt: skip
    if params.get("attention_factor") is not None:
        rope["attention_factor"] = float(params["attention_factor"])
    return rope, int(round(factor * L))


def ntk_mixed_fields(params: Params, geom: RopeGeometry, factor: float) -> tuple[dict[str, Any], int]:
    """vLLM's ``ntk`` rope type with ``mixed_b``: ``get_rope`` reads ``rope_parameters["factor"]`` and
    ``rope_parameters.get("mixed_b")`` into ``NTKScalingRotaryEmbedding(..., scaling_factor, dtype,
    mixed_b)`` (vllm-project/vllm ``vllm/model_executor/layers/rotary_embedding/__init__.py`` at
    commit 926c71f6f25f8fe0a71ba4b168205e64bef24a36). Its cos/sin cache covers
    ``max_position_embeddings`` positions and is not stretched by the factor, so that is set to ``s*L``."""
    rope = {"rope_type": "ntk", "factor": factor, "mixed_b": float(params["mixed_b"])}
    return rope, int(round(factor * geom.trained_len))


def native_export(params: Params, geom: RopeGeometry, factor: float) -> tuple[dict[str, Any], int | None]:
    """The model as shipped: its own rope parameters and length."""
    return native_rope(geom), geom.max_positions or None


def native_vllm(rope: dict[str, Any], factor: float) -> dict[str, Any]:
    """The config's own rope type, where vLLM has it."""
    rope_type = rope["rope_type"]
    if rope_type not in VLLM_ROPE_TYPES:
        raise UserError(
            f"vllm cannot express this model's own RoPE type '{rope_type}'" + (f": {DYNAMIC_IN_VLLM}" if rope_type == "dynamic" else ""),
            f"vllm supports rope types: {', '.join(VLLM_ROPE_TYPES)}",
        )
    return yarn_vllm(rope, factor) if rope_type == "yarn" else dict(rope)


def proportional_rope(params: Params, geom: RopeGeometry, factor: float) -> tuple[dict[str, Any], None]:
    """transformers' ``proportional`` (v5; 4.x has no such type): its ``partial_rotary_factor`` is
    the proportion of the head rotated, so a model that rotates only part of its head already
    cannot take it (see :func:`proportional_freqs`)."""
    if geom.rotary_dim != geom.head_dim:
        raise UserError(
            f"transformers cannot express proportional on a model that rotates {geom.rotary_dim} of its {geom.head_dim} "
            "head dims: its 'proportional' type rotates the whole head, with exponents 2i/head_dim, and reads "
            "partial_rotary_factor as the proportion of the head rotated",
            "export it --to json, or use a model whose rotary dim is its head dim",
        )
    return {"rope_type": "proportional", "factor": factor, "partial_rotary_factor": float(params["partial_rotary_factor"])}, None


# Dual Chunk Attention in engines. vLLM ran it up to 0.10 (the V0 engine's ``DUAL_CHUNK_FLASH_ATTN``
# backend, ``attention/backends/dual_chunk_flash_attn.py`` @006e0acb, with ``dual_chunk_attention_config``
# read by ``get_rope`` into ``DualChunkRotaryEmbedding``); vLLM 0.11 removed the V0 engine and that
# backend, and V1 has none: the config and its rotary class remain but nothing runs them end to end.
# SGLang runs it (``--attention-backend dual_chunk_flash_attn``, the model's config holding
# ``dual_chunk_attention_config``), as vLLM did, for these model types only (others ignore the config).
DUAL_CHUNK_MODELS = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
DCA_REFUSAL = "{engine} has no dual chunk attention (it changes attention itself; SGLang runs it, see the vllm refusal)"
DCA_VLLM_REFUSAL = (
    "vLLM 0.11 removed its dual-chunk attention backend (the V0 engine's DUAL_CHUNK_FLASH_ATTN) and its V1 engine has none, "
    "so no current vLLM runs dca; SGLang does, for qwen2/qwen3 models: `python -m sglang.launch_server --attention-backend "
    "dual_chunk_flash_attn` with dual_chunk_attention_config {chunk_size, local_size = local_window} in the model's config "
    "(export --to json gives both values); vLLM <= 0.10 did with VLLM_USE_V1=0 VLLM_ATTENTION_BACKEND=DUAL_CHUNK_FLASH_ATTN"
)


