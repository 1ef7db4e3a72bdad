"""Task settings from loose values: one builder for CLI options, suite tables and API keywords.

Method entries expand to grids: a parameter given as a list (``--param beta_fast=16,32``, or
``params = { group = [2, 4] }`` in a suite) makes one entry per value, and several listed
parameters make their product. Each entry has a label (default ``yarn(beta_fast=16)``: the
name and its non-default parameters, see :func:`ctxbench.methods.default_label`); two entries
with the same label are an error naming both.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any, TypeGuard

from ctxbench import backends
from ctxbench.defaults import DEFAULT_FACTOR
from ctxbench.errors import UserError, closest, unknown
from ctxbench.methods import check_derived, show_value
from ctxbench.methods.grid import check_labels as check_labels  # (re-exported: their home before)
from ctxbench.methods.grid import expand as expand
from ctxbench.methods.grid import method_entries as method_entries
from ctxbench.methods.grid import resolve_methods as resolve_methods
from ctxbench.model.files import config_source, load_counts, load_geometry
from ctxbench.parsing import parse_factors, parse_lengths, short

if TYPE_CHECKING:
    # (jobs are ctxbench.runner.grid.Job and the config a grid.ModelConfig: grid imports this module)
    from collections.abc import Iterable, Sequence

    from ctxbench.backends.base import Engine
    from ctxbench.methods.setting import MethodSetting
    from ctxbench.model.geometry import RopeGeometry
    from ctxbench.tasks.base import Task


def build_settings(task: Task, methods: str | Sequence[str] | Sequence[MethodSetting], factors: object = DEFAULT_FACTOR,
                   lengths: object = None, options: dict[str, Any] | None = None, where: str = "") -> Any:
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


def is_device(device: object) -> TypeGuard[str]:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N``: what ``--device`` takes."""
    if not isinstance(device, str):
        return False
    index = device.removeprefix("cuda:")
    return device in DEVICES or (device.startswith("cuda:") and index.isdigit())


# Spellings people reach for, and the name ctxbench takes (the suggestion in the refusal; never
# taken silently: a cell's dtype column holds one spelling, so two would split one cell in two).
DTYPE_SPELLINGS = {"fp32": "float32", "f32": "float32", "float": "float32", "torch.float32": "float32", "bf16": "bfloat16",
                   "torch.bfloat16": "bfloat16", "fp16": "float16", "f16": "float16", "half": "float16", "torch.float16": "float16"}  # fmt: skip
UNSUPPORTED_DTYPES = {"float64": "double precision", "double": "double precision", "torch.float64": "double precision",
                      "int8": "an integer type (quantisation is --quantization)", "int4": "an integer type (quantisation is --quantization)",
                      "fp8": "an 8-bit float", "float8": "an 8-bit float"}  # fmt: skip
# The most GPUs one engine spans: vLLM's own tensor parallel runs within a node (8 GPUs); 512 is
# past any multi-node job. A larger number is a typo.
MOST_TENSOR_PARALLEL = 512
# torch.manual_seed takes a signed 64-bit integer; numpy's and Python's generators take any. A seed
# is a whole number from 0 to 2^63 - 1, checked before the plan (2^64 failed in manual_seed after
# the model loaded, with a traceback).
MOST_SEED = 2**63 - 1


def _shown(value: object, flag: str) -> str:
    return f'{flag} "{short(value, 40)}"' if flag.endswith("=") else f"{flag} {short(value, 40)!r}" if isinstance(value, str) else f"{flag} {short(value, 40)}"


