"""InfiniteBench's Retrieve.Number (``ctxbench number-string``; arXiv 2402.13718): a 10-digit
sequence with repeated digits hidden in InfiniteBench's noise lines; scored as InfiniteBench scores
it (the output's first run of digits must be the sequence). Prompts are generated offline
(:mod:`ctxbench.synthetic.infinitebench`); the task's shape is :mod:`ctxbench.tasks.infinitebench`'s."""

from ctxbench.tasks.infinitebench import infinitebench_task

TASK = infinitebench_task("number_string", "number-string",
                          "InfiniteBench number_string: find a 10-digit sequence hidden in noise lines, x lengths x methods (offline).")  # fmt: skip
