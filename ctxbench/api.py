"""Python API for notebooks; the CLI is a thin layer over the same runner path (docs/api.md has an
example)."""

# Docstrings here are Google style (mkdocs.yml: docstring_style google): Args/Returns sections,
# code in backticks, no Sphinx roles, so mkdocstrings renders them.

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ctxbench.backends import DEFAULT as DEFAULT_BACKEND
from ctxbench.defaults import (
    DEFAULT_ATTN,
    DEFAULT_DEVICE,
    DEFAULT_DTYPE,
    DEFAULT_FACTOR,
    DEFAULT_MODEL,
    DEFAULT_SEED,
)
from ctxbench.results import store
from ctxbench.results.store import COLUMNS
from ctxbench.runner.grid import Job, ModelConfig, execute
from ctxbench.runner.settings import build_settings, resolve_methods
from ctxbench.runner.suite import default_out, load_suite
from ctxbench.tasks import get
from ctxbench.tune.run import DEFAULT_GUARD, TuneSettings, check, show_plan, trials_for, tune

if TYPE_CHECKING:  # for the annotations only: importing ctxbench loads neither pandas nor torch
    import pandas as pd

    from ctxbench.backends.base import Engine


def load_model(
    spec: str = DEFAULT_MODEL,
    device: str = DEFAULT_DEVICE,
    dtype: str = DEFAULT_DTYPE,
    trust_remote_code: bool = False,
    attn: str | None = DEFAULT_ATTN,
    device_map: str | None = None,
    quantization: str | None = None,
) -> Engine:
    """Load a model and its tokenizer once, to pass to `run` or `sweep` as `model=`.

    The same loader as the CLI's default backend (transformers, `ctxbench.backends.hf`): the model is checked to have RoPE
    before its weights load, and nothing is downloaded unless `spec` is a hub id.

    Args:
        spec: an alias (`"smollm2-135m"`, the default), a local folder or GGUF file, or a hub id.
        device: `"auto"` (CUDA when present, else CPU), `"cpu"`, `"cuda"` or `"cuda:N"`.
        dtype: `"auto"`, `"float32"`, `"bfloat16"` or `"float16"`; `"auto"` on a CPU picks
            bfloat16 only where it is faster and scores as float32 does.
        trust_remote_code: run the model repository's own code (as transformers' flag).
        attn: the attention implementation (`"sdpa"`, `"eager"`, `"flash_attention_2"`).
        device_map: transformers' `device_map` (`"auto"` spreads a large model over GPUs).
        quantization: `"4bit"` or `"8bit"` (bitsandbytes), or `None`.

    Returns:
        The loaded model on transformers (`ctxbench.backends.hf.HfEngine`, a
            `ctxbench.backends.base.Engine`): model, tokenizer and their provenance.
    """
    return ModelConfig(model=spec, device=device, dtype=dtype, trust_remote_code=trust_remote_code, attn=attn, device_map=device_map,
                       quantization=quantization).load()  # fmt: skip


def run(
    task: str = "ppl",
    model: Engine | str = DEFAULT_MODEL,
    method: str | Sequence[str] = "none",
    factor: float | str | Sequence[float] = DEFAULT_FACTOR,
    length: int | str | Sequence[int | str] | None = None,
    params: dict | None = None,
    out: str | os.PathLike | None = None,
    resume: bool = True,
    seed: int = DEFAULT_SEED,
    device: str = DEFAULT_DEVICE,
    dtype: str = DEFAULT_DTYPE,
    backend: str = DEFAULT_BACKEND,
    show: bool = False,
    **options: Any,
) -> pd.DataFrame:
    """Run one task over methods x factors x lengths, as `ctxbench TASK` does.

    Values parse as the CLI's options do (`length="1k,2k"` or `[1024, 2048]`) and a bad one
    raises `ctxbench.errors.UserError` before the model loads.

    Args:
        task: a registered task's name (`"ppl"`, `"passkey"`, `"niah"`, ... or a plug-in's).
        model: a model from `load_model` (loaded once, reused), or a name to load for this call.
        method: one method or a comma list (`"none,yarn"`, `"ntk+logn"`), or a list.
        factor: the scale factor(s) (`2`, `"2,4"`).
        length: the length(s) in tokens (`"4k"`, `"1k,2k"`); `None`: the task's default grid.
        params: method parameters, checked as `--param` is (`{"beta_fast": 16}`).
        out: a CSV to append the rows to and resume from; `None` keeps them in memory only.
        resume: skip the cells `out` already holds.
        seed: the run's seed (trial `t` is the same prompt for every method).
        device: as in `load_model`, when `model` is a name.
        dtype: as in `load_model`, when `model` is a name.
        backend: `"hf"` (transformers, the default), `"vllm"` or `"llamacpp"` (see `ctxbench.backends`).
        show: print the plan, progress and summary table as the CLI does.
        **options: the task's own options (`docs=2` for ppl, `trials=8` for passkey).

    Returns:
        The tidy rows of every cell (this run's and, with `out`, those resumed), as a pandas
            DataFrame with the results file's columns.
    """

    spec = get(task)
    settings = build_settings(spec, resolve_methods(method, params), factor, length, options)
    target = model if not isinstance(model, str) else ModelConfig(model=model, device=device, dtype=dtype, backend=backend)
    outcome = execute([Job(spec, settings)], target, out, resume, seed, console=_console(show))
    return to_frame(outcome.records)


