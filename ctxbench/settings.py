"""Task settings from loose values: one builder for CLI options, suite tables and API keywords.

Method entries expand to grids: a parameter given as a list (``--param beta_fast=16,32``, or
``params = { group = [2, 4] }`` in a suite) makes one entry per value, and several listed
parameters make their product. Each entry has a label (default ``yarn(beta_fast=16)``: the
name and its non-default parameters, see :func:`ctxbench.methods.default_label`); two entries
with the same label are an error naming both.
"""

from __future__ import annotations

import dataclasses
import itertools

from .errors import UserError, unknown
from .parsing import parse_factors, parse_lengths, split_list

# Parameters whose value is itself a list (LongRoPE's per-pair factors): never expanded to a grid.
LIST_VALUED = {"factors"}


def expand(params: dict) -> list[dict]:
    """``{"a": [1, 2], "b": 3}`` -> ``[{"a": 1, "b": 3}, {"a": 2, "b": 3}]`` (keys in order)."""
    keys = list(params)
    choices = [
        list(params[k]) if isinstance(params[k], (list, tuple)) and k not in LIST_VALUED else [params[k]] for k in keys
    ]
    for k, values in zip(keys, choices, strict=True):
        if not values:
            raise UserError(f"parameter '{k}' has an empty list of values", "give at least one value")
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*choices)]


def method_entries(name: str, params: dict | None = None, label: str | None = None) -> list:
    """One method name with its parameters -> its resolved entries (a grid if values are lists).
    A given ``label`` names a single entry, or is suffixed with the parameters of each grid point."""
    from .methods import default_label, resolve

    grid = expand(dict(params or {}))
    out = []
    for point in grid:
        setting = resolve(name, point)
        if label:
            varying = {k: v for k, v in point.items() if isinstance((params or {}).get(k), (list, tuple)) and k not in LIST_VALUED}
            setting = dataclasses.replace(setting, label=default_label(label, varying, {}) if varying else label)
        out.append(setting)
    return out


def check_labels(settings: list, where: str = "") -> None:
    """Two entries with the same label would merge in every table: an error naming both."""
    seen: dict[str, object] = {}
    for s in settings:
        if s.label in seen and seen[s.label] != s:
            raise UserError(
                f"{where}two method entries are labelled '{s.label}': {_describe(seen[s.label])} and {_describe(s)}",
                "give one of them another label (suite: label = \"...\") or drop the duplicate",
            )
        seen[s.label] = s


def _describe(setting) -> str:
    return f"{setting.name} {setting.params_json()}"


def resolve_methods(method, params: dict | None = None) -> list:
    """``"none,yarn"`` (or a list) and ``params`` -> resolved, labelled entries.

    ``params`` is either one dict shared by the methods (each takes the keys it knows; a key
    none takes is an error) or ``{method: {...}}``. List values expand to grids.
    """
    from .methods import resolve

    params = params or {}
    names = split_list(method, what="--method")
    per_method = bool(params) and all(isinstance(v, dict) for v in params.values())
    if not per_method:
        for key in params:
            if not any(key in resolve(n).defaults() for n in names):
                resolve(names[0], {key: params[key]})  # raises "unknown parameter ... did you mean"
                raise UserError(f"parameter '{key}' is not used by any of {', '.join(names)}", "drop it or add a method that takes it")
    out = []
    for name in names:
        known = resolve(name).defaults()
        own = params.get(name, {}) if per_method else {k: v for k, v in params.items() if k in known}
        out += method_entries(name, own)
    check_labels(out)
    unique = list(dict.fromkeys(out))
    if len(unique) != len(out):
        dup = next(s for s in out if out.count(s) > 1)
        raise UserError(f"method '{dup.label}' is given twice", "list each method once")
    return unique


def build_settings(task, methods, factors=2.0, lengths=None, options: dict | None = None, where: str = ""):
    """The task's frozen settings: ``methods`` (resolved list, or a spec string), ``factors``
    (``"2,4"`` or numbers), ``lengths`` (``"4k,8k"``, ints or None for the task's default) and the
    task's own options (raw values; ``None`` keeps the default). Validated with the task's rules."""
    if isinstance(methods, (str, tuple)) or (isinstance(methods, list) and methods and isinstance(methods[0], str)):
        methods = resolve_methods(methods)
    factors = parse_factors(factors)
    lengths = parse_lengths(lengths) if lengths not in (None, "", []) else None
    options = dict(options or {})
    known = task.option_names()
    values = {}
    for key, raw in options.items():
        if key not in known:
            raise unknown(f"{where}option for task {task.name}", key, known)
        if raw is None:
            continue
        option = next(o for o in task.options if o.name == key)
        values[key] = option.parse(raw) if option.parse else raw
    settings = task.settings(methods=tuple(methods), factors=tuple(factors), lengths=tuple(lengths) if lengths else None, **values)
    if task.validate:
        task.validate(settings)
    return settings