def check_dtype(dtype: object, *, flag: str = "--dtype") -> str:
    """``dtype`` when it is one ctxbench loads in (:data:`DTYPES`), else one :class:`UserError`
    naming the closest: ``fp32`` -> ``float32``, ``half`` -> ``float16``; ``float64`` and ``int8`` are
    not dtypes a run computes in; ``auto,float32`` is two. The CLI, suites and the API all call it
    (through :meth:`ctxbench.runner.grid.ModelConfig.check`), so a dry run refuses what the run would."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    text = str(dtype)
    key = text.strip().lower()
    fix_name = DTYPE_SPELLINGS.get(key) or (key if key in DTYPES else None)
    if "," in text:
        what, fix_name = f"{_shown(text, flag)} names more than one dtype", None
        fix = f"one dtype per run: {_option(flag, 'float32')} (choices: {', '.join(DTYPES)})"
        raise UserError(what, fix)
    if key in UNSUPPORTED_DTYPES:
        raise UserError(f"{_shown(text, flag)} is {UNSUPPORTED_DTYPES[key]}, which ctxbench does not run models in",
                        f"use {_option(flag, 'float32')} (choices: {', '.join(DTYPES)})")  # fmt: skip
    fix_name = fix_name or closest(key, DTYPES)
    hint = f"did you mean {_option(flag, fix_name)}? " if fix_name else ""
    raise UserError(f"unknown dtype: {_shown(text, flag)}", f"{hint}choose one of: {', '.join(DTYPES)}")


def check_device(device: object, *, flag: str = "--device") -> str:
    """``device`` when it names a device this machine has: ``auto``, ``cpu``, or ``cuda``/``cuda:N``
    with a CUDA GPU visible (and N below their count). torch is imported only for a ``cuda`` device."""
    if not is_device(device):
        guess = closest(str(device).strip().lower(), DEVICES)
        hint = f"did you mean {_option(flag, guess)}? " if guess else ""
        raise UserError(f"unknown device: {_shown(device, flag)}", f"{hint}use auto, cpu, cuda or cuda:N")
    if device.startswith("cuda"):
        import torch  # start-up: torch only where it runs

        if not torch.cuda.is_available():
            raise UserError(f"{_option(flag, device)} asks for a CUDA GPU and none is visible on this machine",
                            f"use {_option(flag, 'cpu')} (or auto, which runs on the CPU here)")  # fmt: skip
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise UserError(f"{_option(flag, device)}: this machine has {torch.cuda.device_count()} CUDA GPU(s)",
                            f"use {_option(flag, 'cuda:0')}")  # fmt: skip
    return device


def check_seed(seed: object, *, flag: str = "--seed") -> int:
    """A seed every generator takes: a whole number from 0 to :data:`MOST_SEED` (2^63 - 1)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MOST_SEED:
        raise UserError(f"{_shown(seed, flag)} is not a whole number from 0 to 2^63 - 1 ({MOST_SEED})",
                        f"use e.g. {_option(flag, 0)}")  # fmt: skip
    return seed


def check_tensor_parallel(tp: object, *, flag: str = "--tensor-parallel") -> int:
    """GPUs one engine spans: a whole number from 1 to :data:`MOST_TENSOR_PARALLEL`. Whether the
    backend spans GPUs at all, and whether the number divides the model's heads, is the backend's
    own check (``check`` of its module)."""
    if not isinstance(tp, int) or isinstance(tp, bool) or not 1 <= tp <= MOST_TENSOR_PARALLEL:
        raise UserError(f"{_shown(tp, flag)} is not a whole number from 1 to {MOST_TENSOR_PARALLEL}",
                        f"give the number of GPUs one engine spans, e.g. {_option(flag, 2)}, or drop {flag.rstrip(' =')}")  # fmt: skip
    return tp


# Ceilings on the product of a run's options (each option has its own, the product had none: 4
# methods x 59 factors x 200 lengths x 1000 trials planned cell by cell until it was killed).
# A million cells or ten million trials and documents is months of machine time for the default
# model even at a second each: past that a run is a typo, or a study to split into several runs.
MOST_CELLS = 1_000_000
MOST_EVALUATIONS = 10_000_000
MOST_TOKENS = 2**40  # tokens forwarded, lengths times evaluations: about a year at 30k tokens/s


def grid_size(job: Any) -> tuple[int, int, int]:
    """(cells, evaluations, tokens) of one job from its settings' counts alone, in O(methods +
    lengths): never by listing them. A cell is one method setting at one factor, length and
    depth; an evaluation one trial or document of a cell (the most a ``trials = "auto"`` cell runs);
    tokens are lengths times evaluations (0 where lengths come from the model)."""
    s = job.settings
    factors = len(getattr(s, "factors", ()) or (1,))
    settings = sum(factors if m.uses_factor else 1 for m in getattr(s, "methods", ())) or 1
    lengths = tuple(getattr(s, "lengths", None) or ())
    depths = getattr(s, "depths", None)
    places = len(depths) if isinstance(depths, (tuple, list)) and depths else 1
    trials = getattr(s, "trials", None)
    per_cell = trials if isinstance(trials, int) and not isinstance(trials, bool) else getattr(s, "max_trials", 1)
    per_cell = per_cell if isinstance(per_cell, int) else 1
    docs = getattr(s, "docs", None)
    per_cell = max(1, per_cell, docs if isinstance(docs, int) and not isinstance(docs, bool) else 1)
    cells = settings * max(1, len(lengths) or 3) * places  # the model's own lengths: L/2, L, 2L
    return cells, cells * per_cell, settings * places * per_cell * sum(lengths)


