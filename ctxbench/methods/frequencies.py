"""Frequency-level methods: one pure function each, ``fn(geometry, factor, seq_len, *, xp: Namespace, **params) ->
(inv_freq, attention_scale)``, with transformers' op order (``ROPE_INIT_FUNCTIONS``), and the log-n
family's query scales.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ctxbench.errors import UserError
from ctxbench.methods.params import (
    LONGROPE_FACTORS,
    YARN_BETA_FAST,
    YARN_BETA_SLOW,
    Array,
    Namespace,
    read_factors,
)
from ctxbench.model.geometry import RopeGeometry


def torch_namespace() -> Namespace:
    """The array namespace of torch tensors (array-api-compat), imported on first use: listing
    methods or rejecting a bad name must answer in well under a second, and torch takes ~2-5 s."""
    import array_api_compat.torch as xp  # optional: array_api_compat only where it is used

    return xp


def numpy_namespace() -> Namespace:
    """The array namespace of NumPy arrays: what ``ctxbench freqs`` computes with, so it answers
    without importing torch. The same float32 operations, so the same values to float32 rounding."""
    import array_api_compat.numpy as xp  # optional: array_api_compat only where it is used

    return xp


def _exponents(geom: RopeGeometry, xp: Namespace) -> Array:
    """``2i/d`` for each pair, float32, as transformers computes it."""
    d = geom.rotary_dim
    return xp.astype(xp.arange(0, d, 2, dtype=xp.int64), xp.float32) / d


def _inv_freq(base: float, geom: RopeGeometry, xp: Namespace) -> Array:
    """``theta_i = base^(-2i/d)``, float32."""
    return 1.0 / (base ** _exponents(geom, xp))


def none_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp: Namespace) -> tuple[Array, float]:
    """Plain RoPE, extrapolated past ``L``: ``theta_i = b^(-2i/d)`` (Su et al., arXiv 2104.09864)."""
    return _inv_freq(geom.base, geom, xp), 1.0


def linear_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp: Namespace) -> tuple[Array, float]:
    """Position Interpolation: ``theta_i / s`` (Chen et al., arXiv 2306.15595)."""
    inv_freq = _inv_freq(geom.base, geom, xp)
    inv_freq /= factor
    return inv_freq, 1.0


def ntk_base(geom: RopeGeometry, factor: float) -> float:
    """NTK-aware scaling's base ``b * s^(d/(d-2))`` (bloc97, 2023; YaRN paper sec. 3.1)."""
    d = geom.rotary_dim
    return float(geom.base * factor ** (d / (d - 2)))  # float(): a power of floats is Any to mypy


def ntk_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp: Namespace) -> tuple[Array, float]:
    """NTK-aware scaling: plain RoPE with the base :func:`ntk_base`."""
    return _inv_freq(ntk_base(geom, factor), geom, xp), 1.0


def dynamic_ntk_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp: Namespace) -> tuple[Array, float]:
    """Dynamic NTK: base ``b * (s*l/L - (s-1))^(d/(d-2))`` when ``l > L``, else plain RoPE
    (emozilla, 2023; transformers' ``dynamic``)."""
    d, L = geom.rotary_dim, geom.trained_len
    if seq_len <= L:
        return none_freqs(geom, factor, seq_len, xp=xp)
    base = geom.base * ((factor * seq_len / L) - (factor - 1)) ** (d / (d - 2))
    return _inv_freq(base, geom, xp), 1.0


def ntk_by_parts_freqs(
    geom: RopeGeometry, factor: float, seq_len: int, *, xp: Namespace, alpha: float = 1.0, beta: float = 32.0
) -> tuple[Array, float]:
    """NTK-by-parts (YaRN paper, arXiv 2309.00071, sec. 3.2):
    ``(1-g_i)*theta_i/s + g_i*theta_i`` with ``g_i = clamp((r_i-alpha)/(beta-alpha), 0, 1)``,
    ``r_i = L/lambda_i``: pairs that turn many times in ``L`` (high frequency) are kept,
    pairs that turn less than once are interpolated."""
    theta = _inv_freq(geom.base, geom, xp)
    ratio = geom.trained_len * theta / (2 * math.pi)  # r_i = L / lambda_i
    gamma = xp.clip((ratio - alpha) / (beta - alpha), 0, 1)
    return (1 - gamma) * theta / factor + gamma * theta, 1.0


def yarn_mscale(scale: float) -> float:
    """YaRN attention temperature ``0.1*ln(s) + 1`` (1 for ``s <= 1``)."""
    return 1.0 if scale <= 1 else 0.1 * math.log(scale) + 1.0


