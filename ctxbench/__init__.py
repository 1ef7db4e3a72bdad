"""ctxbench: what each RoPE context-extension method does to perplexity and retrieval at each length."""

__version__ = "0.1.0"

from .api import load_results, run  # noqa: E402

__all__ = ["__version__", "run", "load_results"]
