"""Python API for notebooks; the CLI is a thin layer over the same runner path.

    import ctxbench
    lm = ctxbench.load_model("smollm2-135m")
    df = ctxbench.run("ppl", lm, method="none,ntk,yarn", factor=2, length="1k,2k", docs=2)
    df = ctxbench.sweep("quick", out="quick.csv")   # a built-in suite by name, or a file; shards under torchrun like the CLI
    df = ctxbench.load_results("results/ppl-smollm2-factor2.csv")
    outcome = ctxbench.api.tune_method("yarn", 16384, "tune-yarn", budget=8)   # ctxbench tune (docs/tune.md)
"""

from __future__ import annotations

import os

from ctxbench.defaults import DEFAULT_FACTOR, DEFAULT_MODEL
from ctxbench.results.store import COLUMNS, read_records
from ctxbench.runner.grid import Job, ModelConfig, execute
from ctxbench.runner.settings import build_settings, resolve_methods
from ctxbench.runner.suite import default_out, load_suite
from ctxbench.tasks import get


def load_model(*args, **kwargs):
    """Load a model once (see :func:`ctxbench.model.load.load`); pass it to :func:`run` or :func:`sweep`."""
    from ctxbench.model.load import load

    return load(*args, **kwargs)


def run(
    task: str = "ppl",
    model=DEFAULT_MODEL,
    method="none",
    factor=DEFAULT_FACTOR,
    length=None,
    params: dict | None = None,
    out: str | os.PathLike | None = None,
    resume: bool = True,
    seed: int = 0,
    device: str = "auto",
    dtype: str = "auto",
    backend: str = "hf",
    show: bool = False,
    **options,
):
    """Run one task over methods x factors x lengths; returns the tidy rows as a DataFrame.
    ``options`` are the task's own (e.g. ``docs=2`` for ppl, ``trials=8`` for passkey);
    ``backend="vllm"`` runs it on vLLM (:mod:`ctxbench.backends`); ``show=True`` prints the plan, progress and summary as the CLI does."""

    spec = get(task)
    settings = build_settings(spec, resolve_methods(method, params), factor, length, options)
    target = model if not isinstance(model, str) else ModelConfig(model=model, device=device, dtype=dtype, backend=backend)
    outcome = execute([Job(spec, settings)], target, out, resume, seed, console=_console(show))
    return to_frame(outcome.records)


def tune_method(method: str, target: int, out: str | os.PathLike, *, objective: str = "nll", budget: int | None = None,
                minutes: float | None = None, guard: float | None = None, docs: int = 4, dataset: str | None = None,
                params=(), sampler: str = "auto", export: str | None = None, model=DEFAULT_MODEL, seed: int = 0,
                resume: bool = True, device: str = "auto", dtype: str = "auto", attn: str = "sdpa", backend: str = "hf",
                trust_remote_code: bool = False, dry_run: bool = False, console=None):  # fmt: skip
    """``ctxbench tune``: search ``method``'s parameters for ``model`` at ``target`` tokens, then the
    held-out verdict; returns a :class:`ctxbench.tune.run.TuneOutcome` (None for ``dry_run``).
    ``model`` is a name (loaded once here) or an already loaded model."""
    from ctxbench.tune.run import DEFAULT_GUARD, TuneSettings, check, show_plan, trials_for, tune

    settings = TuneSettings(method=method, target=int(target), out=str(out), objective=objective, trials=budget, minutes=minutes,
                            guard=DEFAULT_GUARD if guard is None else guard, docs=docs, dataset=dataset, seed=seed,
                            sampler=sampler, export=export, only=tuple(params), resume=resume)  # fmt: skip
    config = model if not isinstance(model, str) else ModelConfig(model=model, device=device, dtype=dtype, attn=attn, backend=backend,
                                                                   trust_remote_code=trust_remote_code)  # fmt: skip
    if dry_run:
        space = check(settings, config)
        if console is not None:
            show_plan(console, space, settings, trials_for(settings, space, config), config)
        return None
    return tune(settings, config, console)


def sweep(suite: str | os.PathLike, out: str | os.PathLike | None = None, resume: bool = True, model=None, show: bool = False):
    """Run every job of a suite (a built-in one by name, e.g. ``"nightly"``, or a file; model loaded
    once, or the given one); returns all rows. Without ``out``, the suite's own ``out`` (its folder made)."""

    spec = load_suite(suite)
    target = model or ModelConfig(model=spec.model, device=spec.device, dtype=spec.dtype, attn=spec.attn,
                                  trust_remote_code=spec.trust_remote_code, backend=spec.backend,
                                  tensor_parallel=spec.tensor_parallel)  # fmt: skip
    own = default_out(spec, make=True)[0] if out is None else None
    outcome = execute(list(spec.jobs), target, out if out is not None else own, resume, spec.seed, console=_console(show))
    return to_frame(outcome.records)


def _console(show: bool):
    if not show:
        return None
    from rich.console import Console

    return Console()


def to_frame(records: list[dict]):
    import pandas as pd


    frame = pd.DataFrame.from_records(records, columns=COLUMNS) if records else pd.DataFrame(columns=COLUMNS)
    for col in ("factor", "value", "seconds"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    for col in ("length", "tokens", "seed"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    return frame


def load_results(*paths: str | os.PathLike):
    """Read one or more ctxbench CSVs (schema-checked) into one DataFrame."""

    records = []
    for path in paths:
        records += read_records(path)
    return to_frame(records)
