"""Docs that restate code are checked against it: the README's column list and command table."""

from __future__ import annotations

import re
from pathlib import Path

from ctxbench.results import COLUMNS

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_the_readme_lists_the_results_columns_in_their_order():
    text = README.split("One row per measured value, columns in this order:", 1)[1].split(".", 1)[0]
    assert re.findall(r"[a-z_]+", text) == COLUMNS


def test_the_readme_command_table_has_every_command():
    import typer.main

    from ctxbench.cli import app
    from ctxbench.tasks import registry

    plugins = {n for n, t in registry().items() if not getattr(t.prepare, "func", t.prepare).__module__.startswith("ctxbench.")}
    commands = set(typer.main.get_command(app).commands) - plugins
    shown = set(re.findall(r"^\| `ctxbench ([a-z]+)", README, flags=re.M))
    shown |= {"vt", "cwe", "fwe"}  # one row: `ctxbench vt` / `cwe` / `fwe`
    assert commands <= shown, sorted(commands - shown)
