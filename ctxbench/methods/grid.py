"""Method entries from loose values: ``"none,yarn"`` and parameters -> resolved, labelled entries.

A parameter given as a list (``--param beta_fast=16,32``, or ``params = { group = [2, 4] }`` in a suite)
makes one entry per value, and several listed parameters make their product. Each entry has a label
(default ``yarn(beta_fast=16)``: the name and its non-default parameters, see
:func:`ctxbench.methods.default_label`); two entries with the same label are an error naming both.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Sequence

from ctxbench.errors import UserError
from ctxbench.methods.params import Param, Params
from ctxbench.methods.setting import MethodSetting, default_label, resolve
from ctxbench.parsing import parse_params, split_methods


def expand(params: Params, declared: dict[str, Param] | None = None, method: str = "") -> list[Params]:
    """``{"a": [1, 2], "b": 3}`` -> ``[{"a": 1, "b": 3}, {"a": 2, "b": 3}]`` (keys in order).

    ``declared`` (``{name: Param}``) says which lists are grids: for a list-valued parameter
    (LongRoPE's ``factors``) a list of numbers is one value, a list of files or lists a grid."""
    keys = list(params)

    def grid(k: str) -> bool:
        p = (declared or {}).get(k)
        return p.is_grid(params[k]) if p is not None else isinstance(params[k], (list, tuple))

    choices = [list(params[k]) if grid(k) else [params[k]] for k in keys]
    for k, values in zip(keys, choices, strict=True):
        if not values:
            owner = f"{method} parameter" if method else "parameter"
            raise UserError(f"{owner} '{k}' has an empty list of values", "give at least one value")
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*choices)]


def method_entries(name: str, params: Params | None = None, label: str | None = None) -> list[MethodSetting]:
    """One method name with its parameters -> its resolved entries (a grid if values are lists).
    A given ``label`` names a single entry, or is suffixed with the parameters of each grid point.
    Every entry is checked as one that will run (:func:`ctxbench.methods.resolve`, ``runnable``)."""
    params = dict(params or {})
    declared = resolve(name).declarations()
    grid = expand(params, declared, name)
    out = []
    for point in grid:
        setting = resolve(name, point, runnable=True)
        if label:
            varying = {k: v for k, v in point.items() if k in declared and declared[k].is_grid(params[k])}
            setting = dataclasses.replace(setting, label=default_label(label, varying, {}) if varying else label)
        out.append(setting)
    return out


def check_labels(settings: Sequence[MethodSetting], where: str = "") -> None:
    """Two entries with the same label would merge in every table: an error naming both."""
    seen: dict[str, MethodSetting] = {}
    for s in settings:
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in s.label):
            raise UserError(f"{where}label {json.dumps(s.label)} holds a line break or another control character",
                            "write a label on one line, of printable characters (it names a row in every table)")  # fmt: skip
        if s.label in seen and seen[s.label] != s:
            raise UserError(
                f"{where}two method entries are labelled '{s.label}': {_describe(seen[s.label])} and {_describe(s)}",
                "give one of them another label (suite: label = \"...\") or drop the duplicate",
            )
        seen[s.label] = s


def _describe(setting: MethodSetting) -> str:
    return f"{setting.name} {setting.params_json()}"


def parse_spec(item: str) -> tuple[str, Params]:
    """One method spec -> ``(name, its own parameters)``: ``"yarn"`` -> ``("yarn", {})``,
    ``"yarn(beta_fast=24,beta_slow=2)"`` -> ``("yarn", {"beta_fast": 24, "beta_slow": 2})``. The
    parameters read as ``--param`` values do (a comma list after ``key=`` is a grid), so a label as
    the reports print it, or the winner ``ctxbench tune`` prints, is a method spec every task takes."""
    name, paren, rest = item.partition("(")
    if not paren:
        return item.strip(), {}
    example = "write name(key=value,...), e.g. --method 'yarn(beta_fast=24,beta_slow=2)'"
    if not rest.rstrip().endswith(")") or not name.strip():
        raise UserError(f"bad method spec '{item}'", example)
    inner = rest.rstrip()[:-1].strip()
    try:
        return name.strip(), parse_params([inner]) if inner else {}
    except UserError as exc:
        raise UserError(f"bad method spec '{item}': {exc.what}", example) from None


def one_spec(item: str, params: Params | None = None, what: str = "--method") -> tuple[str, Params]:
    """One method spec naming one setting (what ``export`` prints, what a report labels and ``tune``
    prints as its winner: ``yarn(beta_fast=16)``) -> ``(name, its parameters merged with params)``.
    A parameter given in both is one clear error."""
    name, inline = parse_spec(item)
    params = dict(params or {})
    twice = sorted(set(params) & set(inline))
    if twice:
        raise UserError(f"{name} parameter '{twice[0]}' is given in {what} {name}(...) and in --param too", "give it in one place")
    return name, {**params, **inline}  # a grid of values is refused by resolve, each parameter by its kind


def resolve_methods(method: str | Sequence[str], params: Params | None = None) -> list[MethodSetting]:
    """``"none,yarn"`` (or a list) and ``params`` -> resolved, labelled entries.

    ``params`` is either one dict shared by the methods (each takes the keys it knows; a key
    none takes is an error) or ``{method: {...}}``. List values expand to grids. A method may carry
    its own parameters (``yarn(beta_fast=24)``, :func:`parse_spec`); one given there and in
    ``params`` too is an error.
    """
    params = params or {}
    specs = [parse_spec(item) for item in split_methods(method, what="--method")]
    names = [name for name, _ in specs]
    per_method = bool(params) and all(isinstance(v, dict) for v in params.values())
    if not per_method:
        for key in params:
            if not any(key in resolve(n).defaults() for n in names):
                resolve(names[0], {key: params[key]})  # raises "unknown parameter ... did you mean"
                raise UserError(f"parameter '{key}' is not used by any of {', '.join(names)}", "drop it or add a method that takes it")
    out = []
    for name, inline in specs:
        known = resolve(name).defaults()
        own = params.get(name, {}) if per_method else {k: v for k, v in params.items() if k in known}
        twice = sorted(set(own) & set(inline))
        if twice:
            raise UserError(f"{name} parameter '{twice[0]}' is given in --method {name}(...) and in --param too",
                            "give it in one place")  # fmt: skip
        out += method_entries(name, {**own, **inline})
    check_labels(out)
    unique = list(dict.fromkeys(out))
    if len(unique) != len(out):
        dup = next(s for s in out if out.count(s) > 1)
        raise UserError(f"method '{dup.label}' is given twice", "list each method once")
    return unique
