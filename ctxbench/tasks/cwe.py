"""RULER's common words extraction (aggregation): a numbered list of words where 10 words repeat
more often than the rest; the model lists the 10 most common."""

from ctxbench.tasks.ruler import ruler_task

TASK = ruler_task("cwe", "RULER common words extraction (top 10 of a word list) over lengths x methods.",
                  variants=("default",), default_variants=("default",), has_depth=False, has_haystack=False)  # fmt: skip
