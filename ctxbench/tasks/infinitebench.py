"""The shared shape of InfiniteBench's synthetic retrieval tasks (Zhang et al., 2024, arXiv
2402.13718): prompts generated offline by :mod:`ctxbench.synthetic.infinitebench`, scored as
InfiniteBench scores them, raw prompts by default, the trial machinery of
:mod:`ctxbench.tasks.generated`. Each task stays one plug-in module (``kv_retrieval``,
``number_string``) that names its generator here."""

from __future__ import annotations

from ctxbench.synthetic import infinitebench as ib
from ctxbench.tasks.base import Reference
from ctxbench.tasks.generated import Spec, generated_task

GENERATOR = {"kv_retrieval": 2, "number_string": 1}  # bumped when a generator's prompts change (part of the data digest)
SOURCE = ("OpenBMB/InfiniteBench `data/construct_synthetic_dataset.py`, `src/prompt.py` (`yarn_mistral_templates`), "
          "`src/compute_scores.py`, `src/eval_utils.py`")
VERSION = "commit 88b3daa (2024-06-13)"
REFERENCES = {
    "kv_retrieval": Reference("", "", SOURCE, VERSION,
                              "the JSON object's text, the question (byte for byte: three newlines, then `Key: \"...\"`), "
                              "the template for open models, the scorer, 50 new tokens. Byte-exact in tests",
                              "the pair count fills the length (InfiniteBench: 928 pairs for 64k, 2500 for 128k); the asked pair "
                              "is drawn uniformly per trial (InfiniteBench: sample `cnt` asks index `int(cnt * N / 500)` of its "
                              "shuffled object, spread over the whole object since 2023-12-01); fresh UUIDs from a seeded generator",
                              "not available: the published `kv_retrieval.jsonl` is not read; these are its prompts at your lengths",
                              default=True),
    "number_string": Reference("", "", SOURCE, VERSION,
                               "the noise and needle lines, the key's draw, the template for open models and answer prefix, "
                               "`first_int_match`, 12 new tokens. Byte-exact in tests",
                               "the noise line count fills the length (InfiniteBench fixes it per length); the needle's line is "
                               "drawn per trial (InfiniteBench spreads it evenly over its samples)",
                               "not available: the published `number_string.jsonl` is not read", default=True),
}


def infinitebench_task(name: str, command: str, summary: str):
    """The task of InfiniteBench's generator ``name`` (``kv_retrieval``), run as ``ctxbench COMMAND``."""

    def build(tokenizer, fr, variant, length, seed, trial, state):
        return ib.build(name, tokenizer, fr, length, seed, trial)

    def load(settings):
        # generated: the digest is of the recipe (template, key draw, scorer), not of a file
        # kv_retrieval/2: the question as the source's (a newline before "Key:"), so earlier rows are other cells
        return f"infinitebench-{name}", {"generator": f"infinitebench-{name}/{GENERATOR[name]}", "template": ib.TEMPLATE}, None, []

    spec = Spec(name=command, variants=("default",), default_variants=("default",), build=build,
                scorers={"infinitebench": lambda text, p: ib.score(name, text, p.answers)}, load=load, chat=False,
                max_new_tokens=ib.MAX_NEW_TOKENS[name])  # fmt: skip
    return generated_task(spec, summary, references=(REFERENCES[name],))
