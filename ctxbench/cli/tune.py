"""``ctxbench tune``: search a method's parameters for a model at a target length, then a paired
verdict on held-out documents (through :func:`ctxbench.api.tune_method`). Its defaults are
:class:`ctxbench.tune.run.TuneSettings`'s."""

from __future__ import annotations

import math
import os
from dataclasses import fields
from typing import Any

import typer

from ctxbench.cli.console import console
from ctxbench.cli.options import ATTN, BACKEND, DEVICE, DTYPE, MODEL, RESUME, SEED, TRUST
from ctxbench.parsing import parse_length, split_list
from ctxbench.tune.display import show_outcome
from ctxbench.tune.run import TuneSettings

_DEFAULT: dict[str, Any] = {f.name: f.default for f in fields(TuneSettings)}


def tune(
    method: str = typer.Option(..., "--method", help="the method to tune: one whose parameters declare tuning ranges, e.g. yarn, self-extend, llama3, string, dca"),
    target: str = typer.Option(..., "--target", "-t", help="the length to deploy at, past the model's trained length L, e.g. 16k"),
    objective: str = typer.Option(_DEFAULT["objective"], "--objective", help="nll (NLL past L at the target) | needle (answer NLL of needles) | both"),
    budget: int | None = typer.Option(None, "--budget", help="trials, the published defaults included"),
    minutes: float | None = typer.Option(None, "--minutes", help="wall-clock budget of the search and its verdict (the search leaves time for the verdict; loading the model is not counted)"),
    guard: float = typer.Option(_DEFAULT["guard"], "--guard", help="most NLL (nats/token) at L/2 above none's a setting may cost "
                               f"({_DEFAULT['guard']:g}: perplexity x{math.exp(_DEFAULT['guard']):.2f})"),
    out: str = typer.Option(..., "--out", "-o", help="directory for trials.csv, verdict.csv, summary.json, trials.png, niah.toml"),
    docs: int = typer.Option(_DEFAULT["docs"], "--docs", help="documents of at least the target's tokens, split by hash into tuning and held-out"),
    dataset: str | None = typer.Option(None, "--dataset", help="HF dataset or local file/dir (default: the built-in corpus)"),
    split: str = typer.Option(_DEFAULT["split"], "--split", help=f"the dataset's split (default {_DEFAULT['split']})"),
    text_column: str = typer.Option(_DEFAULT["text_column"], "--text-column", help=f"the dataset's column holding the text (default {_DEFAULT['text_column']})"),
    params: str | None = typer.Option(None, "--params", help="only these of the method's tunable parameters (comma list; factor included)"),
    sampler: str = typer.Option(_DEFAULT["sampler"], "--sampler", help="auto (tpe with optuna installed, else halving) | halving | tpe"),
    export_to: str | None = typer.Option(None, "--export", help="print the winner as an engine's settings: transformers | vllm | llamacpp | json"),
    model: str = MODEL,
    seed: int = SEED,
    resume: bool = RESUME,
    device: str = DEVICE,
    dtype: str = DTYPE,
    attn: str = ATTN,
    backend: str = BACKEND,
    trust_remote_code: bool = TRUST,
    dry_run: bool = typer.Option(False, "--dry-run", help="print the space and the priced plan; load nothing"),
) -> None:
    """Search a method's parameters for this model at --target, then a paired verdict on held-out
    documents (winner vs defaults vs none, at the target and at L/2)."""
    from ctxbench.api import tune_method  # start-up: loads filelock, tomllib
    try:
        outcome = tune_method(method, parse_length(target, "--target"), out, objective=objective, budget=budget, minutes=minutes,
                              guard=guard, docs=docs, dataset=dataset, split=split, text_column=text_column,
                              params=split_list(params, "--params") if params else (), sampler=sampler, export=export_to, model=model, seed=seed, resume=resume, device=device, dtype=dtype,
                              attn=attn, backend=backend, trust_remote_code=trust_remote_code, dry_run=dry_run,
                              console=console)  # fmt: skip
    except KeyboardInterrupt as exc:  # every finished evaluation is already in DIR/trials.csv (written as each lands)
        from ctxbench.runner.grid import Interrupted  # start-up: loads filelock
        from ctxbench.tune.store import evaluations_in  # only on Ctrl-C

        trials = os.path.join(out, "trials.csv")
        raise Interrupted(evaluations_in(trials), trials if os.path.exists(trials) else None,
                          getattr(exc, "signal_name", "SIGINT")) from None  # fmt: skip
    if outcome is not None:
        show_outcome(console, outcome)

