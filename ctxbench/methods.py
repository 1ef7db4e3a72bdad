"""The RoPE scaling-method registry: a method is one object, its entry in ``METHODS``.

Every frequency-level method is one pure function

    fn(geometry, factor, seq_len, *, xp, **params) -> (inv_freq, attention_scale)

returning the ``d/2`` inverse frequencies as a float32 array of the namespace ``xp`` (torch when
a model is patched, NumPy for ``ctxbench freqs``; the same op order as transformers'
``ROPE_INIT_FUNCTIONS`` so the torch result agrees with it to the last bit) and the factor that multiplies cos and
sin (so attention logits are multiplied by its square). ``METHODS`` maps a name to a :class:`Method`
carrying everything about it: that function or what the attention path needs, what the CLI shows,
its parameters (:class:`Param`, declared once), the defaults it derives from the model and factor,
where it applies, and how each serving engine takes it (:class:`Exports`). No other module tells
methods apart by name (``tests/test_method_objects.py`` scans for it): adding a method is its
functions and one entry here (docs/design.md, "How a method plugs in").

Attention-level methods (``logn``, ``ssmax``, ``rerope``, ``leaky-rerope``, ``self-extend``, ``string``,
``dca``, ``ms-poe``) are entries too, with ``attention=True``; :mod:`ctxbench.attention` runs them from
what the entry gives. They combine with one frequency method as ``FREQ+ATTN`` (e.g. ``ntk+logn``,
``yarn+ssmax``). The log-n family (``logn``, ``ssmax``) only multiplies each query by a factor of its position, a pure function
the entry carries (``query_scale``); a two-branch method carries where its far branch puts queries
and keys (``far``), and also takes one of the log-n family, as ReRoPE's author always used log-n:
``rerope+logn``, ``ntk+rerope+logn``, ``rerope+ssmax``. A method that partitions each query's keys its
own way carries the parts (``branches``: Dual Chunk Attention's intra-, successive- and inter-chunk
keys, each with its own query positions); every attention-level method with positions of its own runs
as such a list of :class:`Branch` (:func:`attention_branches`). A per-head method (``ms-poe``)
carries the ratios that divide each head's positions (``head_ratios``), how the input orders the
heads over them (``order_heads``) and the layers it runs on (``layers``).

``native`` is the model as shipped: the config's own RoPE scaling, computed by transformers.
Models without RoPE run only the baselines ``none`` and ``native`` (:func:`check_applicable`).

Notation (README "Methods"): rotary dim ``d``, base ``b``, trained context ``L``, factor ``s``, pair
``i = 0..d/2-1``, ``theta_i = b^(-2i/d)``, wavelength ``lambda_i = 2*pi/theta_i``, current length ``l``.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from .errors import UserError, closest, unknown
from .geometry import RopeGeometry
from .parsing import parse_length

Array = Any  # a float32 array of the namespace ``xp``: a torch tensor, or NumPy in ``ctxbench freqs``
FreqFn = Callable[..., tuple["Array", float]]  # fn(geom, factor, seq_len, *, xp, **params)


def torch_namespace():
    """The array namespace of torch tensors (array-api-compat), imported on first use: listing
    methods or rejecting a bad name must answer in well under a second, and torch takes ~2-5 s."""
    import array_api_compat.torch as xp

    return xp


def numpy_namespace():
    """The array namespace of NumPy arrays: what ``ctxbench freqs`` computes with, so it answers
    without importing torch. The same float32 operations, so the same values to float32 rounding."""
    import array_api_compat.numpy as xp

    return xp


def _exponents(geom: RopeGeometry, xp) -> Array:
    """``2i/d`` for each pair, float32, as transformers computes it."""
    d = geom.rotary_dim
    return xp.astype(xp.arange(0, d, 2, dtype=xp.int64), xp.float32) / d


def _inv_freq(base: float, geom: RopeGeometry, xp) -> Array:
    """``theta_i = base^(-2i/d)``, float32."""
    return 1.0 / (base ** _exponents(geom, xp))


def none_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp) -> tuple[Array, float]:
    """Plain RoPE, extrapolated past ``L``: ``theta_i = b^(-2i/d)`` (Su et al., arXiv 2104.09864)."""
    return _inv_freq(geom.base, geom, xp), 1.0


def linear_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp) -> tuple[Array, float]:
    """Position Interpolation: ``theta_i / s`` (Chen et al., arXiv 2306.15595)."""
    inv_freq = _inv_freq(geom.base, geom, xp)
    inv_freq /= factor
    return inv_freq, 1.0


def ntk_base(geom: RopeGeometry, factor: float) -> float:
    """NTK-aware scaling's base ``b * s^(d/(d-2))`` (bloc97, 2023; YaRN paper sec. 3.1)."""
    d = geom.rotary_dim
    return geom.base * factor ** (d / (d - 2))


def ntk_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp) -> tuple[Array, float]:
    """NTK-aware scaling: plain RoPE with the base :func:`ntk_base`."""
    return _inv_freq(ntk_base(geom, factor), geom, xp), 1.0


def dynamic_ntk_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp) -> tuple[Array, float]:
    """Dynamic NTK: base ``b * (s*l/L - (s-1))^(d/(d-2))`` when ``l > L``, else plain RoPE
    (emozilla, 2023; transformers' ``dynamic``)."""
    d, L = geom.rotary_dim, geom.trained_len
    if seq_len <= L:
        return none_freqs(geom, factor, seq_len, xp=xp)
    base = geom.base * ((factor * seq_len / L) - (factor - 1)) ** (d / (d - 2))
    return _inv_freq(base, geom, xp), 1.0


def ntk_by_parts_freqs(
    geom: RopeGeometry, factor: float, seq_len: int, *, xp, alpha: float = 1.0, beta: float = 32.0
) -> tuple[Array, float]:
    """NTK-by-parts (YaRN paper, arXiv 2309.00071, sec. 3.2):
    ``(1-g_i)*theta_i/s + g_i*theta_i`` with ``g_i = clamp((r_i-alpha)/(beta-alpha), 0, 1)``,
    ``r_i = L/lambda_i``: pairs that turn many times in ``L`` (high frequency) are kept,
    pairs that turn less than once are interpolated."""
    theta = _inv_freq(geom.base, geom, xp)
    ratio = geom.trained_len * theta / (2 * math.pi)  # r_i = L / lambda_i
    gamma = xp.clip((ratio - alpha) / (beta - alpha), 0, 1)
    return (1 - gamma) * theta / factor + gamma * theta, 1.0


def _yarn_mscale(scale: float) -> float:
    """YaRN attention temperature ``0.1*ln(s) + 1`` (1 for ``s <= 1``)."""
    return 1.0 if scale <= 1 else 0.1 * math.log(scale) + 1.0


def yarn_freqs(
    geom: RopeGeometry,
    factor: float,
    seq_len: int, *, xp,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
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
    scale = _yarn_mscale(factor) if attention_factor is None else float(attention_factor)
    return inv_freq, scale


def dynamic_yarn_freqs(
    geom: RopeGeometry,
    factor: float,
    seq_len: int, *, xp,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> tuple[Array, float]:
    """Dynamic YaRN (YaRN repo): ``yarn`` with ``s = max(1, l/L)`` for each sequence; the given
    factor is not used."""
    scale = max(1.0, seq_len / geom.trained_len)
    return yarn_freqs(geom, scale, seq_len, xp=xp, beta_fast=beta_fast, beta_slow=beta_slow)


def llama3_freqs(
    geom: RopeGeometry,
    factor: float,
    seq_len: int, *, xp,
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


def _longrope_factors(geom: RopeGeometry, factors) -> tuple[list[float], list[float]]:
    """(long, short) per-pair rescale factors from a JSON file, a list, or the model config."""
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


def read_factors(factors) -> tuple[list[float], list[float]]:
    """LongRoPE's ``(long, short)`` per-pair factors from a list of numbers (both the same) or the
    path of a JSON file holding such a list or ``{"long_factor": [...], "short_factor": [...]}``
    (short defaults to long). Every factor is a finite number > 0: it divides a frequency.
    Raises ValueError saying what is wrong (the caller names the method and parameter)."""
    if isinstance(factors, (list, tuple)):
        values = _factor_list(factors, "")
        return values, values
    path = Path(str(factors)).expanduser()
    if not path.is_file():
        raise ValueError("is not a file")
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"is not a JSON file ({exc})") from None
    if isinstance(data, list):
        values = _factor_list(data, " in its list")
        return values, values
    if not isinstance(data, dict) or "long_factor" not in data:
        raise ValueError("has no 'long_factor' list")
    long = _factor_list(data["long_factor"], " in its long_factor")
    short = long if data.get("short_factor") is None else _factor_list(data["short_factor"], " in its short_factor")
    if len(short) != len(long):
        raise ValueError(f"has {len(long)} long_factor numbers but {len(short)} short_factor ones")
    return long, short


def _factor_list(values, where: str) -> list[float]:
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"has no list of numbers{where}")
    if not values:
        raise ValueError(f"has an empty list{where}" if where else "is empty")
    for x in values:
        if not _is_number(x) or not math.isfinite(x) or x <= 0:
            raise ValueError(f"has {show_value(x)}{where}, not a number > 0")
    return [float(x) for x in values]


def longrope_freqs(
    geom: RopeGeometry,
    factor: float,
    seq_len: int, *, xp,
    factors: str | list | None = None,
    attention_factor: float | None = None,
) -> tuple[Array, float]:
    """LongRoPE (Ding et al., arXiv 2402.13753): ``theta_i / lambda_i`` with searched per-pair
    factors (long ones when ``l > L``, short ones otherwise); attention scale
    ``sqrt(1 + ln(s)/ln(L))``."""
    long, short = _longrope_factors(geom, factors)
    chosen = long if seq_len > geom.trained_len else short
    if len(chosen) != geom.pairs:
        raise _factor_count_error(len(chosen), geom)
    ext = xp.asarray(chosen, dtype=xp.float32)
    inv_freq = 1.0 / (ext * geom.base ** _exponents(geom, xp))
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(geom.trained_len))
    return inv_freq, float(attention_factor)


def _factor_count_error(n: int, geom: RopeGeometry) -> UserError:
    return UserError(
        f"longrope factors have {n} entries but the model has {geom.pairs} rotary pairs",
        f"give exactly {geom.pairs} factors (one per pair, d/2)",
    )


