"""``ctxbench export``: a method and factor as the settings of the engine you serve with.

* ``transformers``: the config fields, ``rope_parameters`` for transformers >= 5 and
  ``rope_scaling`` (with ``rope_theta``) for 4.x, plus ``max_position_embeddings``;
* ``vllm``: the ``--hf-overrides`` JSON and ``--max-model-len``;
* ``llamacpp``: ``llama-server``/``llama-cli`` flags (``--rope-scaling``, ``--rope-scale``,
  ``--rope-freq-base``, ``--yarn-orig-ctx``, ``--yarn-ext-factor``, ``--yarn-attn-factor``,
  ``--yarn-beta-fast``, ``--yarn-beta-slow``, ``--ctx-size``);
* ``json``: ctxbench's own description (method, factor, every parameter, geometry) — any method.

What an engine cannot express is one :class:`UserError` naming what it supports. Two naming traps
are handled here: transformers' yarn ``attention_factor`` (which ctxbench follows) *replaces*
``0.1 ln s + 1``, while vLLM's and llama.cpp's ``attn_factor`` (as the yarn repository's) *multiplies*
it, so a chosen ``attention_factor`` ``a`` is exported to them as ``a / (0.1 ln s + 1)``.

Nothing heavy is imported at module import time (torch and transformers load inside functions).
"""

from __future__ import annotations

import json
import math

from .errors import UserError, unknown

ENGINES = ("transformers", "vllm", "llamacpp", "json")
# What each engine can express, for the error when it cannot.
SUPPORTED = {
    "transformers": ("none", "native", "linear", "ntk", "ntk-alpha", "theta", "dynamic-ntk", "yarn", "llama3", "longrope"),
    "vllm": ("none", "native", "linear", "ntk", "ntk-alpha", "theta", "yarn", "llama3", "longrope"),
    "llamacpp": ("none", "linear", "ntk", "ntk-alpha", "theta", "yarn"),
    "json": ("every method",),
}
VLLM_ROPE_TYPES = ("default", "linear", "yarn", "llama3", "longrope")
WHY = {
    ("vllm", "dynamic-ntk"): "vLLM's 'dynamic' fixes the base once, at s*L tokens, instead of per sequence length",
    ("llamacpp", "dynamic-ntk"): "llama.cpp has no dynamic NTK",
    ("llamacpp", "llama3"): "llama.cpp applies Llama 3.1 scaling from the GGUF file's rope_freqs tensor, written at conversion, not from flags",
    ("llamacpp", "longrope"): "llama.cpp applies LongRoPE from the GGUF file's rope factor tensors, written at conversion, not from flags",
    ("llamacpp", "native"): "llama.cpp reads the model's own scaling from its GGUF file: pass no rope flags",
    ("transformers", "ntk-mixed"): "transformers has no rope type with NTK-RoPE-mixed's per-pair factors exp(a*m^b)",
    ("vllm", "ntk-mixed"): "ctxbench exports only vLLM rope types it checks against transformers "
                           "(vLLM's own 'ntk' type with mixed_b computes it, untested here)",
    ("llamacpp", "ntk-mixed"): "llama.cpp has no per-pair NTK-RoPE-mixed factors",
}  # fmt: skip


def _yarn_mscale(s: float) -> float:
    return 1.0 if s <= 1 else 0.1 * math.log(s) + 1.0


def _geometry(model, head_dim, base, trained_len, trust_remote_code):
    from .geometry import RopeGeometry
    from .parsing import parse_length

    if model:
        from .models import load_config

        return RopeGeometry.from_config(load_config(model, trust_remote_code))
    if head_dim is None or base is None or trained_len is None:
        raise UserError("export needs a geometry", "pass --model M, or all of --head-dim D --base B --trained-len L")
    return RopeGeometry(head_dim=int(head_dim), rotary_dim=int(head_dim), base=float(base), trained_len=parse_length(str(trained_len)))


