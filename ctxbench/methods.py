"""The RoPE scaling-method registry.

Every frequency-level method is one pure function

    fn(geometry, factor, seq_len, *, xp, **params) -> (inv_freq, attention_scale)

returning the ``d/2`` inverse frequencies as a float32 array of the namespace ``xp`` (torch when
a model is patched, NumPy for ``ctxbench freqs``; the same op order as transformers'
``ROPE_INIT_FUNCTIONS`` so the torch result agrees with it to the last bit) and the factor that multiplies cos and
sin (so attention logits are multiplied by its square). ``METHODS`` maps a name to the function
plus what the CLI shows about it; adding a method is one function and one entry.

Attention-level methods (``logn``, ``rerope``, ``leaky-rerope``, ``self-extend``) are entries
too, with ``attention=True``; their maths lives in :mod:`ctxbench.attention`. They combine with
one frequency method as ``FREQ+ATTN`` (e.g. ``ntk+logn``); a two-branch method also takes log-n
query scaling, as ReRoPE's author always used it: ``rerope+logn``, ``ntk+rerope+logn``.

``native`` is the model as shipped: the config's own RoPE scaling, computed by transformers.
Models without RoPE run only ``none`` and ``native`` (:func:`check_applicable`).

Notation (README "Methods"): rotary dim ``d``, base ``b``, trained context ``L``, factor ``s``, pair
``i = 0..d/2-1``, ``theta_i = b^(-2i/d)``, wavelength ``lambda_i = 2*pi/theta_i``, current length ``l``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
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


def ntk_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp) -> tuple[Array, float]:
    """NTK-aware scaling: base ``b * s^(d/(d-2))`` (bloc97, 2023; YaRN paper sec. 3.1)."""
    d = geom.rotary_dim
    return _inv_freq(geom.base * factor ** (d / (d - 2)), geom, xp), 1.0


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
    if not beta > alpha:
        raise UserError(f"ntk-by-parts needs beta > alpha (got alpha={alpha}, beta={beta})", "e.g. alpha=1 beta=32")
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
    if not high_freq_factor > low_freq_factor:
        raise UserError(
            f"llama3 needs high_freq_factor > low_freq_factor (got {high_freq_factor} <= {low_freq_factor})",
            "e.g. low_freq_factor=1 high_freq_factor=4",
        )
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
    if isinstance(factors, (list, tuple)):
        return [float(x) for x in factors], [float(x) for x in factors]
    path = Path(str(factors)).expanduser()
    if not path.is_file():
        raise UserError(f"longrope factors file '{factors}' not found", "pass --param factors=PATH to a JSON file")
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise UserError(f"longrope factors file '{factors}' is not JSON ({exc})", "fix the file") from None
    if isinstance(data, list):
        return data, data
    if "long_factor" not in data:
        raise UserError(
            f"longrope factors file '{factors}' has no 'long_factor'",
            "write {\"long_factor\": [...], \"short_factor\": [...]} with d/2 numbers each",
        )
    return list(data["long_factor"]), list(data.get("short_factor") or data["long_factor"])


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
        raise UserError(
            f"longrope factors have {len(chosen)} entries but the model has {geom.pairs} rotary pairs",
            f"give exactly {geom.pairs} factors (one per pair, d/2)",
        )
    ext = xp.asarray(chosen, dtype=xp.float32)
    inv_freq = 1.0 / (ext * geom.base ** _exponents(geom, xp))
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(geom.trained_len))
    return inv_freq, float(attention_factor)


def theta_freqs(geom: RopeGeometry, factor: float, seq_len: int, *, xp, theta: float | None = None) -> tuple[Array, float]:
    """Adjusted base frequency (ABF; Code Llama, arXiv 2308.12950): base replaced by ``theta``."""
    if theta is None:
        raise UserError("method 'theta' needs a new base", "pass --param theta=1000000 (Code Llama used 1e6)")
    theta = float(theta)
    if theta <= 1:
        raise UserError(f"theta {theta} must be > 1", "pass e.g. --param theta=1000000")
    return _inv_freq(theta, geom, xp), 1.0


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


@dataclass(frozen=True, eq=False)  # registry entries are singletons: identity equality and hash
class Method:
    """One registry entry: the pure function and what ``ctxbench methods`` shows about it."""

    name: str
    fn: FreqFn | None
    formula: str
    source: str
    params: dict = field(default_factory=dict)
    dynamic: bool = False  # frequencies depend on the sequence length l
    uses_factor: bool = True
    attention: bool = False  # changes attention itself (see ctxbench.attention)


METHODS: dict[str, Method] = {
    "none": Method("none", none_freqs, "theta_i = b^(-2i/d), extrapolated", "RoPE, arXiv 2104.09864", uses_factor=False),
    "linear": Method("linear", linear_freqs, "theta_i / s", "Position Interpolation, arXiv 2306.15595"),
    "ntk": Method("ntk", ntk_freqs, "base b*s^(d/(d-2))", "NTK-aware scaled RoPE (bloc97, 2023)"),
    "dynamic-ntk": Method(
        "dynamic-ntk", dynamic_ntk_freqs, "base b*(s*l/L-(s-1))^(d/(d-2)) when l > L",
        "Dynamic NTK (emozilla, 2023); transformers 'dynamic'", dynamic=True,
    ),
    "ntk-by-parts": Method(
        "ntk-by-parts", ntk_by_parts_freqs, "(1-g)*theta/s + g*theta, g=clamp((L/lambda-alpha)/(beta-alpha),0,1)",
        "YaRN paper sec. 3.2, arXiv 2309.00071", params={"alpha": 1.0, "beta": 32.0},
    ),
    "yarn": Method(
        "yarn", yarn_freqs, "by-parts ramp over pair index (beta_fast..beta_slow); scale 0.1*ln(s)+1",
        "YaRN, arXiv 2309.00071", params={"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True, "attention_factor": None},
    ),
    "dynamic-yarn": Method(
        "dynamic-yarn", dynamic_yarn_freqs, "yarn with s = max(1, l/L)", "YaRN repo (jquesnelle/yarn)",
        params={"beta_fast": 32.0, "beta_slow": 1.0}, dynamic=True, uses_factor=False,
    ),
    "llama3": Method(
        "llama3", llama3_freqs, "lambda > L/lo: theta/s; lambda < L/hi: theta; smooth between",
        "Llama 3.1, arXiv 2407.21783", params={"low_freq_factor": 1.0, "high_freq_factor": 4.0},
    ),
    "longrope": Method(
        "longrope", longrope_freqs, "theta_i / lambda_i (searched); scale sqrt(1+ln(s)/ln(L))",
        "LongRoPE, arXiv 2402.13753", params={"factors": None, "attention_factor": None}, dynamic=True,
    ),
    "theta": Method(
        "theta", theta_freqs, "base replaced by theta", "ABF, Code Llama arXiv 2308.12950",
        params={"theta": None}, uses_factor=False,
    ),
    "native": Method(
        "native", native_freqs, "the model config's own RoPE scaling (its rope_type and parameters), as shipped",
        "transformers ROPE_INIT_FUNCTIONS", uses_factor=False, dynamic=True,
    ),
    # Attention-level methods: frequencies come from the method they are combined with (none by default).
    "logn": Method(
        "logn", None, "q at position m > L scaled by log_L(m)", "entropy-invariant attention (Su 2021; Chiang & Cholak 2022)",
        uses_factor=False, attention=True,
    ),
    "rerope": Method(
        "rerope", None, "relative position p -> min(p, w)", "ReRoPE (Su, 2023)",
        params={"window": None}, uses_factor=False, attention=True,
    ),
    "leaky-rerope": Method(
        "leaky-rerope", None, "p -> p if p < w else w + (p-w)/k", "Leaky ReRoPE (Su, 2023)",
        params={"window": None, "k": None}, attention=True,
    ),
    "self-extend": Method(
        "self-extend", None, "p < w: p; else q//G + w - w//G - k//G", "Self-Extend, arXiv 2401.01325",
        params={"window": None, "group": None}, attention=True,
    ),
}

ALIASES: dict[str, str] = {"pi": "linear", "dynamic": "dynamic-ntk", "abf": "theta", "plain": "none", "shipped": "native"}
# Attention-level methods with a near and a far branch; each also takes log-n query scaling (``rerope+logn``).
TWO_BRANCH = ("rerope", "leaky-rerope", "self-extend")
# Rope types whose frequencies depend on the sequence length (transformers recomputes them per forward).
DYNAMIC_ROPE_TYPES = ("dynamic", "longrope")


@dataclass(frozen=True)
class MethodSetting:
    """A resolved method: canonical name (``ntk+logn``), its parts and every parameter after defaults."""

    name: str
    freq: Method
    attention: Method | None
    params: tuple[tuple[str, object], ...]  # sorted (key, value) pairs, hashable
    logn: bool = False  # a two-branch method that also scales queries by log-n (``rerope+logn``)
    label: str = ""  # how tables, plots and rows name it; default: name(non-default params)

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", default_label(self.name, self.params, self.defaults()))

    def defaults(self) -> dict:
        return {**self.freq.params, **(self.attention.params if self.attention else {})}

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
        """:attr:`dynamic` for this model: ``native`` is dynamic only where the config's rope type is."""
        if self.freq.name == "native":
            return geom.has_rope and native_rope(geom)["rope_type"] in DYNAMIC_ROPE_TYPES
        return self.dynamic

    @property
    def scales_queries(self) -> bool:
        """Queries past ``L`` are multiplied by ``log_L(m)`` (``logn`` alone or with a two-branch method)."""
        return self.logn or (self.attention is not None and self.attention.name == "logn")

    def params_json(self) -> str:
        return json.dumps(self.param_dict, sort_keys=True)

    def freq_params(self) -> dict:
        return {k: v for k, v in self.params if k in self.freq.params}

    def attention_params(self) -> dict:
        return {k: v for k, v in self.params if self.attention is not None and k in self.attention.params}


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