def tune_method(method: str, target: int, out: str | os.PathLike, *, objective: str = "nll", budget: int | None = None,
                minutes: float | None = None, guard: float | None = None, docs: int = 4, dataset: str | None = None,
                split: str = "test", text_column: str = "text", params=(), sampler: str = "auto", export: str | None = None, model=DEFAULT_MODEL, seed: int = DEFAULT_SEED,
                resume: bool = True, device: str = DEFAULT_DEVICE, dtype: str = DEFAULT_DTYPE, attn: str = DEFAULT_ATTN, backend: str = DEFAULT_BACKEND,
                trust_remote_code: bool = False, dry_run: bool = False, console=None):  # fmt: skip
    """Search a method's parameters for a model at a target length, then judge the winner on held-out data, as `ctxbench tune` does.

    Args:
        method: the method whose declared tuning ranges are searched (`"yarn"`, `"self-extend"`).
        target: the length to tune for, in tokens (above the model's trained length).
        out: the folder of the search (`trials.csv`, `verdict.csv`, the plot); a search there resumes.
        objective: `"nll"`, `"needle"` or `"both"`.
        budget: at most this many trials; `minutes`: at most this long.
        model: a model name (loaded once here) or a model from `load_model`.
        dataset, split, text_column: the documents (default: the built-in corpus), as for `run_ppl`.
        dry_run: only check and price the search.

    Returns:
        A `ctxbench.tune.run.TuneOutcome` (`None` for a dry run).
    """
    settings = TuneSettings(method=method, target=int(target), out=str(out), objective=objective, trials=budget, minutes=minutes,
                            guard=DEFAULT_GUARD if guard is None else guard, docs=docs, dataset=dataset, split=split,
                            text_column=text_column, seed=seed,
                            sampler=sampler, export=export, only=tuple(params), resume=resume)  # fmt: skip
    config = model if not isinstance(model, str) else ModelConfig(model=model, device=device, dtype=dtype, attn=attn, backend=backend,
                                                                   trust_remote_code=trust_remote_code)  # fmt: skip
    if dry_run:
        space = check(settings, config)
        if console is not None:
            show_plan(console, space, settings, trials_for(settings, space, config), config)
        return None
    return tune(settings, config, console)


def sweep(suite: str | os.PathLike, out: str | os.PathLike | None = None, resume: bool = True, model: Engine | None = None,
          show: bool = False) -> pd.DataFrame:  # fmt: skip
    """Run every job of a suite with the model loaded once, as `ctxbench sweep` does.

    Args:
        suite: a built-in suite's name (`"quick"`, `"nightly"`) or a suite file's path.
        out: the CSV to write and resume from; `None`: the suite's own `out` (its folder made).
        resume: skip the cells the output file already holds.
        model: a model from `load_model` to use instead of the suite's.
        show: print the plan, progress and summary tables as the CLI does.

    Returns:
        Every row of the suite's cells, as a pandas DataFrame.
    """

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
    from rich.console import Console  # start-up: rich only where it runs

    return Console()


def to_frame(records: list[dict]) -> pd.DataFrame:
    """Result records (dicts of strings, as the results file holds them) as a typed DataFrame.

    Args:
        records: rows with the results file's columns.

    Returns:
        A pandas DataFrame with every column of the results file; `factor`, `value` and `seconds`
            as floats, `length`, `tokens` and `seed` as nullable integers.
    """
    import pandas as pd  # start-up: pandas only where it runs

    frame = pd.DataFrame.from_records(records, columns=COLUMNS) if records else pd.DataFrame(columns=COLUMNS)
    for col in ("factor", "value", "seconds"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    for col in ("length", "tokens", "seed"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    return frame


def load_results(*paths: str | os.PathLike) -> pd.DataFrame:
    """Read one or more ctxbench results files into one DataFrame.

    Every file goes through the one validated reader `report`, `rank` and `compare` use
    (`ctxbench.results.store.load_results`): a ctxbench header and typed key columns, and no value
    that no run can produce; a bad file raises `ctxbench.errors.UserError` naming it. The cells a
    killed run left partial are left out, as those commands leave them out.

    Args:
        *paths: results CSV files.

    Returns:
        Their rows, concatenated, as `to_frame` returns them.
    """

    records = []
    for path in paths:
        records += store.load_results(path)[0]
    return to_frame(records)
