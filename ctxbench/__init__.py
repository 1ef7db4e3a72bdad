"""ctxbench: what each RoPE context-extension method does to perplexity and retrieval at each length."""

__version__ = "0.1.0"

from .api import load_model, load_results, run, sweep  # noqa: E402

__all__ = ["__version__", "run", "sweep", "load_model", "load_results"]