def theta_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp, theta: float | None = None) -> tuple[Array, float]:
    """Adjusted base frequency (ABF; Code Llama, arXiv 2308.12950): base replaced by ``theta``."""
    if theta is None:  # a bare resolve("theta"); resolve(..., runnable=True) refuses it before anything loads
        raise UserError("method 'theta' needs a new base", "pass --param theta=1000000 (Code Llama used 1e6)")
    return _inv_freq(float(theta), geom, xp), 1.0


def ntk_mixed_freqs(
    geom: RopeGeometry, factor: float, seq_len: int, *, xp, mixed_b: float | None = None
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
    geom: RopeGeometry, factor: float, seq_len: int, *, xp, scaling_alpha: float | None = None
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
    return geom.base * float(scaling_alpha) ** (d / (d - 2))


def proportional_freqs(
    geom: RopeGeometry, factor: float, seq_len: int, *, xp, partial_rotary_factor: float | None = None
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


def logn_query_scale(positions: Array, trained_len: int, *, xp) -> Array:
    """Log-n scaling: ``max(1, log_L(m))`` for the 1-based position ``m = p + 1``, as bojone/rerope's
    ``clip(log(position_ids + 1) / log(L), 1)`` (Su 2021; Chiang & Cholak 2022)."""
    m = xp.astype(positions + 1, xp.float32)
    return xp.where(m > trained_len, xp.log(m) / math.log(trained_len), xp.ones_like(m))


def ssmax_query_scale(
    positions: Array, trained_len: int, *, xp, attn_scale: float = 0.1, floor_scale: int = 8192
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


@dataclass(frozen=True)
class Branch:
    """One part of an attention-level method's partition of each query's keys: query ``i`` scores key
    ``j`` here when ``lo(i) <= j < hi(i)``, with the query and the key rotated where ``positions`` puts them.

    * ``keys(q_pos) -> (lo, hi)``: integer arrays, one bound each per 0-based query position; ``lo`` may
      be below 0 (the attention clips it to the keys there are); neither may decrease with ``i``.
    * ``positions(q_pos, k_pos, inv_freq) -> (query positions, key positions, inverse frequencies)``.
    * ``band``: ``lo`` moves with every query (a near branch's window): a block of queries takes its
      keys in one masked kernel call. Otherwise ``lo`` steps (0 throughout, or at chunk starts): the
      attention cuts its query blocks where it steps, and the keys every query of a block reaches run
      through the kernel without a mask, so a branch reaching back over the whole sequence costs no
      ``block x n`` mask.

    The branches of a method are disjoint and, together with causality, cover every key ``j <= i``; the
    attention merges their softmax parts by log-sum-exp.
    """

    keys: Callable[[Array], tuple[Array, Array]]
    positions: Callable[[Array, Array, Array], tuple[Array, Array, Array]]
    band: bool = False


def plain_positions(q_pos: Array, k_pos: Array, inv_freq: Array) -> tuple[Array, Array, Array]:
    """Plain RoPE: the query at ``i``, the key at ``j``."""
    return q_pos, k_pos, inv_freq


def near_keys(q_pos: Array, *, window: int) -> tuple[Array, Array]:
    """A two-branch method's near keys: ``i - w < j <= i``."""
    return q_pos - window + 1, q_pos + 1


def far_keys(q_pos: Array, *, xp, window: int) -> tuple[Array, Array]:
    """A two-branch method's far keys: ``0 <= j <= i - w``."""
    return xp.zeros_like(q_pos), q_pos - window + 1


# Two-branch methods (``rerope``, ``leaky-rerope``, ``self-extend``, ``string``): query ``i`` sees key
# ``j`` at its exact relative position ``i - j`` while ``i - j < w`` (the near branch) and at the
# method's own beyond it (the far branch). :mod:`ctxbench.attention` runs the two branches; an entry gives what
# differs: its parameters after the defaults derived from ``L`` and ``s`` (``derive``), and the
# positions and frequencies the far branch rotates queries and keys by (``far``), a pure function of
# integer position arrays of the namespace ``xp``.


def _window(method: str, params: dict, trained_len: int) -> int:
    """The window ``w``, ``L/4`` by default: the neighbours keep exact positions over a quarter of the
    trained context, leaving three quarters of the trained position range for the compressed far part."""
    window = params.get("window")
    window = int(max(1, trained_len // 4) if window is None else window)
    if window <= 0:
        raise UserError(f"{method} window {window} must be >= 1", f"pass --param window=N with 1 <= N < {trained_len}")
    return window


def _compression(window: int, trained_len: int, factor: float) -> float:
    """The least compression of the far part that keeps the largest position the model sees at
    ``s*L`` tokens within ``L``: ``max(1, (s*L - w) / (L - w))`` (the default ``k`` and ``G``)."""
    return max(1.0, (factor * trained_len - window) / max(1, trained_len - window))


def rerope_params(params: dict, geom: RopeGeometry, factor: float) -> dict:
    """ReRoPE's window after its default (``L/4``)."""
    return {**params, "window": _window("rerope", params, geom.trained_len)}


def rerope_far(q_pos: Array, k_pos: Array, inv_freq: Array, *, xp, window: int) -> tuple[Array, Array, Array]:
    """ReRoPE (Su 2023): every far pair at relative position ``w`` (the query at ``w``, the key at 0)."""
    return xp.full_like(q_pos, window), xp.zeros_like(k_pos), inv_freq


def leaky_rerope_params(params: dict, geom: RopeGeometry, factor: float) -> dict:
    """Leaky ReRoPE's window (``L/4``) and ``k`` (the least that keeps ``s*L`` within ``L``)."""
    window = _window("leaky-rerope", params, geom.trained_len)
    k = _compression(window, geom.trained_len, factor) if params.get("k") is None else params["k"]
    if not float(k) >= 1:
        raise UserError(f"leaky-rerope k={k} must be >= 1", "pass --param k=2 (slope 1/k beyond the window)")
    return {**params, "window": window, "k": float(k)}


def leaky_rerope_far(q_pos: Array, k_pos: Array, inv_freq: Array, *, xp, window: int, k: float) -> tuple[Array, Array, Array]:
    """Leaky ReRoPE (Su 2023): relative position ``w + (i - j - w)/k``, as the angle
    ``theta/k * ((i + w*(k-1)) - j)``: the query at ``i + w(k-1)`` (float64), the key at ``j``, ``theta/k``."""
    return xp.astype(q_pos, xp.float64) + window * (k - 1), k_pos, inv_freq / k


def self_extend_params(params: dict, geom: RopeGeometry, factor: float) -> dict:
    """Self-Extend's window (``L/4``) and group ``G`` (the least whole one that keeps ``s*L`` within ``L``)."""
    window = _window("self-extend", params, geom.trained_len)
    group = params.get("group")
    group = int(math.ceil(_compression(window, geom.trained_len, factor))) if group is None else group
    if int(group) != group or int(group) < 1:
        raise UserError(f"self-extend group {group} must be a whole number >= 1", "pass --param group=4")
    return {**params, "window": window, "group": int(group)}


def self_extend_far(q_pos: Array, k_pos: Array, inv_freq: Array, *, xp, window: int, group: int) -> tuple[Array, Array, Array]:
    """Self-Extend (Jin et al., arXiv 2401.01325) with LongLM's corrected floor division: the query at
    ``i // G + w - w // G`` (shifted so both parts meet at ``w``), the key at ``j // G``."""
    return q_pos // group + window - window // group, k_pos // group, inv_freq


# STRING's defaults, from the authors' code (HKUNLP/STRING at commit
# 216cc2f04cee147e8c3cfaa15723b182ecbe321e): README.md and every evaluation script call
# ``replace_with_string(..., shifted_offset=int(0.33 * L), small_local_value=128)``
# (``--shifted_ratio 0.33 --local_value 128``).
STRING_SHIFT_RATIO = 0.33
STRING_LOCAL_VALUE = 128


def string_params(params: dict, geom: RopeGeometry, factor: float) -> dict:
    """STRING's ``S`` (``window``, the authors' ``shifted_offset``: ``int(0.33 * L)``) and ``W``
    (``local_value``: the authors' 128, at most ``S // 2`` so that a short trained length still
    shifts far pairs down); ``W > S`` would move far pairs farther than they are."""
    window = params.get("window")
    window = int(max(1, int(STRING_SHIFT_RATIO * geom.trained_len)) if window is None else window)
    local = params.get("local_value")
    local = int(min(STRING_LOCAL_VALUE, window // 2) if local is None else local)
    if local > window:
        raise UserError(
            f"string local_value {local} must be <= window {window}: far pairs (i - j >= S) sit at "
            "i - j - S + W, beyond their true distance when W > S",
            f"pass --param local_value=N with 0 <= N <= {window} (the authors: 128 for S = 0.33*L), or a larger window",
        )
    return {**params, "window": window, "local_value": local}


def string_far(
    q_pos: Array, k_pos: Array, inv_freq: Array, *, xp, window: int, local_value: int
) -> tuple[Array, Array, Array]:
    """STRING (An et al., arXiv 2410.18745; HKUNLP/STRING ``string_for_llama.py`` at commit 216cc2f):
    a far pair (``i - j >= S``) at relative position ``i - j - S + W``, as the authors rotate it: the
    query at ``i - S + W`` (their ``position_ids - diag_size + local_window``), the key at ``j``."""
    return q_pos - window + local_value, k_pos, inv_freq


# Dual Chunk Attention (An et al., "Training-Free Long-Context Scaling of Large Language Models",
# ICML 2024, arXiv 2402.17463), as the authors' code computes it: HKUNLP/ChunkLlama
# ``chunkllama_attn_replace.py`` at commit 2add4d7c99d24dcc1ab03414cc602abb2e28cf2c (the file as of its
# last change, 847ae71). ``replace_with_chunkllama(pretraining_length=L, local_window_size=None)`` sets
# ``chunk_size = L * 3 // 4`` and ``local_window = local_window_size or L // 8``; chunks hold
# ``c = chunk_size - local_window`` tokens (their ``chunk_len``). vLLM's dual-chunk rotary embedding
# (``dual_chunk_rope.py``) computes the same positions from ``chunk_size`` and ``local_size``.
DCA_CHUNK_RATIO = (3, 4)  # chunk_size = L * 3 // 4
DCA_LOCAL_DIVISOR = 8  # local_window = L // 8


def dca_params(params: dict, geom: RopeGeometry, factor: float) -> dict:
    """DCA's ``chunk_size`` (the authors' ``L * 3 // 4``) and ``local_window`` (their ``L // 8``, at most
    ``chunk_size // 2`` so that a chunk size given alone still leaves chunks); chunks hold
    ``chunk_size - local_window`` tokens, so ``local_window`` must stay below ``chunk_size``."""
    L = geom.trained_len
    chunk = params.get("chunk_size")
    chunk = int(max(1, L * DCA_CHUNK_RATIO[0] // DCA_CHUNK_RATIO[1]) if chunk is None else chunk)
    local = params.get("local_window")
    local = int(min(L // DCA_LOCAL_DIVISOR, chunk // 2) if local is None else local)
    if local >= chunk:
        raise UserError(
            f"dca local_window {local} must be < chunk_size {chunk}: each chunk holds chunk_size - local_window tokens",
            f"pass --param local_window=N with 0 <= N < {chunk} (the authors: L/8 with chunk_size 3L/4), or a larger chunk_size",
        )
    return {**params, "chunk_size": chunk, "local_window": local}


def _dca_intra_keys(q_pos: Array, *, chunk: int) -> tuple[Array, Array]:
    """Intra-chunk: the keys of the query's own chunk up to it, ``(i // c) c <= j <= i``."""
    return (q_pos // chunk) * chunk, q_pos + 1


def _dca_successive_keys(q_pos: Array, *, chunk: int) -> tuple[Array, Array]:
    """Successive-chunk: the whole previous chunk, ``(i // c - 1) c <= j < (i // c) c``."""
    start = (q_pos // chunk) * chunk
    return start - chunk, start


def _dca_inter_keys(q_pos: Array, *, xp, chunk: int) -> tuple[Array, Array]:
    """Inter-chunk: every earlier chunk, ``0 <= j < (i // c - 1) c``."""
    return xp.zeros_like(q_pos), (q_pos // chunk - 1) * chunk


def _dca_intra_positions(q_pos, k_pos, inv_freq, *, chunk: int) -> tuple[Array, Array, Array]:
    """The query at ``i mod c`` (the authors' ``q_t``), the key at ``j mod c`` (``k_t``)."""
    return q_pos % chunk, k_pos % chunk, inv_freq


def _dca_successive_positions(q_pos, k_pos, inv_freq, *, xp, chunk: int, chunk_size: int) -> tuple[Array, Array, Array]:
    """The query at ``min(i mod c + c, chunk_size)`` (the authors' ``qc_t``), the key at ``j mod c``: the
    first ``local_window + 1`` queries of a chunk keep their true distance to the previous chunk's last keys."""
    return xp.clip(q_pos % chunk + chunk, max=chunk_size), k_pos % chunk, inv_freq


def _dca_inter_positions(q_pos, k_pos, inv_freq, *, xp, chunk: int, chunk_size: int) -> tuple[Array, Array, Array]:
    """Every query at ``min(2c - 1, chunk_size)`` (the authors' ``qc_t[chunk_len - 1]``: ``chunk_size`` unless
    ``local_window >= c``), the key at ``j mod c``."""
    return xp.full_like(q_pos, min(2 * chunk - 1, chunk_size)), k_pos % chunk, inv_freq


def dca_branches(*, xp, chunk_size: int, local_window: int) -> tuple[Branch, Branch, Branch]:
    """Dual Chunk Attention (arXiv 2402.17463; HKUNLP/ChunkLlama ``chunkllama_attn_replace.py``): keys sit at
    ``j mod c`` (``c = chunk_size - local_window``), and query ``i`` scores the keys of

    * its own chunk (``j // c == i // c``) from ``i mod c``: relative position ``i - j``, exact;
    * the previous chunk (``j // c == i // c - 1``) from ``min(i mod c + c, chunk_size)``;
    * every earlier chunk (``j // c <= i // c - 2``) from ``min(2c - 1, chunk_size)``,

    so no relative position exceeds ``chunk_size`` (``3L/4`` by default) however long the sequence; the
    three softmax parts are merged by log-sum-exp, as the authors' ``merge_attn_outputs``."""
    chunk = chunk_size - local_window
    return (
        Branch(partial(_dca_intra_keys, chunk=chunk), partial(_dca_intra_positions, chunk=chunk)),
        Branch(partial(_dca_successive_keys, chunk=chunk),
               partial(_dca_successive_positions, xp=xp, chunk=chunk, chunk_size=chunk_size)),
        Branch(partial(_dca_inter_keys, xp=xp, chunk=chunk),
               partial(_dca_inter_positions, xp=xp, chunk=chunk, chunk_size=chunk_size)),
    )  # fmt: skip


# Ms-PoE (Zhang et al., "Found in the Middle: How Language Models Use Long Contexts Better via
# Plug-and-Play Positional Encoding", NeurIPS 2024, arXiv 2403.04797), from the authors' code:
# VITA-Group/Ms-PoE at commit a46c3d18a6c7d9fb941b72c17dccffe7863adddc, ``utils/modify_arch/llama.py``
# (``MsPoELlamaRotaryEmbedding``, ``MsPoELlamaAttention``) with the defaults of ``src/ms_poe.sh`` and
# ``inference.py``: ``--compress_ratio_min 1.2 --compress_ratio_max 1.8`` and ``--apply_layers
# 2,3,...,31`` on 32-layer models (every layer but the first two). A per-head method: head ``h``
# reads every position divided by its own ratio; which ratio depends on the input (the order of
# the heads' "outlier" scores at the input's last query), so :mod:`ctxbench.attention` computes
# that order once per input and keeps it for the decoding steps, as the authors' module does.
MSPOE_RATIO_MIN, MSPOE_RATIO_MAX, MSPOE_FIRST_LAYER = 1.2, 1.8, 2


def mspoe_ratios(num_heads: int, *, xp, ratio_min: float, ratio_max: float, **_) -> Array:
    """The authors' ``compress_ratio``: ``r_k = min + (max - min) * k / H`` for ``k = 0..H-1``, in
    float32 as their rotary module computes it (``k / H``, so ``r`` never reaches ``max``)."""
    k = xp.astype(xp.arange(num_heads, dtype=xp.int64), xp.float32)
    return ratio_min + (ratio_max - ratio_min) * (k / num_heads)


def mspoe_order(probs: Array, *, xp, head_order: str, **_) -> Array:
    """Which ratio each head takes, ``(b, h)`` integer indices into :func:`mspoe_ratios`, from
    ``probs`` (b, h, n): each head's attention of the input's last query over all its keys,
    without positions (the softmax of the unrotated ``q k^T``).

    ``outlier`` (the authors' default, ``head_type`` unset; their ``_calculate_outlier``): the score
    of a head is ``-mean_j [p_j > 3 * mean(p)]``, minus the share of keys drawing more than three
    times the average weight, and head ``h`` takes the ratio of index ``argsort(score)[h]`` (their
    ``cos[self.head_order]``), ties kept in head order. ``reversed`` (their ``--head_type normal``):
    head ``h`` takes index ``H - 1 - h`` whatever the input."""
    b, h = probs.shape[0], probs.shape[1]
    if head_order == "reversed":
        fixed = (h - 1) - xp.arange(h, dtype=xp.int64, device=probs.device)
        return xp.broadcast_to(fixed[None, :], (b, h))
    average = xp.mean(probs, axis=-1, keepdims=True)
    outlier = -xp.mean(xp.astype(probs > 3 * average, xp.float32), axis=-1)  # (b, h)
    return xp.argsort(outlier, axis=-1, stable=True)


def mspoe_key_ratios(ratios: Array, kv_heads: int, *, xp, keys: str, **_) -> Array:
    """The ratios keys are rotated with, from the (b, h) ratios of the query heads. ``per-head``:
    each query head reads its own copy of its group's key head rotated at its own ratio, (b, h), so
    its scores depend on ``(i - j) / r`` as the paper's formula has it, whatever the grouping.
    ``group-first`` (the authors' code, ``cos[::num_key_value_groups]``): a key head takes the ratio
    of its group's first query head, (b, kv_heads); on a grouped-query model the group's other heads
    then score queries at one ratio against keys at another, and their scores stop depending on
    ``i - j`` alone. With one key head per query head the two are the same."""
    if keys == "group-first":
        return ratios[:, :: ratios.shape[1] // kv_heads]
    return ratios


def mspoe_layers(num_layers: int, *, first_layer: int, **_) -> range:
    """The layers Ms-PoE runs on, ``first_layer .. num_layers - 1`` (the authors' ``apply_layers``);
    the earlier ones keep plain RoPE."""
    if first_layer >= num_layers:
        raise UserError(
            f"ms-poe first_layer={first_layer} leaves no layer of this {num_layers}-layer model to apply to",
            f"pass --param first_layer=N with 0 <= N < {num_layers} (the authors: 2, every layer but the first two)",
        )
    return range(first_layer, num_layers)


class _RopeConfig:
    """The few config fields transformers' ``ROPE_INIT_FUNCTIONS`` read, rebuilt from a geometry."""

    def __init__(self, geom: RopeGeometry, rope: dict) -> None:
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


def native_rope(geom: RopeGeometry) -> dict:
    """The model config's own RoPE scaling: ``{"rope_type": ..., <its parameters>}`` (``default`` when none)."""
    rope = {k: v for k, v in geom.native.items() if k != "type"}
    rope_type = rope.get("rope_type") or geom.native.get("type") or "default"
    return {**rope, "rope_type": rope_type}


def native_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp) -> tuple[Array, float]:
    """The model as shipped: the config's own RoPE scaling, computed by the installed transformers'
    ``ROPE_INIT_FUNCTIONS`` (linear, dynamic, yarn, longrope, llama3, and any other type it has) for
    a sequence of ``seq_len`` tokens, as the model's rotary module would; the given factor is not used."""
    rope = native_rope(geom)
    rope_type = rope["rope_type"]
    if rope_type == "default":
        return none_freqs(geom, factor, seq_len, xp=xp)
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    fn = ROPE_INIT_FUNCTIONS.get(rope_type)
    if fn is None:
        raise UserError(
            f"the model's config asks for RoPE type '{rope_type}', which the installed transformers does not have",
            f"it has: default, {', '.join(ROPE_INIT_FUNCTIONS)}; upgrade transformers or pick another method",
        )
    inv_freq, scale = fn(_RopeConfig(geom, rope), "cpu", seq_len=int(seq_len))
    return xp.asarray(inv_freq.float().numpy()), float(scale)  # torch or NumPy, as asked


def native_params(params: dict, geom: RopeGeometry, factor: float) -> dict:
    """What ``native`` uses: the config's own RoPE type and parameters, as shipped; on a model without
    RoPE, the kind of positions it has (``absolute``, ``alibi``)."""
    if not geom.has_rope:
        return {"position": geom.position}
    return {**params, **native_rope(geom)}


def native_dynamic(geom: RopeGeometry) -> bool:
    """``native`` depends on the sequence length only where the config's rope type does."""
    return geom.has_rope and native_rope(geom)["rope_type"] in DYNAMIC_ROPE_TYPES


def longrope_check(params: dict, geom: RopeGeometry) -> None:
    """LongRoPE factors the user gave must number ``d/2``, which only the geometry tells."""
    factors = params.get("factors")
    if factors is not None and len(_longrope_factors(geom, factors)[0]) != geom.pairs:
        raise _factor_count_error(len(_longrope_factors(geom, factors)[0]), geom)


# Engine exports (``ctxbench export``, :mod:`ctxbench.export`): per engine, a function giving what the
# engine needs to compute the method, or the reason it cannot. export.py adds what every method shares
# (the base and partial rotary factor, the context length, the engine's own format).

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

    transformers: Callable | str = ""
    vllm: Callable | str = ""
    llamacpp: Callable | str = ""
    fields: Callable | None = None

    @classmethod
    def refused(cls, reason: str) -> Exports:
        """No engine can express it, for one reason."""
        return cls(reason, reason, reason)

    def refusal(self, engine: str) -> str | None:
        """None when ``engine`` can express the method, else why not (``""``: no reason given)."""
        how = getattr(self, engine)
        return None if callable(how) else how


def same_in_vllm(rope: dict, factor: float) -> dict:
    """vLLM reads these ``rope_parameters`` as transformers does."""
    return dict(rope)


def _rebased_rope(base_of: Callable, params: dict, geom: RopeGeometry, factor: float) -> tuple[dict, None]:
    return {"rope_type": "default", "rope_theta": base_of(params, geom, factor)}, None


def _rebased_flags(base_of: Callable, params: dict, geom: RopeGeometry, factor: float) -> dict:
    return {"--rope-scaling": "none", "--rope-freq-base": base_of(params, geom, factor)}


def rebased(base_of: Callable[[dict, RopeGeometry, float], float]) -> Exports:
    """A method that is plain RoPE with the base ``base_of(params, geom, factor)`` (``none``, ``ntk``,
    ``ntk-alpha``, ``theta``): every engine takes it as a new base, no rope type."""
    return Exports(partial(_rebased_rope, base_of), same_in_vllm, partial(_rebased_flags, base_of))


def _base_of_none(params: dict, geom: RopeGeometry, factor: float) -> float:
    return geom.base


def _base_of_ntk(params: dict, geom: RopeGeometry, factor: float) -> float:
    return ntk_base(geom, factor)


def _base_of_ntk_alpha(params: dict, geom: RopeGeometry, factor: float) -> float:
    return alpha_base(geom, params.get("scaling_alpha"))


def _base_of_theta(params: dict, geom: RopeGeometry, factor: float) -> float:
    if params.get("theta") is None:
        raise UserError("method 'theta' needs a new base", "pass --param theta=1000000")
    return float(params["theta"])


def linear_rope(params: dict, geom: RopeGeometry, factor: float) -> tuple[dict, None]:
    return {"rope_type": "linear", "factor": factor}, None


def linear_flags(params: dict, geom: RopeGeometry, factor: float) -> dict:
    return {"--rope-scaling": "linear", "--rope-scale": factor, "--rope-freq-base": geom.base}


def dynamic_ntk_rope(params: dict, geom: RopeGeometry, factor: float) -> tuple[dict, int]:
    """transformers' ``dynamic`` takes ``L`` from ``max_position_embeddings``."""
    return {"rope_type": "dynamic", "factor": factor}, geom.trained_len


def yarn_rope(params: dict, geom: RopeGeometry, factor: float) -> tuple[dict, int]:
    """transformers' ``yarn``, whose ``attention_factor`` replaces ``0.1 ln s + 1`` as ctxbench's does."""
    L = geom.trained_len
    rope = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": L,
            "beta_fast": float(params["beta_fast"]), "beta_slow": float(params["beta_slow"]), "truncate": bool(params["truncate"])}  # fmt: skip
    if params.get("attention_factor") is not None:
        rope["attention_factor"] = float(params["attention_factor"])
    return rope, int(round(factor * L))


def yarn_vllm(rope: dict, factor: float) -> dict:
    """vLLM's yarn: its ``attn_factor`` (as the yarn repository's) *multiplies* ``0.1 ln s + 1`` where
    transformers' ``attention_factor`` replaces it, so ``a`` is written ``a / (0.1 ln s + 1)``;
    ``truncate=true`` is its default and left out."""
    rope = dict(rope)
    a = rope.pop("attention_factor", None)
    if a is not None:
        rope["attn_factor"] = a / _yarn_mscale(factor)
    if rope.get("truncate", True):
        rope.pop("truncate", None)  # the default everywhere
    return rope


def yarn_flags(params: dict, geom: RopeGeometry, factor: float) -> dict:
    """llama.cpp's yarn: its ramp floors/ceils the correction dims (``truncate``) and
    ``--yarn-attn-factor`` multiplies ``0.1 ln s + 1``."""
    if not params.get("truncate", True):
        raise UserError(
            "llamacpp cannot express yarn with truncate=false: it always rounds the correction range to whole dims",
            "export yarn with the default truncate=true, or --to transformers",
        )
    a = params.get("attention_factor")
    return {
        "--rope-scaling": "yarn", "--rope-scale": factor, "--rope-freq-base": geom.base,
        "--yarn-orig-ctx": geom.trained_len, "--yarn-ext-factor": "1",
        "--yarn-attn-factor": 1.0 if a is None else float(a) / _yarn_mscale(factor),
        "--yarn-beta-fast": float(params["beta_fast"]), "--yarn-beta-slow": float(params["beta_slow"]),
    }  # fmt: skip


def llama3_rope(params: dict, geom: RopeGeometry, factor: float) -> tuple[dict, int]:
    L = geom.trained_len
    return {"rope_type": "llama3", "factor": factor, "original_max_position_embeddings": L,
            "low_freq_factor": float(params["low_freq_factor"]), "high_freq_factor": float(params["high_freq_factor"])}, int(round(factor * L))  # fmt: skip


def longrope_rope(params: dict, geom: RopeGeometry, factor: float) -> tuple[dict, int]:
    L = geom.trained_len
    long, short = _longrope_factors(geom, params.get("factors"))
    rope = {"rope_type": "longrope", "factor": factor, "original_max_position_embeddings": L,
            "long_factor": [float(x) for x in long], "short_factor": [float(x) for x in short]}  # fmt: skip
    if params.get("attention_factor") is not None:
        rope["attention_factor"] = float(params["attention_factor"])
    return rope, int(round(factor * L))


def ntk_mixed_fields(params: dict, geom: RopeGeometry, factor: float) -> tuple[dict, int]:
    """vLLM's ``ntk`` rope type with ``mixed_b``: ``get_rope`` reads ``rope_parameters["factor"]`` and
    ``rope_parameters.get("mixed_b")`` into ``NTKScalingRotaryEmbedding(..., scaling_factor, dtype,
    mixed_b)`` (vllm-project/vllm ``vllm/model_executor/layers/rotary_embedding/__init__.py`` at
    commit 926c71f6f25f8fe0a71ba4b168205e64bef24a36). Its cos/sin cache covers
    ``max_position_embeddings`` positions and is not stretched by the factor, so that is set to ``s*L``."""
    rope = {"rope_type": "ntk", "factor": factor, "mixed_b": float(params["mixed_b"])}
    return rope, int(round(factor * geom.trained_len))


def native_export(params: dict, geom: RopeGeometry, factor: float) -> tuple[dict, int | None]:
    """The model as shipped: its own rope parameters and length."""
    return native_rope(geom), geom.max_positions or None


def native_vllm(rope: dict, factor: float) -> dict:
    """The config's own rope type, where vLLM has it."""
    rope_type = rope["rope_type"]
    if rope_type not in VLLM_ROPE_TYPES:
        raise UserError(
            f"vllm cannot express this model's own RoPE type '{rope_type}'" + (f": {DYNAMIC_IN_VLLM}" if rope_type == "dynamic" else ""),
            f"vllm supports rope types: {', '.join(VLLM_ROPE_TYPES)}",
        )
    return yarn_vllm(rope, factor) if rope_type == "yarn" else dict(rope)


def proportional_rope(params: dict, geom: RopeGeometry, factor: float) -> tuple[dict, None]:
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


# vLLM's Dual Chunk Attention (vllm-project/vllm): ``get_rope`` builds a ``DualChunkRotaryEmbedding`` from the
# config's ``dual_chunk_attention_config`` (``chunk_size``, ``local_size``) whatever ``rope_parameters`` says
# (``rotary_embedding/__init__.py`` @07b12f1b, ``dual_chunk_rope.py`` @07b13497: the positions of
# :func:`dca_branches`), and the ``DUAL_CHUNK_FLASH_ATTN`` backend (``attention/backends/dual_chunk_flash_attn.py``
# @006e0acb, a V0-engine backend) runs the three parts; ``original_max_position_embeddings``, left out,
# would add a length-dependent temperature. Only these model types pass the config on to them
# (``models/qwen3.py``, ``qwen3_moe.py`` @002456df; ``qwen2.py``, ``qwen2_moe.py``): any other ignores it silently.
VLLM_DUAL_CHUNK_MODELS = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
DCA_REFUSAL = "{engine} has no dual chunk attention (it changes attention itself; vLLM runs it: export --to vllm)"
VLLM_DUAL_CHUNK_ENV = {"VLLM_ATTENTION_BACKEND": "DUAL_CHUNK_FLASH_ATTN", "VLLM_USE_V1": "0"}


def dca_vllm(rope: dict, params: dict, geom: RopeGeometry, factor: float) -> dict:
    """``dca`` for vLLM: ``dual_chunk_attention_config`` with the authors' ``chunk_size`` and ``local_window``
    (vLLM's ``local_size``), its attention backend on the V0 engine, eager mode (as Qwen2.5-1M's
    instructions run it). vLLM's dual-chunk rotary embedding takes only the base and partial rotary
    factor, so a frequency method under it (``yarn+dca``) cannot be expressed; nor can a model type
    whose vLLM implementation does not read the config."""
    if rope.get("rope_type", "default") != "default":
        raise UserError(
            f"vllm cannot express dca over rope type '{rope['rope_type']}': its DualChunkRotaryEmbedding takes the "
            "base only and ignores rope_parameters' type",
            "export --method dca alone (plain RoPE frequencies), or --to json",
        )
    if geom.model_type and geom.model_type not in VLLM_DUAL_CHUNK_MODELS:
        raise UserError(
            f"vllm cannot express dca on model type '{geom.model_type}': its implementation ignores "
            "dual_chunk_attention_config (it would serve plain RoPE)",
            f"vllm runs dual chunk attention for model types {', '.join(VLLM_DUAL_CHUNK_MODELS)}; or export --to json",
        )
    config = {"chunk_size": int(params["chunk_size"]), "local_size": int(params["local_window"])}
    return {"hf_overrides": {"dual_chunk_attention_config": config}, "env": dict(VLLM_DUAL_CHUNK_ENV), "flags": ["--enforce-eager"]}


KINDS = ("float", "int", "length", "bool", "choice", "factors")


@dataclass(frozen=True)
class Param:
    """One method parameter, declared once: the values it takes and what it means.

    ``kind``: ``float`` (a real number), ``int`` (a whole number), ``length`` (tokens: ``512`` or
    ``2k``), ``bool`` (true/false), ``choice`` (one of ``choices``) or ``factors`` (LongRoPE's
    per-pair factors: a list of numbers, or a JSON file of them). ``low`` bounds numbers from below
    (``low_inclusive``: ``>=`` rather than ``>``), ``high`` from above (always ``<=``); ``greater_than`` names a parameter of the same
    method this one must exceed (``beta > alpha``), checked after defaults fill in. A ``None``
    default means the method derives the value (shown and accepted as ``auto``) unless
    ``required``, when the user must give it. ``example`` is the value error messages suggest.
    """

    name: str
    default: object
    kind: str
    help: str
    low: float | None = None
    low_inclusive: bool = True
    high: float | None = None
    choices: tuple[str, ...] = ()
    greater_than: str | None = None
    required: bool = False
    example: object = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:  # a typo in a declaration would otherwise accept anything
            raise ValueError(f"parameter {self.name}: unknown kind {self.kind!r} (kinds: {', '.join(KINDS)})")

    @property
    def auto(self) -> bool:
        """The method derives the value when it is not given (``None``, or ``auto`` on the command line)."""
        return self.default is None and not self.required

    def type_text(self, with_auto: bool = True) -> str:
        """What values it takes: ``a number > 0``, ``a whole number >= 1``, ``true or false``...
        (``, or auto`` added where the method derives it, unless ``with_auto`` is False)."""
        bound = ""
        if self.low is not None:
            bound = f" {'>=' if self.low_inclusive else '>'} {format_value(self.low)}"
        if self.high is not None:
            bound += f"{' and' if bound else ''} <= {format_value(self.high)}"
        if self.greater_than:
            bound += f" and > {self.greater_than}" if bound else f" > {self.greater_than}"
        text = {
            "float": f"a number{bound}",
            "int": f"a whole number{bound}",
            "length": f"a length in tokens{bound} (e.g. 512 or 2k)",
            "bool": "true or false",
            "choice": f"one of: {', '.join(self.choices)}",
            "factors": "a list of numbers > 0, one per rotary pair, or a JSON file of them",
        }[self.kind]
        return text + (", or auto" if self.auto and with_auto else "")

    def shown_default(self) -> str:
        """The default as ``ctxbench methods`` shows it: ``32``, ``true``, ``auto`` or ``required``."""
        if self.default is None:
            return "required" if self.required else "auto"
        return format_value(self.default)

    def bad(self, method: str, value, problem: str) -> UserError:
        """The one-line error for a bad value: method, parameter, value, and what it takes."""
        example = self.example if self.example is not None else self.default
        return UserError(
            f"bad value for {method} parameter {self.name}: {show_value(value)} {problem}",
            f"{self.name} is {self.type_text()} ({self.help}); e.g. {self.name}={format_value(example)}",
        )

    def check(self, value, method: str):
        """``value`` if it is one this parameter takes, as the method reads it (a ``length`` in
        tokens, ``auto`` as ``None``, a list of factors as a tuple), else the :meth:`bad` error."""
        if self.auto and (value is None or (isinstance(value, str) and value.strip().lower() == "auto")):
            return None
        try:
            return _CHECKS[self.kind](self, value)
        except ValueError as exc:
            raise self.bad(method, value, str(exc)) from None

    def is_grid(self, value) -> bool:
        """A list given for this parameter means one run per item (``beta_fast = [16, 32]``); for
        ``factors``, whose one value is a list of numbers, only a list of files or of lists is a grid."""
        if not isinstance(value, (list, tuple)):
            return False
        if self.kind == "factors":
            return all(isinstance(v, (list, tuple, str)) for v in value)
        return True


def _is_number(value) -> bool:
    """A real number, and not a bool (``True`` is an int in Python, but never a number here)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def show_value(value) -> str:
    """A value as an error quotes it: ``'abc'`` for text, ``''`` for empty, ``true``, ``nan``, ``[1, 2]``."""
    if isinstance(value, str):
        return repr(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show_value(v) for v in value) + "]"
    return str(value)


def _bounded(p: Param, x):
    if not math.isfinite(x):
        raise ValueError("is not a finite number")
    if p.low is not None and not (x >= p.low if p.low_inclusive else x > p.low):
        raise ValueError(f"must be {'>=' if p.low_inclusive else '>'} {format_value(p.low)}")
    if p.high is not None and not x <= p.high:
        raise ValueError(f"must be <= {format_value(p.high)}")
    return x


def _empty(value) -> bool:
    return isinstance(value, str) and not value.strip()  # ``--param beta_fast=``


def _check_float(p: Param, value):
    if not _is_number(value):
        raise ValueError("is empty" if _empty(value) else "is not a number")
    return _bounded(p, value if isinstance(value, (int, float)) else float(value))


def _check_int(p: Param, value):
    if not _is_number(value) or not math.isfinite(value) or int(value) != value:
        raise ValueError("is empty" if _empty(value) else "is not a whole number")
    return _bounded(p, int(value))


def _check_length(p: Param, value):
    if isinstance(value, str) and value.strip():
        try:
            value = parse_length(value)
        except UserError:
            raise ValueError("is not a length") from None
    return _check_int(p, value)


def _check_bool(p: Param, value):
    if not isinstance(value, bool):
        raise ValueError("is not true or false")
    return value


def _check_choice(p: Param, value):
    if value not in p.choices:
        guess = closest(str(value), p.choices)
        raise ValueError("is not one of the choices" + (f" (did you mean '{guess}'?)" if guess else ""))
    return value


def _check_factors(p: Param, value):
    if _empty(value):
        raise ValueError("is empty")
    if not isinstance(value, (str, list, tuple)):
        raise ValueError("is neither a list of numbers nor a file name")
    read_factors(value)  # a file must exist and hold factors now, not after the model has loaded
    return tuple(value) if isinstance(value, list) else value


_CHECKS = {"float": _check_float, "int": _check_int, "length": _check_length, "bool": _check_bool,
           "choice": _check_choice, "factors": _check_factors}  # fmt: skip


# Parameters several methods share, declared once.
BETA_FAST = Param("beta_fast", 32.0, "float", "rotations in L above which a pair is kept, not interpolated",
                  low=0, low_inclusive=False, greater_than="beta_slow")  # fmt: skip
BETA_SLOW = Param("beta_slow", 1.0, "float", "rotations in L below which a pair is fully interpolated", low=0, low_inclusive=False)
WINDOW = Param("window", None, "length", "neighbours within w tokens keep exact positions; auto: L/4", low=1, example="1k")
ATTN_SCALE = Param("attn_scale", 0.1, "float", "strength: the query at p is scaled by 1 + attn_scale*ln(1+floor((p+1)/floor_scale))",
                   low=0)
FLOOR_SCALE = Param("floor_scale", 8192, "length", "tokens per step of the query scale (Llama 4: 8192, whatever L)", low=1,
                    example="8k")
STRING_WINDOW = Param("window", None, "length", "S (the authors' shifted_offset): pairs at i - j < S keep exact positions, "
                      "farther ones move down by S - W; auto: int(0.33*L)", low=1, example="1k")  # fmt: skip
STRING_LOCAL = Param("local_value", None, "length", "W: the relative position the farthest-shifted pairs start at (the authors' "
                     "local_value; 128, 256 or 512 suggested); auto: 128, at most S/2", low=0, example=128)  # fmt: skip
DCA_CHUNK = Param("chunk_size", None, "length", "the authors' chunk_size: chunks hold chunk_size - local_window tokens and "
                  "no relative position exceeds chunk_size; auto: 3L/4", low=1, example="3k")  # fmt: skip
DCA_LOCAL = Param("local_window", None, "length", "the authors' local_window (vLLM's local_size): the first local_window + 1 "
                  "queries of a chunk see the previous chunk at their true distance; auto: L/8, at most chunk_size/2", low=0,
                  example=512)  # fmt: skip
LONGROPE_FACTORS = Param("factors", None, "factors", "LongRoPE's searched per-pair factors; auto: the model config's",
                         example="factors.json")  # fmt: skip


@dataclass(frozen=True, eq=False)  # registry entries are singletons: identity equality and hash
class Method:
    """One registry entry: everything about one method. Its maths (the frequency function, or what
    the attention path needs), what ``ctxbench methods`` shows, its parameters, each declared once
    (:class:`Param`), the defaults it derives, where it applies and how engines take it. No other
    module tells methods apart by name: they ask the entry."""

    name: str
    fn: FreqFn | None  # fn(geom, factor, seq_len, *, xp, **params) -> (inv_freq, attention scale)
    formula: str
    source: str
    declared: tuple[Param, ...] = ()
    dynamic: bool = False  # frequencies depend on the sequence length l
    uses_factor: bool = True
    attention: bool = False  # changes attention itself (see ctxbench.attention)
    # The log-n family: fn(positions, trained_len, *, xp, **params) -> the factor multiplying the
    # query at each 0-based position (``logn``, ``ssmax``); a two-branch method also takes one.
    query_scale: Callable[..., Array] | None = None
    # A two-branch method: fn(q_pos, k_pos, inv_freq, *, xp, **params) -> (query positions, key
    # positions, inverse frequencies) of the far branch (keys at i - j >= window); the near branch is RoPE.
    far: Callable[..., tuple[Array, Array, Array]] | None = None
    # A method that partitions each query's keys its own way: fn(*, xp, **params) -> its parts, each a
    # :class:`Branch` (key range and positions); ``dca``: intra-, successive- and inter-chunk.
    branches: Callable[..., tuple[Branch, ...]] | None = None
    # A per-head method (``ms-poe``): fn(num_heads, *, xp, **params) -> the (h,) float32 ratios that
    # divide positions, and fn(probs, *, xp, **params) -> the (b, h) index of the ratio each head
    # takes, from ``probs`` (b, h, n), each head's position-free attention of the input's last query
    head_ratios: Callable[..., Array] | None = None
    order_heads: Callable[..., Array] | None = None
    # fn(ratios, kv_heads, *, xp, **params) -> the ratios keys are rotated with, from the query heads'
    # (b, h): (b, kv_heads), one per key head, or (b, h), each query head its own copy of its group's
    # key head; None: the query heads' own
    key_ratios: Callable[..., Array] | None = None
    # fn(num_layers, **params) -> the layer indices it runs on (others keep plain RoPE); None: every layer
    layers: Callable[..., range] | None = None
    # a token's output depends on the tokens up to it only; False (``ms-poe``, whose head order comes
    # from the input's last query): a prefix's forward or KV cache is not shared with longer inputs
    causal: bool = True
    # fn(params, geom, factor) -> the parameters it uses on this model at this factor, from its own:
    # defaults derived from L and s (rerope's window L/4), the config's own scaling (native)
    derive: Callable[[dict, RopeGeometry, float], dict] | None = None
    # fn(params, geom) raising UserError where its parameters cannot apply to this model
    check: Callable[[dict, RopeGeometry], None] | None = None
    baseline: bool = False  # applies to a model without RoPE, leaving it as it is
    # fn(geom) -> whether it depends on the sequence length on this model (default: ``dynamic``)
    dynamic_on: Callable[[RopeGeometry], bool] | None = None
    exports: Exports = Exports()  # what ``ctxbench export`` writes for each engine, or why it cannot

    @property
    def params(self) -> dict:
        """``{name: default}`` of the declared parameters (``None``: derived, or required)."""
        return {p.name: p.default for p in self.declared}


METHODS: dict[str, Method] = {
    "none": Method(
        "none", none_freqs, "theta_i = b^(-2i/d), extrapolated", "RoPE, arXiv 2104.09864", uses_factor=False,
        baseline=True, exports=rebased(_base_of_none),
    ),
    "linear": Method(
        "linear", linear_freqs, "theta_i / s", "Position Interpolation, arXiv 2306.15595",
        exports=Exports(linear_rope, same_in_vllm, linear_flags),
    ),
    "ntk": Method("ntk", ntk_freqs, "base b*s^(d/(d-2))", "NTK-aware scaled RoPE (bloc97, 2023)", exports=rebased(_base_of_ntk)),
    "dynamic-ntk": Method(
        "dynamic-ntk", dynamic_ntk_freqs, "base b*(s*l/L-(s-1))^(d/(d-2)) when l > L",
        "Dynamic NTK (emozilla, 2023); transformers 'dynamic'", dynamic=True,
        exports=Exports(dynamic_ntk_rope, DYNAMIC_IN_VLLM, "llama.cpp has no dynamic NTK"),
    ),
    "ntk-by-parts": Method(
        "ntk-by-parts", ntk_by_parts_freqs, "(1-g)*theta/s + g*theta, g=clamp((L/lambda-alpha)/(beta-alpha),0,1)",
        "YaRN paper sec. 3.2, arXiv 2309.00071", declared=(
            Param("alpha", 1.0, "float", "rotations in L below which a pair is fully interpolated", low=0),
            Param("beta", 32.0, "float", "rotations in L above which a pair is kept", low=0, low_inclusive=False,
                  greater_than="alpha"),
        ),
        exports=Exports.refused("its ramp is linear in L/lambda (the YaRN paper), not in the pair index as every engine's yarn"),
    ),  # fmt: skip
    "yarn": Method(
        "yarn", yarn_freqs, "by-parts ramp over pair index (beta_fast..beta_slow); scale 0.1*ln(s)+1",
        "YaRN, arXiv 2309.00071", declared=(
            BETA_FAST, BETA_SLOW,
            Param("truncate", True, "bool", "round the ramp's ends to whole pairs, as the YaRN paper and llama.cpp do"),
            Param("attention_factor", None, "float", "multiplies cos and sin; auto: 0.1*ln(s)+1", low=0, low_inclusive=False,
                  example=1.0),
        ),
        exports=Exports(yarn_rope, yarn_vllm, yarn_flags),
    ),  # fmt: skip
    "dynamic-yarn": Method(
        "dynamic-yarn", dynamic_yarn_freqs, "yarn with s = max(1, l/L)", "YaRN repo (jquesnelle/yarn)",
        declared=(BETA_FAST, BETA_SLOW), dynamic=True, uses_factor=False,
        exports=Exports.refused("the engines' yarn has a fixed factor"),
    ),
    "llama3": Method(
        "llama3", llama3_freqs, "lambda > L/lo: theta/s; lambda < L/hi: theta; smooth between",
        "Llama 3.1, arXiv 2407.21783", declared=(
            Param("low_freq_factor", 1.0, "float", "wavelengths above L/low_freq_factor are divided by s", low=0, low_inclusive=False),
            Param("high_freq_factor", 4.0, "float", "wavelengths below L/high_freq_factor are kept", low=0, low_inclusive=False,
                  greater_than="low_freq_factor"),
        ),
        exports=Exports(llama3_rope, same_in_vllm,
                        "llama.cpp applies Llama 3.1 scaling from the GGUF file's rope_freqs tensor, written at conversion, not from flags"),
    ),  # fmt: skip
    "longrope": Method(
        "longrope", longrope_freqs, "theta_i / lambda_i (searched); scale sqrt(1+ln(s)/ln(L))",
        "LongRoPE, arXiv 2402.13753", declared=(
            LONGROPE_FACTORS,
            Param("attention_factor", None, "float", "multiplies cos and sin; auto: sqrt(1+ln(s)/ln(L))", low=0,
                  low_inclusive=False, example=1.0),
        ), dynamic=True, check=longrope_check,
        exports=Exports(longrope_rope, same_in_vllm,
                        "llama.cpp applies LongRoPE from the GGUF file's rope factor tensors, written at conversion, not from flags"),
    ),  # fmt: skip
    "theta": Method(
        "theta", theta_freqs, "base replaced by theta", "ABF, Code Llama arXiv 2308.12950",
        declared=(Param("theta", None, "float", "the new rope base b; Code Llama used 1e6", low=1, low_inclusive=False,
                        required=True, example=1000000),),
        uses_factor=False, exports=rebased(_base_of_theta),
    ),  # fmt: skip
    "ntk-mixed": Method(
        "ntk-mixed", ntk_mixed_freqs, "theta_i / exp(a*m^b), m=i+1, a=ln(s)/(d/2)^b",
        "NTK-RoPE-mixed (Su 2023, kexue.fm/archives/9706); vLLM 'ntk' with mixed_b",
        declared=(Param("mixed_b", None, "float", "exponent b of lambda_m = exp(a*m^b); b=1 is fixed NTK scaling",
                        low=0, low_inclusive=False, required=True, example=0.625),),
        exports=Exports(
            "transformers has no rope type with NTK-RoPE-mixed's per-pair factors exp(a*m^b)",
            same_in_vllm, "llama.cpp has no per-pair NTK-RoPE-mixed factors", fields=ntk_mixed_fields,
        ),
    ),  # fmt: skip
    "proportional": Method(
        "proportional", proportional_freqs, "theta_i / s for the int(p*d/2) highest-frequency pairs, 0 (not rotated) for the rest",
        "p-RoPE, arXiv 2410.06205; transformers 'proportional' (Gemma 4)",
        declared=(Param("partial_rotary_factor", None, "float", "p: the proportion of rotary pairs kept, highest frequencies "
                        "first (transformers' partial_rotary_factor; Gemma 4: 0.25)", low=0, low_inclusive=False, high=1,
                        required=True, example=0.25),),
        exports=Exports(
            proportional_rope,
            "vLLM's 'proportional' (Gemma4RotaryEmbedding, vllm/model_executor/layers/rotary_embedding/gemma4_rope.py "
            "@41c5903) reads no factor: it never divides the frequencies by s",
            "llama.cpp has no proportional (partly unrotated) RoPE flags",
        ),
    ),
    "ntk-alpha": Method(
        "ntk-alpha", ntk_alpha_freqs, "base b*alpha^(d/(d-2)) (alpha given, not s)",
        "Hunyuan dynamic NTK alpha; vLLM DynamicNTKAlphaRotaryEmbedding",
        declared=(Param("scaling_alpha", None, "float", "NTK ratio alpha (Hunyuan's rope_scaling alpha); the factor is not used",
                        low=1, required=True, example=1000),),
        uses_factor=False, exports=rebased(_base_of_ntk_alpha),
    ),  # fmt: skip
    "native": Method(
        "native", native_freqs, "the model config's own RoPE scaling (its rope_type and parameters), as shipped",
        "transformers ROPE_INIT_FUNCTIONS", uses_factor=False, dynamic=True, dynamic_on=native_dynamic,
        derive=native_params, baseline=True,
        exports=Exports(native_export, native_vllm, "llama.cpp reads the model's own scaling from its GGUF file: pass no rope flags"),
    ),
    # Attention-level methods: frequencies come from the method they are combined with (none by default).
    "logn": Method(
        "logn", None, "q at position m > L scaled by log_L(m)", "entropy-invariant attention (Su 2021; Chiang & Cholak 2022)",
        uses_factor=False, attention=True, query_scale=logn_query_scale, exports=Exports.refused(ATTENTION_REFUSAL),
    ),
    "ssmax": Method(
        "ssmax", None, "q at 0-based p scaled by 1 + attn_scale*ln(1+floor((p+1)/floor_scale))",
        "Scalable-Softmax, arXiv 2501.19399, as Llama 4's attention temperature tuning",
        declared=(ATTN_SCALE, FLOOR_SCALE), uses_factor=False, attention=True, query_scale=ssmax_query_scale,
        exports=Exports.refused(ATTENTION_REFUSAL),
    ),
    "rerope": Method(
        "rerope", None, "relative position p -> min(p, w)", "ReRoPE (Su, 2023)",
        declared=(WINDOW,), uses_factor=False, attention=True, far=rerope_far, derive=rerope_params,
        exports=Exports.refused(ATTENTION_REFUSAL),
    ),
    # k = 1 is allowed: it is plain RoPE (the value auto gives at s = 1), as self-extend's group = 1;
    # k < 1 would spread far positions wider than plain RoPE, the opposite of the method.
    "leaky-rerope": Method(
        "leaky-rerope", None, "p -> p if p < w else w + (p-w)/k", "Leaky ReRoPE (Su, 2023)",
        declared=(WINDOW, Param("k", None, "float", "slope 1/k beyond the window; auto: the least k that keeps s*L within L",
                                low=1, example=2)),
        attention=True, far=leaky_rerope_far, derive=leaky_rerope_params, exports=Exports.refused(ATTENTION_REFUSAL),
    ),  # fmt: skip
    "self-extend": Method(
        "self-extend", None, "p < w: p; else q//G + w - w//G - k//G", "Self-Extend, arXiv 2401.01325",
        declared=(WINDOW, Param("group", None, "int", "G far positions share one; auto: the least G that keeps s*L within L",
                                low=1, example=4)),
        attention=True, far=self_extend_far, derive=self_extend_params, exports=Exports.refused(ATTENTION_REFUSAL),
    ),  # fmt: skip
    "string": Method(
        "string", None, "p < S: p; else p - S + W", "STRING, arXiv 2410.18745 (HKUNLP/STRING)",
        declared=(STRING_WINDOW, STRING_LOCAL), uses_factor=False, attention=True, far=string_far, derive=string_params,
        exports=Exports(ATTENTION_REFUSAL,
                        ATTENTION_REFUSAL + " (the authors' vLLM fork, HKUNLP/STRING vllm_string, has a StringAttention "
                        "backend; stock vLLM does not)", ATTENTION_REFUSAL),
    ),  # fmt: skip
    "dca": Method(
        "dca", None, "chunks of c = chunk_size - local_window; keys at j mod c; q at i mod c (own chunk), "
        "min(i mod c + c, chunk_size) (previous), min(2c-1, chunk_size) (earlier)",
        "Dual Chunk Attention, arXiv 2402.17463 (HKUNLP/ChunkLlama)",
        declared=(DCA_CHUNK, DCA_LOCAL), uses_factor=False, attention=True, branches=dca_branches, derive=dca_params,
        exports=Exports(DCA_REFUSAL.format(engine="transformers"), dca_vllm, DCA_REFUSAL.format(engine="llama.cpp")),
    ),  # fmt: skip
    "ms-poe": Method(
        "ms-poe", None, "head h: positions / r_o(h), r_k = min + (max-min) k/H, o = argsort of the heads' outlier scores",
        "Ms-PoE, arXiv 2403.04797 (VITA-Group/Ms-PoE)",
        declared=(
            Param("ratio_min", MSPOE_RATIO_MIN, "float", "the smallest ratio a head divides positions by (the authors' "
                  "compress_ratio_min)", low=1),
            Param("ratio_max", MSPOE_RATIO_MAX, "float", "ratios run from ratio_min towards ratio_max in H equal steps, "
                  "r_k = min + (max-min) k/H (the authors' compress_ratio_max)", low=1, greater_than="ratio_min"),
            Param("first_layer", MSPOE_FIRST_LAYER, "int", "layers from this one on use Ms-PoE, earlier ones plain RoPE "
                  "(the authors' apply_layers 2..31 of 32)", low=0),
            Param("head_order", "outlier", "choice", "which head takes which ratio: outlier (by the share of keys above "
                  "3x the mean weight at the input's last query) or reversed (head h takes index H-1-h; the authors' "
                  "head_type normal)", choices=("outlier", "reversed")),
            Param("keys", "per-head", "choice", "on a grouped-query model, the ratio keys take: per-head (each query "
                  "head reads its group's keys at its own ratio, so scores depend on distance/r) or group-first "
                  "(a key head takes its group's first query head's ratio, as the authors' code)",
                  choices=("per-head", "group-first")),
        ),
        uses_factor=False, attention=True, head_ratios=mspoe_ratios, order_heads=mspoe_order, key_ratios=mspoe_key_ratios,
        layers=mspoe_layers,
        causal=False, exports=Exports.refused(
            ATTENTION_REFUSAL + ": Ms-PoE divides each head's positions by its own ratio, chosen per input from "
            "the attention statistics of the prompt's last token, and no engine's rotary embedding has per-head positions"),
    ),  # fmt: skip
}

ALIASES: dict[str, str] = {"pi": "linear", "dynamic": "dynamic-ntk", "abf": "theta", "plain": "none", "shipped": "native",
                           "mspoe": "ms-poe"}
# Views of the registry. Attention-level methods with a near and a far branch; each also takes
# log-n query scaling (``rerope+logn``).
TWO_BRANCH = tuple(n for n, m in METHODS.items() if m.far is not None)
BASELINES = tuple(n for n, m in METHODS.items() if m.baseline)  # what applies to a model without RoPE
# Rope types whose frequencies depend on the sequence length (transformers recomputes them per forward).
DYNAMIC_ROPE_TYPES = ("dynamic", "longrope")


@dataclass(frozen=True)
class MethodSetting:
    """A resolved method: canonical name (``ntk+logn``), its parts and every parameter after defaults."""

    name: str
    freq: Method
    attention: Method | None
    params: tuple[tuple[str, object], ...]  # sorted (key, value) pairs, hashable
    # a log-n family member (``logn``, ``ssmax``) a two-branch method also takes (``rerope+logn``)
    scaler: Method | None = None
    label: str = ""  # how tables, plots and rows name it; default: name(non-default params)

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", default_label(self.name, self.params, self.defaults()))

    @property
    def parts(self) -> tuple[Method, ...]:
        """The registry entries it is made of: frequency method, attention method, stacked scaler."""
        return tuple(m for m in (self.freq, self.attention, self.scaler) if m is not None)

    @property
    def logn(self) -> bool:
        """A two-branch method that also scales queries by log-n (``rerope+logn``)."""
        return self.scaler is not None and self.scaler.name == "logn"

    def defaults(self) -> dict:
        return {k: v for m in self.parts for k, v in m.params.items()}

    def declarations(self) -> dict[str, Param]:
        """``{name: Param}`` of every parameter its parts declare."""
        return {p.name: p for m in self.parts for p in m.declared}

    @property
    def param_dict(self) -> dict:
        return dict(self.params)

    @property
    def uses_factor(self) -> bool:
        """False when no part reads the factor (``none``, ``theta``, ``rerope``...): such a method
        gives the same numbers at every factor, so a grid runs it once per length."""
        return self.freq.uses_factor or (self.attention is not None and self.attention.uses_factor)

    @property
    def dynamic(self) -> bool:
        """Frequencies depend on the sequence length, so each length needs its own forward."""
        return self.freq.dynamic

    def dynamic_for(self, geom: RopeGeometry) -> bool:
        """:attr:`dynamic` for this model, as its frequency method says (``native``: only where the
        config's rope type is dynamic)."""
        dynamic_on = self.freq.dynamic_on
        return self.dynamic if dynamic_on is None else dynamic_on(geom)

    @property
    def two_branch(self) -> bool:
        """Its attention method has a near and a far branch (``rerope``, ``leaky-rerope``, ``self-extend``,
        ``string``)."""
        return self.attention is not None and self.attention.far is not None

    @property
    def head_scaled(self) -> bool:
        """Its attention method divides each head's positions by a ratio of its own (``ms-poe``)."""
        return self.attention is not None and self.attention.head_ratios is not None

    @property
    def causal(self) -> bool:
        """Each token's output depends on the tokens up to it only, so a forward (or KV cache) of a
        prefix serves every longer input that starts with it; False for ``ms-poe``, whose head order
        is computed from the input's last query."""
        return all(part.causal for part in self.parts)

    @property
    def query_scaler(self) -> Method | None:
        """The log-n family member that scales queries (``logn``, ``ssmax``), alone or stacked on a
        two-branch method; None when queries are left as they are."""
        if self.scaler is not None:
            return self.scaler
        return self.attention if self.attention is not None and self.attention.query_scale is not None else None

    @property
    def scales_queries(self) -> bool:
        """Queries are multiplied by a factor of their position (``logn``, ``ssmax``, alone or with a two-branch method)."""
        return self.query_scaler is not None

    def params_json(self) -> str:
        return json.dumps(self.param_dict, sort_keys=True)

    def own_params(self, part: Method | None) -> dict:
        """The parameters one of its parts declares ({} for None)."""
        return {k: v for k, v in self.params if part is not None and k in part.params}

    def freq_params(self) -> dict:
        return self.own_params(self.freq)

    def attention_params(self) -> dict:
        return self.own_params(self.attention)

    def scaler_params(self) -> dict:
        """The parameters of :attr:`query_scaler` (``attn_scale``, ``floor_scale`` for ``ssmax``)."""
        return self.own_params(self.query_scaler)

    def export_refusal(self, engine: str) -> str | None:
        """None when ``engine`` can express it, else why not (``""``: no reason given): the first
        refusal of its parts, attention-level ones first (``ntk+logn`` is refused for ``logn``)."""
        for part in reversed(self.parts):
            reason = part.exports.refusal(engine)
            if reason is not None:
                return reason
        return None


def format_value(value) -> str:
    """A parameter value as labels show it: ``16`` for 16.0, ``0.25``, ``true``, ``a|b`` for lists."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "|".join(format_value(v) for v in value)
    return str(value)


def default_label(name: str, params, defaults: dict) -> str:
    """``yarn(beta_fast=16)``: the name plus every parameter that differs from its default,
    sorted by key; the bare name when all are defaults."""
    changed = [(k, v) for k, v in sorted(dict(params).items()) if k not in defaults or _differs(v, defaults[k])]
    if not changed:
        return name
    return name + "(" + ",".join(f"{k}={format_value(v)}" for k, v in changed) + ")"


def _differs(value, default) -> bool:
    if default is None or value is None:
        return value is not default
    try:
        return float(value) != float(default)
    except (TypeError, ValueError):
        return value != default


def _canonical(name: str) -> str:
    name = name.strip().lower()
    name = ALIASES.get(name, name)
    if name not in METHODS:
        raise unknown("method", name, list(METHODS) + list(ALIASES))
    return name


def resolve(spec: str, params: dict | None = None, label: str | None = None, *, runnable: bool = False) -> MethodSetting:
    """``"ntk+logn"``, ``{"beta_fast": 16}`` -> a :class:`MethodSetting` with defaults filled in.

    The one place parameter values are checked, before any model loads: every given value
    against its declaration (:class:`Param`: type, range, ``auto``), then the rules between
    parameters (``beta > alpha``). ``runnable=True`` (what runs or exports a method) also
    refuses a required parameter left out (``theta``); a bare ``resolve("theta")`` names the
    method without running it. Raises :class:`UserError` for unknown names, unknown parameters,
    bad values and combinations other than one frequency method plus one attention-level
    method, where a two-branch method (``rerope``, ``leaky-rerope``, ``self-extend``, ``string``) may also
    take one query scale of the log-n family (``logn``, ``ssmax``): ``ntk+rerope+logn``.
    """
    params = dict(params or {})
    parts = [_canonical(p) for p in str(spec).split("+") if p.strip()]
    if not parts:
        raise UserError("empty method name", f"choose one of: {', '.join(METHODS)}")
    freqs = [p for p in parts if not METHODS[p].attention]
    attns = [p for p in parts if METHODS[p].attention]
    scalers = [a for a in attns if METHODS[a].query_scale is not None]
    scaler = None
    if len(attns) == 2 and len(scalers) == 1 and any(METHODS[a].far is not None for a in attns):
        scaler = METHODS[scalers[0]]
        attns = [a for a in attns if a != scaler.name]
    if len(freqs) > 1 or len(attns) > 1:
        raise UserError(f"cannot combine '{spec}'", combinations_hint())
    freq = METHODS[freqs[0]] if freqs else METHODS["none"]
    attention = METHODS[attns[0]] if attns else None
    owner = {p.name: m.name for m in (freq, attention, scaler) if m is not None for p in m.declared}
    declared = {p.name: p for m in (freq, attention, scaler) if m is not None for p in m.declared}
    for key in params:
        if key not in declared:
            guess = closest(key, declared)
            known = ", ".join(declared) or "none"
            raise UserError(
                f"unknown parameter '{key}' for method '{spec}'",
                (f"did you mean '{guess}'? " if guess else "") + f"its parameters are: {known}",
            )
    merged = {k: p.default for k, p in declared.items()}
    merged.update({k: declared[k].check(v, owner[k]) for k, v in params.items()})
    _check_rules(declared, merged, owner, runnable)
    merged = {k: tuple(v) if isinstance(v, list) else v for k, v in merged.items()}
    parts = [freq.name] if attention is None or freq.name != "none" else []
    parts += [attention.name] if attention is not None else []
    parts += [scaler.name] if scaler is not None else []
    return MethodSetting(name="+".join(parts), freq=freq, attention=attention, params=tuple(sorted(merged.items())),
                         scaler=scaler, label=label or "")  # fmt: skip


def _check_rules(declared: dict[str, Param], values: dict, owner: dict[str, str], runnable: bool) -> None:
    """What no single value shows: a required parameter left out, ``beta <= alpha``."""
    for p in declared.values():
        if runnable and p.required and values[p.name] is None:
            raise UserError(
                f"method '{owner[p.name]}' needs parameter {p.name} ({p.help})",
                f"{p.name} is {p.type_text()}; e.g. {p.name}={format_value(p.example)}",
            )
        other = p.greater_than
        if other and values[p.name] is not None and values[other] is not None and not values[p.name] > values[other]:
            q = declared[other]
            raise UserError(
                f"{owner[p.name]} needs {p.name} > {other} (got {other}={show_value(values[other])}, "
                f"{p.name}={show_value(values[p.name])})",
                f"e.g. {other}={format_value(q.default)} {p.name}={format_value(p.default)}",
            )


def combinations_hint() -> str:
    """What combines, for the one error every impossible combination gives."""
    freq_names = ", ".join(n for n, m in METHODS.items() if not m.attention)
    attn_names = ", ".join(n for n, m in METHODS.items() if m.attention)
    with_logn = ", ".join(f"{n}+logn" for n in TWO_BRANCH)
    scalers = " or ".join(n for n, m in METHODS.items() if m.query_scale is not None)
    return (
        f"combine at most one frequency method ({freq_names}) with one attention method ({attn_names}); "
        f"a two-branch method also takes {scalers} ({with_logn}); e.g. ntk+logn, yarn+rerope, ntk+rerope+logn"
    )


def effective_params(setting: MethodSetting, geom: RopeGeometry, factor: float) -> dict:
    """Every parameter the method uses, after defaults: each part's own, then what its entry derives
    from the model and factor (:attr:`Method.derive`: ``window = L/4``, ``k``, ``G``, native's config)."""
    check_applicable(setting, geom)
    params = setting.param_dict
    for part in setting.parts:
        if part.derive is not None:
            params.update(part.derive(setting.own_params(part), geom, factor))
    return params


def frequencies(
    setting: MethodSetting, geom: RopeGeometry, factor: float, seq_len: int, xp=None
) -> tuple[Array, float]:
    """``(inv_freq, attention_scale)`` of a resolved method for a sequence of ``seq_len`` tokens.

    ``inv_freq`` is a float32 torch tensor, or an array of the namespace ``xp`` when given
    (:func:`numpy_namespace`: the same values without importing torch)."""
    xp = xp or torch_namespace()
    if factor < 1:
        raise UserError(f"bad factor {factor}: it must be >= 1", "use 1 for none, 2, 4, ...")
    check_applicable(setting, geom)
    if not geom.has_rope:
        raise UserError(
            f"model type '{geom.model_type}' has no rotary position embedding (RoPE; it uses {geom.position} positions), "
            "so it has no rotary frequencies", "run its baselines with --method none or native",
        )
    inv_freq, scale = setting.freq.fn(geom, float(factor), int(seq_len), xp=xp, **setting.freq_params())
    return xp.astype(inv_freq, xp.float32), float(scale)


def query_scale(setting: MethodSetting, geom: RopeGeometry, positions: Array, xp=None) -> Array:
    """The factor multiplying the query at each 0-based position (float32): its log-n family
    member's (``logn``, ``ssmax``; :attr:`MethodSetting.query_scaler`), or 1 where it has none."""
    xp = xp or torch_namespace()
    scaler = setting.query_scaler
    if scaler is None:
        return xp.ones_like(xp.astype(positions, xp.float32))
    return scaler.query_scale(positions, geom.trained_len, xp=xp, **setting.scaler_params())


def attention_branches(setting: MethodSetting, params: dict, xp=None) -> tuple[Branch, ...]:
    """The parts each query's keys fall into under the attention-level method of ``setting``, with
    ``params`` from :func:`effective_params`: a two-branch method's near band (``i - w < j <= i``, plain
    RoPE) and far keys (``j <= i - w``, its entry's :attr:`Method.far`), or the entry's own
    :attr:`Method.branches` (``dca``); ``()`` for the log-n family, which keeps one plain branch."""
    xp = xp or torch_namespace()
    part = setting.attention
    if part is None:
        return ()
    own = _own_params(part, params)
    if part.far is not None:
        window = int(params["window"])
        return (
            Branch(partial(near_keys, window=window), plain_positions, band=True),
            Branch(partial(far_keys, xp=xp, window=window), partial(part.far, xp=xp, **own)),
        )
    if part.branches is not None:
        return tuple(part.branches(xp=xp, **own))
    return ()


def _own_params(part: Method, params: dict) -> dict:
    """The entries of ``params`` (from :func:`effective_params`) that the method ``part`` declares."""
    return {k: params[k] for k in part.params}


def head_ratios(setting: MethodSetting, params: dict, num_heads: int, xp=None) -> Array:
    """The (h,) float32 ratios a per-head method (:attr:`Method.head_ratios`) divides positions by,
    with ``params`` from :func:`effective_params`."""
    xp = xp or torch_namespace()
    part = setting.attention
    return part.head_ratios(num_heads, xp=xp, **_own_params(part, params))


def order_heads(setting: MethodSetting, params: dict, probs: Array, xp=None) -> Array:
    """The (b, h) index of the ratio each head takes (:attr:`Method.order_heads`), from ``probs``
    (b, h, n): each head's position-free attention of the input's last query over its keys."""
    xp = xp or torch_namespace()
    part = setting.attention
    return part.order_heads(probs, xp=xp, **_own_params(part, params))


def key_ratios(setting: MethodSetting, params: dict, ratios: Array, kv_heads: int, xp=None) -> Array:
    """The ratios a per-head method rotates keys with, from the (b, h) ratios of the query heads
    (:attr:`Method.key_ratios`): (b, kv_heads) when each key head takes one ratio, (b, h) when each
    query head reads its own copy of its group's key head; the query heads' own when the entry says
    nothing."""
    xp = xp or torch_namespace()
    part = setting.attention
    if part.key_ratios is None:
        return ratios
    return part.key_ratios(ratios, kv_heads, xp=xp, **_own_params(part, params))


def method_layers(setting: MethodSetting, params: dict, num_layers: int) -> range | None:
    """The layer indices its attention method runs on (:attr:`Method.layers`), the others keeping
    plain RoPE; None when it runs on every layer."""
    part = setting.attention
    if part is None or part.layers is None:
        return None
    return part.layers(num_layers, **_own_params(part, params))


def exportable(engine: str) -> tuple[str, ...]:
    """The methods ``engine`` can express (``transformers``, ``vllm``, ``llamacpp``), in registry order."""
    return tuple(n for n, m in METHODS.items() if m.exports.refusal(engine) is None)


def check_applicable(setting: MethodSetting, geom: RopeGeometry, seq_len: int | None = None) -> None:
    """Raise :class:`UserError` if ``setting`` cannot run on a model of this geometry (at ``seq_len``).

    A model without RoPE (ALiBi, learned absolute positions) runs only the baselines (entries with
    ``baseline``: ``none`` and ``native``), the model as it is; every scaling method is an error. A
    learned absolute-position table ends at ``max_positions``: a longer sequence is an error, not an
    index crash inside the model. On a RoPE model each part's own :attr:`Method.check` runs
    (LongRoPE's factors must number ``d/2``, which only the geometry tells; resolve checked the rest).
    """
    if geom.has_rope:
        for part in setting.parts:
            if part.check is not None:
                part.check(setting.own_params(part), geom)
        return
    if not all(part.baseline for part in setting.parts):
        raise UserError(
            f"model type '{geom.model_type}' has no rotary position embedding (RoPE; it uses {geom.position} positions), "
            f"so method '{setting.name}' cannot apply",
            f"run it as a baseline with --method {' or '.join(BASELINES)}; scaling methods need a RoPE model",
        )
    if geom.position == "absolute" and seq_len is not None and seq_len > geom.max_positions:
        raise UserError(
            f"length {seq_len} is past the learned position table of model type '{geom.model_type}' ({geom.max_positions} positions)",
            f"use lengths up to {geom.max_positions} with this model",
        )
