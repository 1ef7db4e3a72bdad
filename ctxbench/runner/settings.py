"""Task settings from loose values: one builder for CLI options, suite tables and API keywords.

Method entries expand to grids: a parameter given as a list (``--param beta_fast=16,32``, or
``params = { group = [2, 4] }`` in a suite) makes one entry per value, and several listed
parameters make their product. Each entry has a label (default ``yarn(beta_fast=16)``: the
name and its non-default parameters, see :func:`ctxbench.methods.default_label`); two entries
with the same label are an error naming both.
"""

from __future__ import annotations

import json
from pathlib import Path

from ctxbench.defaults import DEFAULT_FACTOR
from ctxbench.errors import UserError, closest, unknown
from ctxbench.methods import show_value
from ctxbench.methods.grid import check_labels, expand, method_entries, resolve_methods  # noqa: F401  (their home before)
from ctxbench.model.size import layers_of
from ctxbench.parsing import parse_factors, parse_lengths


def build_settings(task, methods, factors=DEFAULT_FACTOR, lengths=None, options: dict | None = None, where: str = ""):
    """The task's frozen settings: ``methods`` (resolved list, or a spec string), ``factors``
    (``"2,4"`` or numbers), ``lengths`` (``"4k,8k"``, ints or None for the task's default) and the
    task's own options (raw values; ``None`` keeps the default). Validated with the task's rules."""
    if isinstance(methods, (str, tuple)) or (isinstance(methods, list) and methods and isinstance(methods[0], str)):
        methods = resolve_methods(methods)
    factors = parse_factors(factors)
    lengths = parse_lengths(lengths) if lengths is not None else None  # "" or [] is refused, not read as the default
    options = dict(options or {})
    known = task.option_names()
    values = {}
    for key, raw in options.items():
        if key not in known:
            raise unknown(f"{where}option for task {task.name}", key, known)
        if raw is None:
            continue
        if isinstance(raw, str) and not raw.strip():  # "" is not "not given": refused, never read as the default
            raise UserError(f"{where}{key} = {raw!r} is empty", f"give a value, or leave {key} out for its default")
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


def check_backend(jobs, config) -> None:
    """Refuse, before the plan, what the chosen backend (``--backend``) cannot run: an unknown
    backend (naming the closest), or a method, metric or model option it does not have
    (``ctxbench.backends.<name>.check``)."""
    from ctxbench import backends

    backend = backends.get(config.backend)
    methods = [m for job in jobs for m in getattr(job.settings, "methods", ())]
    metrics = sorted({m for job in jobs for m in getattr(job.settings, "metrics", ()) or ()})
    backend.check(methods, metrics, config)


def _option(flag: str, value) -> str:
    """``--attn sdpa`` on the command line, ``attn = "sdpa"`` in a suite."""
    return f'{flag} "{value}"' if flag.endswith("=") else f"{flag} {value}"


# ---- what a method computes on the model, checked before the plan -----------------------------


def check_methods(jobs, geom, num_layers=None) -> None:
    """Raise :class:`UserError` for the first method of ``jobs`` whose numbers on a model of geometry
    ``geom`` (and ``num_layers`` layers) are not sensible, or whose parameters break a rule only the
    model shows (:func:`ctxbench.methods.check_derived`: ``dca`` ``local_window < chunk_size`` once
    ``chunk_size`` defaults to ``3L/4``, ``string`` ``local_value <= window``, ``ms-poe``'s
    ``first_layer`` past the model's layers, frequencies that overflow). The run used to find these
    after loading the weights (25-30 s) or in its first cell; ``execute`` calls this before the plan,
    on the config for a dry run as for a run, so both refuse in the same words."""
    from ctxbench.methods import check_derived

    for job in jobs:
        settings = job.settings
        lengths = getattr(settings, "lengths", None) or job.task.default_lengths(geom.trained_len)
        for method in getattr(settings, "methods", ()):
            layers = num_layers if method.attention is not None and method.attention.layers is not None else None
            for factor in (getattr(settings, "factors", ()) or (1.0,)) if method.uses_factor else (None,):
                check_derived(method, geom, factor, lengths, layers)


def check_methods_on_model(jobs, model: str, trust_remote_code: bool = False) -> None:
    """:func:`check_methods` on the model named ``model``, from its config alone (no weights, no torch):
    a local directory or ``.gguf`` file always (its geometry is cached, so a second plan reads it in
    milliseconds), a hub model when its config is already downloaded. A hub model that is not, and a
    config this cannot read, are checked by :func:`check_loaded` once the model has loaded."""
    if not any(_reads_input(m) for job in jobs for m in getattr(job.settings, "methods", ())):
        return  # none, native, logn: the model's own numbers; no config to read for them
    source = _config_source(model)
    if source is None:
        return
    from ctxbench.model.files import load_geometry

    geom = load_geometry(source, trust_remote_code)
    needs_layers = any(m.attention is not None and m.attention.layers is not None
                       for job in jobs for m in getattr(job.settings, "methods", ()))  # fmt: skip
    check_methods(jobs, geom, _num_layers(source, trust_remote_code) if needs_layers else None)


def _reads_input(setting) -> bool:
    """A method whose numbers depend on what the user gave: a parameter of one of its parts, or the factor."""
    return setting.uses_factor or any(part.declared for part in setting.parts)


def check_loaded(jobs, lm) -> None:
    """:func:`check_methods` on a loaded model: its geometry and its config's layers."""
    from ctxbench import backends

    check_methods(jobs, lm.geometry, backends.of(lm).num_layers(lm))


def _config_source(model: str) -> str | None:
    """Where ``model``'s config can be read without the network: the path itself for a local model or
    alias, the cached snapshot folder for a hub id already downloaded, else None."""
    from ctxbench.model.files import locate

    kind, _, _ = locate(model)
    if kind != "hub":
        return model
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
    except Exception:  # noqa: BLE001  a hub id the cache cannot even name: the load will say what is wrong
        return None
    return str(Path(cached).parent) if isinstance(cached, str) else None


def _num_layers(source: str, trust_remote_code: bool) -> int | None:
    """The number of decoder layers in a model's config: ``config.json`` read as JSON for a folder
    (milliseconds), else the config transformers reads (a ``.gguf`` header)."""
    path = Path(source).expanduser()
    if path.is_dir():
        try:
            config = json.loads((path / "config.json").read_text(encoding="utf-8-sig"))
        except (OSError, ValueError):
            return None
        return layers_of(config)
    from ctxbench.model.files import load_config

    return layers_of(load_config(source, trust_remote_code))


