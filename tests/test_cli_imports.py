"""Commands that only parse, list or report must not pay for torch and transformers (~5 s here)."""

from __future__ import annotations

import subprocess
import sys


def _imported(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint(' '.join(m for m in ('torch', 'transformers', 'pandas', 'matplotlib') if m in sys.modules))"
    return set(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split())


def test_importing_the_cli_pulls_in_no_torch_or_transformers():
    assert _imported("import ctxbench.cli") == set()


def test_resolving_a_method_and_parsing_values_needs_no_torch():
    assert _imported("from ctxbench.settings import resolve_methods\nresolve_methods('none,yarn', {'beta_fast': [16, 32]})") == set()
