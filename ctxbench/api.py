"""Python API for notebooks; the CLI is a thin layer over it.

    import ctxbench
    lm = ctxbench.load_model("smollm2-135m")
    df = ctxbench.run("ppl", lm, method="none,ntk,yarn", factor=2, length="1k,2k", docs=2)
    df = ctxbench.load_results("results/ppl-smollm2-factor2.csv")
"""

from __future__ import annotations

import dataclasses
import os

import pandas as pd

from .errors import UserError
from .methods import MethodSetting, resolve
from .models import DEFAULT_MODEL, LoadedModel, load
from .parsing import parse_factors, parse_lengths, split_list
from .results import COLUMNS, read_records
from .runner import RunResult, run_task
from .tasks import TASKS

load_model = load


def resolve_methods(method, params: dict | None = None) -> list[MethodSetting]:
    """``"none,ntk+logn"`` or a list -> resolved settings. ``params`` is either one dict shared by
    the methods (each gets the keys it takes; a key none takes is an error) or ``{method: {...}}``."""
    params = params or {}
    names = split_list(method)
    per_method = bool(params) and all(isinstance(v, dict) for v in params.values())
    if not per_method:
        _check_params_used(names, params)
    settings = []
    for name in names:
        if per_method:
            own = params.get(name, {})
        else:
            known = dict(resolve(name).params)
            own = {k: v for k, v in params.items() if k in known}
        settings.append(resolve(name, own))
    return list(dict.fromkeys(settings))


def _check_params_used(names: list[str], params: dict) -> None:
    for key in params:
        if not any(key in dict(resolve(n).params) for n in names):
            resolve(names[0], {key: params[key]})  # raises "unknown parameter ... did you mean"
            raise UserError(f"parameter '{key}' is not used by any of {', '.join(names)}", "drop it or add a method that takes it")


def build_settings(task: str, method="none", factor=1.0, length=None, params: dict | None = None, **options):
    """Typed task settings from loose values (strings like ``"2k,4k"`` accepted)."""
    if task not in TASKS:
        from .errors import unknown

        raise unknown("task", task, TASKS)
    methods = resolve_methods(method, params)
    factors = parse_factors(factor)
    lengths = parse_lengths(length) if length not in (None, "", []) else None
    cls = TASKS[task].Settings
    names = {f.name for f in dataclasses.fields(cls)}
    unknown_opts = [k for k in options if k not in names]
    if unknown_opts:
        from .errors import unknown

        raise unknown(f"option for task {task}", unknown_opts[0], sorted(names - {"methods", "factors", "lengths"}))
    return cls(methods=methods, factors=factors, lengths=lengths, **{k: v for k, v in options.items() if v is not None})


def run(
    task: str = "ppl",
    model: str | LoadedModel = DEFAULT_MODEL,
    method="none",
    factor=1.0,
    length=None,
    params: dict | None = None,
    out: str | os.PathLike | None = None,
    resume: bool = True,
    seed: int = 0,
    device: str = "auto",
    dtype: str = "auto",
    **options,
) -> pd.DataFrame:
    """Run one task over methods x factors x lengths; returns the tidy rows as a DataFrame."""
    settings = build_settings(task, method, factor, length, params, **options)
    lm = model if isinstance(model, LoadedModel) else load(model, device=device, dtype=dtype)
    result: RunResult = run_task(lm, task, settings, out=out, resume=resume, seed=seed)
    return to_frame(result.records)


def sweep(suite: str | os.PathLike, out: str | os.PathLike | None = None, resume: bool = True, model: LoadedModel | None = None) -> pd.DataFrame:
    """Run every job of a suite file (model loaded once, or the given one); returns all rows."""
    from .suite import load_suite

    spec = load_suite(suite)
    lm = model or load(spec.model, device=spec.device, dtype=spec.dtype, trust_remote_code=spec.trust_remote_code, attn=spec.attn)
    target = out if out is not None else spec.out
    records = []
    for task, settings in spec.jobs:
        records += run_task(lm, task, settings, out=target, resume=resume, seed=spec.seed).records
    return to_frame(records)


def to_frame(records: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(records, columns=COLUMNS) if records else pd.DataFrame(columns=COLUMNS)
    for col in ("factor", "value", "seconds"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    for col in ("length", "tokens", "seed"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    return frame


def load_results(*paths: str | os.PathLike) -> pd.DataFrame:
    """Read one or more ctxbench CSVs (schema-checked) into one DataFrame."""
    records = []
    for path in paths:
        records += read_records(path)
    return to_frame(records)