def resolve(spec: str, params: dict | None = None, label: str | None = None) -> MethodSetting:
    """``"ntk+logn"``, ``{"beta_fast": 16}`` -> a :class:`MethodSetting` with defaults filled in.

    Raises :class:`UserError` for unknown names, unknown parameters and combinations other than
    one frequency method plus one attention-level method, where a two-branch method (``rerope``,
    ``leaky-rerope``, ``self-extend``) may also take ``logn``: ``ntk+rerope+logn``.
    """
    params = dict(params or {})
    parts = [_canonical(p) for p in str(spec).split("+") if p.strip()]
    if not parts:
        raise UserError("empty method name", f"choose one of: {', '.join(METHODS)}")
    freqs = [p for p in parts if not METHODS[p].attention]
    attns = [p for p in parts if METHODS[p].attention]
    logn = len(attns) == 2 and "logn" in attns and any(a in TWO_BRANCH for a in attns)
    if logn:
        attns = [a for a in attns if a != "logn"]
    if len(freqs) > 1 or len(attns) > 1:
        raise UserError(f"cannot combine '{spec}'", combinations_hint())
    freq = METHODS[freqs[0]] if freqs else METHODS["none"]
    attention = METHODS[attns[0]] if attns else None
    defaults = {**freq.params, **(attention.params if attention else {})}
    for key in params:
        if key not in defaults:
            guess = closest(key, defaults)
            known = ", ".join(defaults) or "none"
            raise UserError(
                f"unknown parameter '{key}' for method '{spec}'",
                (f"did you mean '{guess}'? " if guess else "") + f"its parameters are: {known}",
            )
    merged = {k: tuple(v) if isinstance(v, list) else v for k, v in {**defaults, **params}.items()}
    for key in ("window",):
        if merged.get(key) is not None and isinstance(merged[key], str):
            merged[key] = parse_length(merged[key])
    parts = [freq.name] if attention is None or freq.name != "none" else []
    parts += [attention.name] if attention is not None else []
    parts += ["logn"] if logn else []
    return MethodSetting(name="+".join(parts), freq=freq, attention=attention, params=tuple(sorted(merged.items())), logn=logn,
                         label=label or "")  # fmt: skip


