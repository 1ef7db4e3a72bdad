"""Old module paths, kept importable for one release (0.1 -> 0.2).

Before 0.2 every module sat directly in ``ctxbench/``; plug-ins and scripts import some of them
(``ctxbench.patching``, ``ctxbench.decoding``, ``ctxbench.scoring``, ``ctxbench.data``...). A
finder on ``sys.meta_path`` answers each old name with the module now in its subpackage (the very
same module object, so monkeypatching either name patches both) and a ``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    "ctxbench.adaptive": "ctxbench.runner.adaptive",
    "ctxbench.attention": "ctxbench.methods.attention",
    "ctxbench.compare": "ctxbench.report.compare",
    "ctxbench.costmodel": "ctxbench.runner.costmodel",
    "ctxbench.data": "ctxbench.tasks.corpus",
    "ctxbench.decoding": "ctxbench.model.decoding",
    "ctxbench.display": "ctxbench.report.display",
    "ctxbench.distributed": "ctxbench.runner.distributed",
    "ctxbench.effective": "ctxbench.report.effective",
    "ctxbench.export": "ctxbench.methods.export",
    "ctxbench.freqplot": "ctxbench.methods.freqplot",
    "ctxbench.geometry": "ctxbench.model.geometry",
    "ctxbench.identity": "ctxbench.results.identity",
    "ctxbench.measure": "ctxbench.model.measure",
    "ctxbench.modelfiles": "ctxbench.model.files",
    "ctxbench.models": "ctxbench.model.load",
    "ctxbench.paired": "ctxbench.report.paired",
    "ctxbench.patching": "ctxbench.methods.patching",
    "ctxbench.pivot": "ctxbench.report.pivot",
    "ctxbench.plan": "ctxbench.runner.plan",
    "ctxbench.plots": "ctxbench.tasks.plots",
    "ctxbench.progress": "ctxbench.runner.progress",
    "ctxbench.ranking": "ctxbench.report.ranking",
    "ctxbench.rulerscore": "ctxbench.report.rulerscore",
    "ctxbench.scoring": "ctxbench.model.scoring",
    "ctxbench.settings": "ctxbench.runner.settings",
    "ctxbench.suite": "ctxbench.runner.suite",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module) -> None:  # the target is already executed
        pass


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds ``ctxbench.<old>`` as the module it became."""

    def find_spec(self, fullname: str, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        warnings.warn(f"{fullname} moved to {new}; the old name goes in the next release", DeprecationWarning, stacklevel=3)
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.append(MovedModules())
