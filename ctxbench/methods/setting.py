"""A resolved method (:class:`MethodSetting`): parsing ``FREQ+ATTN`` specs, labels, effective parameters,
and the functions the rest of ctxbench calls (frequencies, query scales, branches, applicability).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from ctxbench.defaults import DEFAULT_FACTOR
from ctxbench.errors import UserError, closest, unknown
from ctxbench.methods.branches import Branch, far_keys, near_keys, plain_positions
from ctxbench.methods.frequencies import numpy_namespace, torch_namespace
from ctxbench.methods.params import Array, Namespace, Param, Params, format_value, show_value
from ctxbench.methods.registry import ALIASES, BASELINES, METHODS, PLAIN, TWO_BRANCH, Method
from ctxbench.model.geometry import RopeGeometry
from ctxbench.parsing import MOST_LENGTH


@dataclass(frozen=True)
class MethodSetting:
    """A resolved method: canonical name (``ntk+logn``), its parts and every parameter after defaults."""

    name: str
    freq: Method
    attention: Method | None
    params: tuple[tuple[str, Any], ...]  # sorted (key, value) pairs, hashable
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
    def attention_path(self) -> str:
        """The attention path its parts run (:attr:`Method.attention_path`, ``+``-joined, sorted):
        ``far+query-scale`` for ``rerope+logn``; ``""`` when the model's own attention runs it."""
        kinds = {k for m in self.parts for k in m.attention_path.split("+") if k}
        return "+".join(sorted(kinds))

    @property
    def logn(self) -> bool:
        """A two-branch method that also scales queries by log-n (``rerope+logn``): its stacked
        scaler's entry says so (:attr:`Method.log_n`)."""
        return self.scaler is not None and self.scaler.log_n

    def defaults(self) -> Params:
        return {k: v for m in self.parts for k, v in m.params.items()}

    def declarations(self) -> dict[str, Param]:
        """``{name: Param}`` of every parameter its parts declare."""
        return {p.name: p for m in self.parts for p in m.declared}

    @property
    def param_dict(self) -> Params:
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

    def own_params(self, part: Method | None) -> Params:
        """The parameters one of its parts declares ({} for None)."""
        return {k: v for k, v in self.params if part is not None and k in part.params}

    def freq_params(self) -> Params:
        return self.own_params(self.freq)

    def attention_params(self) -> Params:
        return self.own_params(self.attention)

    def scaler_params(self) -> Params:
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


def default_label(name: str, params: Iterable[tuple[str, Any]] | Params, defaults: Params) -> str:
    """``yarn(beta_fast=16)``: the name plus every parameter that differs from its default,
    sorted by key; the bare name when all are defaults."""
    changed = [(k, v) for k, v in sorted(dict(params).items()) if k not in defaults or _differs(v, defaults[k])]
    if not changed:
        return name
    return name + "(" + ",".join(f"{k}={format_value(v)}" for k, v in changed) + ")"


def _differs(value: Any, default: Any) -> bool:
    if default is None or value is None:
        return value is not default
    try:
        return float(value) != float(default)
    except (TypeError, ValueError):
        return bool(value != default)


def _canonical(name: str) -> str:
    name = name.strip().lower()
    name = ALIASES.get(name, name)
    if name not in METHODS:
        raise unknown("method", name, list(METHODS) + list(ALIASES))
    return name


def resolve(spec: str, params: Params | None = None, label: str | None = None, *, runnable: bool = False) -> MethodSetting:
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
    freq = METHODS[freqs[0]] if freqs else PLAIN
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
    parts = [freq.name] if attention is None or freq is not PLAIN else []
    parts += [attention.name] if attention is not None else []
    parts += [scaler.name] if scaler is not None else []
    return MethodSetting(name="+".join(parts), freq=freq, attention=attention, params=tuple(sorted(merged.items())),
                         scaler=scaler, label=label or "")  # fmt: skip


def _check_rules(declared: dict[str, Param], values: Params, owner: dict[str, str], runnable: bool) -> None:
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


