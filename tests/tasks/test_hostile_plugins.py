"""Plug-ins fail alone (issue 23): a plug-in that does not import, is not a Task, is registered
under another name than its task's, or takes a built-in's name is refused with one warning naming
its package; every built-in task keeps working, and a good plug-in beside them works too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.metadata import EntryPoint, entry_points

import pytest
from helpers import TESTS

import ctxbench.tasks as registry_module

BUILTINS = {"ppl", "passkey", "niah", "vt", "cwe", "fwe"}


@pytest.fixture
def installed(monkeypatch):
    """Install fake entry points beside the real ones; the registry is read afresh."""

    def install(*extra: tuple[str, str]):
        fakes = [EntryPoint(name, value, registry_module.GROUP) for name, value in extra]
        real = list(entry_points(group=registry_module.GROUP))
        monkeypatch.setattr(registry_module, "entry_points", lambda group: [*real, *fakes])
        registry_module.registry.cache_clear()
        return registry_module.registry()

    yield install
    registry_module.registry.cache_clear()


CASES = [
    # (entry point name, value, words in the warning)
    ("passkey", "plugins.fake_tasks:COLLIDING", "'passkey' is already a built-in task"),
    ("ppl", "plugins.fake_tasks:GOOD", "it holds task 'mytask'"),
    ("mytask2", "plugins.fake_tasks:GOOD", "it holds task 'mytask'"),
    ("othername2", "plugins.fake_tasks:MISNAMED", "it holds task 'othername'"),
    ("dicttask", "plugins.fake_tasks:NOT_A_TASK", "it names a dict, not a ctxbench Task"),
    ("broken", "plugins.broken_import:TASK", "failed to load (RuntimeError: this plug-in is broken at import)"),
    ("missing", "plugins.no_such_module:TASK", "failed to load (ModuleNotFoundError"),
    ("noattr", "plugins.fake_tasks:NO_SUCH_NAME", "failed to load (AttributeError"),
]


@pytest.mark.parametrize("name,value,words", CASES, ids=[c[0] + " " + c[1] for c in CASES])
def test_a_bad_plugin_is_refused_with_one_warning_and_the_builtins_stay(installed, capsys, name, value, words):
    tasks = installed((name, value))
    assert BUILTINS <= set(tasks)
    assert tasks["passkey"].help.startswith("Passkey retrieval")  # the built-in, never the plug-in
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"warning: task plug-in '{name}' from package 'plugins'"), lines
    assert words in lines[0] and " — " in lines[0]


def test_a_good_plugin_beside_a_bad_one_still_registers(installed, capsys):
    tasks = installed(("mytask", "plugins.fake_tasks:GOOD"), ("broken", "plugins.broken_import:TASK"))
    assert "mytask" in tasks and BUILTINS <= set(tasks)
    assert capsys.readouterr().err.count("warning:") == 1


def test_each_warning_shows_once_per_process(installed, capsys):
    installed(("dicttask", "plugins.fake_tasks:NOT_A_TASK"))
    registry_module.registry()
    registry_module.registry()
    assert capsys.readouterr().err.count("warning:") == 1


@pytest.mark.integration
def test_a_misnamed_plugin_no_longer_hides_every_task_command(tmp_path):
    # a real installed-package layout: a dist-info whose entry_points.txt names a misnamed task
    site = tmp_path / "site"
    shutil.copytree(TESTS / "plugins", site / "plugins")
    info = site / "badplugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: badplugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ctxbench.tasks]\nwrongname = plugins.fake_tasks:MISNAMED\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-m", "ctxbench", "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0
    assert all(name in proc.stdout for name in BUILTINS)
    assert "warning: task plug-in 'wrongname' from package 'badplugin'" in proc.stderr
