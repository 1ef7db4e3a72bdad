"""0.2 keeps one import path per name: the 0.1 module paths are gone, and the CHANGELOG names the
module each became (a plug-in written against 0.1 finds its new import there)."""

import importlib
import re
import subprocess
import sys

import pytest
from helpers import ROOT

MOVED_ROW = re.compile(r"^\s*\| `(ctxbench\.[\w.]+)` \| `(ctxbench\.[\w.]+)` \|$")


def moved() -> dict[str, str]:
    """The CHANGELOG's table of 0.1 paths and their 0.2 homes."""
    text = (ROOT / "CHANGELOG.md").read_text()
    table = text[text.index("| 0.1 path | 0.2 path |") :].split("\n\n")[0]
    return dict(m.groups() for line in table.splitlines() if (m := MOVED_ROW.match(line)))


def test_the_changelog_lists_the_27_old_paths():
    assert len(moved()) == 27


@pytest.mark.parametrize(("old", "new"), sorted(moved().items()))
def test_an_old_module_path_no_longer_imports_and_its_new_home_does(old, new):
    sys.modules.pop(old, None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
    importlib.import_module(new)


@pytest.mark.integration
def test_the_api_is_at_the_top_of_the_package_without_loading_the_runner_first():
    code = "import sys, ctxbench.errors; print('ctxbench.runner.grid' in sys.modules); import ctxbench; print(callable(ctxbench.run))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
