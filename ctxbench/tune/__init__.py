"""``ctxbench tune``: search a method's parameters for a model and a target length, prove the winner on
held-out data, export it (docs/tune.md). Modules: :mod:`~ctxbench.tune.space` (the search space from
the registry), :mod:`~ctxbench.tune.objective`, :mod:`~ctxbench.tune.search`, :mod:`~ctxbench.tune.verdict`,
:mod:`~ctxbench.tune.store` (the trials file), :mod:`~ctxbench.tune.plot`, :mod:`~ctxbench.tune.run`
(the one orchestration the CLI and the API share)."""
