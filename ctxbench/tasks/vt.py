"""RULER's variable tracking (multi-hop tracing): a chain ``VAR A = 12345``, ``VAR B = VAR A``, ...
hidden in noise; the model names every variable that holds the value (1 chain, 4 hops)."""

from ctxbench.tasks.ruler import ruler_task

TASK = ruler_task("vt", "RULER variable tracking (1 chain, 4 hops) over lengths x depths x methods.",
                  variants=("default",), default_variants=("default",), has_depth=True, has_haystack=False)  # fmt: skip
