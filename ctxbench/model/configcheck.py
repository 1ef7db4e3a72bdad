"""The values of a saved model's ``config.json`` that shape its RoPE and its size, checked as JSON.

A value of the wrong kind there fails deep inside transformers (a text ``rope_theta`` is a
``float()`` traceback at load), is blamed on options the task commands do not have (a zero
``max_position_embeddings`` on ``--trained-len``), or worse, runs: ``rope_theta: 0`` reads as "no
rotary base" and ``factor: 0`` divides positions by zero. This module reads the parsed JSON (no
torch, no transformers: milliseconds, so ``--dry-run`` refuses what the run would) and raises one
:class:`UserError` naming the file and the key, e.g. ``"rope_parameters.rope_theta"``.

What each key may hold follows transformers' own reading (``PreTrainedConfig`` fields and
``modeling_rope_utils``' validation of ``rope_parameters``): counts are positive integers, the
rotary base a finite number above 1 (``RopeGeometry``'s own rule), a fraction of the head rotated is
in (0, 1], a scaling ``factor`` is a number >= 1, and each scaling type has its required keys.
"""

from __future__ import annotations

import difflib
import json
import math
from pathlib import Path

from ctxbench.errors import UserError

# Counts: a positive integer each (transformers types them ``int``; 0 divides or empties a table).
COUNT_KEYS = ("max_position_embeddings", "original_max_position_embeddings", "head_dim", "hidden_size",
              "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "vocab_size", "intermediate_size")  # fmt: skip
# The rotary base, top level (before transformers v5) or in rope_parameters.
BASE_KEYS = ("rope_theta", "rotary_emb_base")
# The share of each head that is rotated.
FRACTION_KEYS = ("partial_rotary_factor", "rotary_pct")
# Finite numbers a scaling type reads (YaRN's betas and attention factor, Llama 3's band factors).
NUMBER_KEYS = ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "low_freq_factor", "high_freq_factor")
# The rope types transformers 5 computes (``ROPE_INIT_FUNCTIONS`` and ``default``), with the keys each
# requires (``modeling_rope_utils``' validation). A type outside this table is asked of transformers
# itself (:func:`_known_to_transformers`), so a newer release's type is never refused here.
REQUIRED = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "longrope": ("short_factor", "long_factor"),
    "proportional": (),
    "mrope": (),  # Qwen2-VL's multimodal sections: its config class reads it as "default"
}
SCALING_KEYS = ("rope_parameters", "rope_scaling")


def check_config_values(config: dict, file: Path) -> None:
    """Raise :class:`UserError` naming ``file`` and the key at fault unless every RoPE and size value
    of ``config`` (and of its ``text_config``) is of the kind transformers reads."""
    _check_level(config, file, "")
    text = config.get("text_config")
    if isinstance(text, dict):
        _check_level(text, file, "text_config.")


def _bad(file: Path, key: str, value: object, why: str, fix: str) -> UserError:
    shown = repr(value) if isinstance(value, str) else _json(value)
    return UserError(f"'{file}' sets \"{key}\" to {shown}: {why}", f"{fix} in config.json (the model's source has the right value)")


