"""The README's method table says what the registry holds: one row per method, its aliases, and
the parameters it declares (a method added, renamed or given a parameter without the README fails)."""

from __future__ import annotations

import re
from pathlib import Path

from ctxbench.methods import ALIASES, METHODS

README = Path(__file__).resolve().parents[1] / "README.md"


def _rows() -> dict[str, tuple[set[str], str]]:
    """{method: (aliases, parameters cell)} of the README's method table's single-method rows."""
    text = README.read_text()
    table = text[text.index("| method | frequencies | attention scale | parameters |"):]
    table = table[: table.index("\n\n")]
    out = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`([^`]+)`", cells[0])
        if not names or "+" in names[0]:
            continue  # a combination row
        out[names[0]] = (set(names[1:]), cells[-1])
    return out


def test_every_registry_method_has_a_readme_row_and_every_row_a_method():
    assert set(_rows()) == set(METHODS)


def test_the_readme_names_each_methods_aliases():
    for name, (aliases, _) in _rows().items():
        assert aliases == {a for a, target in ALIASES.items() if target == name}, name


def test_the_readme_lists_each_declared_parameter():
    for name, (_, params) in _rows().items():
        for p in METHODS[name].declared:
            assert re.search(rf"\b{re.escape(p.name)}\b", params), f"{name}: parameter {p.name} missing from the README's table"
