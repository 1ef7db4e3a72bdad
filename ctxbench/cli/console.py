"""The CLI's two rich consoles: ``console`` (stdout: tables, plans, results) and ``err`` (stderr:
notes, errors). Made once at import; every command prints through them."""

from __future__ import annotations

import os
import sys

from rich.console import Console

PIPED_WIDTH = 250


def _stdout_console() -> Console:
    """Rich cuts table cells to fit 80 columns when stdout is not a terminal (a CI log, ``> file``),
    which turns "100% [72%–100%] n=10" into "[72%–10…"; piped output gets room for every cell
    instead, unless COLUMNS says otherwise."""
    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(width=PIPED_WIDTH) if piped else Console()


console = _stdout_console()
err = Console(stderr=True, highlight=False, soft_wrap=True)
