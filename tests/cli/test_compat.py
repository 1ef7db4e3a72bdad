"""Public module paths from 0.1 keep working for one release: plug-ins and scripts written against
them still import, get the very module it became, and are told where it went."""

import importlib
import subprocess
import sys
import warnings

import pytest

from ctxbench._compat import MOVED

# What the 0.1 writing-a-task guide and the example plug-in imported.
GUIDE_NAMES = [
    ("ctxbench.patching", "applied"),
    ("ctxbench.decoding", "decode_shared"),
    ("ctxbench.decoding", "score_shared"),
    ("ctxbench.scoring", "token_nll"),
    ("ctxbench.plots", "depth_heatmaps"),
    ("ctxbench.data", "load_corpus"),
    ("ctxbench.data", "Tokenized"),
    ("ctxbench.tasks.common", "accuracy_rows"),
    ("ctxbench.tasks.common", "answer_cells"),
    ("ctxbench.tasks.common", "trial_cells"),
    ("ctxbench.tasks.common", "parse_positive_int"),
    ("ctxbench.tasks.common", "factors_for"),
    ("ctxbench.results", "Row"),
    ("ctxbench.methods", "resolve"),
    ("ctxbench.tasks.base", "Measurement"),
]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_is_the_moved_module_with_a_warning(old):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.modules.pop(old, None)
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert any(issubclass(w.category, DeprecationWarning) and MOVED[old] in str(w.message) for w in caught)


@pytest.mark.parametrize(("module", "name"), GUIDE_NAMES)
def test_a_name_plugins_imported_in_0_1_still_imports(module, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert hasattr(importlib.import_module(module), name)


@pytest.mark.integration
def test_the_api_is_at_the_top_of_the_package_without_loading_the_runner_first():
    code = "import sys, ctxbench.errors; print('ctxbench.runner.grid' in sys.modules); import ctxbench; print(callable(ctxbench.run))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
