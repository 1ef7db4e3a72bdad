"""ctxbench: what each RoPE context-extension method does to perplexity and retrieval at each length.

The Python API (:mod:`ctxbench.api`) is loaded on first use, so importing a leaf module
(``ctxbench.errors``, ``ctxbench.parsing``) never pulls in the runner.
"""
from ctxbench.version import __version__

__all__ = ["__version__", "run", "sweep", "load_model", "load_results"]


def __getattr__(name: str):
    if name in ("run", "sweep", "load_model", "load_results"):
        from ctxbench import api  # on first use: the runner loads only when the API is used

        return getattr(api, name)
    raise AttributeError(f"module 'ctxbench' has no attribute {name!r}")
