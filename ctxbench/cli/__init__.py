"""The ``ctxbench`` command line: parses values and calls the runner or the API; no logic of its own.

One module per command or family, each listed once in :data:`COMMANDS` (the order ``ctxbench
--help`` shows them in); a command for every registered task follows (:mod:`ctxbench.cli.tasks`).
Options the commands share, and the one builder of the runner's settings from them, are in
:mod:`ctxbench.cli.options`.

User errors print one line ``error: <what> — <how to fix>`` on stderr and exit 2; bugs keep
their traceback and exit 1.
"""

from __future__ import annotations

import importlib
import shlex
import signal
import sys
from typing import NamedTuple

import typer

from ctxbench.cli import tasks
from ctxbench.cli.console import console, err
from ctxbench.cli.options import refuse_empty
from ctxbench.errors import UserError
from ctxbench.version import __version__

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
    help="Measure what RoPE context-extension methods do to perplexity and retrieval at each length.",
)


class Command(NamedTuple):
    """Where a command is defined: ``ctxbench.cli.<module>.<attr>``, a function (the command) or a
    ``typer.Typer`` (a group of subcommands); ``summary``: its line in ``ctxbench --help`` where
    the start of its docstring would be cut short."""

    module: str
    attr: str
    summary: str | None = None


COMMANDS: dict[str, Command] = {
    "methods": Command("methods", "methods"),
    "freqs": Command("methods", "freqs"),
    "sweep": Command("sweep", "sweep"),
    "suites": Command("sweep", "suites"),
    "compare": Command("compare", "compare", "Per-cell change between two results files; exit 1 if anything got worse beyond noise (the CI gate)."),
    "report": Command("results", "report", "The pivot (method label x length per task and factor) as tables with intervals, in any format, and PNG plots."),
    "rank": Command("results", "rank", "Methods at one length, best first, and which pairs the paired tests separate (Holm-adjusted)."),
    "show-prompt": Command("results", "show_prompt", "The exact prompt of one trial of a results file (ROW-ID: FILE@KEY as report --html names it, or FILE:N)."),
    "export": Command("methods", "export"),
    "tune": Command("tune", "tune", "Search a method's parameters for this model at --target; a paired held-out verdict against the defaults and none."),
    "data": Command("data", "app"),
}


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"ctxbench {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="print ctxbench's version and exit", is_eager=True, expose_value=False,
                                 callback=_print_version),  # fmt: skip
) -> None:
    """Options of ``ctxbench`` itself (before any command)."""


def _register() -> None:
    """Every command of :data:`COMMANDS`, then one per registered task; each refuses an empty value
    (:func:`ctxbench.cli.options.refuse_empty`)."""
    for name, command in COMMANDS.items():
        target = getattr(importlib.import_module(f"ctxbench.cli.{command.module}"), command.attr)
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=name)
        else:
            app.command(name, short_help=command.summary)(target)
    tasks.register(app)
    groups = [g.typer_instance for g in app.registered_groups if g.typer_instance is not None]  # (add_typer sets each)
    for info in [*app.registered_commands, *(c for g in groups for c in g.registered_commands)]:
        info.callback = refuse_empty(info.callback)


_register()


class _Terminated(KeyboardInterrupt):
    signal_name = "SIGTERM"


def _on_sigterm(signum, frame) -> None:
    raise _Terminated()


def _resume_command() -> str:
    """The command line that was run, as the one that resumes it (without --no-resume)."""
    args = [a for a in sys.argv[1:] if a != "--no-resume"]
    return "ctxbench " + shlex.join(args)


def main() -> None:
    """Entry point: user errors -> one line and exit 2; SIGINT/SIGTERM -> one line saying what is
    kept and how to resume (exit 130 / 143)."""
    from ctxbench.runner.grid import Interrupted  # start-up: loads filelock

    for stream in (sys.stdout, sys.stderr):  # a terminal that cannot show "—" or "θ" must not turn output into a traceback
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = app(standalone_mode=False)  # returns the code of a typer.Exit in this mode
        if isinstance(code, int) and code:
            sys.exit(code)
    except Interrupted as exc:
        where = f"kept in {exc.out}" if exc.out is not None else "not saved (no --out)"
        err.print(f"interrupted ({exc.signal_name}): {exc.kept} finished cell(s) {where}; resume with: {_resume_command()}",
                  markup=False)  # fmt: skip
        sys.exit(143 if exc.signal_name == "SIGTERM" else 130)
    except KeyboardInterrupt as exc:  # before or after a run: nothing half-written
        err.print(f"interrupted ({getattr(exc, 'signal_name', 'SIGINT')}): no results were being written", markup=False)
        sys.exit(143 if isinstance(exc, _Terminated) else 130)
    except UserError as exc:
        err.print(exc.line(), markup=False)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted", markup=False)
        sys.exit(130)
    except Exception as exc:
        # typer's (vendored) click usage errors: unknown option, bad value, missing argument.
        if type(exc).__name__ == "NoArgsIsHelpError" and hasattr(exc, "format_message"):
            console.print(exc.format_message(), markup=False, highlight=False)
            sys.exit(0)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            ctx = getattr(exc, "ctx", None)
            command = f"ctxbench {ctx.info_name}" if ctx is not None and ctx.info_name != "ctxbench" else "ctxbench"
            err.print(f"error: {exc.format_message()} — see `{command} --help`", markup=False)
            sys.exit(2 if exc.exit_code in (1, 2) else exc.exit_code)
        raise