def effective_params(setting: MethodSetting, geom: RopeGeometry, factor: float) -> Params:
    """Every parameter the method uses, after defaults: each part's own, then what its entry derives
    from the model and factor (:attr:`Method.derive`: ``window = L/4``, ``k``, ``G``, native's config)."""
    check_applicable(setting, geom)
    params = setting.param_dict
    for part in setting.parts:
        if part.derive is not None:
            params.update(part.derive(setting.own_params(part), geom, factor))
    return params


def frequencies(
    setting: MethodSetting, geom: RopeGeometry, factor: float, seq_len: int, xp: Namespace = None
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
    fn = setting.freq.fn
    assert fn is not None  # every frequency method's entry has its function (only attention-level ones have none)
    inv_freq, scale = fn(geom, float(factor), int(seq_len), xp=xp, **setting.freq_params())
    return xp.astype(inv_freq, xp.float32), float(scale)


def query_scale(setting: MethodSetting, geom: RopeGeometry, positions: Array, xp: Namespace = None) -> Array:
    """The factor multiplying the query at each 0-based position (float32): its log-n family
    member's (``logn``, ``ssmax``; :attr:`MethodSetting.query_scaler`), or 1 where it has none."""
    xp = xp or torch_namespace()
    scaler = setting.query_scaler
    if scaler is None or scaler.query_scale is None:  # (a query scaler has its query scale)
        return xp.ones_like(xp.astype(positions, xp.float32))
    return scaler.query_scale(positions, geom.trained_len, xp=xp, **setting.scaler_params())


def attention_branches(setting: MethodSetting, params: Params, xp: Namespace = None) -> tuple[Branch, ...]:
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


def _own_params(part: Method, params: Params) -> Params:
    """The entries of ``params`` (from :func:`effective_params`) that the method ``part`` declares."""
    return {k: params[k] for k in part.params}


def head_ratios(setting: MethodSetting, params: Params, num_heads: int, xp: Namespace = None) -> Array:
    """The (h,) float32 ratios a per-head method (:attr:`Method.head_ratios`) divides positions by,
    with ``params`` from :func:`effective_params`."""
    xp = xp or torch_namespace()
    part = setting.attention
    assert part is not None and part.head_ratios is not None  # called for a per-head method only
    return part.head_ratios(num_heads, xp=xp, **_own_params(part, params))


def order_heads(setting: MethodSetting, params: Params, probs: Array, xp: Namespace = None) -> Array:
    """The (b, h) index of the ratio each head takes (:attr:`Method.order_heads`), from ``probs``
    (b, h, n): each head's position-free attention of the input's last query over its keys."""
    xp = xp or torch_namespace()
    part = setting.attention
    assert part is not None and part.order_heads is not None  # called for a per-head method only
    return part.order_heads(probs, xp=xp, **_own_params(part, params))


def key_ratios(setting: MethodSetting, params: Params, ratios: Array, kv_heads: int, xp: Namespace = None) -> Array:
    """The ratios a per-head method rotates keys with, from the (b, h) ratios of the query heads
    (:attr:`Method.key_ratios`): (b, kv_heads) when each key head takes one ratio, (b, h) when each
    query head reads its own copy of its group's key head; the query heads' own when the entry says
    nothing."""
    xp = xp or torch_namespace()
    part = setting.attention
    assert part is not None  # called for a per-head method only
    if part.key_ratios is None:
        return ratios
    return part.key_ratios(ratios, kv_heads, xp=xp, **_own_params(part, params))


def method_layers(setting: MethodSetting, params: Params, num_layers: int) -> range | None:
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


# ---- the numbers a method computes, checked before any model loads ------------------------------


def check_derived(
    setting: MethodSetting, geom: RopeGeometry, factor: float | None, lengths: Iterable[int] = (), num_layers: int | None = None
) -> Params:
    """Every parameter ``setting`` uses on this model at ``factor`` (:func:`effective_params`), once
    the numbers it computes from them are shown to be sensible; else one :class:`UserError`.

    Each value passed its declared range, but a range cannot know the model: what overflows is the
    value combined with the base, the rotary dim and the trained length (``ntk`` at a huge factor
    raised ``OverflowError``; ``linear`` divided every frequency to 0, nothing left to rotate; a tiny
    ``beta_slow`` made YaRN's ramp infinite). So the values themselves are computed here, with NumPy
    in float32 as a run computes them with torch, at the trained length and at each of ``lengths``:
    the inverse frequencies must be finite, >= 0 and not all 0, the attention scale's square (the
    logits' factor) a finite float32 > 0, the query scale finite and > 0, and ``s*L`` no longer than
    the longest length ctxbench takes. The rules between parameters that need the model run too
    (the derived defaults' ``dca`` ``local_window < chunk_size``, ``string`` ``local_value <= window``;
    with ``num_layers``, the layers a method runs on, ``ms-poe``'s ``first_layer``). The CLI, suites,
    the API, ``freqs`` and ``export`` all call this one check before a model loads, and the run
    again on the loaded model, so ``--dry-run`` refuses what the run refuses, in the same words.

    The error names the value to blame and the range that works on this model, found by trying
    each value the user gave (and the factor) at its default: the first whose default clears the
    problem is bisected between the two to the edge of what works."""
    factor = 1.0 if factor is None else float(factor)
    params = effective_params(setting, geom, factor)
    lengths = sorted({int(n) for n in lengths} | {geom.trained_len})
    problem = _derived_problem(setting, geom, factor, lengths)
    if problem is not None:
        raise _blame(setting, geom, factor, lengths, problem)
    if num_layers is not None:
        method_layers(setting, params, num_layers)
    return params


def _reads_input(part: Method) -> bool:
    """A frequency method whose numbers depend on what the user gives (its parameters or the factor);
    the others (``none``, ``native``) give the model's own frequencies, which its config vouches for."""
    return bool(part.declared) or part.uses_factor


def _derived_problem(setting: MethodSetting, geom: RopeGeometry, factor: float, lengths: list[int]) -> str | None:
    """What is wrong with the numbers ``setting`` computes (None: nothing)."""
    import numpy as np  # start-up: numpy only where it runs

    if setting.uses_factor and factor * geom.trained_len > MOST_LENGTH:
        return (f"stretches the trained length L = {geom.trained_len:,} to s*L = {factor * geom.trained_len:,.0f} tokens, "
                f"past the longest length ctxbench takes (16m = {MOST_LENGTH:,})")  # fmt: skip
    if not geom.has_rope:
        return None
    xp = numpy_namespace()
    dynamic = setting.dynamic_for(geom)
    with np.errstate(all="ignore"):  # an overflow is a finding here, not a warning on stderr
        try:
            plain_fn, fn = METHODS["none"].fn, setting.freq.fn
            assert plain_fn is not None and fn is not None  # every frequency method's entry has its function
            plain = np.asarray(plain_fn(geom, 1.0, geom.trained_len, xp=xp)[0], dtype=np.float32)
            if not (np.isfinite(plain).all() and (plain > 0).all()):  # the model's own: every method starts there
                return (f"cannot be computed in float32: the rope base b = {geom.base:g} leaves pairs at frequency 0 "
                        "(float32 ends at 3.4e38)")  # fmt: skip
            if _reads_input(setting.freq):
                for n in lengths if dynamic else lengths[:1]:
                    inv_freq, scale = fn(geom, factor, n, xp=xp, **setting.freq_params())
                    inv_freq = np.asarray(inv_freq, dtype=np.float32)
                    if not np.isfinite(inv_freq).all():
                        return "gives inverse frequencies that are not finite (inf or NaN)"
                    if (inv_freq < 0).any():
                        return "gives negative inverse frequencies"
                    if not (inv_freq > 0).any():
                        return "leaves nothing to rotate: every inverse frequency is 0 in float32"
                    squared = np.float32(scale) ** 2
                    if not (math.isfinite(scale) and np.isfinite(squared) and squared > 0):
                        return f"gives the attention scale {scale:g}, whose square (the factor of every logit) is not a finite float32 > 0"
            if setting.query_scaler is not None:
                last = np.asarray([0, max(lengths) - 1], dtype=np.int64)
                q = np.asarray(query_scale(setting, geom, last, xp=xp), dtype=np.float32)
                if not (np.isfinite(q).all() and (q > 0).all()):
                    return f"gives the query at position {max(lengths) - 1:,} the scale {float(q[-1]):g}, not a finite number > 0"
        except (OverflowError, ValueError, ZeroDivisionError, FloatingPointError) as exc:
            return f"cannot be computed: {type(exc).__name__} ({exc})"
        except UserError:  # it needs what this model lacks (longrope's factors): its own error comes where it runs
            return None
    return None


def _with(setting: MethodSetting, name: str, value: object) -> MethodSetting:
    return replace(setting, params=tuple(sorted({**setting.param_dict, name: value}.items())), label=setting.label)


def _blame(setting: MethodSetting, geom: RopeGeometry, factor: float, lengths: list[int], problem: str) -> UserError:
    """The :class:`UserError` for a ``problem`` of the derived numbers: the value to blame and the
    range of it that works here. Each numeric value the user gave (the factor among them, where the
    method reads it) is tried at its default (its example, for a required one); the first whose
    default clears the problem is blamed, and the edge of what works is found by bisection between
    the two (on a log scale: the ranges span many orders of magnitude)."""
    model = f"d = {geom.rotary_dim}, b = {geom.base:g}, L = {geom.trained_len:,}"
    declared = setting.declarations()
    candidates: list[tuple[str, float, float, Param | None]] = []
    if setting.uses_factor and factor != DEFAULT_FACTOR:
        candidates.append(("factor", factor, float(DEFAULT_FACTOR), None))
    for name, value in setting.params:
        param = declared[name]
        good = param.default if param.default is not None else param.example
        if param.kind in ("float", "int", "length") and value is not None and good is not None and not isinstance(good, str):
            if float(value) != float(good):
                candidates.append((name, float(value), float(good), param))
    for name, bad, good, p in candidates:
        def works(x: float, name: str = name, p: Param | None = p) -> bool:
            x = round(x) if p is not None and p.kind != "float" else x
            if name == "factor":
                return _derived_problem(setting, geom, x, lengths) is None
            return _derived_problem(_with(setting, name, x), geom, factor, lengths) is None

        if not works(good):
            continue
        edge = _edge(works, good, bad)
        edge = round(edge) if p is not None and p.kind != "float" else edge
        works_where = f"up to about {edge:.4g}" if bad > good else f"from about {edge:.4g} up"
        shown = format_value(good if p is None else p.check(good, setting.label))
        if p is None:  # the factor (the one candidate without a declaration): the largest power of two that works reads better than the default
            nice = 2.0 ** math.floor(math.log2(edge * (1 + 1e-9))) if bad > good else good
            shown = format_value(nice if works(nice) else good)
            return UserError(f"factor {factor:g} {problem}, for method '{setting.name}' on this model ({model})",
                             f"a factor works {works_where} here, e.g. factor {shown}")  # fmt: skip
        value = p.check(bad if p.kind == "float" else round(bad), setting.label)
        return UserError(f"{name}={format_value(value)} {problem}, for method '{setting.name}' on this model ({model})",
                         f"{name} works {works_where} here, e.g. {name}={shown}")  # fmt: skip
    return UserError(f"method '{setting.label}' {problem} on this model ({model}), whatever its parameters",
                     "check the model's rope base and trained length (its config's rope_theta and max_position_embeddings, "
                     "or the values given for them), or pick another method")  # fmt: skip


def _edge(works: Callable[[float], bool], good: float, bad: float, steps: int = 60) -> float:
    """The value nearest ``bad`` that still ``works``, between ``good`` (works) and ``bad`` (does not):
    bisection in log space when both are > 0, else linear."""
    log = good > 0 and bad > 0
    lo, hi = (math.log(good), math.log(bad)) if log else (good, bad)
    for _ in range(steps):
        mid = (lo + hi) / 2
        if works(math.exp(mid) if log else mid):
            lo = mid
        else:
            hi = mid
    return math.exp(lo) if log else lo
