"""The README and the docs pages name only what exists: every repository path they give (in prose,
code spans and code blocks) is a file or folder of the repository, and every ``ctxbench.*`` module
or attribute they name resolves (the 0.1 module paths are gone: they no longer resolve).

Not checked as paths: URLs; placeholders (``tests/<folder>/``, ``{...}``); a user's own files in an
example (``tasks/mine.toml``, ``my-gate.yml``); and the outputs a built-in suite writes by default
(``results/quick.csv``), which exist only after a run. A glob (``tests/*/test_hostile_*.py``) must
match at least one file."""

from __future__ import annotations

import glob
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PREFIXES = ("tests", "scripts", "ctxbench", "results", "examples", "tasks", "docs", ".github", ".ci")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(p) for p in PREFIXES) + r")/[\w./*<>{}+-]*)")
NAME = re.compile(r"(?<![\w./-])(ctxbench(?:\.[A-Za-z_]\w*)+)")
FROM_IMPORT = re.compile(r"\bfrom\s+(ctxbench(?:\.\w+)*)\s+import\s+(\([^)]*\)|[\w ,]+)")
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+")
PLACEHOLDER = re.compile(r"[<>{}]|(^|[/-])(mine|my-[\w-]+)(\.|/|$)")


@dataclass(frozen=True)
class Hit:
    page: str
    line: int
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.what} — {self.why}"


def suite_outputs() -> set[str]:
    """What the built-in suites write where no --out is given: generated, not committed."""
    return {tomllib.loads(p.read_text()).get("out", "") for p in (ROOT / "ctxbench" / "suites").glob("*.toml")}


def _lines(text: str):
    for i, line in enumerate(text.splitlines(), 1):
        yield i, URL.sub("", line)


def dead_paths(text: str, page: str, root: Path = ROOT, generated: frozenset = frozenset()) -> list[Hit]:
    hits = []
    for i, line in _lines(text):
        for m in PATH.finditer(line):
            path = m.group(1).rstrip(".,:;)")
            if PLACEHOLDER.search(path) or path in generated or path.rstrip("/") in generated:
                continue
            found = glob.glob(str(root / path)) if "*" in path else (root / path).exists()
            if not found:
                hits.append(Hit(page, i, path, "no such file or folder in the repository"))
    return hits


def resolve(name: str) -> str | None:
    """Why ``name`` (``ctxbench.a.b.c``) does not resolve, or None: its longest importable prefix is
    imported and the rest looked up as attributes."""
    parts = name.split(".")
    module, rest = None, []
    for i in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        rest = parts[i:]
        break
    obj = module
    for j, attr in enumerate(rest):
        if not hasattr(obj, attr):
            return f"{'.'.join(parts[: len(parts) - len(rest) + j])} has no attribute {attr!r}"
        obj = getattr(obj, attr)
    return None


def bad_names(text: str, page: str) -> list[Hit]:
    hits = []
    for i, line in _lines(text):
        for m in NAME.finditer(line):
            why = resolve(m.group(1))
            if why:
                hits.append(Hit(page, i, m.group(1), why))
    for m in FROM_IMPORT.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        for attr in re.findall(r"\w+", m.group(2)):
            if attr != "as":
                why = resolve(f"{m.group(1)}.{attr}")
                if why:
                    hits.append(Hit(page, line, f"from {m.group(1)} import {attr}", why))
    return hits


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in PAGES}


def test_every_repository_path_the_docs_name_exists(pages):
    generated = frozenset(suite_outputs())
    hits = [h for page, text in pages.items() for h in dead_paths(text, page, generated=generated)]
    assert not hits, "\n".join(map(str, hits))


def test_every_ctxbench_name_the_docs_use_resolves_without_a_deprecated_path(pages):
    hits = [h for page, text in pages.items() for h in bad_names(text, page)]
    assert not hits, "\n".join(map(str, hits))


def test_the_pages_are_scanned_at_all(pages):
    """The scan finds what the pages hold: a guard against a regex that silently matches nothing."""
    text = "\n".join(pages.values())
    assert len({m.group(1) for m in PATH.finditer(text)}) > 40 and len({m.group(1) for m in NAME.finditer(text)}) > 15


def test_a_dead_path_a_missing_attribute_and_a_removed_0_1_module_are_each_found():
    text = (
        "Run `pytest tests/test_patching.py -k cuda`; see scripts/nope.py and tests/*/test_nothing_*.py.\n"
        "```\nctxbench.tasks.proxy.answer_nlls(lm, ...)\nfrom ctxbench.tasks.trials import answer_nlls, nothing_here\n```\n"
        "Wrap it in `ctxbench.patching.applied(...)` (https://example.com/tests/x.py is a URL).\n"
        "Fine: tests/methods/test_patching.py, tests/<folder>/, tasks/mine.toml, results/quick.csv, ctxbench.tasks.trials.answer_nlls.\n"
    )
    paths = [h.what for h in dead_paths(text, "page.md", generated=frozenset({"results/quick.csv"}))]
    assert paths == ["tests/test_patching.py", "scripts/nope.py", "tests/*/test_nothing_*.py"]
    names = {h.what: h.why for h in bad_names(text, "page.md")}
    assert set(names) == {"ctxbench.tasks.proxy.answer_nlls", "from ctxbench.tasks.trials import nothing_here",
                          "ctxbench.patching.applied"}  # fmt: skip
    assert names["ctxbench.patching.applied"] == "ctxbench has no attribute 'patching'"  # a 0.1 path, gone in 0.2
    assert "has no attribute 'answer_nlls'" in names["ctxbench.tasks.proxy.answer_nlls"]
