"""``ctxbench NAME`` for every registered task (``ppl``, ``passkey``, ``niah``, ... and plug-ins):
the shared options (:mod:`ctxbench.cli.options`) plus the task's own, built from its
:class:`ctxbench.tasks.base.Option` declarations, with its old spellings as hidden aliases."""

from __future__ import annotations

import inspect

import typer

from ctxbench.cli.console import console, err
from ctxbench.cli.options import (
    ATTN,
    BACKEND,
    DEVICE,
    DEVICE_MAP,
    DRY_RUN,
    DTYPE,
    FACTOR,
    METHOD,
    MODEL,
    PARAM,
    QUANT,
    RESUME,
    SEED,
    TENSOR_PARALLEL,
    TRUST,
    exit_if_failed,
    run,
)
from ctxbench.errors import UserError
from ctxbench.parsing import parse_params
from ctxbench.runner.settings import build_settings, resolve_methods
from ctxbench.tasks import registry
from ctxbench.tasks.plots import check_plot_dir, write_plots


def register(app: typer.Typer) -> None:
    """A command on ``app`` for every registered task; where the registry cannot load, one line
    saying why, and the other commands still work."""
    try:
        tasks = registry()
    except UserError as exc:  # still let `methods`, `report`... work; say why task commands are missing
        err.print(exc.line(), markup=False)
        return
    for task in tasks.values():
        _task_command(app, task)


def _times_L(n: int, trained_len: int = 64) -> str:
    """A task's default length as its --help states it: L/4, L/2, L, 2L, 4L of the trained length L."""
    return "L" if n == trained_len else (f"{n // trained_len}L" if n > trained_len else f"L/{trained_len // n}")


def _summary(help_text: str, width: int = 110) -> str | None:
    """A task's one-line summary in ``ctxbench --help``: its help, or the clause before its first
    parenthesis where the whole would not fit beside the command's name (Click would cut it with '...')."""
    text = " ".join(help_text.split())
    return None if len(text) <= width else text.split(" (", 1)[0].rstrip(" :;,.")


def _task_command(app: typer.Typer, task) -> None:
    """Register ``ctxbench NAME`` for a task: the shared options plus the task's own."""
    P = inspect.Parameter

    def opt(name, default, *flags, help, annotation=str | None, **kw):  # noqa: A002
        return P(name, P.KEYWORD_ONLY, default=typer.Option(default, *flags, help=help, **kw), annotation=annotation)

    params = [
        P("model", P.KEYWORD_ONLY, default=MODEL, annotation=str),
        P("method", P.KEYWORD_ONLY, default=METHOD, annotation=str),
        P("factor", P.KEYWORD_ONLY, default=FACTOR, annotation=str),
        opt("length", None, "--len", "-l", help="comma list of lengths in tokens (16k = 16384); default: "
            + ", ".join(_times_L(n) for n in task.default_lengths(64)) + " of the model's trained length L"),
        P("param", P.KEYWORD_ONLY, default=PARAM, annotation=list[str] | None),
    ]
    for option in task.options:
        if option.is_flag:
            params.append(opt(option.name, None, f"{option.cli_flag}/--no-{option.cli_flag[2:]}", help=option.help,
                              annotation=bool | None))  # fmt: skip
        elif option.repeatable:  # every value given reaches parse, none is dropped for the last
            params.append(opt(option.name, None, option.cli_flag, help=option.help, metavar=option.metavar, annotation=list[str] | None))
        else:
            params.append(opt(option.name, None, option.cli_flag, help=option.help, metavar=option.metavar))
        for i, alias in enumerate(option.aliases):  # an old spelling: accepted, hidden, with a deprecation note
            params.append(opt(f"{option.name}__alias{i}", None, alias, help=f"deprecated spelling of {option.cli_flag}", hidden=True))
    params += [
        opt("out", f"ctxbench-{task.name}.csv", "--out", "-o", help="results CSV (appended; finished cells are skipped)", annotation=str),
        opt("plot", None, "--plot", help="directory for PNG plots of this run's results"),
        P("dry_run", P.KEYWORD_ONLY, default=DRY_RUN, annotation=bool),
        P("seed", P.KEYWORD_ONLY, default=SEED, annotation=int),
        P("resume", P.KEYWORD_ONLY, default=RESUME, annotation=bool),
        P("device", P.KEYWORD_ONLY, default=DEVICE, annotation=str),
        P("dtype", P.KEYWORD_ONLY, default=DTYPE, annotation=str),
        P("attn", P.KEYWORD_ONLY, default=ATTN, annotation=str),
        P("trust_remote_code", P.KEYWORD_ONLY, default=TRUST, annotation=bool),
        P("device_map", P.KEYWORD_ONLY, default=DEVICE_MAP, annotation=str | None),
        P("quantization", P.KEYWORD_ONLY, default=QUANT, annotation=str | None),
        P("backend", P.KEYWORD_ONLY, default=BACKEND, annotation=str),
        P("tensor_parallel", P.KEYWORD_ONLY, default=TENSOR_PARALLEL, annotation=int),
    ]

    def command(**values) -> None:
        _run_task_command(task, values)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # typer reads it (functions take any attribute)
    command.__doc__ = task.help
    command.__name__ = task.name
    app.command(name=task.name, help=task.help, short_help=_summary(task.help))(command)


def _run_task_command(task, values: dict) -> None:
    """The task's settings from its options (:func:`ctxbench.runner.settings.build_settings`), then
    the runner (:func:`ctxbench.cli.options.run`); ``--plot``: this run's plots afterwards, before a
    run with failed cells exits 1."""
    from ctxbench.runner.grid import Job  # start-up: loads filelock
    options = {o.name: _with_aliases(o, values) for o in task.options}
    methods = resolve_methods(values["method"], parse_params(values["param"]))
    settings = build_settings(task, methods, values["factor"], values["length"], options)
    if values["plot"]:
        check_plot_dir(values["plot"])
    out = values["out"]
    outcome = run([Job(task, settings)], values, out)
    if values["plot"] and not values["dry_run"]:
        from ctxbench.results.store import read_records  # start-up: loads filelock
        for path in write_plots(read_records(out), values["plot"]):
            console.print(f"plot: {path}")
    exit_if_failed(outcome)


def _with_aliases(option, values: dict):
    """An option's raw value, from its flag or one of its old spellings (not both)."""
    value = values[option.name]
    for i, alias in enumerate(option.aliases):
        old = values.get(f"{option.name}__alias{i}")
        if old is None:
            continue
        if value is not None:
            raise UserError(f"give {option.cli_flag} or {alias}, not both", f"{alias} is the old spelling of {option.cli_flag}")
        value = option.alias_parse(old) if option.alias_parse else old  # a bad value: its error alone, no note
        err.print(f"note: {alias} is deprecated and will be removed in a later release; use {option.cli_flag}", markup=False)
    return value
