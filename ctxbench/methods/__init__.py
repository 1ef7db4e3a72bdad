"""RoPE scaling methods: a method is one object, its entry in ``METHODS``.

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
``dca``, ``ms-poe``) are entries too, with ``attention=True``; :mod:`ctxbench.methods.attention` runs them from
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

Notation (docs/methods.md): rotary dim ``d``, base ``b``, trained context ``L``, factor ``s``, pair
``i = 0..d/2-1``, ``theta_i = b^(-2i/d)``, wavelength ``lambda_i = 2*pi/theta_i``, current length ``l``.

The package, by job: :mod:`~ctxbench.methods.params` (parameter declarations and checks),
:mod:`~ctxbench.methods.frequencies` (frequency-level formulas), :mod:`~ctxbench.methods.branches`
(attention-level positions), :mod:`~ctxbench.methods.native`, :mod:`~ctxbench.methods.engines` (what each
serving engine is told), :mod:`~ctxbench.methods.registry` (``METHODS``), :mod:`~ctxbench.methods.setting`
(resolving a spec, and what the rest of ctxbench calls). Applying one to a model:
:mod:`~ctxbench.methods.patching` and :mod:`~ctxbench.methods.attention`; :mod:`~ctxbench.methods.export`
and :mod:`~ctxbench.methods.freqplot` serve ``ctxbench export`` and ``ctxbench freqs``.
"""

from ctxbench.methods.branches import (  # noqa: F401
    DCA_CHUNK_RATIO,
    DCA_LOCAL_DIVISOR,
    MSPOE_FIRST_LAYER,
    MSPOE_RATIO_MAX,
    MSPOE_RATIO_MIN,
    STRING_LOCAL_VALUE,
    STRING_SHIFT_RATIO,
    Branch,
    dca_branches,
    dca_params,
    far_keys,
    leaky_rerope_far,
    leaky_rerope_params,
    mspoe_key_ratios,
    mspoe_layers,
    mspoe_order,
    mspoe_ratios,
    near_keys,
    plain_positions,
    rerope_far,
    rerope_params,
    self_extend_far,
    self_extend_params,
    string_far,
    string_params,
)
from ctxbench.methods.engines import (  # noqa: F401
    ATTENTION_REFUSAL,
    DCA_REFUSAL,
    DCA_VLLM_REFUSAL,
    DUAL_CHUNK_MODELS,
    DYNAMIC_IN_VLLM,
    VLLM_ROPE_TYPES,
    Exports,
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
    vllm_longrope_switch,
    vllm_table_positions,
    yarn_flags,
    yarn_rope,
    yarn_vllm,
)
from ctxbench.methods.frequencies import (  # noqa: F401
    alpha_base,
    dynamic_ntk_freqs,
    dynamic_yarn_freqs,
    linear_freqs,
    llama3_freqs,
    logn_query_scale,
    longrope_freqs,
    none_freqs,
    ntk_alpha_freqs,
    ntk_base,
    ntk_by_parts_freqs,
    ntk_freqs,
    ntk_mixed_freqs,
    numpy_namespace,
    proportional_freqs,
    ssmax_query_scale,
    theta_freqs,
    torch_namespace,
    yarn_freqs,
)
from ctxbench.methods.native import (  # noqa: F401
    DYNAMIC_ROPE_TYPES,
    longrope_check,
    native_dynamic,
    native_freqs,
    native_params,
    native_rope,
)
from ctxbench.methods.params import (  # noqa: F401
    ATTN_SCALE,
    BETA_FAST,
    BETA_SLOW,
    DCA_CHUNK,
    DCA_LOCAL,
    FLOOR_SCALE,
    KINDS,
    LONGROPE_FACTORS,
    STRING_LOCAL,
    STRING_WINDOW,
    WINDOW,
    Param,
    format_value,
    read_factors,
    show_value,
)
from ctxbench.methods.registry import (  # noqa: F401
    ALIASES,
    BASELINES,
    METHODS,
    TWO_BRANCH,
    Method,
)
from ctxbench.methods.setting import (  # noqa: F401
    MethodSetting,
    attention_branches,
    check_applicable,
    check_derived,
    combinations_hint,
    default_label,
    effective_params,
    exportable,
    frequencies,
    head_ratios,
    key_ratios,
    method_layers,
    order_heads,
    query_scale,
    resolve,
)

# the package's public names, imported from it by the rest of ctxbench (mypy's no_implicit_reexport)
__all__ = [
    "DCA_CHUNK_RATIO", "DCA_LOCAL_DIVISOR", "MSPOE_FIRST_LAYER", "MSPOE_RATIO_MAX", "MSPOE_RATIO_MIN",
    "STRING_LOCAL_VALUE", "STRING_SHIFT_RATIO", "Branch", "dca_branches", "dca_params", "far_keys",
    "leaky_rerope_far", "leaky_rerope_params", "mspoe_key_ratios", "mspoe_layers", "mspoe_order",
    "mspoe_ratios", "near_keys", "plain_positions", "rerope_far", "rerope_params", "self_extend_far",
    "self_extend_params", "string_far", "string_params", "ATTENTION_REFUSAL", "DCA_REFUSAL",
    "DCA_VLLM_REFUSAL", "DUAL_CHUNK_MODELS", "DYNAMIC_IN_VLLM", "VLLM_ROPE_TYPES", "Exports",
    "dynamic_ntk_rope", "linear_flags", "linear_rope", "llama3_rope", "longrope_rope", "native_export",
    "native_vllm", "ntk_mixed_fields", "proportional_rope", "rebased", "same_in_vllm", "vllm_longrope_switch",
    "vllm_table_positions", "yarn_flags", "yarn_rope", "yarn_vllm", "alpha_base", "dynamic_ntk_freqs",
    "dynamic_yarn_freqs", "linear_freqs", "llama3_freqs", "logn_query_scale", "longrope_freqs", "none_freqs",
    "ntk_alpha_freqs", "ntk_base", "ntk_by_parts_freqs", "ntk_freqs", "ntk_mixed_freqs", "numpy_namespace",
    "proportional_freqs", "ssmax_query_scale", "theta_freqs", "torch_namespace", "yarn_freqs",
    "DYNAMIC_ROPE_TYPES", "longrope_check", "native_dynamic", "native_freqs", "native_params", "native_rope",
    "ATTN_SCALE", "BETA_FAST", "BETA_SLOW", "DCA_CHUNK", "DCA_LOCAL", "FLOOR_SCALE", "KINDS",
    "LONGROPE_FACTORS", "STRING_LOCAL", "STRING_WINDOW", "WINDOW", "Param", "format_value", "read_factors",
    "show_value", "ALIASES", "BASELINES", "METHODS", "TWO_BRANCH", "Method", "MethodSetting",
    "attention_branches", "check_applicable", "check_derived", "combinations_hint", "default_label",
    "effective_params", "exportable", "frequencies", "head_ratios", "key_ratios", "method_layers",
    "order_heads", "query_scale", "resolve",
]
