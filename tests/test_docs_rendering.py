"""What the docs site renders from the code: the Python API page (mkdocstrings, Google-style
docstrings) and the CLI reference (every command's --help). The look of each page is checked by eye
on the screenshots ``scripts/screenshots.py`` takes (docs/screenshots/)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPHINX_ROLE = re.compile(r":(func|class|mod|data|meth|attr|exc|obj):`")


def _rendered_modules() -> list[str]:
    """The modules docs/api.md renders (``::: module`` lines)."""
    return re.findall(r"^::: ([\w.]+)", (ROOT / "docs/api.md").read_text(), flags=re.M)


def test_the_api_page_renders_no_sphinx_role_literally():
    """mkdocstrings (Google style) shows ``:func:`x``` as typed: the rendered docstrings use backticks."""
    found = []
    for name in _rendered_modules():
        module = importlib.import_module(name)
        docs = {name: module.__doc__ or ""}
        for attr, obj in vars(module).items():
            if getattr(obj, "__module__", None) == name and (inspect.isfunction(obj) or inspect.isclass(obj)):
                docs[f"{name}.{attr}"] = obj.__doc__ or ""
                if inspect.isclass(obj):
                    docs |= {
                        f"{name}.{attr}.{m}": f.__doc__ or ""
                        for m, f in vars(obj).items()
                        if inspect.isfunction(f)
                    }
        found += [where for where, doc in docs.items() if SPHINX_ROLE.search(doc)]
    assert _rendered_modules() and not found, found


def test_load_model_shows_the_parameters_of_the_loader_it_calls():
    from ctxbench.api import load_model
    from ctxbench.model.load import load

    mine, theirs = inspect.signature(load_model).parameters, inspect.signature(load).parameters
    assert [(p.name, p.default) for p in mine.values()] == [(p.name, p.default) for p in theirs.values()]
    assert not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in mine.values())
    documented = re.findall(r"^\s{8}(\w+):", load_model.__doc__, flags=re.M)
    assert documented == list(mine), "every parameter under Args:, in order"


def test_the_cli_reference_cuts_no_command_summary():
    """Click shortens a command's summary to the width left beside its name, ending it with '...'."""
    text = (ROOT / "docs/cli.md").read_text()
    block = text.split("[[[cog import docgen; docgen.cli_reference()]]]", 1)[1].split("[[[end]]]", 1)[0]
    cut = [ln for ln in block.splitlines() if ln.rstrip().endswith("...") and not ln.startswith("Usage:")]
    assert not cut, cut
