"""The registry: ``METHODS`` maps a name to the :class:`Method` object that carries everything about it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ctxbench.methods.branches import (
    MSPOE_FIRST_LAYER,
    MSPOE_RATIO_MAX,
    MSPOE_RATIO_MIN,
    Branch,
    dca_branches,
    dca_params,
    leaky_rerope_far,
    leaky_rerope_params,
    mspoe_key_ratios,
    mspoe_layers,
    mspoe_order,
    mspoe_ratios,
    rerope_far,
    rerope_params,
    self_extend_far,
    self_extend_params,
    string_far,
    string_params,
)
from ctxbench.methods.engines import (
    ATTENTION_REFUSAL,
    DCA_REFUSAL,
    DCA_VLLM_REFUSAL,
    DYNAMIC_IN_VLLM,
    Exports,
    base_of_none,
    base_of_ntk,
    base_of_ntk_alpha,
    base_of_theta,
    dynamic_ntk_rope,
    linear_flags,
    linear_rope,
    llama3_rope,
    longrope_rope,
    native_export,
    native_vllm,
    ntk_mixed_fields,
    proportional_rope,
    rebased,
    same_in_vllm,
    yarn_flags,
    yarn_rope,
    yarn_vllm,
)
from ctxbench.methods.frequencies import (
    dynamic_ntk_freqs,
    dynamic_yarn_freqs,
    linear_freqs,
    llama3_freqs,
    logn_query_scale,
    longrope_freqs,
    none_freqs,
    ntk_alpha_freqs,
    ntk_by_parts_freqs,
    ntk_freqs,
    ntk_mixed_freqs,
    proportional_freqs,
    ssmax_query_scale,
    theta_freqs,
    yarn_freqs,
)
from ctxbench.methods.native import (
    longrope_check,
    native_dynamic,
    native_freqs,
    native_params,
)
from ctxbench.methods.params import (
    ATTN_SCALE,
    BETA_FAST,
    BETA_SLOW,
    DCA_CHUNK,
    DCA_LOCAL,
    FLOOR_SCALE,
    LONGROPE_FACTORS,
    LONGROPE_KNOTS,
    MOST_ATTENTION_FACTOR,
    MOST_BASE,
    MOST_LAYER,
    MOST_MIXED_B,
    MOST_ROTATIONS,
    STRING_LOCAL,
    STRING_WINDOW,
    TUNE_BETA_FAST,
    TUNE_BETA_SLOW,
    WINDOW,
    Array,
    FreqFn,
    Param,
    Params,
    Tune,
    tune_range,
)
from ctxbench.model.geometry import RopeGeometry
from ctxbench.parsing import MOST_FACTOR


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
    attention: bool = False  # changes attention itself (see ctxbench.methods.attention)
    # The log-n family: fn(positions, trained_len, *, xp, **params) -> the factor multiplying the
    # query at each 0-based position (``logn``, ``ssmax``); a two-branch method also takes one.
    query_scale: Callable[..., Array] | None = None
    # its query scale is log-n's, log_L(m) past L (Su 2021), the one ``MethodSetting.logn`` reports:
    # ``rerope+logn`` (another member of the family stacked the same way, ``ssmax``, is not)
    log_n: bool = False
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
    derive: Callable[[Params, RopeGeometry, float], Params] | None = None
    # fn(params, geom) raising UserError where its parameters cannot apply to this model
    check: Callable[[Params, RopeGeometry], None] | None = None
    baseline: bool = False  # applies to a model without RoPE, leaving it as it is
    # fn(geom) -> whether it depends on the sequence length on this model (default: ``dynamic``)
    dynamic_on: Callable[[RopeGeometry], bool] | None = None
    exports: Exports = Exports()  # what ``ctxbench export`` writes for each engine, or why it cannot
    # ``ctxbench tune``: where it searches the factor (None: the factor stays T/L), and fn(params, L, T)
    # -> why a point of the search space is left out (the authors' rule), or None to keep it
    tune_factor: Tune | None = None
    tune_rule: Callable[[Params, int, int], str | None] | None = None

    @property
    def params(self) -> Params:
        """``{name: default}`` of the declared parameters (``None``: derived, or required)."""
        return {p.name: p.default for p in self.declared}

    @property
    def attention_path(self) -> str:
        """Which of ctxbench's attention paths it runs, read from the fields it fills (never its name):
        ``branches`` (keys partitioned its own way), ``far`` (a near and a far branch), ``heads`` (a
        ratio per head), ``query-scale`` (queries scaled by position), joined by ``+`` when it fills
        several; ``""`` for a method that leaves attention to the model. Plans price each path's
        attention by its own measured cost factor (:mod:`ctxbench.runner.costmodel`)."""
        kinds = (("branches", self.branches), ("far", self.far), ("heads", self.head_ratios), ("query-scale", self.query_scale))
        return "+".join(kind for kind, fn in kinds if fn is not None) if self.attention else ""


# ``ctxbench tune``'s factor range: from T/L (every position up to T within s*L) to twice that.
TUNE_FACTOR = tune_range("log", "T/L (positions up to T within s*L) to 2T/L", lambda L, T: T / L, lambda L, T: 2 * T / L)


def _reaches_target(compression: str) -> Callable[[Params, int, int], str | None]:
    """The rule of the two-branch methods' authors: the window plus the far part compressed by
    ``compression`` must cover the target, ``w + (L - w) * G >= T`` (Self-Extend, arXiv 2401.01325,
    sec. 3: the longest context it extends to); a window of L or more leaves nothing to compress."""

    def rule(params: Params, L: int, T: int) -> str | None:
        window = params.get("window") or L // 4
        if window >= L:
            return f"window {window} >= L = {L}"
        g = params.get(compression)
        if g is not None and window + (L - window) * g < T:
            return f"window + (L - window) * {compression} = {window + (L - window) * g:g} < T = {T}"
        return None

    rule.__doc__ = f"w + (L - w) * {compression} >= T (the authors' longest extended context)"
    return rule


def _string_rule(params: Params, L: int, T: int) -> str | None:
    """local_value <= window/2 (STRING's own constraint, as STRING's parameters are checked when a setting resolves)."""
    window, local = params.get("window") or int(0.33 * L), params.get("local_value")
    if local is not None and local > window // 2:
        return f"local_value {local} > window/2 = {window // 2}"
    return None


def _dca_rule(params: Params, L: int, T: int) -> str | None:
    """local_window < chunk_size (DCA's own constraint; the default local window is L/8, at most half the chunk)."""
    chunk = params.get("chunk_size") or 3 * L // 4
    local = params.get("local_window") or min(L // 8, chunk // 2)
    return f"local_window {local} >= chunk_size/2" if local >= chunk else None


METHODS: dict[str, Method] = {
    "none": Method(
        "none", none_freqs, "theta_i = b^(-2i/d), extrapolated", "RoPE, arXiv 2104.09864", uses_factor=False,
        baseline=True, exports=rebased(base_of_none),
    ),
    "linear": Method(
        "linear", linear_freqs, "theta_i / s", "Position Interpolation, arXiv 2306.15595",
        exports=Exports(linear_rope, same_in_vllm, linear_flags), tune_factor=TUNE_FACTOR,
    ),
    "ntk": Method("ntk", ntk_freqs, "base b*s^(d/(d-2))", "NTK-aware scaled RoPE (bloc97, 2023)", exports=rebased(base_of_ntk),
                  tune_factor=TUNE_FACTOR),
    "dynamic-ntk": Method(
        "dynamic-ntk", dynamic_ntk_freqs, "base b*(s*l/L-(s-1))^(d/(d-2)) when l > L",
        "Dynamic NTK (emozilla, 2023); transformers 'dynamic'", dynamic=True,
        exports=Exports(dynamic_ntk_rope, DYNAMIC_IN_VLLM, "llama.cpp has no dynamic NTK"),
    ),
    "ntk-by-parts": Method(
        "ntk-by-parts", ntk_by_parts_freqs, "(1-g)*theta/s + g*theta, g=clamp((L/lambda-alpha)/(beta-alpha),0,1)",
        "YaRN paper sec. 3.2, arXiv 2309.00071", declared=(
            Param("alpha", 1.0, "float", "rotations in L below which a pair is fully interpolated", low=0, high=MOST_ROTATIONS,
                  tune=TUNE_BETA_SLOW),
            Param("beta", 32.0, "float", "rotations in L above which a pair is kept", low=0, low_inclusive=False,
                  high=MOST_ROTATIONS, greater_than="alpha", tune=TUNE_BETA_FAST),
        ), tune_factor=TUNE_FACTOR,
        exports=Exports.refused("its ramp is linear in L/lambda (the YaRN paper), not in the pair index as every engine's yarn"),
    ),  # fmt: skip
    "yarn": Method(
        "yarn", yarn_freqs, "by-parts ramp over pair index (beta_fast..beta_slow); scale 0.1*ln(s)+1",
        "YaRN, arXiv 2309.00071", declared=(
            BETA_FAST, BETA_SLOW,
            Param("truncate", True, "bool", "round the ramp's ends to whole pairs, as the YaRN paper and llama.cpp do"),
            Param("attention_factor", None, "float", "multiplies cos and sin; auto: 0.1*ln(s)+1", low=0, low_inclusive=False,
                  high=MOST_ATTENTION_FACTOR, example=1.0,
                  tune=tune_range("linear", "1 (none) to 1 + 0.2 ln(2T/L): twice the slope of YaRN's 0.1 ln(s) + 1",
                                  1.0, lambda L, T: 1.0 + 0.2 * math.log(2 * T / L))),
        ),
        exports=Exports(yarn_rope, yarn_vllm, yarn_flags), tune_factor=TUNE_FACTOR,
    ),  # fmt: skip
    "dynamic-yarn": Method(
        "dynamic-yarn", dynamic_yarn_freqs, "yarn with s = max(1, l/L)", "YaRN repo (jquesnelle/yarn)",
        declared=(BETA_FAST, BETA_SLOW), dynamic=True, uses_factor=False,
        exports=Exports.refused("the engines' yarn has a fixed factor"),
    ),
    "llama3": Method(
        "llama3", llama3_freqs, "lambda > L/lo: theta/s; lambda < L/hi: theta; smooth between",
        "Llama 3.1, arXiv 2407.21783", declared=(
            Param("low_freq_factor", 1.0, "float", "wavelengths above L/low_freq_factor are divided by s", low=0, low_inclusive=False,
                  high=MOST_ROTATIONS, tune=tune_range("log", "0.25 to 2 around Llama 3.1's 1 (below high_freq_factor's range)", 0.25, 2)),
            Param("high_freq_factor", 4.0, "float", "wavelengths below L/high_freq_factor are kept", low=0, low_inclusive=False,
                  high=MOST_ROTATIONS, greater_than="low_freq_factor",
                  tune=tune_range("log", "2.5 to 32 around Llama 3.1's 4", 2.5, 32)),
        ), tune_factor=TUNE_FACTOR,
        exports=Exports(llama3_rope, same_in_vllm,
                        "llama.cpp applies Llama 3.1 scaling from the GGUF file's rope_freqs tensor, written at conversion, not from flags"),
    ),  # fmt: skip
    "longrope": Method(
        "longrope", longrope_freqs, "theta_i / lambda_i (searched); scale sqrt(1+ln(s)/ln(L))",
        "LongRoPE, arXiv 2402.13753", declared=(
            LONGROPE_FACTORS,
            LONGROPE_KNOTS,
            Param("attention_factor", None, "float", "multiplies cos and sin; auto: sqrt(1+ln(s)/ln(L))", low=0,
                  low_inclusive=False, high=MOST_ATTENTION_FACTOR, example=1.0),
        ), dynamic=True, check=longrope_check,
        exports=Exports(longrope_rope, same_in_vllm,
                        "llama.cpp applies LongRoPE from the GGUF file's rope factor tensors, written at conversion, not from flags"),
    ),  # fmt: skip
    "theta": Method(
        "theta", theta_freqs, "base replaced by theta", "ABF, Code Llama arXiv 2308.12950",
        declared=(Param("theta", None, "float", "the new rope base b; Code Llama used 1e6", low=1, low_inclusive=False,
                        high=MOST_BASE, required=True, example=1000000),),
        uses_factor=False, exports=rebased(base_of_theta),
    ),  # fmt: skip
    "ntk-mixed": Method(
        "ntk-mixed", ntk_mixed_freqs, "theta_i / exp(a*m^b), m=i+1, a=ln(s)/(d/2)^b",
        "NTK-RoPE-mixed (Su 2023, kexue.fm/archives/9706); vLLM 'ntk' with mixed_b",
        declared=(Param("mixed_b", None, "float", "exponent b of lambda_m = exp(a*m^b); b=1 is fixed NTK scaling",
                        low=0, low_inclusive=False, high=MOST_MIXED_B, required=True, example=0.625),),
        exports=Exports(
            "transformers has no rope type with NTK-RoPE-mixed's per-pair factors exp(a*m^b)",
            same_in_vllm, "llama.cpp has no per-pair NTK-RoPE-mixed factors", fields=ntk_mixed_fields,
            vllm_float32_only="vLLM (0.32) computes its a = ln(s) / (d/2)^b as a tensor of the model's dtype, so in bf16 "
            "its frequencies are not the method's (at x4, position 10464 rotates half a turn away)",
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
                        low=1, high=MOST_FACTOR, required=True, example=1000),),
        uses_factor=False, exports=rebased(base_of_ntk_alpha),
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
        uses_factor=False, attention=True, query_scale=logn_query_scale, log_n=True, exports=Exports.refused(ATTENTION_REFUSAL),
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
                                low=1, high=MOST_FACTOR, example=2,
                                tune=tune_range("log", "1 to 4T/L, kept where w + (L - w) k >= T", 1, lambda L, T: 4 * T / L))),
        attention=True, far=leaky_rerope_far, tune_rule=_reaches_target("k"), derive=leaky_rerope_params, exports=Exports.refused(ATTENTION_REFUSAL),
    ),  # fmt: skip
    "self-extend": Method(
        "self-extend", None, "p < w: p; else q//G + w - w//G - k//G", "Self-Extend, arXiv 2401.01325",
        declared=(WINDOW, Param("group", None, "int", "G far positions share one; auto: the least G that keeps s*L within L",
                                low=1, high=MOST_FACTOR, example=4,
                                tune=tune_range("grid", "2 to 32 (the Self-Extend paper's groups), kept where the authors' "
                                                "w + (L - w) G >= T holds", (2, 3, 4, 6, 8, 12, 16, 24, 32)))),
        attention=True, far=self_extend_far, tune_rule=_reaches_target("group"), derive=self_extend_params, exports=Exports.refused(ATTENTION_REFUSAL),
    ),  # fmt: skip
    "string": Method(
        "string", None, "p < S: p; else p - S + W", "STRING, arXiv 2410.18745 (HKUNLP/STRING)",
        declared=(STRING_WINDOW, STRING_LOCAL), uses_factor=False, attention=True, far=string_far, derive=string_params,
        tune_rule=_string_rule,
        exports=Exports(ATTENTION_REFUSAL,
                        ATTENTION_REFUSAL + " (the authors' vLLM fork, HKUNLP/STRING vllm_string, has a StringAttention "
                        "backend; stock vLLM does not)", ATTENTION_REFUSAL),
    ),  # fmt: skip
    "dca": Method(
        "dca", None, "chunks of c = chunk_size - local_window; keys at j mod c; q at i mod c (own chunk), "
        "min(i mod c + c, chunk_size) (previous), min(2c-1, chunk_size) (earlier)",
        "Dual Chunk Attention, arXiv 2402.17463 (HKUNLP/ChunkLlama)",
        declared=(DCA_CHUNK, DCA_LOCAL), uses_factor=False, attention=True, branches=dca_branches, derive=dca_params,
        tune_rule=_dca_rule,
        exports=Exports(DCA_REFUSAL.format(engine="transformers"), DCA_VLLM_REFUSAL, DCA_REFUSAL.format(engine="llama.cpp")),
    ),  # fmt: skip
    "ms-poe": Method(
        "ms-poe", None, "head h: positions / r_o(h), r_k = min + (max-min) k/H, o = argsort of the heads' outlier scores",
        "Ms-PoE, arXiv 2403.04797 (VITA-Group/Ms-PoE)",
        declared=(
            Param("ratio_min", MSPOE_RATIO_MIN, "float", "the smallest ratio a head divides positions by (the authors' "
                  "compress_ratio_min)", low=1, high=MOST_FACTOR),
            Param("ratio_max", MSPOE_RATIO_MAX, "float", "ratios run from ratio_min towards ratio_max in H equal steps, "
                  "r_k = min + (max-min) k/H (the authors' compress_ratio_max)", low=1, high=MOST_FACTOR, greater_than="ratio_min"),
            Param("first_layer", MSPOE_FIRST_LAYER, "int", "layers from this one on use Ms-PoE, earlier ones plain RoPE "
                  "(the authors' apply_layers 2..31 of 32)", low=0, high=MOST_LAYER),
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
# The model's own frequencies: the frequency method of a setting that names none (``rerope`` is ``none+rerope``).
PLAIN = METHODS["none"]
