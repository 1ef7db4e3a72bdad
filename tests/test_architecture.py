"""The folders are the architecture (docs/design.md, "The house"): every import of a ctxbench module,
at a module's top or inside a function, points down the layers, and no modules import each other
round in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "ctxbench"
# Top to bottom. A module may import its own layer's modules and any layer below, never one above.
LAYERS = [
    {"cli", "__main__"},
    {"api"},
    {"tune"},
    {"runner"},
    {"report"},
    {"results"},
    {"tasks"},
    {"backends"},
    {"methods"},
    {"model"},
    {"errors", "parsing", "stats", "defaults", "version", "synthetic", "_compat", "textsafe", "outfiles"},
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "ctxbench"]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, *([node.module] if node.module else [])])
    else:
        source = node.module or ""
        if source.split(".")[0] != "ctxbench":
            return []
    return [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names]


def imports() -> dict[str, set[str]]:
    """Module -> the ctxbench modules it imports anywhere in its body."""
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found |= {t for t in _targets(node, name, path.name == "__init__.py") if t in MODULES and t != name}
        edges[name] = found
    return edges


def layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None  # the package itself (its __init__ loads the API lazily)
    return next(i for i, names in enumerate(LAYERS) if parts[1] in names)


def test_every_module_is_in_a_layer():
    assert all(layer(m) is not None for m in MODULES if m != "ctxbench")


def test_every_import_points_down_the_layers():
    up = [f"{a} -> {b}" for a, targets in imports().items() for b in targets
          if layer(a) is not None and layer(b) is not None and layer(b) < layer(a)]  # fmt: skip
    assert not up, "imports that run back up a layer:\n" + "\n".join(sorted(up))


def test_no_modules_import_each_other_round_in_a_circle():
    edges = imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                circles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_only_backends_and_model_touch_the_loaded_models_torch_module_or_probe_what_it_is():
    """The runner and the tasks ask the loaded model's backend (``ctxbench.backends.base.Backend``),
    never which backend they hold (``hasattr(lm, ...)``) nor its torch module (``lm.model``)."""
    import re

    found = []
    for name, path in MODULES.items():
        if name.split(".")[1:2] in (["backends"], ["model"]):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"hasattr\(lm\s*,|getattr\(lm\s*,|\blm\.model\b", line):
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "\n".join(found)
