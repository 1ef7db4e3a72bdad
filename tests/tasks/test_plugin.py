"""The example plug-in (examples/task-plugin) installs as a package, appears as a command, runs
through the CLI, a suite, report and compare, and disappears when uninstalled."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from helpers import ROOT

pytestmark = pytest.mark.integration  # runs the CLI or Python in a subprocess

PIP = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]


@pytest.fixture
def plugin_copy(tmp_path):
    """The example, copied: installing it builds in the copy, never in examples/task-plugin."""
    copy = tmp_path / "task-plugin"
    shutil.copytree(ROOT / "examples" / "task-plugin", copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    return copy


@pytest.fixture
def plugin(plugin_copy):
    subprocess.run([*PIP, str(plugin_copy)], check=True, capture_output=True)
    yield
    subprocess.run([sys.executable, "-m", "pip", "uninstall", "--quiet", "-y", "ctxbench-lastword"], check=True, capture_output=True)


def _run(*args, **kw):
    return subprocess.run(["ctxbench", *args], capture_output=True, text=True, timeout=300, **kw)


def test_installed_plugin_is_a_command_a_suite_section_and_is_reported_and_compared(plugin, saved_model, tmp_path):
    assert "lastword" in _run("--help").stdout
    out = tmp_path / "lw.csv"
    proc = _run("lastword", "--model", str(saved_model), "--method", "none,yarn", "--len", "128,256", "--passages", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    suite = tmp_path / "s.toml"
    suite.write_text(f'model = "{saved_model}"\n[[methods]]\nname = "ntk"\n[lastword]\nfactors = [2]\nlengths = ["128"]\npassages = 1\n')
    assert _run("sweep", str(suite), "--out", str(out)).returncode == 0
    report = _run("report", str(out), "--format", "markdown").stdout
    assert "lastword nll_tail" in report and "| ntk |" in report and "| yarn |" in report
    assert _run("compare", str(out), str(out)).returncode == 0


def test_uninstalled_plugin_is_gone(plugin, plugin_copy):
    assert "lastword" in _run("--help").stdout
    subprocess.run([sys.executable, "-m", "pip", "uninstall", "--quiet", "-y", "ctxbench-lastword"], check=True, capture_output=True)
    assert "lastword" not in _run("--help").stdout
    subprocess.run([*PIP, str(plugin_copy)], check=True, capture_output=True)  # for the fixture's teardown


def test_the_example_plugins_option_is_part_of_the_cell_identity(plugin, saved_model, tmp_path):
    out = tmp_path / "lw.csv"
    args = ("lastword", "--model", str(saved_model), "--method", "none", "--len", "128", "--out", str(out))
    first = _run(*args, "--passages", "1")
    second = _run(*args, "--passages", "2")
    assert first.returncode == second.returncode == 0, second.stderr
    assert "1 cell(s) run, 0 resumed" in second.stdout
    report = _run("report", str(out), "--format", "markdown").stdout
    assert "passages=1" in report and "passages=2" in report  # two tables, each titled by its setting


def test_installing_the_plugin_leaves_nothing_in_the_example_folder(plugin):
    left = {p.name for p in (ROOT / "examples" / "task-plugin").iterdir()} - {"ctxbench_lastword", "pyproject.toml"}
    assert not left, left