def combinations_hint() -> str:
    """What combines, for the one error every impossible combination gives."""
    freq_names = ", ".join(n for n, m in METHODS.items() if not m.attention)
    attn_names = ", ".join(n for n, m in METHODS.items() if m.attention)
    with_logn = ", ".join(f"{n}+logn" for n in TWO_BRANCH)
    return (
        f"combine at most one frequency method ({freq_names}) with one attention method ({attn_names}); "
        f"a two-branch method also takes logn ({with_logn}); e.g. ntk+logn, yarn+rerope, ntk+rerope+logn"
    )


def effective_params(setting: MethodSetting, geom: RopeGeometry, factor: float) -> dict:
    """Every parameter the method uses, after defaults (including those derived from ``L`` and ``s``)."""
    from .attention import attention_defaults  # attention maths depends on methods, not the reverse

    check_applicable(setting, geom)
    if not geom.has_rope:
        return {"position": geom.position} if setting.freq.name == "native" else {}
    params = setting.param_dict
    if setting.freq.name == "native":
        params.update(native_rope(geom))  # the config's own parameters, as shipped
    if setting.attention is not None:
        params.update(attention_defaults(setting.attention.name, setting.attention_params(), geom, factor))
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


BASELINES = ("none", "native")  # what applies to a model without RoPE


def check_applicable(setting: MethodSetting, geom: RopeGeometry, seq_len: int | None = None) -> None:
    """Raise :class:`UserError` if ``setting`` cannot run on a model of this geometry (at ``seq_len``).

    A model without RoPE (ALiBi, learned absolute positions) runs only ``none`` and ``native``, the
    model as it is; every scaling method is an error. A learned absolute-position table ends at
    ``max_positions``: a longer sequence is an error, not an index crash inside the model.
    """
    if geom.has_rope:
        return
    if setting.name not in BASELINES:
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
