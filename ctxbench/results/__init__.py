"""The results file: rows with their provenance, the cell identity, and safe concurrent writes."""
from ctxbench.results.store import *  # noqa: F401,F403
from ctxbench.results.store import lock_path, signals_deferred  # noqa: F401
