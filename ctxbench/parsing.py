"""Parsing of the small value languages the CLI and suite files share: ``16k`` lengths,
comma lists, ``key=value`` method parameters."""

from __future__ import annotations

import json
import re

from .errors import UserError

_LENGTH = re.compile(r"^(\d+)([kKmM]?)$")


def parse_length(text: str) -> int:
    """``16k`` -> 16384 (k = 1024, m = 1024**2); plain positive integers as they are."""
    text = str(text).strip()
    m = _LENGTH.match(text)
    if not m:
        raise UserError(
            f"bad length '{text}'",
            "write a positive whole number of tokens such as 4096, 4k or 16k (k = 1024)",
        )
    value = int(m.group(1)) * {"": 1, "k": 1024, "m": 1024**2}[m.group(2).lower()]
    if value <= 0:
        raise UserError(f"bad length '{text}': it must be at least 1 token", "use e.g. 4k or 16k")
    return value


def split_list(text: str | int | float | list | tuple) -> list[str]:
    """``"a,b, c"`` -> ``["a", "b", "c"]``; lists pass through as strings."""
    if isinstance(text, (list, tuple)):
        items = [str(t).strip() for t in text]
    else:
        items = [t.strip() for t in str(text).split(",")]
    items = [t for t in items if t]
    if not items:
        raise UserError(f"empty list '{text}'", "give at least one value, comma separated")
    return items


def parse_lengths(text) -> list[int]:
    return sorted(dict.fromkeys(parse_length(t) for t in split_list(text)))


def parse_factor(text) -> float:
    """A scale factor: a number >= 1."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UserError(f"bad factor '{text}': not a number", "use a number >= 1 such as 2 or 4") from None
    if not value >= 1.0 or value != value or value == float("inf"):
        raise UserError(
            f"bad factor '{text}': it must be >= 1",
            "a factor s stretches the trained context L to s*L; use 1 for none, 2, 4, ...",
        )
    return value


def parse_factors(text) -> list[float]:
    return list(dict.fromkeys(parse_factor(t) for t in split_list(text)))


def parse_value(text: str):
    """A parameter value: JSON number/bool/list if it parses, else the string."""
    if not isinstance(text, str):
        return text
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_params(items: list[str] | None) -> dict:
    """``["beta_fast=16", "window=2k"]`` -> ``{"beta_fast": 16, "window": "2k"}``."""
    params: dict = {}
    for item in items or []:
        for part in split_list(item):
            if "=" not in part:
                raise UserError(f"bad --param '{part}'", "write key=value, e.g. --param beta_fast=16")
            key, value = part.split("=", 1)
            key = key.strip()
            if not key:
                raise UserError(f"bad --param '{part}': empty key", "write key=value, e.g. --param beta_fast=16")
            params[key] = parse_value(value.strip())
    return params