def rope_parameters(setting, geom, factor: float) -> tuple[dict, int | None]:
    """The method in transformers >= 5 terms: (``rope_parameters``, ``max_position_embeddings`` to set or None).

    Raises :class:`UserError` for methods transformers cannot express.
    """
    from .methods import _longrope_factors, native_rope

    name, p, L, d = setting.freq.name, setting.freq_params(), geom.trained_len, geom.rotary_dim
    out: dict = {"rope_theta": geom.base}
    if geom.rotary_dim != geom.head_dim:
        out["partial_rotary_factor"] = geom.rotary_dim / geom.head_dim
    longer = int(round(factor * L))
    if name == "none":
        return {**out, "rope_type": "default"}, None
    if name == "native":  # the model as shipped: its own rope parameters and length
        return {**out, **native_rope(geom)}, geom.max_positions or None
    if name == "linear":
        return {**out, "rope_type": "linear", "factor": factor}, None
    if name == "ntk":  # NTK-aware scaling is plain RoPE with a larger base
        return {**out, "rope_type": "default", "rope_theta": geom.base * factor ** (d / (d - 2))}, None
    if name == "ntk-alpha":  # Hunyuan's alpha: the same, with the ratio alpha given
        return {**out, "rope_type": "default", "rope_theta": _alpha_base(p, geom)}, None
    if name == "theta":
        if p.get("theta") is None:
            raise UserError("method 'theta' needs a new base", "pass --param theta=1000000")
        return {**out, "rope_type": "default", "rope_theta": float(p["theta"])}, None
    if name == "dynamic-ntk":  # transformers' dynamic takes L from max_position_embeddings
        return {**out, "rope_type": "dynamic", "factor": factor}, L
    if name == "yarn":
        rope = {**out, "rope_type": "yarn", "factor": factor, "original_max_position_embeddings": L,
                "beta_fast": float(p["beta_fast"]), "beta_slow": float(p["beta_slow"]), "truncate": bool(p["truncate"])}  # fmt: skip
        if p.get("attention_factor") is not None:
            rope["attention_factor"] = float(p["attention_factor"])
        return rope, longer
    if name == "llama3":
        return {**out, "rope_type": "llama3", "factor": factor, "original_max_position_embeddings": L,
                "low_freq_factor": float(p["low_freq_factor"]), "high_freq_factor": float(p["high_freq_factor"])}, longer  # fmt: skip
    if name == "longrope":
        long, short = _longrope_factors(geom, p.get("factors"))
        rope = {**out, "rope_type": "longrope", "factor": factor, "original_max_position_embeddings": L,
                "long_factor": [float(x) for x in long], "short_factor": [float(x) for x in short]}  # fmt: skip
        if p.get("attention_factor") is not None:
            rope["attention_factor"] = float(p["attention_factor"])
        return rope, longer
    raise _cannot("transformers", setting)


def _alpha_base(p: dict, geom) -> float:
    """ntk-alpha's base ``b * alpha^(d/(d-2))``."""
    if p.get("scaling_alpha") is None:
        raise UserError("method 'ntk-alpha' needs its alpha", "pass --param scaling_alpha=1000")
    d = geom.rotary_dim
    return geom.base * float(p["scaling_alpha"]) ** (d / (d - 2))


def _cannot(engine: str, setting) -> UserError:
    name = setting.name if setting.attention is not None else setting.freq.name
    why = WHY.get((engine, name))
    if setting.attention is not None:
        why = "it changes attention itself (ctxbench's own attention function), which no serving engine has"
    elif why is None and name in ("ntk-by-parts", "dynamic-yarn"):
        why = {
            "ntk-by-parts": "its ramp is linear in L/lambda (the YaRN paper), not in the pair index as every engine's yarn",
            "dynamic-yarn": "the engines' yarn has a fixed factor",
        }[name]
    return UserError(
        f"{engine} cannot express method '{name}'" + (f": {why}" if why else ""),
        f"{engine} supports: {', '.join(SUPPORTED[engine])} (or export --to json)",
    )


def _transformers(setting, geom, factor) -> dict:
    rope, max_pos = rope_parameters(setting, geom, factor)
    v5: dict = {"rope_parameters": rope}
    v4: dict = {"rope_theta": rope["rope_theta"]}
    scaling = {k: v for k, v in rope.items() if k not in ("rope_theta", "partial_rotary_factor")}
    v4["rope_scaling"] = None if scaling.get("rope_type") == "default" else scaling
    if "partial_rotary_factor" in rope:
        v4["partial_rotary_factor"] = rope["partial_rotary_factor"]
    if max_pos is not None:
        v5["max_position_embeddings"] = v4["max_position_embeddings"] = max_pos
    return {"transformers>=5": v5, "transformers<5": v4}


def _vllm(setting, geom, factor) -> dict:
    if setting.attention is not None or setting.freq.name not in SUPPORTED["vllm"]:
        raise _cannot("vllm", setting)
    rope, max_pos = rope_parameters(setting, geom, factor)
    rope = dict(rope)
    if rope["rope_type"] not in VLLM_ROPE_TYPES:  # native: the config's own type
        raise UserError(
            f"vllm cannot express this model's own RoPE type '{rope['rope_type']}'"
            + (f": {WHY[('vllm', 'dynamic-ntk')]}" if rope["rope_type"] == "dynamic" else ""),
            f"vllm supports rope types: {', '.join(VLLM_ROPE_TYPES)}",
        )
    if rope["rope_type"] == "yarn":
        a = rope.pop("attention_factor", None)
        if a is not None:  # vLLM's attn_factor multiplies 0.1 ln s + 1; transformers' attention_factor replaces it
            rope["attn_factor"] = a / _yarn_mscale(factor)
        if rope.get("truncate", True):
            rope.pop("truncate", None)  # the default everywhere
    overrides: dict = {"rope_parameters": rope}
    if max_pos is not None:
        overrides["max_position_embeddings"] = max_pos
    model_len = max_pos or int(round(factor * geom.trained_len))
    return {"hf_overrides": overrides, "max_model_len": model_len}


