"""RULER's synthetic tasks as pure prompt builders and metrics (Hsieh et al., 2024, "RULER: What's
the Real Context Size of Your Long-Context Language Models?", arXiv 2404.06654,
github.com/NVIDIA/RULER): niah (8 variants), vt, cwe, fwe. No model and no torch here.
"""

from __future__ import annotations

from ctxbench.synthetic.config import METRIC, TOKENS_TO_GENERATE, VARIANTS, ruler_name
from ctxbench.synthetic.haystack import NOISE, Haystack, load_haystack
from ctxbench.synthetic.metrics import postprocess, score, string_match_all, string_match_part
from ctxbench.synthetic.pieces import Prompt, TooShort
from ctxbench.synthetic.prompt import PROTOCOLS, build, min_length, resolve

__all__ = [
    "METRIC", "NOISE", "PROTOCOLS", "TOKENS_TO_GENERATE", "VARIANTS", "Haystack", "Prompt", "TooShort", "build",
    "load_haystack", "min_length", "postprocess", "resolve", "ruler_name", "score", "string_match_all",
    "string_match_part",
]
