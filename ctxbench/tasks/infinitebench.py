"""The shared shape of InfiniteBench's synthetic retrieval tasks (Zhang et al., 2024, arXiv
2402.13718): prompts generated offline by :mod:`ctxbench.synthetic.infinitebench`, scored as
InfiniteBench scores them, raw prompts by default, the trial machinery of
:mod:`ctxbench.tasks.generated`. Each task stays one plug-in module (``kv_retrieval``,
``number_string``) that names its generator here."""

from __future__ import annotations

from ctxbench.synthetic import infinitebench as ib
from ctxbench.tasks.generated import Spec, generated_task


def infinitebench_task(name: str, command: str, summary: str):
    """The task of InfiniteBench's generator ``name`` (``kv_retrieval``), run as ``ctxbench COMMAND``."""

    def build(tokenizer, fr, variant, length, seed, trial, state):
        return ib.build(name, tokenizer, fr, length, seed, trial)

    def load(settings):
        # generated: the digest is of the recipe (template, key draw, scorer), not of a file
        return f"infinitebench-{name}", {"generator": f"infinitebench-{name}/1", "template": ib.TEMPLATE}, None, []

    spec = Spec(name=command, variants=("default",), default_variants=("default",), build=build,
                scorers={"infinitebench": lambda text, p: ib.score(name, text, p.answers)}, load=load, chat=False,
                max_new_tokens=ib.MAX_NEW_TOKENS[name])  # fmt: skip
    return generated_task(spec, summary)
