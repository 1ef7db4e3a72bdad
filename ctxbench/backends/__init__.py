"""Engine backends: what runs a task's forwards and decoding (``--backend``).

Each backend is one module with ``NAME``, ``check`` and ``load`` (:class:`ctxbench.backends.base.BackendModule`);
``load`` returns an :class:`ctxbench.backends.base.Engine`, which the runner and the tasks call
without asking which one it is. This table is the only place that names the backends. ``hf``
(transformers) is the default and the reference; ``vllm`` runs the methods vLLM can express,
checked against ctxbench's own rotary tables when each engine starts; ``llamacpp`` runs llama.cpp
through llama-cpp-python, checked against transformers' numbers before the grid.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

from ctxbench.errors import unknown

if TYPE_CHECKING:
    from ctxbench.backends.base import BackendModule

# backend name -> its module; import on first use (vllm's import alone takes seconds)
BACKENDS = {"hf": "ctxbench.backends.hf", "vllm": "ctxbench.backends.vllm", "llamacpp": "ctxbench.backends.llamacpp"}
DEFAULT = "hf"


def get(name: str) -> BackendModule:
    """The backend module called ``name`` (one :class:`~ctxbench.errors.UserError` naming the
    closest one for a name that is not a backend)."""
    name = str(name).strip().lower()
    if name not in BACKENDS:
        raise unknown("--backend", name, tuple(BACKENDS))
    return cast("BackendModule", importlib.import_module(BACKENDS[name]))
