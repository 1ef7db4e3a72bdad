"""InfiniteBench's Retrieve.Number (``ctxbench number-string``; arXiv 2402.13718): a 10-digit
sequence with repeated digits hidden in InfiniteBench's noise lines; scored as InfiniteBench scores
it (the output's first run of digits must be the sequence). Prompts are generated offline
(:mod:`ctxbench.synthetic.infinitebench`); the trial machinery is :mod:`ctxbench.tasks.generated`'s."""

from ctxbench.synthetic import infinitebench as ib
from ctxbench.tasks.generated import Spec, generated_task

NAME = "number_string"


def _build(tokenizer, fr, variant, length, seed, trial, state):
    return ib.build(NAME, tokenizer, fr, length, seed, trial)


def _load(settings):
    return "infinitebench-number_string", {"generator": "infinitebench-number_string/1", "template": ib.TEMPLATE}, None, []


SPEC = Spec(name="number-string", variants=("default",), default_variants=("default",), build=_build,
            scorers={"infinitebench": lambda text, p: ib.score(NAME, text, p.answers)}, load=_load, chat=False,
            max_new_tokens=ib.MAX_NEW_TOKENS[NAME])  # fmt: skip

TASK = generated_task(SPEC, "InfiniteBench number_string: find a 10-digit sequence hidden in noise lines, x lengths x methods (offline).")
