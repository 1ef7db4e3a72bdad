"""``ctxbench export``: a method and factor as the settings of the engine you serve with.

* ``transformers``: the config fields, ``rope_parameters`` for transformers >= 5 and
  ``rope_scaling`` (with ``rope_theta``) for 4.x, plus ``max_position_embeddings``;
* ``vllm``: the ``--hf-overrides`` JSON and ``--max-model-len``; for an attention-level method vLLM
  runs itself (``dca``: its ``dual_chunk_attention_config``), also the environment and flags it needs,
  printed as a whole ``vllm serve`` command;
* ``llamacpp``: ``llama-server``/``llama-cli`` flags (``--rope-scaling``, ``--rope-scale``,
  ``--rope-freq-base``, ``--yarn-orig-ctx``, ``--yarn-ext-factor``, ``--yarn-attn-factor``,
  ``--yarn-beta-fast``, ``--yarn-beta-slow``, ``--ctx-size``);
* ``json``: ctxbench's own description (method, factor, every parameter, geometry) — any method.

Each method's registry entry says how each engine takes it (``Method.exports`` in
:mod:`ctxbench.methods`: a function giving the engine's fields or flags, or the reason it cannot,
such as the yarn ``attention_factor`` trap: transformers' (which ctxbench follows) *replaces*
``0.1 ln s + 1``, vLLM's and llama.cpp's ``attn_factor`` *multiplies* it). This module adds what
every method shares and never asks a method's name. What an engine cannot express is one
:class:`UserError` naming what it supports.

Nothing heavy is imported at module import time (the registry, torch and transformers load inside functions).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ctxbench.errors import UserError, unknown
from ctxbench.methods import (
    METHODS,
    MethodSetting,
    check_applicable,
    check_derived,
    effective_params,
    exportable,
    resolve,
)
from ctxbench.methods.grid import one_spec
from ctxbench.model.geometry import RopeGeometry
from ctxbench.parsing import MOST_LENGTH, parse_factor, parse_length

SERVING_ENGINES = ("transformers", "vllm", "llamacpp")  # the fields of methods.Exports
ENGINES = (*SERVING_ENGINES, "json")


def supported(engine: str) -> tuple[str, ...]:
    """The methods ``engine`` can express, for the error when it cannot (every method for ``json``)."""

    return ("every method",) if engine == "json" else exportable(engine)


def __getattr__(name: str) -> Any:
    """``SUPPORTED`` (engine -> :func:`supported`) and ``WHY`` ((engine, method) -> the reason it
    cannot express it): views of the registry's entries, built when asked."""
    if name == "SUPPORTED":
        return {engine: supported(engine) for engine in ENGINES}
    if name == "WHY":

        return {(engine, n): m.exports.refusal(engine) for n, m in METHODS.items() for engine in SERVING_ENGINES
                if m.exports.refusal(engine)}  # fmt: skip
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _geometry(model: str | None, head_dim: int | None, base: float | None, trained_len: object,
              trust_remote_code: bool) -> RopeGeometry:

    if model:
        from ctxbench.model.files import load_config  # looked up when called (tests replace it)

        return RopeGeometry.from_config(load_config(model, trust_remote_code))
    if head_dim is None or base is None or trained_len is None:
        raise UserError("export needs a geometry", "pass --model M, or all of --head-dim D --base B --trained-len L")
    return RopeGeometry(head_dim=int(head_dim), rotary_dim=int(head_dim), base=float(base), trained_len=parse_length(str(trained_len)))


def rope_parameters(setting: MethodSetting, geom: RopeGeometry, factor: float) -> tuple[dict[str, Any], int | None]:
    """The method in transformers >= 5 terms: (``rope_parameters``, ``max_position_embeddings`` to set or None).

    Raises :class:`UserError` for methods transformers cannot express.
    """
    reason = setting.export_refusal("transformers")
    if reason is not None:
        raise _cannot("transformers", setting, reason)
    return _rope_fields(setting, geom, factor)


def _rope_fields(setting: MethodSetting, geom: RopeGeometry, factor: float) -> tuple[dict[str, Any], int | None]:
    """The frequency method's transformers fields over the base (and partial rotary factor) every method
    has; for a method transformers cannot express, the fields of vLLM's own rope type (``Exports.fields``)."""
    out: dict[str, Any] = {"rope_theta": geom.base}
    if geom.rotary_dim != geom.head_dim:
        out["partial_rotary_factor"] = geom.rotary_dim / geom.head_dim
    exports = setting.freq.exports
    how = exports.transformers if callable(exports.transformers) else exports.fields
    assert how is not None  # the caller checked export_refusal: one of the two expresses it
    fields, max_pos = how(setting.freq_params(), geom, factor)
    return {**out, **fields}, max_pos


def _cannot(engine: str, setting: MethodSetting, why: str) -> UserError:
    name = setting.name if setting.attention is not None else setting.freq.name
    return UserError(
        f"{engine} cannot express method '{name}'" + (f": {why}" if why else ""),
        f"{engine} supports: {', '.join(supported(engine))} (or export --to json)",
    )


