"""Engine backends: what runs a task's forwards and decoding (``--backend``).

Each backend is one module behind the interface of :mod:`ctxbench.backends.base`; this table is
the only place that names them, and tasks never ask which one runs. ``hf`` (transformers) is the
default and the reference; ``vllm`` runs the methods vLLM can express, checked against ctxbench's
own rotary tables when each engine starts.
"""

from __future__ import annotations

import importlib

from ctxbench.errors import unknown

# backend name -> its module; import on first use (vllm's import alone takes seconds)
BACKENDS = {"hf": "ctxbench.backends.hf", "vllm": "ctxbench.backends.vllm"}
DEFAULT = "hf"


def get(name: str):
    """The backend module called ``name`` (one :class:`~ctxbench.errors.UserError` naming the
    closest one for a name that is not a backend)."""
    name = str(name).strip().lower()
    if name not in BACKENDS:
        raise unknown("--backend", name, tuple(BACKENDS))
    return importlib.import_module(BACKENDS[name])


def of(lm):
    """The backend a loaded model runs on (``lm.backend``; a model loaded by transformers is ``hf``)."""
    return get(getattr(lm, "backend", DEFAULT))


def session(lm, method, factor: float, seq_len: int):
    """A context in which ``lm`` computes ``method`` at ``factor`` for sequences of up to
    ``seq_len`` tokens: a :class:`ctxbench.backends.base.Session`."""
    return of(lm).session(lm, method, factor, seq_len)
