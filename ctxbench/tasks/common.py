"""Small helpers task modules share: option parsers and the factor axis of a method."""

from __future__ import annotations

from ..errors import UserError, closest


def factors_for(method, factors) -> list[float | None]:
    """The factors a method runs at: all of them, or ``[None]`` (once) when it ignores the factor.
    Rows of such a cell have an empty ``factor``; tables show them beside every factor."""
    return list(factors) if method.uses_factor else [None]


def parse_positive_int(value, flag: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise UserError(f"{flag} '{value}' is not a whole number", f"pass e.g. {flag} 4") from None
    if number < 1:
        raise UserError(f"{flag} {number} must be >= 1", f"pass e.g. {flag} 4")
    return number


def parse_choice(value, flag: str, choices: tuple[str, ...]) -> str:
    text = str(value).strip().lower()
    if text not in choices:
        guess = closest(text, choices)
        raise UserError(f"unknown {flag} '{value}'", (f"did you mean '{guess}'? " if guess else "") + f"choose one of: {', '.join(choices)}")
    return text


def parse_bool(value, flag: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise UserError(f"{flag} '{value}' is not true or false", f"pass {flag} true or {flag} false")


def accuracy_rows(scores: list[float], tokens: int, seconds: float, **extra) -> list:
    """A cell's ``accuracy`` (mean per-trial score) with its trial count, and its 95% Wilson
    interval as ``accuracy_lo``/``accuracy_hi`` rows (for fractional scores, RULER's
    string_match_all, the interval treats the summed score as the count of successes)."""
    from ..stats import wilson
    from .base import Measurement

    n = len(scores)
    total = float(sum(scores))
    lo, hi = wilson(round(total), n) if n else (float("nan"), float("nan"))
    info = {"trials": n, "correct": total, **extra}
    agg = dict(trial="all", tokens=tokens)
    return [
        Measurement("accuracy", total / n, seconds=round(seconds, 4), extra=info, **agg),
        Measurement("accuracy_lo", lo, extra={"interval": "95% Wilson"}, **agg),
        Measurement("accuracy_hi", hi, extra={"interval": "95% Wilson"}, **agg),
    ]
