"""RULER's needle-in-a-haystack task, eight configurations (``--variant``; RULER's
``scripts/synthetic.yaml`` niah_single_1 ... niah_multiquery): word/number/uuid keys and values,
a noise, prose or distractor-needle haystack, several keys, values per key, or queries."""

from ctxbench.synthetic import VARIANTS
from ctxbench.tasks.ruler import ruler_task

NIAH = tuple(VARIANTS["niah"])

TASK = ruler_task(
    "niah", "RULER needle-in-a-haystack (8 variants: --variant single_1,...,multiquery or all) over lengths x depths x methods.",
    variants=NIAH, default_variants=("single_1",), has_depth=True, has_haystack=True, answer_nll=True,
)
