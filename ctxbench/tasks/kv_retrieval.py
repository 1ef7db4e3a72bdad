"""InfiniteBench's Retrieve.KV (``ctxbench kv-retrieval``; arXiv 2402.13718): a JSON object of random
UUID key-value pairs filling the length, one key asked; scored as InfiniteBench scores it (the value
must be one of the output's words). Prompts are generated offline (:mod:`ctxbench.synthetic.infinitebench`);
the task's shape is :mod:`ctxbench.tasks.infinitebench`'s."""

from ctxbench.tasks.infinitebench import infinitebench_task

TASK = infinitebench_task("kv_retrieval", "kv-retrieval",
                          "InfiniteBench kv_retrieval: find a UUID key's value in a JSON object filling the length, x lengths x methods (offline).")  # fmt: skip