def _llamacpp(setting, geom, factor) -> list[str]:
    if setting.attention is not None or setting.freq.name not in SUPPORTED["llamacpp"]:
        raise _cannot("llamacpp", setting)
    p, L, d, name = setting.freq_params(), geom.trained_len, geom.rotary_dim, setting.freq.name
    ctx = int(round(factor * L))
    if name == "none":
        return ["--rope-scaling", "none", "--rope-freq-base", _num(geom.base), "--ctx-size", str(ctx)]
    if name == "linear":
        return ["--rope-scaling", "linear", "--rope-scale", _num(factor), "--rope-freq-base", _num(geom.base), "--ctx-size", str(ctx)]
    if name in ("ntk", "ntk-alpha", "theta"):
        new_base = {"ntk": lambda: geom.base * factor ** (d / (d - 2)), "ntk-alpha": lambda: _alpha_base(p, geom),
                    "theta": lambda: p.get("theta")}[name]()  # fmt: skip
        if new_base is None:
            raise UserError("method 'theta' needs a new base", "pass --param theta=1000000")
        return ["--rope-scaling", "none", "--rope-freq-base", _num(float(new_base)), "--ctx-size", str(ctx)]
    # yarn: llama.cpp's ramp floors/ceils the correction dims (truncate) and multiplies --yarn-attn-factor in
    if not p.get("truncate", True):
        raise UserError(
            "llamacpp cannot express yarn with truncate=false: it always rounds the correction range to whole dims",
            "export yarn with the default truncate=true, or --to transformers",
        )
    attn = 1.0 if p.get("attention_factor") is None else float(p["attention_factor"]) / _yarn_mscale(factor)
    return [
        "--rope-scaling", "yarn", "--rope-scale", _num(factor), "--rope-freq-base", _num(geom.base),
        "--yarn-orig-ctx", str(L), "--yarn-ext-factor", "1", "--yarn-attn-factor", _num(attn),
        "--yarn-beta-fast", _num(float(p["beta_fast"])), "--yarn-beta-slow", _num(float(p["beta_slow"])),
        "--ctx-size", str(ctx),
    ]  # fmt: skip


def _num(x: float) -> str:
    """A flag value: ``4`` for 4.0, else the shortest repr that reads back as the same double."""
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


def _engine(to: str) -> str:
    engine = str(to).strip().lower()
    engine = {"hf": "transformers", "llama.cpp": "llamacpp", "llama-cpp": "llamacpp"}.get(engine, engine)
    if engine not in ENGINES:
        raise unknown("engine", engine, ENGINES)
    return engine


def export_settings(method: str, factor, to: str, model: str | None = None, head_dim: int | None = None,
                    base: float | None = None, trained_len=None, params: dict | None = None,
                    trust_remote_code: bool = False):  # fmt: skip
    """The structured export (dict, or a list of flags for llama.cpp); :func:`export` prints it."""
    from .methods import check_applicable, effective_params, resolve
    from .parsing import parse_factor

    engine = _engine(to)
    setting = resolve(method, params, runnable=True)  # every value checked before a config is read
    s = parse_factor(factor)
    geom = _geometry(model, head_dim, base, trained_len, trust_remote_code)
    check_applicable(setting, geom)
    if not geom.has_rope:
        raise UserError(
            f"model type '{geom.model_type}' has no RoPE ({geom.position} positions): there are no rope settings to export",
            "serve it unchanged",
        )
    if engine == "json":
        return {
            "method": setting.name, "factor": s, "method_params": effective_params(setting, geom, s),
            "geometry": {"head_dim": geom.head_dim, "rotary_dim": geom.rotary_dim, "base": geom.base, "trained_len": geom.trained_len},
        }  # fmt: skip
    if setting.attention is not None:
        raise _cannot(engine, setting)
    return {"transformers": _transformers, "vllm": _vllm, "llamacpp": _llamacpp}[engine](setting, geom, s)


def export(method: str, factor, to: str, model: str | None = None, head_dim: int | None = None,
           base: float | None = None, trained_len=None, params: dict | None = None,
           trust_remote_code: bool = False) -> str:  # fmt: skip
    """The text ``ctxbench export`` prints: JSON for transformers and json, a command line fragment
    for vLLM and llama.cpp. Raises :class:`UserError` for bad input or what the engine cannot express."""
    out = export_settings(method, factor, to, model, head_dim, base, trained_len, params, trust_remote_code)
    engine = _engine(to)
    if engine == "llamacpp":
        return " ".join(out)
    if engine == "vllm":
        overrides = json.dumps(out["hf_overrides"], separators=(",", ":"))
        return f"--hf-overrides '{overrides}' --max-model-len {out['max_model_len']}"
    return json.dumps(out, indent=2)
