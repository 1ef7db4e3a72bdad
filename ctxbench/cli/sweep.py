"""``ctxbench sweep`` (every cell of a suite, the model loaded once) and ``ctxbench suites`` (the
built-in suites)."""

from __future__ import annotations

import sys
from typing import Any

import typer
from rich.table import Table

from ctxbench.cli.console import console
from ctxbench.cli.options import RESUME, exit_if_failed, run
from ctxbench.errors import unknown
from ctxbench.runner.plan import plan_table


def sweep(
    suite: str = typer.Argument(..., help="a built-in suite's name (see `ctxbench suites`), e.g. quick, or a TOML suite file"),
    out: str | None = typer.Option(None, "--out", "-o", help="results CSV (default: the suite's `out`, else results.csv)"),
    resume: bool = RESUME,
    dry_run: bool = typer.Option(False, "--dry-run", help="print the grid and a rough cost; load nothing"),
    device: str | None = typer.Option(None, "--device", help="override the suite's device"),
    backend: str | None = typer.Option(None, "--backend", help="override the suite's backend: hf | vllm"),
) -> None:
    """Every cell of a suite (a built-in one by name, or a file), model loaded once, resumable."""
    from ctxbench.runner.suite import default_out, load_suite  # start-up: loads filelock, tomllib

    spec = load_suite(suite)
    own, folder_exists = default_out(spec, make=not dry_run) if out is None else (None, True)
    target = out or own or "results.csv"
    values: dict[str, Any] = dict(model=spec.model, device=device or spec.device, dtype=spec.dtype, attn=spec.attn,
                  trust_remote_code=spec.trust_remote_code, backend=backend or spec.backend,
                  tensor_parallel=spec.tensor_parallel, resume=resume, seed=spec.seed, dry_run=dry_run)  # fmt: skip

    def grid_table() -> None:  # a dry run's table per task and method, once the runner's checks pass
        _plan_table(spec.jobs, spec.model, str(suite), target, values["device"], spec.dtype)
        if not folder_exists:  # nothing to check there yet: a run makes the suite's folder
            console.print(f"[dim]results -> {target} (its folder is made when the suite runs)[/]", highlight=False)

    exit_if_failed(run(list(spec.jobs), values, target if folder_exists else None, before_plan=grid_table))


def _plan_table(jobs, model: str, suite: str, target: str, device: str, dtype: str) -> None:
    plan = plan_table(jobs, model, device=device, dtype=dtype)
    table = Table(title=f"{suite}: {model} -> {target} (rough cost: {plan.basis})")
    for col in ("task", "method", "cells", "tokens", "~seconds"):
        table.add_column(col, justify="left" if col in ("task", "method") else "right")
    for job in plan.jobs:
        for what, cells, tokens, seconds in job.rows:
            table.add_row(job.task, what, str(cells), f"{tokens:,}", f"{seconds:,.0f}" if plan.timed else "—")
    console.print(table)


def suites(name: str | None = typer.Argument(None, help="a built-in suite to print as TOML (to start a suite file of your own)")) -> None:
    """The built-in suites, shipped with ctxbench: run one with `ctxbench sweep NAME`."""
    from ctxbench.runner.suite import (  # start-up: loads filelock, tomllib
        builtin_suites,
        describe,
        load_suite,
    )

    found = builtin_suites()
    if name is not None:
        if name.removesuffix(".toml") not in found:
            raise unknown("suite", name, found)
        sys.stdout.write(found[name.removesuffix(".toml")].read_text())
        return
    table = Table(title="built-in suites: ctxbench sweep NAME runs one, ctxbench suites NAME prints it")
    for col in ("suite", "jobs", "tasks", "methods", "model", "description"):
        table.add_column(col, justify="right" if col in ("jobs", "methods") else "left")
    for key, path in found.items():
        spec = load_suite(path)
        methods = {m.label for job in spec.jobs for m in job.settings.methods}
        table.add_row(key, str(len(spec.jobs)), ", ".join(job.task.name for job in spec.jobs), str(len(methods)), spec.model,
                      describe(spec))  # fmt: skip
    console.print(table)
