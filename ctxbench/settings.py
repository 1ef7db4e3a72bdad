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


def expand(params: dict, declared: dict | None = None, method: str = "") -> list[dict]:
    """``{"a": [1, 2], "b": 3}`` -> ``[{"a": 1, "b": 3}, {"a": 2, "b": 3}]`` (keys in order).

    ``declared`` (``{name: Param}``) says which lists are grids: for a list-valued parameter
    (LongRoPE's ``factors``) a list of numbers is one value, a list of files or lists a grid."""
    keys = list(params)

    def grid(k) -> bool:
        p = (declared or {}).get(k)
        return p.is_grid(params[k]) if p is not None else isinstance(params[k], (list, tuple))

    choices = [list(params[k]) if grid(k) else [params[k]] for k in keys]
    for k, values in zip(keys, choices, strict=True):
        if not values:
            owner = f"{method} parameter" if method else "parameter"
            raise UserError(f"{owner} '{k}' has an empty list of values", "give at least one value")
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*choices)]


def method_entries(name: str, params: dict | None = None, label: str | None = None) -> list:
    """One method name with its parameters -> its resolved entries (a grid if values are lists).
    A given ``label`` names a single entry, or is suffixed with the parameters of each grid point.
    Every entry is checked as one that will run (:func:`ctxbench.methods.resolve`, ``runnable``)."""
    from .methods import default_label, resolve

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


# ---- model-loading values, checked before anything loads ---------------------------------------

DEVICES = ("auto", "cpu", "cuda")  # and cuda:N (models.resolve_device)
DTYPES = ("auto", "float32", "bfloat16", "float16")  # models.DTYPES, and auto
# Attention kernels transformers 5 runs a whole model with (its AttentionInterface names, plus
# eager). Left out: flash_attention_4 (Blackwell-only), paged|eager (continuous batching; ctxbench
# feeds one unpadded sequence per row) and Hub kernel repos.
ATTN_KERNELS = ("sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention")
# The module each flash kernel imports (transformers' is_flash_attn_{2,3}_available) and how to install it.
FLASH_MODULES = {
    "flash_attention_2": ("flash_attn", "pip install flash-attn"),
    "flash_attention_3": ("flash_attn_interface", "build flash-attention's hopper/ package (FlashAttention-3, H100)"),
}


def is_device(device) -> bool:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N``: what ``--device`` takes."""
    if not isinstance(device, str):
        return False
    index = device.removeprefix("cuda:")
    return device in DEVICES or (device.startswith("cuda:") and index.isdigit())


def check_attn(attn: str | None, device: str, *, flag: str = "--attn") -> None:
    """Raise :class:`UserError` unless the attention kernel ``attn`` can run on ``device``.

    ``None`` is transformers' default (sdpa). A flash kernel needs a CUDA GPU — ``device="cpu"``,
    or ``"auto"`` on a machine without one, is an error — and its package (``flash_attn``;
    or the ``kernels`` package, from which transformers fetches a Hub build instead). ``flag``
    names the setting in messages: ``--attn`` on the command line, ``attn =`` in a suite.
    torch is imported only to ask whether ``auto`` has a GPU, for a flash kernel.
    """
    if attn is None:
        return
    if attn not in ATTN_KERNELS:
        from .errors import closest
        from .methods import show_value

        guess = closest(str(attn), ATTN_KERNELS)
        hint = f"did you mean '{guess}'? " if guess else ""
        raise UserError(f"unknown {flag.rstrip(' =')} kernel {show_value(attn)}", f"{hint}choose one of: {', '.join(ATTN_KERNELS)}")
    if attn not in FLASH_MODULES:
        return
    module, install = FLASH_MODULES[attn]
    device_flag = flag.replace("attn", "device")
    if device == "cpu":
        raise UserError(f"{_option(flag, attn)} needs a CUDA GPU, and {_option(device_flag, device)} asks for the CPU",
                        f"use {_option(flag, 'sdpa')} on the CPU")  # fmt: skip
    import importlib.util

    if importlib.util.find_spec(module) is None and importlib.util.find_spec("kernels") is None:
        raise UserError(f"{_option(flag, attn)} needs the '{module}' package, which is not installed",
                        f"use {_option(flag, 'sdpa')}, or {install}")  # fmt: skip
    if device == "auto":
        import torch

        if not torch.cuda.is_available():
            raise UserError(f"{_option(flag, attn)} needs a CUDA GPU, and none is visible ({_option(device_flag, 'auto')} runs on the CPU)",
                            f"use {_option(flag, 'sdpa')} on the CPU")  # fmt: skip


def _option(flag: str, value) -> str:
    """``--attn sdpa`` on the command line, ``attn = "sdpa"`` in a suite."""
    return f'{flag} "{value}"' if flag.endswith("=") else f"{flag} {value}"
