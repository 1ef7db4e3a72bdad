"""Apply a scaling method to a loaded model in place, and restore it.

``with applied(model, geom, setting, factor, seq_len): ...`` writes the method's inverse
frequencies and attention scale into every rotary module (Llama, Mistral, Qwen2/3, Phi-3,
GPT-NeoX, ... all keep an ``inv_freq`` buffer and an ``attention_scaling`` attribute) and puts
the originals back on exit, so one loaded model serves a whole grid with no state leaking
between cells.

An attention-level method of some layers only (``ms-poe``: ``first_layer`` on, the authors'
``apply_layers``) gets each layer its own plan, and plain RoPE on the layers it leaves.

A per-layer-type model (Gemma 3: ``geom.layer_type`` set, see :mod:`ctxbench.model.geometry`) keeps one
table per layer type in its rotary module (``full_attention_inv_freq``,
``sliding_attention_inv_freq``, ...): the method is written into the geometry's type's table only
and every other type's table stays as shipped. An attention-level method runs on the attention
modules of that type; the others (sliding-window layers) go on attending as shipped, with their
own rotary and window (:func:`ctxbench.methods.attention.ctxbench_attention` with ``plan=None`` and
``_ctxbench_window``); a layer of another type without a sliding window is one error.

Dynamic methods get ``seq_len`` — the length of the whole sequence of the call (prompt plus new
tokens when generating) — once, so every key in the cache is rotated with the same frequencies.
transformers' own per-step dynamic update is switched off while a method is applied (the rotary
module's ``rope_type`` reads ``default``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch import nn

from ctxbench.errors import UserError
from ctxbench.methods import (
    MethodSetting,
    attention_branches,
    check_applicable,
    effective_params,
    frequencies,
    head_ratios,
    key_ratios,
    method_layers,
    order_heads,
    query_scale,
)
from ctxbench.methods.attention import NAME as ATTENTION_NAME
from ctxbench.methods.attention import AttentionPlan
from ctxbench.model.geometry import RopeGeometry

# A transformers module (the model, a rotary embedding, an attention layer): ctxbench reads and sets
# attributes nn.Module's type does not have (``{prefix}inv_freq``, ``rope_type``, ``layer_idx``, the
# attention plan), so its type is Any here.
HfModule = Any


def rotary_modules(model: nn.Module) -> list[nn.Module]:
    """Every module holding an ``inv_freq`` tensor (one per model in v5, one per layer in older code)."""
    found = [m for m in model.modules() if isinstance(getattr(m, "inv_freq", None), torch.Tensor)]
    if not found:
        raise UserError(
            f"{type(model).__name__} has no rotary embedding module",
            "ctxbench evaluates RoPE models (Llama, Mistral, Qwen, Phi-3, GPT-NeoX, SmolLM2, ...)",
        )
    return found


def rotary_tables(model: nn.Module, geom: RopeGeometry) -> list[tuple[HfModule, str]]:
    """``(module, prefix)`` of every rotary table a method rewrites: ``module.{prefix}inv_freq`` (and
    ``{prefix}attention_scaling``); the prefix is ``""``, or ``"<layer type>_"`` on a per-layer-type model."""
    if not geom.layer_type:
        return [(m, "") for m in rotary_modules(model)]
    prefix = f"{geom.layer_type}_"
    found = [(m, prefix) for m in model.modules() if isinstance(getattr(m, f"{prefix}inv_freq", None), torch.Tensor)]
    if not found:
        raise UserError(
            f"{type(model).__name__} has no rotary module holding '{geom.layer_type}' frequencies, "
            "which its config's per-layer-type RoPE says it has",
            "ctxbench drives transformers' per-layer-type rotary modules (Gemma 3: <layer type>_inv_freq buffers)",
        )
    return found


def check_layout(model: nn.Module, geom: RopeGeometry, setting: MethodSetting, factor: float) -> None:
    """Refuse, before any plan or cell, a method whose frequency table does not fit the model's
    rotary tables (the check :func:`applied` makes again when it writes them)."""
    if not geom.has_rope:
        return
    inv_freq, _ = frequencies(setting, geom, factor, geom.trained_len)
    _check_fits(rotary_tables(model, geom), inv_freq, setting.label)


def _check_fits(tables: list[tuple[HfModule, str]], inv_freq: torch.Tensor, label: str) -> None:
    """Every table ``module.{prefix}inv_freq`` holds as many frequencies as the method computed."""
    for module, prefix in tables:
        held = getattr(module, f"{prefix}inv_freq").shape
        if held != inv_freq.shape:
            raise UserError(
                f"the model's rotary module has {held[-1]} frequencies, method '{label}' computed {inv_freq.shape[-1]}",
                "this model's RoPE layout is not supported (e.g. proportional RoPE, whose table holds zeros past the "
                "rotated pairs): run --method native",
            )


def _no_dynamic_update(module: HfModule, layer_type: str) -> str | dict[str, str]:
    """``rope_type`` that keeps transformers' dynamic update off the rewritten table: ``"default"``, or
    a per-layer-type module's dict with that type's entry ``"default"`` (a new dict; the original is restored)."""
    rope_type = module.rope_type
    return {**rope_type, layer_type: "default"} if isinstance(rope_type, dict) else "default"


def attention_modules(model: nn.Module) -> list[HfModule]:
    """Self-attention modules: the ones transformers calls the attention interface from."""
    return [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "scaling") and hasattr(m, "config")]


@contextmanager
def applied(
    model: HfModule, geom: RopeGeometry, setting: MethodSetting, factor: float, seq_len: int
) -> Iterator[tuple[torch.Tensor | None, float]]:
    """Apply ``setting`` at ``factor`` for sequences of ``seq_len`` tokens; yields (inv_freq, scale).

    On a model without RoPE only the baselines ``none`` and ``native`` apply, and they leave the
    model as it is (yields ``(None, 1.0)``); anything else, or a length past a learned position
    table, is a :class:`UserError` (:func:`ctxbench.methods.check_applicable`).
    """
    check_applicable(setting, geom, seq_len)
    if not geom.has_rope:
        yield None, 1.0
        return
    inv_freq, scale = frequencies(setting, geom, factor, seq_len)
    tables = rotary_tables(model, geom)
    _check_fits(tables, inv_freq, setting.label)
    saved = [
        (m, p, getattr(m, f"{p}inv_freq"), getattr(m, f"{p}attention_scaling", None), getattr(m, "rope_type", None))
        for m, p in tables
    ]
    attn_saved: list[HfModule] = []
    impl = getattr(model.config, "_attn_implementation", None)
    try:
        for module, prefix, original, _, _ in saved:
            if scale != 1.0 and not hasattr(module, f"{prefix}attention_scaling"):
                raise UserError(
                    f"{type(module).__name__} cannot scale attention, which method '{setting.name}' needs",
                    "pick a method without attention scaling (e.g. ntk, linear) or a newer transformers",
                )
            identity = setting.attention is not None  # the attention function rotates q and k itself
            setattr(module, f"{prefix}inv_freq", (torch.zeros_like(inv_freq) if identity else inv_freq).to(original.device))
            if hasattr(module, f"{prefix}attention_scaling"):
                setattr(module, f"{prefix}attention_scaling", 1.0 if identity else scale)
            if isinstance(getattr(module, "rope_type", None), (str, dict)):
                # keep transformers' dynamic update from rewriting our buffer
                module.rope_type = _no_dynamic_update(module, geom.layer_type)
        if setting.attention is not None:
            params = effective_params(setting, geom, factor)
            plan = AttentionPlan(  # what the entry says, bound to this setting: attention.py asks no names
                inv_freq=inv_freq,
                scale=scale,
                rotary_dim=geom.rotary_dim,
                trained_len=geom.trained_len,
                branches=attention_branches(setting, params),
                query_scale=partial(query_scale, setting, geom) if setting.scales_queries else None,
                head_ratios=partial(head_ratios, setting, params) if setting.head_scaled else None,
                order_heads=partial(order_heads, setting, params) if setting.head_scaled else None,
                key_ratios=partial(key_ratios, setting, params) if setting.head_scaled else None,
            )
            modules = attention_modules(model)
            layers = method_layers(setting, params, 1 + max((m.layer_idx for m in modules), default=-1))
            for module in modules:
                runs = _runs_method(module, geom, setting)
                module._ctxbench_plan = _layer_plan(plan, module, layers) if runs else None
                attn_saved.append(module)
            if not attn_saved:
                raise UserError(
                    f"{type(model).__name__} has no attention module ctxbench can drive",
                    "attention-level methods need a transformers model that uses the AttentionInterface",
                )
            model.set_attn_implementation(ATTENTION_NAME)
        yield inv_freq, scale
    finally:
        for module, prefix, original, scaling, rope_type in saved:
            setattr(module, f"{prefix}inv_freq", original)
            if scaling is not None:
                setattr(module, f"{prefix}attention_scaling", scaling)
            if rope_type is not None:
                module.rope_type = rope_type
        for module in attn_saved:
            del module._ctxbench_plan
            if hasattr(module, "_ctxbench_window"):
                del module._ctxbench_window
        if attn_saved and impl is not None:
            model.set_attn_implementation(impl)


def _layer_plan(plan: AttentionPlan, module: HfModule, layers: range | None) -> AttentionPlan:
    """The plan of one attention module: the shared one for a method of every layer; for a method
    of some layers (``ms-poe``'s ``first_layer``), its own copy, with its own memo, on those layers,
    and plain RoPE (the frequency part's) on the others."""
    if layers is None:
        return plan
    if module.layer_idx in layers:
        return replace(plan, memo={})
    return replace(plan, branches=(), query_scale=None, head_ratios=None, order_heads=None, key_ratios=None, memo={})


def _runs_method(module: HfModule, geom: RopeGeometry, setting: MethodSetting) -> bool:
    """Whether an attention module runs the attention-level method: every one on a one-RoPE model;
    on a per-layer-type model those of the geometry's type, while a sliding-window layer of another
    type is marked to attend as shipped (``_ctxbench_window``) and any other layer is one error."""
    if not geom.layer_type:
        return True
    layer_type = getattr(module, "layer_type", None)
    if layer_type == geom.layer_type:
        return True
    window = getattr(module, "sliding_window", None)
    if layer_type is None or not isinstance(window, int) or window < 1:
        raise UserError(
            f"method '{setting.name}' cannot run on {type(module).__name__} layer {getattr(module, 'layer_idx', '?')} "
            f"(layer type {layer_type!r}): ctxbench keeps only sliding-window layers as shipped beside "
            f"the '{geom.layer_type}' layers it applies an attention-level method to",
            "pick a frequency method (e.g. yarn, ntk, linear) or native for this model",
        )
    module._ctxbench_window = window
    return False
