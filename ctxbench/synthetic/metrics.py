"""RULER's scoring of one prediction (arXiv 2404.06654; ``scripts/eval/evaluate.py`` and
``scripts/eval/synthetic/constants.py``).

RULER averages these over samples and reports percentages rounded to 2 places; here each
returns the fraction for a single prediction, so a caller can average as it likes.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f]")


def postprocess(prediction: str) -> str:
    """evaluate.py ``postprocess_pred``: strip, turn control characters into newlines, strip."""
    return _CONTROL.sub("\n", prediction.strip()).strip()


def string_match_all(prediction: str, answers: list[str] | tuple[str, ...]) -> float:
    """The fraction of ``answers`` that occur in the prediction (case-insensitive substring)."""
    pred = prediction.lower()
    return sum(1.0 for a in answers if a.lower() in pred) / len(answers)


def string_match_part(prediction: str, answers: list[str] | tuple[str, ...]) -> float:
    """1.0 when any answer occurs in the prediction (case-insensitive substring), else 0.0
    (RULER's max over the references; it scores qa this way)."""
    pred = prediction.lower()
    return max(1.0 if a.lower() in pred else 0.0 for a in answers)


METRICS = {"string_match_all": string_match_all, "string_match_part": string_match_part}


def score(metric: str, prediction: str, answers: list[str] | tuple[str, ...]) -> float:
    """``metric`` of the post-processed prediction, as RULER's evaluate.py computes it."""
    return METRICS[metric](postprocess(prediction), answers)