def check_grid_size(jobs: Iterable[Any]) -> None:
    """Refuse a run whose grid is past :data:`MOST_CELLS` cells, :data:`MOST_EVALUATIONS`
    trials and documents or :data:`MOST_TOKENS` tokens in all, before the plan and in O(1) of the
    trial count; the fix names a smaller value of the option that multiplies most (and passes)."""
    sizes = [grid_size(job) for job in jobs]
    cells, evaluations, tokens = (sum(x[i] for x in sizes) for i in range(3))
    for total, most, what in ((cells, MOST_CELLS, "cells"), (evaluations, MOST_EVALUATIONS, "trials and documents"),
                              (tokens, MOST_TOKENS, "tokens")):  # fmt: skip
        if total > most:
            raise UserError(f"the grid is {total:,} {what} in all (methods x factors x lengths x depths x trials), "
                            f"above the most one run takes, {most:,}",
                            "run fewer methods, factors, lengths or trials at once (split the study into several runs, "
                            "each with an --out of its own)")  # fmt: skip


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

    if importlib.util.find_spec(module) is None and importlib.util.find_spec("kernels") is None:
        raise UserError(f"{_option(flag, attn)} needs the '{module}' package, which is not installed",
                        f"use {_option(flag, 'sdpa')}, or {install}")  # fmt: skip
    if device == "auto":
        import torch  # start-up: torch only where it runs

        if not torch.cuda.is_available():
            raise UserError(f"{_option(flag, attn)} needs a CUDA GPU, and none is visible ({_option(device_flag, 'auto')} runs on the CPU)",
                            f"use {_option(flag, 'sdpa')} on the CPU")  # fmt: skip


def check_backend(jobs: Iterable[Any], config: Any) -> None:
    """Refuse, before the plan, what the chosen backend (``--backend``) cannot run: an unknown
    backend (naming the closest), or a method, metric or model option it does not have
    (``ctxbench.backends.<name>.check``)."""
    backend = backends.get(config.backend)
    methods = [m for job in jobs for m in getattr(job.settings, "methods", ())]
    metrics = sorted({m for job in jobs for m in getattr(job.settings, "metrics", ()) or ()})
    backend.check(methods, metrics, config)


def _option(flag: str, value: object) -> str:
    """``--attn sdpa`` on the command line, ``attn = "sdpa"`` in a suite."""
    return f'{flag} "{value}"' if flag.endswith("=") else f"{flag} {value}"


# ---- what a method computes on the model, checked before the plan -----------------------------


def check_methods(jobs: Iterable[Any], geom: RopeGeometry, num_layers: int | None = None) -> None:
    """Raise :class:`UserError` for the first method of ``jobs`` whose numbers on a model of geometry
    ``geom`` (and ``num_layers`` layers) are not sensible, or whose parameters break a rule only the
    model shows (:func:`ctxbench.methods.check_derived`: ``dca`` ``local_window < chunk_size`` once
    ``chunk_size`` defaults to ``3L/4``, ``string`` ``local_value <= window``, ``ms-poe``'s
    ``first_layer`` past the model's layers, frequencies that overflow). The run used to find these
    after loading the weights (25-30 s) or in its first cell; ``execute`` calls this before the plan,
    on the config for a dry run as for a run, so both refuse in the same words."""
    for job in jobs:
        settings = job.settings
        lengths = getattr(settings, "lengths", None) or job.task.default_lengths(geom.trained_len)
        for method in getattr(settings, "methods", ()):
            layers = num_layers if method.attention is not None and method.attention.layers is not None else None
            for factor in (getattr(settings, "factors", ()) or (1.0,)) if method.uses_factor else (None,):
                check_derived(method, geom, factor, lengths, layers)


def check_methods_on_model(jobs: Sequence[Any], model: str, trust_remote_code: bool = False) -> None:
    """:func:`check_methods` on the model named ``model``, from its config alone (no weights, no torch):
    a local directory or ``.gguf`` file always (its geometry is cached, so a second plan reads it in
    milliseconds), a hub model when its config is already downloaded. A hub model that is not, and a
    config this cannot read, are checked by :func:`check_loaded` once the model has loaded."""
    if not any(_reads_input(m) for job in jobs for m in getattr(job.settings, "methods", ())):
        return  # none, native, logn: the model's own numbers; no config to read for them

    source = config_source(model)
    if source is None:
        return

    geom = load_geometry(source, trust_remote_code)
    needs_layers = any(m.attention is not None and m.attention.layers is not None
                       for job in jobs for m in getattr(job.settings, "methods", ()))  # fmt: skip
    check_methods(jobs, geom, _num_layers(source, trust_remote_code) if needs_layers else None)


def _reads_input(setting: MethodSetting) -> bool:
    """A method whose numbers depend on what the user gave: a parameter of one of its parts, or the factor."""
    return setting.uses_factor or any(part.declared for part in setting.parts)


def check_loaded(jobs: Iterable[Any], lm: Engine) -> None:
    """:func:`check_methods` on a loaded model: its geometry and its config's layers."""
    check_methods(jobs, lm.geometry, lm.num_layers())


def _num_layers(source: str, trust_remote_code: bool) -> int | None:
    """The number of decoder layers in a model's config (cached for a ``.gguf`` file)."""
    return load_counts(source, trust_remote_code)[0]


