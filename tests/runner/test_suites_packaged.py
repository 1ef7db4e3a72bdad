"""The built-in suites ship in the wheel (issue 38 item 4): build it, install it into a fresh venv
(not the editable checkout), and run ``ctxbench sweep quick --dry-run``, ``sweep nightly --dry-run``
and ``ctxbench suites`` from an empty folder. About 10 s: nothing is downloaded.

The wheel is built from a copy of the sources so that setuptools' ``build/`` folder lands in the
temporary directory, not in the checkout. ``--system-site-packages`` reaches only the base Python's
packages, not this venv's (torch, typer, ...), so a ``.pth`` file lists this interpreter's
site-packages after the new venv's own: the new venv's ctxbench comes first, and the test checks so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest
from helpers import ROOT

pytestmark = pytest.mark.integration  # pip, venv and the installed command in subprocesses

NAMES = ("nightly", "quick", "yarn-paper")
# no PYTHONPATH: it would put a source tree before the installed wheel
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}


def _run(*args, cwd, ok=(0,)) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode in ok, f"{args} -> {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the new venv's bin folder, an empty working folder) with the wheel installed, not editable."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "ctxbench", src / "ctxbench", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", tmp / "dist", src, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("ctxbench-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        shipped = {n for n in zf.namelist() if n.startswith("ctxbench/suites/")}
    assert shipped == {f"ctxbench/suites/{n}.toml" for n in NAMES}

    venv = tmp / "venv"
    _run(sys.executable, "-m", "venv", "--system-site-packages", venv, cwd=tmp)
    py = venv / "bin" / "python"
    _run(py, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", "--no-index", wheel, cwd=tmp)
    site = _run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp).stdout.strip()
    # written after the install, so that pip in the new venv never sees the editable ctxbench
    (venv / site.removeprefix(str(venv) + os.sep) / "_ctxbench_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    empty = tmp / "empty"
    empty.mkdir()
    where = _run(py, "-c", "import ctxbench; print(ctxbench.__file__)", cwd=empty).stdout.strip()
    assert where == os.path.join(site, "ctxbench", "__init__.py"), f"not the wheel's ctxbench: {where}"
    return venv / "bin", empty


@pytest.mark.parametrize("name,tasks", [("quick", ["ppl", "passkey"]), ("nightly", ["ppl", "passkey", "niah"])])
def test_the_installed_wheel_plans_a_built_in_suite_by_name_from_an_empty_folder(installed, name, tasks):
    bindir, empty = installed
    proc = _run(bindir / "ctxbench", "sweep", name, "--dry-run", cwd=empty)
    assert f"{name}: smollm2-135m -> results/{name}.csv" in proc.stdout
    for task in tasks:
        assert f"plan {task}:" in proc.stdout
    assert list(empty.iterdir()) == []  # a dry run writes nothing


def test_the_installed_wheel_lists_its_suites_without_torch(installed):
    bindir, empty = installed
    proc = _run(bindir / "ctxbench", "suites", cwd=empty)
    for name in NAMES:
        assert f"│ {name} " in proc.stdout
    probe = ("import sys\nfrom ctxbench.cli import main\nsys.argv = ['ctxbench', 'suites']\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\nprint('torch' in sys.modules)")  # fmt: skip
    assert _run(bindir / "python", "-c", probe, cwd=empty).stdout.split()[-1] == "False"


def test_the_installed_wheel_refuses_an_unknown_suite_in_one_line(installed):
    bindir, empty = installed
    proc = _run(bindir / "ctxbench", "sweep", "quik", "--dry-run", cwd=empty, ok=(2,))
    assert proc.stderr.count("\n") == 1 and "did you mean 'quick'?" in proc.stderr, proc.stderr