def _json(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_level(config: dict, file: Path, prefix: str) -> None:
    for key in COUNT_KEYS:
        _count(config, key, file, prefix)
    for key in BASE_KEYS:
        _base(config, key, file, prefix)
    for key in FRACTION_KEYS:
        _fraction(config, key, file, prefix)
    for key in SCALING_KEYS:
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise _bad(file, prefix + key, value, "not an object of RoPE settings", f'give "{key}" as an object such as {{"rope_type": "default", "rope_theta": 10000.0}}, or null')
        if value and all(isinstance(v, dict) for v in value.values()):  # per layer type (Gemma 3): one object each
            for layer_type, params in value.items():
                _check_scaling(params, file, f"{prefix}{key}.{layer_type}.")
        else:
            _check_scaling(value, file, f"{prefix}{key}.")


def _count(config: dict, key: str, file: Path, prefix: str) -> None:
    value = config.get(key)
    if value is None:
        return
    if not (isinstance(value, int) and not isinstance(value, bool)) or value < 1:
        raise _bad(file, prefix + key, value, "a count is a whole number >= 1", f'set "{key}" to the model\'s own whole number')


def _base(config: dict, key: str, file: Path, prefix: str) -> None:
    value = config.get(key)
    if value is None:
        return
    if not _is_number(value):
        raise _bad(file, prefix + key, value, "the rotary base is a number, not text", f'set "{key}": 10000.0 (or the model\'s own base)')
    if not math.isfinite(value) or value <= 1:
        raise _bad(file, prefix + key, value, "the rotary base is a finite number above 1 (RoPE's frequencies are base^(-2i/d))",
                   f'set "{key}": 10000.0 (or the model\'s own base)')  # fmt: skip


def _fraction(config: dict, key: str, file: Path, prefix: str) -> None:
    value = config.get(key)
    if value is not None and not (_is_number(value) and math.isfinite(value) and 0 < value <= 1):
        raise _bad(file, prefix + key, value, "the share of each head that is rotated is a number in (0, 1]",
                   f'set "{key}": 1.0 (or the share the model rotates)')  # fmt: skip


def _check_scaling(params: dict, file: Path, prefix: str) -> None:
    """One ``rope_parameters`` / ``rope_scaling`` object: its type known, its required keys present,
    each value of the kind transformers reads."""
    _base(params, "rope_theta", file, prefix)
    _count(params, "original_max_position_embeddings", file, prefix)
    _fraction(params, "partial_rotary_factor", file, prefix)
    type_key = "rope_type" if "rope_type" in params else "type"
    rope_type = params.get(type_key, "default")
    if not isinstance(rope_type, str) or not rope_type:
        raise _bad(file, prefix + type_key, rope_type, "a rope type is a name", f'set "{type_key}" to one of {", ".join(REQUIRED)}')
    if rope_type not in REQUIRED and not _known_to_transformers(rope_type):
        close = difflib.get_close_matches(rope_type, REQUIRED, n=1)
        raise _bad(file, prefix + type_key, rope_type, "transformers has no such rope type" + (f" (did you mean {close[0]!r}?)" if close else ""),
                   f'set "{type_key}" to one of {", ".join(REQUIRED)}')  # fmt: skip
    for key in REQUIRED.get(rope_type, ()):
        if params.get(key) is None:
            raise UserError(f"'{file}' sets \"{prefix}{type_key}\" to '{rope_type}' without \"{prefix}{key}\", which that type requires",
                            f'add "{key}" to "{prefix.rstrip(".")}" in config.json (the model\'s source has its value)')  # fmt: skip
    factor = params.get("factor")
    if factor is not None and not (_is_number(factor) and math.isfinite(factor) and factor >= 1):
        raise _bad(file, prefix + "factor", factor, "a scaling factor is a number >= 1 (positions are divided by it)", 'set "factor" to e.g. 2.0')
    for key in NUMBER_KEYS:
        value = params.get(key)
        if value is not None and not (_is_number(value) and math.isfinite(value)):
            raise _bad(file, prefix + key, value, "not a finite number", f'set "{key}" to a number')
    for key in ("short_factor", "long_factor"):
        value = params.get(key)
        if value is not None and not (isinstance(value, list) and value and all(_is_number(v) and math.isfinite(v) and v > 0 for v in value)):
            raise _bad(file, prefix + key, value, "LongRoPE's factors are a list of positive numbers, one per rotated pair", f'set "{key}" to the model\'s list')


def _known_to_transformers(rope_type: str) -> bool:
    """Whether the installed transformers computes ``rope_type`` (a release newer than :data:`REQUIRED`
    knows). Imports transformers' rope module (and torch), so it is asked only for a type outside the table."""
    try:
        from transformers.modeling_rope_utils import (  # start-up: transformers only where it runs
            ROPE_INIT_FUNCTIONS,  # start-up: transformers only where it runs
        )
    except ImportError:  # pragma: no cover - transformers is a dependency
        return False
    return rope_type in ROPE_INIT_FUNCTIONS