def _transformers(setting: MethodSetting, geom: RopeGeometry, factor: float) -> dict[str, Any]:
    rope, max_pos = _rope_fields(setting, geom, factor)
    v5: dict[str, Any] = {"rope_parameters": per_layer_type(rope, geom)}  # 5.x keys a per-layer-type model's by layer type
    v4: dict[str, Any] = {"rope_theta": rope["rope_theta"]}
    # the model's own partial rotary factor is a config field in 4.x; a method's (proportional's) stays in rope_scaling
    own = geom.rotary_dim != geom.head_dim
    scaling = {k: v for k, v in rope.items() if k != "rope_theta" and not (own and k == "partial_rotary_factor")}
    v4["rope_scaling"] = None if scaling.get("rope_type") == "default" else scaling
    if own:
        v4["partial_rotary_factor"] = rope["partial_rotary_factor"]
    if max_pos is not None:
        v5["max_position_embeddings"] = v4["max_position_embeddings"] = max_pos
    return {"transformers>=5": v5, "transformers<5": v4}


def _vllm(setting: MethodSetting, geom: RopeGeometry, factor: float) -> dict[str, Any]:
    rope, max_pos = _rope_fields(setting, geom, factor)
    to_vllm = setting.freq.exports.vllm
    assert callable(to_vllm)  # the caller checked export_refusal("vllm")
    overrides: dict[str, Any] = {"rope_parameters": to_vllm(rope, factor)}
    if max_pos is not None:
        overrides["max_position_embeddings"] = max_pos
    model_len = max_pos or int(round(factor * geom.trained_len))
    out: dict[str, Any] = {"hf_overrides": overrides, "max_model_len": model_len}
    if setting.attention is not None:  # one vLLM runs itself (export_refusal said so): what it adds
        adds = setting.attention.exports.vllm
        assert callable(adds)
        extra = adds(overrides["rope_parameters"], effective_params(setting, geom, factor), geom, factor)
        overrides.update(extra.get("hf_overrides", {}))
        out.update(env=dict(extra.get("env", {})), flags=list(extra.get("flags", [])))
    overrides["rope_parameters"] = per_layer_type(overrides["rope_parameters"], geom)
    return out


def per_layer_type(rope: dict[str, Any], geom: RopeGeometry) -> dict[str, Any]:
    """``rope`` as a per-layer-type model's config keys it (Gemma 3: ``{"sliding_attention": ...,
    "full_attention": ...}``): the method on the geometry's layer type, every other type as shipped.
    An engine reads ``rope_parameters`` per layer type on such a model (vLLM's ``gemma3.py`` looks up
    ``rope_parameters[layer_type]``), so a single entry there would replace the whole structure."""
    if not geom.layer_type:
        return rope
    return {**{kind: dict(params) for kind, params in geom.other_layers.items()}, geom.layer_type: rope}


def method_rope(rope: dict[str, Any], geom: RopeGeometry) -> dict[str, Any]:
    """The method's own ``rope_parameters`` out of :func:`per_layer_type`'s (the geometry's layer type's)."""
    return rope.get(geom.layer_type, rope) if geom.layer_type else rope


def vllm_settings(setting: MethodSetting, geom: RopeGeometry, factor: float) -> dict[str, Any]:
    """``hf_overrides``, ``max_model_len`` (and, for an attention method vLLM runs itself, ``env`` and
    ``flags``) of a resolved method: what ``--backend vllm`` starts its engine with. Raises
    :class:`UserError` for a method vLLM cannot express."""
    reason = setting.export_refusal("vllm")
    if reason is not None:
        raise _cannot("vllm", setting, reason)
    return _vllm(setting, geom, float(factor))


def llamacpp_settings(setting: MethodSetting, geom: RopeGeometry, factor: float) -> dict[str, Any]:
    """``{flag: value}`` of a resolved method at ``factor``: the ``llama-server``/``llama-cli`` flags
    that ``export --to llamacpp`` prints, and what ``--backend llamacpp`` runs (it translates each
    flag into the ``llama_cpp.Llama`` argument of the same meaning, ``--ctx-size`` into the run's
    context). One source, so the printed flags are what was measured. Raises :class:`UserError`
    for a method llama.cpp cannot express (the reason is the registry's, in the same words)."""
    reason = setting.export_refusal("llamacpp")
    if reason is not None:
        raise _cannot("llamacpp", setting, reason)
    return _llamacpp_flags(setting, geom, float(factor))


def _llamacpp_flags(setting: MethodSetting, geom: RopeGeometry, factor: float) -> dict[str, Any]:
    to_llamacpp = setting.freq.exports.llamacpp
    assert callable(to_llamacpp)  # the caller checked export_refusal("llamacpp")
    flags = to_llamacpp(setting.freq_params(), geom, factor)
    return {**flags, "--ctx-size": int(round(factor * geom.trained_len))}


