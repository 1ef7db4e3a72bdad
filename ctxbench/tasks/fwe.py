"""RULER's frequent words extraction (aggregation): coded text with word frequencies following a
Zipf law (alpha 2); the model names the three most frequent coded words."""

from ctxbench.tasks.ruler import ruler_task

TASK = ruler_task("fwe", "RULER frequent words extraction (top 3 coded words) over lengths x methods.",
                  variants=("default",), default_variants=("default",), has_depth=False, has_haystack=False)  # fmt: skip
