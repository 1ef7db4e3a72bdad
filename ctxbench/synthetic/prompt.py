"""One RULER synthetic prompt of an exact token length (arXiv 2404.06654).

:func:`build` is pure: the same task, variant, tokenizer, length, depth, seed and trial give the
same ids, whatever method or model runs them. Random choices come from two generators seeded by
strings: the haystack's (task, variant, seed, length) — the essay's starting point, the needle
haystack's distractor lines, the in-context examples — and the trial's (..., depth, trial) —
keys, values, positions, word lists. So every prompt of one length starts with the same tokens up
to its first trial-specific one (``shared_len``), and one KV cache can serve that prefix.
"""

from __future__ import annotations

import random

from ctxbench.errors import UserError, unknown
from ctxbench.synthetic import config, cwe, fwe, niah, vt
from ctxbench.synthetic.haystack import Haystack, load_haystack
from ctxbench.synthetic.pieces import Prompt, TooShort, frame

BUILDERS = {"niah": niah.make, "vt": vt.make, "cwe": cwe.make, "fwe": fwe.make}


def resolve(task: str, variant: str | None) -> tuple[str, dict]:
    """(variant, config) of a task; vt, cwe and fwe have one variant, "default" (or None)."""
    if task not in config.VARIANTS:
        raise unknown("synthetic task", task, config.VARIANTS)
    variants = config.VARIANTS[task]
    if variant is None and len(variants) == 1:
        variant = next(iter(variants))
    if variant not in variants:
        raise unknown(f"{task} variant", str(variant), variants)
    return variant, variants[variant]


PROTOCOLS = ("ruler", "exact")


def build(task: str, variant: str | None, tokenizer, length: int, depth: float | None = None, seed: int = 0,
          trial: int = 0, chat: bool = False, haystack: Haystack | None = None, protocol: str = "exact") -> Prompt:
    """A RULER prompt for ``length``.

    ``protocol="ruler"``: RULER's length accounting, prompt + the task's generation budget
    (``max_new_tokens``) <= ``length`` with as many whole haystack units as fit, and RULER's
    random placement of every needle and chain line when ``depth`` is None.
    ``protocol="exact"``: the prompt is exactly ``length`` tokens (the answer's come on top), and
    ``depth`` in [0, 1] places the asked needle(s) (niah) or the chain's first line (vt) at that
    fraction of the haystack; ``None`` draws it from RULER's 40 depths. cwe and fwe ignore depth.
    ``haystack`` is the essay for niah's essay variants (default :func:`load_haystack`'s).
    ``chat`` wraps the task in the tokenizer's chat template, the answer prefix after it; its
    tokens count toward the length.
    """
    if protocol not in PROTOCOLS:
        raise unknown("protocol", str(protocol), PROTOCOLS)
    ruler = protocol == "ruler"
    variant, cfg = resolve(task, variant)
    if depth is not None and not 0.0 <= depth <= 1.0:
        raise UserError(f"depth {depth} is outside [0, 1]", "0 puts the needle at the start of the haystack, 1 at its end")
    if length < 1:
        raise UserError(f"length {length} must be positive", "e.g. 4096")
    if cfg.get("type_haystack") == "essay" and haystack is None:  # niah's essay variants
        haystack = load_haystack(None)
    base = f"ruler|{task}|{variant}|{seed}|{length}"
    trial_rng = random.Random(f"{base}|{depth!r}|{trial}")
    fr = frame(tokenizer, chat)
    label = f"RULER {config.ruler_name(task, variant)}"
    made = BUILDERS[task](tokenizer, fr, cfg, length, depth, lambda: random.Random(base), trial_rng, haystack, label, ruler=ruler)
    ids = tuple(made["ids"])
    if ruler:
        assert len(ids) + config.TOKENS_TO_GENERATE[task] <= length, (task, variant, length, len(ids))
    else:
        assert len(ids) == length, (task, variant, length, len(ids))
    extra = dict(made["extra"])
    if haystack is not None and cfg.get("type_haystack") == "essay":
        extra["essay"] = {"name": haystack.name, "digest": haystack.digest}
    return Prompt(
        ids=ids,
        answers=tuple(made["answers"]),
        max_new_tokens=config.TOKENS_TO_GENERATE[task],
        metric=config.METRIC[task],
        needle_positions=tuple(made["needle_positions"]),
        shared_len=made["shared_len"],
        extra=extra,
    )


def min_length(task: str, variant: str | None, tokenizer, chat: bool = False, seed: int = 0, trials: int = 8,
               probe: int = 2048, protocol: str = "exact") -> int:
    """The shortest length that holds the fixed text of the first ``trials`` prompts of ``seed``
    (keys and values differ in tokens, so another prompt may need a few more; :func:`build`
    names its own minimum when a length is too short). ``probe`` is the length whose
    configuration is measured (cwe uses smaller repeats below 4096). Under ``protocol="ruler"``
    the minimum includes the generation budget."""
    need = 0
    for trial in range(trials):
        try:
            need = max(need, build(task, variant, tokenizer, probe, 0.5, seed, trial, chat, protocol=protocol).extra["min_length"])
        except TooShort as e:
            need = max(need, e.minimum)
    return need