def _llamacpp(setting: MethodSetting, geom: RopeGeometry, factor: float) -> list[str]:
    flags = _llamacpp_flags(setting, geom, factor)
    return [text for flag, value in flags.items() for text in (flag, value if isinstance(value, str) else _num(value))]


def _num(x: float) -> str:
    """A flag value: ``4`` for 4.0, else the shortest repr that reads back as the same double."""
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


def engine_name(to: str) -> str:
    engine = str(to).strip().lower()
    engine = {"hf": "transformers", "llama.cpp": "llamacpp", "llama-cpp": "llamacpp"}.get(engine, engine)
    if engine not in ENGINES:
        raise unknown("engine", engine, ENGINES)
    return engine


def export_settings(method: str, factor: float | str, to: str, model: str | None = None, head_dim: int | None = None,
                    base: float | None = None, trained_len: int | str | None = None, params: dict[str, Any] | None = None,
                    trust_remote_code: bool = False) -> dict[str, Any] | list[str]:  # fmt: skip
    """The structured export (dict, or a list of flags for llama.cpp); :func:`export` prints it."""

    engine = engine_name(to)
    name, params = one_spec(method, params)  # a report's label or tune's winner line, e.g. yarn(beta_fast=16)
    setting = resolve(name, params, runnable=True)  # every value checked before a config is read
    s = parse_factor(factor)
    geom = _geometry(model, head_dim, base, trained_len, trust_remote_code)
    check_applicable(setting, geom)
    if not geom.has_rope:
        raise UserError(
            f"model type '{geom.model_type}' has no RoPE ({geom.position} positions): there are no rope settings to export",
            "serve it unchanged",
        )
    reason = None if engine == "json" else setting.export_refusal(engine)
    if reason is not None:  # what the engine cannot express at all comes first
        raise _cannot(engine, setting, reason)
    # the numbers the engine would compute from these settings are finite and sensible (a factor of
    # 1e200 wrote max_position_embeddings of 201 digits; a huge base, OverflowError), at s*L
    check_derived(setting, geom, s, [min(MOST_LENGTH, max(1, round(s * geom.trained_len)))])
    if engine == "json":
        return {
            "method": setting.name, "factor": s, "method_params": effective_params(setting, geom, s),
            "geometry": {"head_dim": geom.head_dim, "rotary_dim": geom.rotary_dim, "base": geom.base, "trained_len": geom.trained_len},
        }  # fmt: skip
    return SETTINGS[engine](setting, geom, s)


def export(method: str, factor: float | str, to: str, model: str | None = None, head_dim: int | None = None,
           base: float | None = None, trained_len: int | str | None = None, params: dict[str, Any] | None = None,
           trust_remote_code: bool = False) -> str:  # fmt: skip
    """The text ``ctxbench export`` prints: JSON for transformers and json, a command line fragment
    for vLLM and llama.cpp. Raises :class:`UserError` for bad input or what the engine cannot express."""
    out = export_settings(method, factor, to, model, head_dim, base, trained_len, params, trust_remote_code)
    return RENDER[engine_name(to)](out, model)


def _vllm_text(out: dict[str, Any], model: str | None) -> str:
    """``--hf-overrides '{...}' --max-model-len N``; with an environment or flags, the whole ``vllm serve`` line."""
    overrides = _json(out["hf_overrides"], separators=(",", ":"))
    text = f"--hf-overrides '{overrides}' --max-model-len {out['max_model_len']}"
    if out.get("env") or out.get("flags"):  # the whole command: the environment goes before it
        env = " ".join(f"{k}={v}" for k, v in out.get("env", {}).items())
        text = f"{env} vllm serve {model or 'MODEL'} {text} {' '.join(out.get('flags', []))}".strip()
    return text


def _json(value: object, **kw: Any) -> str:
    """Strict JSON, as engines parse it: ``Infinity`` and ``NaN`` are not JSON, so a value that is not
    finite is refused (``check_derived`` refuses the settings that would make one before this)."""
    try:
        return json.dumps(value, allow_nan=False, **kw)
    except ValueError:
        raise UserError("the export would hold a number that is not finite (inf or NaN), which is not JSON",
                        "use values inside each parameter's range (see `ctxbench methods`) and a smaller factor") from None


# export target -> what builds its settings, and what prints them (the one place that names the targets)
SETTINGS: dict[str, Callable[[MethodSetting, RopeGeometry, float], dict[str, Any] | list[str]]] = {"transformers": _transformers, "vllm": _vllm, "llamacpp": _llamacpp}
RENDER: dict[str, Callable[[Any, str | None], str]] = {"transformers": lambda out, model: _json(out, indent=2), "json": lambda out, model: _json(out, indent=2),
          "vllm": _vllm_text, "llamacpp": lambda out, model: " ".join(out)}  # fmt: skip
