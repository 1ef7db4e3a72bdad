"""Reference computations the tests hold ctxbench to, re-expressed from public code (see each module's header)."""
