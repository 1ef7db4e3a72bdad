"""The folders are the architecture (docs/design.md, "The house"): every import of a ctxbench module,
at a module's top or inside a function, points down the layers, and no modules import each other
round in a circle; and no code outside the registries switches on a method's, task's or
objective's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
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
    {"errors", "parsing", "stats", "defaults", "version", "synthetic", "textsafe", "outfiles"},
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


# --- no code switches on a method's, task's or objective's name ------------------------------------

# The registries that map names to objects, the one place a name may pick one (each answers "which
# object is this name?"; everything else asks the object).
REGISTRIES = {
    "ctxbench/methods/registry.py": "METHODS and ALIASES: a method's entry by name",
    "ctxbench/tasks/__init__.py": "registry(): a task by name, built-ins and plug-ins",
    "ctxbench/tune/objective.py": "OBJECTIVES: tune's objective by --objective name",
}
# What holds a name: ``x.name``, ``name``, ``task_name``, ``x.task``, ``row["method"]``, ``row.get("objective")``.
NAME_HOLDERS = {"name", "task", "method", "objective"}


def _registered_names() -> dict[str, str]:
    """Every method name and alias, task name and objective name, with what it names (backend names
    are not here: the backends are asked by their own check)."""
    from ctxbench.methods import ALIASES, METHODS
    from ctxbench.tasks import registry
    from ctxbench.tune.objective import OBJECTIVES

    return {**{n: "method" for n in (*METHODS, *ALIASES)}, **{n: "task" for n in registry()}, **{n: "objective" for n in OBJECTIVES}}


NAMES = _registered_names()


def _holds_a_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr in NAME_HOLDERS or node.attr.endswith("_name")
    if isinstance(node, ast.Name):
        return node.id in NAME_HOLDERS or node.id.endswith("_name")
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value in NAME_HOLDERS
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        return isinstance(node.args[0], ast.Constant) and node.args[0].value in NAME_HOLDERS
    return False


def _names_in(node: ast.AST) -> list[str]:
    """Registered names a literal holds: a string, or the strings of a tuple, list or set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for elt in node.elts for n in _names_in(elt)]
    return []


def name_switches(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of each comparison (``==``, ``!=``, ``in``, ``not in``) or ``case`` of something
    holding a name against a registered method, task or objective name: ``setting.name == "yarn"``,
    ``name in ("ppl", "passkey")``, ``row["task"] == "niah"``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_holds_a_name(o) for o in operands) and any(_names_in(o) for o in operands):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Match) and _holds_a_name(node.subject):
            found += [(case.pattern.lineno, f"case {ast.unparse(case.pattern)}") for case in node.cases
                      if any(_names_in(p.value) for p in ast.walk(case.pattern) if isinstance(p, ast.MatchValue))]  # fmt: skip
    return found


def test_no_code_switches_on_a_method_task_or_objective_name_outside_the_registries():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {code}" for path in sorted(PACKAGE.rglob("*.py"))
                 if str(path.relative_to(ROOT)) not in REGISTRIES for line, code in name_switches(path.read_text())]  # fmt: skip
    assert not offenders, "ask the object (its registry entry's fields) instead of its name:\n" + "\n".join(offenders)


def test_the_registries_the_name_scan_allows_are_there():
    assert all((ROOT / path).is_file() for path in REGISTRIES)


@pytest.mark.parametrize("snippet,count", [
    ('if setting.name == "yarn": pass', 1),
    ('if self.scaler.name != "logn": pass', 1),
    ('if name in ("ppl", "passkey"): pass', 1),
    ('if task == "niah": pass', 1),
    ('if r["task"] == "ppl" and r.get("method") != "none": pass', 2),
    ('if objective.name == "needle": pass', 1),
    ('match spec.method_name:\n    case "self-extend": pass\n    case _: pass', 1),
    ('if r["metric"] == "ppl": pass', 0),  # a metric of that name, not the task
    ('if kind == "needle": pass', 0),  # a haystack of needles, not the objective
    ('setting = resolve("none")', 0),  # using a method by name is not switching on one
    ('if d.name == dim: pass', 0),  # a lookup by a name held in a variable
    ('if config.backend == "vllm": pass', 0),  # backends: their own check
])  # fmt: skip
def test_the_name_scan_finds_switches_and_only_those(snippet, count):
    assert len(name_switches(snippet)) == count, name_switches(snippet)


def test_no_code_outside_backends_asks_which_engine_it_holds():
    """An engine is an object (``ctxbench.backends.base.Engine``): outside ``backends/`` no module
    imports a backend's own module, compares anything with a backend's name, or reaches the package
    for more than its registry (``get``, ``DEFAULT``, ``BACKENDS``) and the base class."""
    import re

    from ctxbench.backends import BACKENDS

    names = "|".join(re.escape(n) for n in BACKENDS)
    switch = re.compile(rf"""(==|!=)\s*["']({names})["']|["']({names})["']\s*(==|!=)|\.backend\s*(==|!=|in\b)|backends\.(of|session)\(""")
    own = {f"ctxbench.backends.{n}" for n in BACKENDS}
    found = []
    for name, path in MODULES.items():
        if name.split(".")[1:2] == ["backends"]:
            continue
        found += [f"{name} imports {t}" for t in imports()[name] if t in own]
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if switch.search(line):
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "\n".join(found)


def test_no_module_imports_another_modules_private_name():
    """A name used across modules is public in its module: no ``from ctxbench.x import _name``."""
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ctxbench"):
                found += [f"{name}: from {node.module} import {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]  # fmt: skip
    assert not found, "\n".join(found)


# Imports inside functions, at most: each keeps a module's start-up light (torch, transformers and what
# loads them come where a model runs), an optional dependency optional, or a name replaceable when called.
MOST_INNER_IMPORTS = 166


def _inner_imports() -> list[tuple[str, int, str]]:
    """(path, line, the import's text) of every import inside a function of the package."""
    out = []
    for path in MODULES.values():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        seen: set[int] = set()
        for f in ast.walk(tree):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for n in ast.walk(f):
                    if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in seen:
                        seen.add(id(n))
                        out.append((str(path.relative_to(ROOT)), n.lineno, "\n".join(lines[n.lineno - 1 : n.end_lineno])))
    return out


def test_imports_inside_functions_are_few_and_each_says_why():
    found = _inner_imports()
    assert len(found) <= MOST_INNER_IMPORTS, f"{len(found)} imports inside functions (at most {MOST_INNER_IMPORTS})"
    silent = [f"{p}:{i}: {text.strip()}" for p, i, text in found if "#" not in text]
    assert not silent, "imports inside functions without their reason (a comment):\n" + "\n".join(silent)
