"""InfiniteBench's Retrieve.KV (``ctxbench kv-retrieval``; arXiv 2402.13718): a JSON object of random
UUID key-value pairs filling the length, one key asked; scored as InfiniteBench scores it (the value
must be one of the output's words). Prompts are generated offline (:mod:`ctxbench.synthetic.infinitebench`);
the trial machinery is :mod:`ctxbench.tasks.generated`'s."""

from ctxbench.synthetic import infinitebench as ib
from ctxbench.tasks.generated import Spec, generated_task

NAME = "kv_retrieval"


def _build(tokenizer, fr, variant, length, seed, trial, state):
    return ib.build(NAME, tokenizer, fr, length, seed, trial)


def _load(settings):
    # generated: the digest is of the recipe (template, key draw, scorer), not of a file
    return "infinitebench-kv_retrieval", {"generator": "infinitebench-kv_retrieval/1", "template": ib.TEMPLATE}, None, []


SPEC = Spec(name="kv-retrieval", variants=("default",), default_variants=("default",), build=_build,
            scorers={"infinitebench": lambda text, p: ib.score(NAME, text, p.answers)}, load=_load, chat=False,
            max_new_tokens=ib.MAX_NEW_TOKENS[NAME])  # fmt: skip

TASK = generated_task(SPEC, "InfiniteBench kv_retrieval: find a UUID key's value in a JSON object filling the length, x lengths x methods (offline).")
