"""Method parameters, each declared once (:class:`Param`): kind, default, range and meaning, and the
checks that turn a loose value into a valid one.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxbench.errors import UserError, closest
from ctxbench.parsing import MOST_FACTOR, MOST_LENGTH, parse_length

Array = Any  # a float32 array of the namespace ``xp``: a torch tensor, or NumPy in ``ctxbench freqs``
FreqFn = Callable[..., tuple["Array", float]]  # fn(geom, factor, seq_len, *, xp, **params)
Params = dict[str, Any]  # a method's parameters: name -> value
Namespace = Any  # an array API namespace ``xp``: array_api_compat.torch, or .numpy in ``ctxbench freqs``

# The finite ends of the declared ranges, each a number that means something for what the parameter
# counts, so that no value inside a declared range overflows a formula (``1e308`` rotations did):
# * rotations of a pair in L (YaRN's betas, ntk-by-parts' alpha and beta, Llama 3's frequency
#   factors): a pair turns at most L/(2 pi) times in L, 2.7 million at the longest length ctxbench
#   takes (16m tokens); 1e6 is far past every published value (YaRN: 32; Llama 3.1: 4).
MOST_ROTATIONS = 1e6
# * a factor that multiplies cos and sin (yarn's and LongRoPE's attention_factor): logits are
#   multiplied by its square; YaRN's own 0.1 ln(s) + 1 is 2.7 at the largest factor.
MOST_ATTENTION_FACTOR = 10.0
# * a rope base: the slowest pair of a base of 1e12 turns once in about 6e12 tokens, a million
#   times the longest length; published bases reach 1e9.
MOST_BASE = 1e12
# * a ratio that stretches positions as a factor does (ntk-alpha's alpha, leaky-rerope's k,
#   self-extend's group, Ms-PoE's ratios): at most MOST_FACTOR, as the factor itself.
# * a length in tokens (windows, chunk sizes, floor_scale): at most MOST_LENGTH, as every length.
# * an exponent of the pair index (ntk-mixed's b): (d/2)^b must stay finite in float32 for heads of
#   up to 4096 dims; 1 is fixed NTK scaling, Su's suggestion 0.625.
MOST_MIXED_B = 10.0
# * a layer index: more layers than any model has (Llama 3.1 405B: 126).
MOST_LAYER = 1023


KINDS = ("float", "int", "length", "bool", "choice", "factors", "curve")
TUNE_SCALES = ("log", "linear", "grid")
# A ``curve`` parameter (LongRoPE's knots) is searched as ``knots`` dimensions on the ``log`` or
# ``linear`` scale, one per knot, each within ``bounds(L, T)``; the point is their values sorted.


@dataclass(frozen=True)
class Tune:
    """Where ``ctxbench tune`` searches a parameter, in terms of the model's trained length ``L`` and the
    target length ``T`` (both in tokens): ``bounds(L, T) -> (low, high)``, searched uniformly on a
    ``log`` or ``linear`` scale, or ``grid``: the whole numbers ``values(L, T)``. ``why`` says where the
    range comes from (a paper's values, the method's own rule), for ``ctxbench tune --help`` and the docs."""

    scale: str
    why: str
    bounds: Callable[[int, int], tuple[float, float]] | None = None
    values: Callable[[int, int], tuple[int, ...]] | None = None
    knots: int = 0  # a curve parameter: how many knots (dimensions) the search gives it

    def __post_init__(self) -> None:
        if self.scale not in TUNE_SCALES:
            raise ValueError(f"unknown tuning scale {self.scale!r} (scales: {', '.join(TUNE_SCALES)})")
        if (self.scale == "grid") != (self.values is not None) or (self.scale != "grid") != (self.bounds is not None):
            raise ValueError("a grid range gives values(L, T), a log or linear one bounds(L, T)")


def tune_range(scale: str, why: str, low: object, high: object = None, knots: int = 0) -> Tune:
    """A :class:`Tune` from plain numbers or functions of ``(L, T)``: ``tune_range("log", why, 4, 64)``,
    ``tune_range("grid", why, lambda L, T: (L // 8, L // 4))``; ``knots`` for a curve parameter."""
    def at(x: object) -> Callable[[int, int], Any]:
        return x if callable(x) else (lambda L, T: x)

    if scale == "grid":
        return Tune(scale, why, values=at(low))
    return Tune(scale, why, bounds=lambda L, T: (float(at(low)(L, T)), float(at(high)(L, T))), knots=knots)


@dataclass(frozen=True)
class Param:
    """One method parameter, declared once: the values it takes and what it means.

    ``kind``: ``float`` (a real number), ``int`` (a whole number), ``length`` (tokens: ``512`` or
    ``2k``), ``bool`` (true/false), ``choice`` (one of ``choices``) or ``factors`` (LongRoPE's
    per-pair factors: a list of numbers, or a JSON file of them). ``low`` bounds numbers from below
    (``low_inclusive``: ``>=`` rather than ``>``), ``high`` from above (always ``<=``); ``greater_than`` names a parameter of the same
    method this one must exceed (``beta > alpha``), checked after defaults fill in. A ``None``
    default means the method derives the value (shown and accepted as ``auto``) unless
    ``required``, when the user must give it. ``example`` is the value error messages suggest.
    """

    name: str
    default: Any  # a value of its kind (loose: a number, text, a list)
    kind: str
    help: str
    low: float | None = None
    low_inclusive: bool = True
    high: float | None = None
    choices: tuple[str, ...] = ()
    greater_than: str | None = None
    required: bool = False
    example: Any = None
    tune: Tune | None = None  # where ``ctxbench tune`` searches it; None: it is not tuned (kept at its default)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:  # a typo in a declaration would otherwise accept anything
            raise ValueError(f"parameter {self.name}: unknown kind {self.kind!r} (kinds: {', '.join(KINDS)})")

    @property
    def auto(self) -> bool:
        """The method derives the value when it is not given (``None``, or ``auto`` on the command line)."""
        return self.default is None and not self.required

    def type_text(self, with_auto: bool = True) -> str:
        """What values it takes: ``a number > 0``, ``a whole number >= 1``, ``true or false``...
        (``, or auto`` added where the method derives it, unless ``with_auto`` is False)."""
        bounds = []
        if self.low is not None:
            bounds.append(f"{'>=' if self.low_inclusive else '>'} {format_value(self.low)}")
        if self.greater_than:
            bounds.append(f"> {self.greater_than}")
        if self.high is not None:
            bounds.append(f"<= {self.bound_text(self.high)}")
        bound = (" " + " and ".join(bounds)) if bounds else ""
        text = {
            "float": f"a number{bound}",
            "int": f"a whole number{bound}",
            "length": f"a length in tokens{bound} (e.g. 512 or 2k)",
            "bool": "true or false",
            "choice": f"one of: {', '.join(self.choices)}",
            "factors": f"a list of numbers > 0 and <= {MOST_FACTOR}, one per rotary pair, or a JSON file of them",
            "curve": f"a non-decreasing list of numbers > 0 and <= {MOST_FACTOR}",
        }[self.kind]
        return text + (", or auto" if self.auto and with_auto else "")

    def bound_text(self, x: float) -> str:
        """A bound as messages show it, in a form the parameter takes back: ``16m`` for a length,
        ``1e+06``, ``16777216`` (never a rounded ``1.67772e+07`` that would not be the bound)."""
        if self.kind == "length" and x >= 2**20 and x % 2**20 == 0:
            return f"{int(x) // 2**20}m"
        if isinstance(x, float) and x.is_integer() and float(f"{x:g}") == x and abs(x) >= 1e6:
            return f"{x:g}"
        return format_value(x)

    def shown_default(self) -> str:
        """The default as ``ctxbench methods`` shows it: ``32``, ``true``, ``auto`` or ``required``."""
        if self.default is None:
            return "required" if self.required else "auto"
        return format_value(self.default)

    def bad(self, method: str, value: object, problem: str) -> UserError:
        """The one-line error for a bad value: method, parameter, value, and what it takes."""
        example = self.example if self.example is not None else self.default
        return UserError(
            f"bad value for {method} parameter {self.name}: {show_value(value)} {problem}",
            f"{self.name} is {self.type_text()} ({self.help}); e.g. {self.name}={format_value(example)}",
        )

    def check(self, value: Any, method: str) -> Any:
        """``value`` if it is one this parameter takes, as the method reads it (a ``length`` in
        tokens, ``auto`` as ``None``, a list of factors as a tuple), else the :meth:`bad` error."""
        if self.auto and (value is None or (isinstance(value, str) and value.strip().lower() == "auto")):
            return None
        try:
            return _CHECKS[self.kind](self, value)
        except ValueError as exc:
            raise self.bad(method, value, str(exc)) from None

    def is_grid(self, value: object) -> bool:
        """A list given for this parameter means one run per item (``beta_fast = [16, 32]``); for
        ``factors``, whose one value is a list of numbers, only a list of files or of lists is a grid."""
        if not isinstance(value, (list, tuple)):
            return False
        if self.kind in ("factors", "curve"):
            return all(isinstance(v, (list, tuple, str)) for v in value)
        return True


def _is_number(value: object) -> bool:
    """A real number, and not a bool (``True`` is an int in Python, but never a number here)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def show_value(value: object) -> str:
    """A value as an error quotes it: ``'abc'`` for text, ``''`` for empty, ``true``, ``nan``, ``[1, 2]``."""
    if isinstance(value, str):
        return repr(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show_value(v) for v in value) + "]"
    return str(value)


# The checks of each kind: a loose value (command line, suite, API) in, the value the method reads
# out, or ValueError saying what is wrong; loose values are Any.
def _bounded(p: Param, x: Any) -> Any:
    if not math.isfinite(x):
        raise ValueError("is not a finite number")
    if p.low is not None and not (x >= p.low if p.low_inclusive else x > p.low):
        raise ValueError(f"must be {'>=' if p.low_inclusive else '>'} {format_value(p.low)}")
    if p.high is not None and not x <= p.high:
        raise ValueError(f"must be <= {p.bound_text(p.high)}")
    return x


def _empty(value: object) -> bool:
    return isinstance(value, str) and not value.strip()  # ``--param beta_fast=``


def _check_float(p: Param, value: Any) -> Any:
    if not _is_number(value):
        raise ValueError("is empty" if _empty(value) else "is not a number")
    return _bounded(p, value if isinstance(value, (int, float)) else float(value))


def _check_int(p: Param, value: Any) -> Any:
    if not _is_number(value) or not math.isfinite(value) or int(value) != value:
        raise ValueError("is empty" if _empty(value) else "is not a whole number")
    return _bounded(p, int(value))


def _check_length(p: Param, value: Any) -> Any:
    if isinstance(value, str) and value.strip():
        try:
            value = parse_length(value)
        except UserError as exc:  # "bad length ..." is not a length; "... above the longest" is one, too long
            raise ValueError("is not a length" if exc.what.startswith("bad ") else f"must be <= {p.bound_text(p.high or MOST_LENGTH)}") from None
    return _check_int(p, value)


def _check_bool(p: Param, value: Any) -> Any:
    if not isinstance(value, bool):
        raise ValueError("is not true or false")
    return value


def _check_choice(p: Param, value: Any) -> Any:
    if value not in p.choices:
        guess = closest(str(value), p.choices)
        raise ValueError("is not one of the choices" + (f" (did you mean '{guess}'?)" if guess else ""))
    return value


def _check_factors(p: Param, value: Any) -> Any:
    if _empty(value):
        raise ValueError("is empty")
    if not isinstance(value, (str, list, tuple)):
        raise ValueError("is neither a list of numbers nor a file name")
    read_factors(value)  # a file must exist and hold factors now, not after the model has loaded
    return tuple(value) if isinstance(value, list) else value


def _check_curve(p: Param, value: Any) -> Any:
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError("is not a list of numbers") from None
    elif isinstance(value, str) and "|" in value:  # as labels print it: knots=1|1.5|3
        try:
            value = [float(v) for v in value.split("|")]
        except ValueError:
            raise ValueError("is not a list of numbers") from None
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError("is empty" if isinstance(value, (list, tuple)) or _empty(value) else "is not a list of numbers")
    if not all(_is_number(v) and math.isfinite(v) for v in value):
        raise ValueError("holds something that is not a finite number")
    if not all(0 < v <= MOST_FACTOR for v in value):
        raise ValueError(f"holds a number outside (0, {MOST_FACTOR}]")
    if any(b < a for a, b in zip(value, value[1:], strict=False)):
        raise ValueError("is not non-decreasing (a knot below the one before it)")
    return tuple(float(v) for v in value)


_CHECKS = {"float": _check_float, "int": _check_int, "length": _check_length, "bool": _check_bool,
           "choice": _check_choice, "factors": _check_factors, "curve": _check_curve}  # fmt: skip


# Parameters several methods share, declared once.
# Tuning ranges of YaRN's betas: the paper's 32 and 1 (Llama 2) sit inside, and beta_slow's range ends
# below beta_fast's, so that every point keeps beta_fast > beta_slow.
# YaRN's betas as the paper sets them for Llama 2 (arXiv 2309.00071, sec. 3.2: alpha = 1, beta = 32),
# and transformers' defaults: the one place they are written (the frequency functions' defaults read them).
YARN_BETA_FAST, YARN_BETA_SLOW = 32.0, 1.0
TUNE_BETA_FAST = tune_range("log", "rotations in L: 8 to 64 around the YaRN paper's 32", 8, 64)
TUNE_BETA_SLOW = tune_range("log", "rotations in L: 0.25 to 4 around the YaRN paper's 1 (below beta_fast's range)", 0.25, 4)
BETA_FAST = Param("beta_fast", YARN_BETA_FAST, "float", "rotations in L above which a pair is kept, not interpolated",
                  low=0, low_inclusive=False, high=MOST_ROTATIONS, greater_than="beta_slow", tune=TUNE_BETA_FAST)  # fmt: skip
BETA_SLOW = Param("beta_slow", YARN_BETA_SLOW, "float", "rotations in L below which a pair is fully interpolated", low=0, low_inclusive=False,
                  high=MOST_ROTATIONS, tune=TUNE_BETA_SLOW)  # fmt: skip
WINDOW = Param("window", None, "length", "neighbours within w tokens keep exact positions; auto: L/4", low=1, high=MOST_LENGTH,
               example="1k", tune=tune_range("grid", "L/16, L/8, L/4 (the default), L/2", lambda L, T: (L // 16, L // 8, L // 4, L // 2)))  # fmt: skip
# ssmax's strength: Llama 4 ships 0.1; at 1 the query 16m tokens in is already scaled by 1 + ln(1 + 2^24), 17.6.
ATTN_SCALE = Param("attn_scale", 0.1, "float", "strength: the query at p is scaled by 1 + attn_scale*ln(1+floor((p+1)/floor_scale))",
                   low=0, high=1, tune=tune_range("linear", "0 (no scaling) to 0.5, around Llama 4's 0.1", 0, 0.5))
FLOOR_SCALE = Param("floor_scale", 8192, "length", "tokens per step of the query scale (Llama 4: 8192, whatever L)", low=1,
                    high=MOST_LENGTH, example="8k")
STRING_WINDOW = Param("window", None, "length", "S (the authors' shifted_offset): pairs at i - j < S keep exact positions, "
                      "farther ones move down by S - W; auto: int(0.33*L)", low=1, high=MOST_LENGTH, example="1k",
                      tune=tune_range("grid", "L/8, L/4, the authors' int(0.33*L), L/2",
                                      lambda L, T: (L // 8, L // 4, int(0.33 * L), L // 2)))  # fmt: skip
STRING_LOCAL = Param("local_value", None, "length", "W: the relative position the farthest-shifted pairs start at (the authors' "
                     "local_value; 128, 256 or 512 suggested); auto: 128, at most S/2", low=0, high=MOST_LENGTH, example=128,
                     tune=tune_range("grid", "the authors' suggested 128, 256 and 512, and 64", (64, 128, 256, 512)))  # fmt: skip
DCA_CHUNK = Param("chunk_size", None, "length", "the authors' chunk_size: chunks hold chunk_size - local_window tokens and "
                  "no relative position exceeds chunk_size; auto: 3L/4", low=1, high=MOST_LENGTH, example="3k",
                  tune=tune_range("grid", "L/2, 5L/8, 3L/4 (the authors' default), 7L/8",
                                  lambda L, T: (L // 2, 5 * L // 8, 3 * L // 4, 7 * L // 8)))  # fmt: skip
DCA_LOCAL = Param("local_window", None, "length", "the authors' local_window (vLLM's local_size): the first local_window + 1 "
                  "queries of a chunk see the previous chunk at their true distance; auto: L/8, at most chunk_size/2", low=0,
                  high=MOST_LENGTH, example=512)  # fmt: skip
LONGROPE_FACTORS = Param("factors", None, "factors", "LongRoPE's searched per-pair factors; auto: the model config's",
                         example="factors.json")  # fmt: skip
# LongRoPE's search space kept small (issue 46): a monotone curve through a few knots instead of d/2
# free factors. Each knot between 1 (no interpolation) and 2T/L (a pair stretched past the target).
LONGROPE_KNOTS = Param("knots", None, "curve", "per-pair factors as a non-decreasing curve through these knots, spread evenly "
                       "from the first pair to the last (log-linear between knots); instead of factors",
                       example="[1,1.5,3,4]", tune=tune_range("log", "1 (pair kept) to 2T/L, per knot; 4 knots, sorted",
                                                              1, lambda L, T: 2 * T / L, knots=4))  # fmt: skip


def format_value(value: object) -> str:
    """A parameter value as labels show it: ``16`` for 16.0, ``0.25``, ``true``, ``a|b`` for lists."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "|".join(format_value(v) for v in value)
    return str(value)


def read_factors(factors: object) -> tuple[list[float], list[float]]:
    """LongRoPE's ``(long, short)`` per-pair factors from a list of numbers (both the same) or the
    path of a JSON file holding such a list or ``{"long_factor": [...], "short_factor": [...]}``
    (short defaults to long). Every factor is a finite number > 0: it divides a frequency.
    Raises ValueError saying what is wrong (the caller names the method and parameter)."""
    if isinstance(factors, (list, tuple)):
        values = _factor_list(factors, "")
        return values, values
    path = Path(str(factors)).expanduser()
    if not path.is_file():
        raise ValueError("is not a file")
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"is not a JSON file ({exc})") from None
    if isinstance(data, list):
        values = _factor_list(data, " in its list")
        return values, values
    if not isinstance(data, dict) or "long_factor" not in data:
        raise ValueError("has no 'long_factor' list")
    long = _factor_list(data["long_factor"], " in its long_factor")
    short = long if data.get("short_factor") is None else _factor_list(data["short_factor"], " in its short_factor")
    if len(short) != len(long):
        raise ValueError(f"has {len(long)} long_factor numbers but {len(short)} short_factor ones")
    return long, short


def _factor_list(values: object, where: str) -> list[float]:
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"has no list of numbers{where}")
    if not values:
        raise ValueError(f"has an empty list{where}" if where else "is empty")
    for x in values:  # each divides its pair's frequency as a factor would: at most MOST_FACTOR
        if not _is_number(x) or not math.isfinite(x) or x <= 0 or x > MOST_FACTOR:
            raise ValueError(f"has {show_value(x)}{where}, not a number > 0 and <= {MOST_FACTOR}")
    return [float(x) for x in values]