def yarn_freqs(
    geom: RopeGeometry,
    factor: float,
    seq_len: int, *, xp: Namespace,
    beta_fast: float = YARN_BETA_FAST,
    beta_slow: float = YARN_BETA_SLOW,
    truncate: bool = True,
    attention_factor: float | None = None,
) -> tuple[Array, float]:
    """YaRN (Peng et al., arXiv 2309.00071) as transformers computes it: NTK-by-parts whose ramp is
    linear in the pair index between the correction dims of ``beta_fast`` and ``beta_slow``
    rotations in ``L``, and attention scale ``0.1*ln(s) + 1``."""
    d, base, L = geom.rotary_dim, geom.base, geom.trained_len

    def correction_dim(rotations: float) -> float:
        return (d * math.log(L / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    ramp = xp.clip((xp.arange(d // 2, dtype=xp.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (xp.astype(xp.arange(0, d, 2), xp.float32) / d)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp  # 1 for high-frequency pairs (extrapolated), 0 for low-frequency ones
    inv_freq = interpolation * (1 - keep) + extrapolation * keep
    scale = yarn_mscale(factor) if attention_factor is None else float(attention_factor)
    return inv_freq, scale


def dynamic_yarn_freqs(
    geom: RopeGeometry,
    factor: float,
    seq_len: int, *, xp: Namespace,
    beta_fast: float = YARN_BETA_FAST,
    beta_slow: float = YARN_BETA_SLOW,
) -> tuple[Array, float]:
    """Dynamic YaRN (YaRN repo): ``yarn`` with ``s = max(1, l/L)`` for each sequence; the given
    factor is not used."""
    scale = max(1.0, seq_len / geom.trained_len)
    return yarn_freqs(geom, scale, seq_len, xp=xp, beta_fast=beta_fast, beta_slow=beta_slow)


def llama3_freqs(
    geom: RopeGeometry,
    factor: float,
    seq_len: int, *, xp: Namespace,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
) -> tuple[Array, float]:
    """Llama 3.1 scaling (as transformers' ``llama3``): wavelengths above ``L/low_freq_factor`` are
    divided by ``s``, below ``L/high_freq_factor`` kept, smoothly blended in between."""
    L = geom.trained_len
    inv_freq = _inv_freq(geom.base, geom, xp)
    low_freq_wavelen, high_freq_wavelen = L / low_freq_factor, L / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = xp.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (L / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = xp.logical_and(~(wavelen < high_freq_wavelen), ~(wavelen > low_freq_wavelen))
    return xp.where(medium, smoothed, scaled), 1.0


def knot_curve(knots: Iterable[float], pairs: int) -> list[float]:
    """LongRoPE's per-pair factors as a curve through ``knots``: knot ``j`` of ``K`` sits at pair
    ``j (P - 1) / (K - 1)`` of ``P``; a pair between two knots takes the log-linear (geometric)
    interpolation of their factors, so the curve is non-decreasing when the knots are. One knot is a
    constant. ``K = P`` knots are the factors themselves."""
    knots = [float(k) for k in knots]
    if len(knots) == 1 or pairs == 1:
        return [knots[0]] * pairs
    out = []
    for i in range(pairs):
        x = i * (len(knots) - 1) / (pairs - 1)  # the pair's place on the knots' axis, 0 .. K-1
        j = min(int(x), len(knots) - 2)
        t = x - j
        out.append(math.exp((1 - t) * math.log(knots[j]) + t * math.log(knots[j + 1])))
    return out


def longrope_factors(geom: RopeGeometry, factors: object, knots: Iterable[float] | None = None) -> tuple[list[float], list[float]]:
    """(long, short) per-pair rescale factors from a JSON file, a list, knots, or the model config."""
    if knots is not None:
        if factors is not None:
            raise UserError("longrope takes factors or knots, not both", "drop one: knots draw the factors as a curve")
        curve = knot_curve(knots, geom.pairs)
        return curve, curve
    if factors is None:
        long, short = geom.native.get("long_factor"), geom.native.get("short_factor")
        if long is None:
            raise UserError(
                "longrope needs per-pair rescale factors and this model's config has none",
                "pass --param factors=FILE.json with {\"long_factor\": [...], \"short_factor\": [...]}",
            )
        return list(long), list(short or long)
    try:  # checked when the method was resolved; read again here, where the numbers are used
        return read_factors(factors)
    except ValueError as exc:
        raise LONGROPE_FACTORS.bad("longrope", factors, str(exc)) from None


def longrope_freqs(
    geom: RopeGeometry,
    factor: float,
    seq_len: int, *, xp: Namespace,
    factors: str | Sequence[float] | None = None,
    knots: tuple[float, ...] | None = None,
    attention_factor: float | None = None,
) -> tuple[Array, float]:
    """LongRoPE (Ding et al., arXiv 2402.13753): ``theta_i / lambda_i`` with searched per-pair
    factors (long ones when ``l > L``, short ones otherwise), or the factors :func:`knot_curve`
    draws through ``knots`` (at every length); attention scale ``sqrt(1 + ln(s)/ln(L))``."""
    long, short = longrope_factors(geom, factors, knots)
    chosen = long if seq_len > geom.trained_len else short
    if len(chosen) != geom.pairs:
        raise factor_count_error(len(chosen), geom)
    ext = xp.asarray(chosen, dtype=xp.float32)
    inv_freq = 1.0 / (ext * geom.base ** _exponents(geom, xp))
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(geom.trained_len))
    return inv_freq, float(attention_factor)


def factor_count_error(n: int, geom: RopeGeometry) -> UserError:
    return UserError(
        f"longrope factors have {n} entries but the model has {geom.pairs} rotary pairs",
        f"give exactly {geom.pairs} factors (one per pair, d/2)",
    )


def theta_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp: Namespace, theta: float | None = None) -> tuple[Array, float]:
    """Adjusted base frequency (ABF; Code Llama, arXiv 2308.12950): base replaced by ``theta``."""
    if theta is None:  # a bare resolve("theta"); resolve(..., runnable=True) refuses it before anything loads
        raise UserError("method 'theta' needs a new base", "pass --param theta=1000000 (Code Llama used 1e6)")
    return _inv_freq(float(theta), geom, xp), 1.0


def ntk_mixed_freqs(
    geom: RopeGeometry, factor: float, seq_len: int, *, xp: Namespace, mixed_b: float | None = None
) -> tuple[Array, float]:
    """NTK-RoPE-mixed (Su, "Transformer upgrade path 11: carrying the beta-base position through",
    https://kexue.fm/archives/9706): pair ``i`` divided by ``lambda_m = exp(a * m^b)``, ``m = i + 1``,
    ``a = ln(s) / (d/2)^b``, so the highest-frequency pair is divided least (by ``s^(1/(d/2)^b)``) and
    the lowest one (``m = d/2``) by exactly ``s``; ``b = 1`` is fixed NTK scaling (``lambda_m = s^(m/(d/2))``).

    Computed as vLLM computes it (``NTKScalingRotaryEmbedding._compute_inv_freq`` with ``mixed_b``,
    vllm-project/vllm ``vllm/model_executor/layers/rotary_embedding/ntk_scaling_rope.py`` at commit
    91b4f8fbfcc33a9cb58456f3061dced32509af4f): float32 throughout, ``ln(s)`` of a float32 ``s``,
    the base unchanged, ``theta_i / lambda_m``."""
    if mixed_b is None:  # a bare resolve("ntk-mixed"); resolve(..., runnable=True) refuses it before anything loads
        raise UserError("method 'ntk-mixed' needs its exponent b", "pass --param mixed_b=0.625")
    d = geom.rotary_dim
    a = xp.log(xp.asarray(factor, dtype=xp.float32)) / (d / 2) ** mixed_b
    m = xp.astype(xp.arange(1, d // 2 + 1, dtype=xp.int64), xp.float32)
    return _inv_freq(geom.base, geom, xp) / xp.exp(a * m**mixed_b), 1.0


def ntk_alpha_freqs(
    geom: RopeGeometry, factor: float, seq_len: int, *, xp: Namespace, scaling_alpha: float | None = None
) -> tuple[Array, float]:
    """Hunyuan's "dynamic NTK alpha": base ``b * alpha^(d/(d-2))``, NTK-aware scaling with the
    ratio ``alpha`` given directly (Hunyuan configs: ``rope_scaling = {"type": "dynamic", "alpha": ...}``;
    despite the name the base is fixed, whatever the sequence length). As vLLM computes it
    (``DynamicNTKAlphaRotaryEmbedding``, vllm-project/vllm
    ``vllm/model_executor/layers/rotary_embedding/dynamic_ntk_alpha_rope.py`` at commit
    a42938c2e7432785b64b436dd8b9905ad854cbb1), with ``d`` the rotary dim (transformers' HunYuan code
    uses the head dim, the same number for every full-rotary model). The factor is not used:
    ``alpha`` is not a length ratio in Hunyuan's configs, and with ``alpha = s`` this is ``ntk``."""
    return _inv_freq(alpha_base(geom, scaling_alpha), geom, xp), 1.0


def alpha_base(geom: RopeGeometry, scaling_alpha: float | None) -> float:
    """``ntk-alpha``'s base ``b * alpha^(d/(d-2))``."""
    if scaling_alpha is None:  # a bare resolve("ntk-alpha"); resolve(..., runnable=True) refuses it
        raise UserError("method 'ntk-alpha' needs its alpha", "pass --param scaling_alpha=1000")
    d = geom.rotary_dim
    return float(geom.base * float(scaling_alpha) ** (d / (d - 2)))


def proportional_freqs(
    geom: RopeGeometry, factor: float, seq_len: int, *, xp: Namespace, partial_rotary_factor: float | None = None
) -> tuple[Array, float]:
    """Proportional RoPE (p-RoPE: Barbero et al., "Round and Round We Go! What makes Rotary
    Positional Encodings useful?", arXiv 2410.06205; Gemma 4's full-attention layers) as
    transformers computes it: ``_compute_proportional_rope_parameters``, ``ROPE_INIT_FUNCTIONS
    ["proportional"]`` in huggingface/transformers ``src/transformers/modeling_rope_utils.py``,
    v5.24.0. The ``int(p * d // 2)`` highest-frequency pairs keep ``theta_i = b^(-2i/d)``, every
    lower one gets frequency 0 (cos 1, sin 0: it is not rotated, NoPE), and all are divided by
    ``s`` (its ``inv_freq /= factor``); attention scale 1. ``p`` is its ``rope_parameters``
    ``partial_rotary_factor``.

    ``d`` is the rotary dim, the dims the model's rotary module rotates, where transformers uses
    the head dim: the two agree on every full-rotary model (Llama, Mistral, Qwen, Gemma). On a model
    whose own ``partial_rotary_factor`` is below 1 (GPT-NeoX, Phi-2, StableLM) ctxbench applies it
    within the rotated dims, as transformers would on a head of ``d`` dims; transformers' own
    ``proportional`` on such a config would rotate the whole head with exponents ``2i/head_dim``
    and pairs ``(i, i + head_dim/2)``, which that model's rotary module does not do, so the
    transformers export refuses it (:func:`proportional_rope`)."""
    if partial_rotary_factor is None:  # a bare resolve("proportional"); resolve(..., runnable=True) refuses it
        raise UserError("method 'proportional' needs its partial_rotary_factor", "pass --param partial_rotary_factor=0.25")
    d = geom.rotary_dim
    rope_angles = int(partial_rotary_factor * d // 2)
    exponents = xp.astype(xp.arange(0, 2 * rope_angles, 2, dtype=xp.int64), xp.float32) / d
    inv_freq = 1.0 / (geom.base**exponents)
    nope_angles = d // 2 - rope_angles
    if nope_angles > 0:
        inv_freq = xp.concat((inv_freq, xp.zeros(nope_angles, dtype=xp.float32)))
    return inv_freq / factor, 1.0


# Query scales: the log-n family (attention-level methods that multiply the query at 0-based
# position p by a factor of p alone). ``positions`` is an integer array; the result is float32.


def logn_query_scale(positions: Array, trained_len: int, *, xp: Namespace) -> Array:
    """Log-n scaling: ``max(1, log_L(m))`` for the 1-based position ``m = p + 1``, as bojone/rerope's
    ``clip(log(position_ids + 1) / log(L), 1)`` (Su 2021; Chiang & Cholak 2022)."""
    m = xp.astype(positions + 1, xp.float32)
    return xp.where(m > trained_len, xp.log(m) / math.log(trained_len), xp.ones_like(m))


def ssmax_query_scale(
    positions: Array, trained_len: int, *, xp: Namespace, attn_scale: float = 0.1, floor_scale: int = 8192
) -> Array:
    """Scalable-Softmax as Llama 4 ships it (attention temperature tuning; Nakanishi, arXiv 2501.19399):
    ``1 + attn_scale * ln(1 + floor((p + 1) / floor_scale))`` for the 0-based position ``p``, in the
    op order of transformers' ``Llama4TextAttention.forward`` (huggingface/transformers
    ``src/transformers/models/llama4/modeling_llama4.py``, v5.24.0: ``log1p(floor((p + 1.0) /
    floor_scale)) * attn_scale + 1.0`` in float32). It is 1 for the first ``floor_scale - 1``
    positions whatever ``L``; Llama 4 (``attn_scale=0.1``, ``floor_scale=8192``) applies it on its
    NoPE layers, ctxbench on every layer's rotated queries."""
    p = xp.astype(positions, xp.float32)
    return xp.log1p(xp.floor((p + 1.0) / floor_scale)) * attn_scale + 1.0


