"""Commands that only parse, list or report must not pay for torch and transformers (~5 s here)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # runs the CLI or Python in a subprocess


def _imported(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint(' '.join(m for m in ('torch', 'transformers', 'pandas', 'matplotlib') if m in sys.modules))"
    return set(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split())


def test_importing_the_cli_pulls_in_no_torch_or_transformers():
    assert _imported("import ctxbench.cli") == set()


def test_resolving_a_method_and_parsing_values_needs_no_torch():
    assert _imported("from ctxbench.runner.settings import resolve_methods\nresolve_methods('none,yarn', {'beta_fast': [16, 32]})") == set()


def test_freqs_from_a_geometry_computes_without_torch():
    code = (
        "import sys\nfrom ctxbench.cli import main\nsys.argv = ['ctxbench', 'freqs', '--method', 'none,yarn,llama3', '--factor', '4',"
        " '--head-dim', '64', '--base', '1e4', '--trained-len', '4k', '--format', 'csv']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    assert "torch" not in _imported(code)


def test_version_answers_before_the_cli_loads():
    """``ctxbench --version`` costs Python's start only: not even typer, rich or numpy load."""
    from ctxbench import __version__

    code = "import sys\nsys.argv = ['ctxbench', '--version']\nfrom ctxbench.__main__ import main\nmain()\n" \
           "print(' '.join(m for m in ('typer', 'rich', 'numpy', 'torch', 'ctxbench.cli') if m in sys.modules))"  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [f"ctxbench {__version__}", ""]


def test_the_cli_itself_takes_version_too():
    """``ctxbench.cli.main`` (what scripts and ``--help`` see) answers ``--version`` the same way."""
    from ctxbench import __version__

    code = "import sys\nsys.argv = ['ctxbench', '--version']\nfrom ctxbench.cli import main\nmain()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (0, f"ctxbench {__version__}\n")
