"""Parsers of task option values that tasks share: positive ints, choices, booleans, ``--chat`` and
the needle depths (``--depths N`` or ``--depth 0,0.5,1``). Each raises one :class:`~ctxbench.errors.UserError`
naming the flag and the fix."""

from __future__ import annotations

import json
import re

from ctxbench.errors import UserError, closest, unknown
from ctxbench.parsing import short, split_list
from ctxbench.tasks.base import Option


def parse_positive_int(value, flag: str, most: int | None = None, why: str = "") -> int:
    """A whole number >= 1, and at most ``most`` where a count has a ceiling that means something
    (``why`` says what): a count the user types must never make a plan or a run that cannot end,
    so an absurd one is refused at once rather than planned."""
    text = str(value).strip()
    if re.fullmatch(r"\+?\d{19,}", text):  # past any ceiling (and past int()'s 4300 digits): said as too large, shortened
        if most is not None:
            raise UserError(f"{flag} {short(text, 40)} is above the most ctxbench runs, {most}" + (f" ({why})" if why else ""),
                            f"pass {flag} {most} or fewer")  # fmt: skip
        raise UserError(f"{flag} {short(text, 40)} is too large to be a count", f"pass e.g. {flag} 4")
    try:
        number = int(text)
    except ValueError:
        raise UserError(f"{flag} '{short(text, 40)}' is not a whole number", f"pass e.g. {flag} 4") from None
    if number < 1:
        raise UserError(f"{flag} {number} must be >= 1", f"pass e.g. {flag} 4")
    check_most(number, flag, most, why)
    return number


def check_most(number: int, flag: str, most: int | None, why: str = "") -> None:
    """Refuse ``number`` above the ceiling ``most`` of ``flag`` (one line naming the ceiling)."""
    if most is not None and number > most:
        raise UserError(f"{flag} {number} is above the most ctxbench runs, {most}" + (f" ({why})" if why else ""),
                        f"pass {flag} {most} or fewer")  # fmt: skip


# The most needle depths a cell grid takes: 1000 depths are 0.1% of a prompt apart, finer than a
# needle line's own length at any length a model reads.
MOST_DEPTHS = 1000


def text_parser(flag: str, example: str):
    """A parser for an option whose value is text (a path, a hub id, a name): a suite's ``data = 42``
    or ``data = ["a", "b"]`` is one line naming the key, never looked up on the hub as ``"42"``."""

    def parse(value) -> str:
        if not isinstance(value, str):
            kind = {bool: "true/false", int: "a number", float: "a number", list: "a list", dict: "a table"}.get(type(value), type(value).__name__)
            raise UserError(f"{flag} is {kind} ({short(json.dumps(value, default=str), 40)}), not text (a path or a name)",
                            f"write it as text, e.g. {example}")  # fmt: skip
        return value.strip()  # empty: each reader says what an empty one means

    return parse


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


def parse_chat(value) -> bool | None:
    """``--chat``/``--no-chat``, a suite's ``chat = true|false``, or ``"auto"`` (the default: decided
    by :func:`settle_chat` once the model is loaded)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    return parse_bool(value, "--chat")


def parse_think_budget(value) -> int:
    """``--think-budget N``: the most tokens a model thinks before it must answer, N >= 0 (0: no thinking)."""
    text = str(value).strip()
    try:
        number = int(text)
    except ValueError:
        raise UserError(f"--think-budget '{short(text, 40)}' is not a whole number of tokens", "pass e.g. --think-budget 1024") from None
    if number < 0:
        raise UserError(f"--think-budget {number} is negative", "pass a number of tokens >= 0 (0: no thinking), e.g. --think-budget 1024")
    return number


def parse_think_tags(value) -> tuple[str, str]:
    """``--think-tags OPEN,CLOSE`` (a suite's two-item list too): the tags of the model's reasoning."""
    items = [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value).split(",")
    items = [v.strip() for v in items]
    if len(items) != 2 or not all(items) or items[0] == items[1]:
        raise UserError(f"--think-tags '{','.join(items)}' is not two different tags OPEN,CLOSE", "pass e.g. --think-tags '<think>,</think>'")
    return items[0], items[1]


PROMPT_MODES = ("auto", "chat", "completion")


def parse_prompt_mode(value) -> tuple[str, ...]:
    """``--prompt-mode chat|completion|auto`` (a comma list runs each as its own cells): ``chat`` the
    model's chat template, ``completion`` RULER's raw prompt with its answer prefix, ``auto`` the
    task's rule (:func:`ctxbench.tasks.common.settle_chat`)."""
    items = [str(v).strip().lower() for v in value] if isinstance(value, (list, tuple)) else split_list(str(value), what="--prompt-mode")
    for item in items:
        parse_choice(item, "--prompt-mode", PROMPT_MODES)
    if len(set(items)) != len(items):
        raise UserError("a --prompt-mode is given twice", "list each mode once, e.g. --prompt-mode chat,completion")
    return tuple(items)


def chat_of_mode(mode: str) -> bool | None:
    """The ``chat`` setting a prompt mode names (``auto``: None, left to the model)."""
    return {"chat": True, "completion": False}.get(mode)


def mode_of_chat(chat: bool | None) -> str:
    """The prompt mode a settled ``chat`` setting is (what every generated row records)."""
    return "auto" if chat is None else ("chat" if chat else "completion")


def variants_parser(family: str, names: tuple[str, ...]):
    """The parser of a task's ``--variant``: a comma list of ``names`` (or ``all``), each known
    (else did-you-mean), none twice; a suite's list passes through the same checks."""
    def parse(value) -> tuple[str, ...]:
        items = split_list(value, what="--variant") if not isinstance(value, (list, tuple)) else [str(v) for v in value]
        if items == ["all"]:
            return names
        for item in items:
            if item not in names:
                raise unknown(f"{family} variant", item, [*names, "all"])
        if len(set(items)) != len(items):
            raise UserError("a --variant is given twice", "list each variant once")
        return tuple(items)

    return parse


def parse_depths(depths: int | None = None, depth: str | None = None) -> list[float]:
    """``depths`` N evenly spaced in [0, 1], or ``depth`` an explicit comma list (``0.1,0.5``);
    default 5 depths (0, 0.25, 0.5, 0.75, 1)."""
    if depths is not None and depth is not None:
        raise UserError("give --depths N or --depth LIST, not both", "e.g. --depths 5 or --depths 0.1,0.5,0.9")
    if depth is not None:
        values = []
        parts = str(depth).split(",")
        if len(parts) > MOST_DEPTHS:
            raise UserError(f"{len(parts)} depths are more than the most ctxbench runs, {MOST_DEPTHS} (depths 0.1% apart)",
                            f"list {MOST_DEPTHS} depths or fewer, e.g. --depths 11")  # fmt: skip
        for part in parts:
            try:
                value = float(part)
            except ValueError:
                raise UserError(f"bad depth '{part}': not a number", "depths are fractions in [0, 1], e.g. 0.5") from None
            if not 0.0 <= value <= 1.0 or value != value:
                raise UserError(f"depth {part} is outside [0, 1]", "0 puts the needle at the start of the haystack, 1 at its end")
            values.append(value)
        if len(set(values)) != len(values):
            raise UserError(f"a depth is given twice in '{depth}'", "list each depth once")
        return sorted(values)
    n = 5 if depths is None else depths
    if n < 1:
        raise UserError(f"--depths {n} must be >= 1", "e.g. --depths 5 for 0, 0.25, 0.5, 0.75, 1")
    check_most(n, "--depths", MOST_DEPTHS, "depths 0.1% apart")
    return [0.5] if n == 1 else [round(i / (n - 1), 4) for i in range(n)]


def parse_depths_option(value) -> tuple[float, ...]:
    """``--depths 5`` (N evenly spaced) or ``--depths 0.1,0.5`` (a list; also a TOML list)."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise UserError("empty list of depths", "give at least one depth, e.g. [0.5]")
        return tuple(parse_depths(None, ",".join(map(str, value))))
    text = str(value).strip()
    if "," in text or "." in text:
        return tuple(parse_depths(None, text))
    return tuple(parse_depths(parse_positive_int(text, "--depths", MOST_DEPTHS, "depths 0.1% apart"), None))


def _explicit_depths(value) -> tuple[float, ...]:
    """``--depth 0.1,0.5`` as the first release read it: always an explicit list (``--depth 1`` is depth 1.0)."""
    return tuple(parse_depths(None, ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)))


def depths_option(help: str):  # noqa: A002
    """The shared ``--depths`` option: N evenly spaced depths or a comma list. Each depth is its
    own cell (the ``depth`` column), so the list itself is not part of the cell key. ``--depth``
    (the first release's explicit list) is kept as a hidden alias."""

    return Option("depths", help, parse_depths_option, identity=False, aliases=("--depth",), alias_parse=_explicit_depths)


# ---- messages in a suite's words ----------------------------------------------------------------

_NOT_VALUES = {"or", "and", "is", "are", "must", "bounds", "for", "to", "with", "the", "a", "an", "not", "only", "needs",
               "places", "scores", "name", "names", "given", "slides", "of", "in", "as", "at", "be", "takes", "asks",
               "counts", "was", "it", "than", "needle", "needles", "value", "list", "by", "on"}  # fmt: skip
_LISTS = {"lengths", "factors", "metrics", "variants"}  # suite keys whose TOML value is a list
_FLAG = re.compile(r"--([a-z][a-z0-9-]*)(?: ('[^']*'|[\w.,:+/~=\[\]-]+))?")


def suite_wording(text: str, keys: dict[str, str]) -> str:
    """``text`` (an error's what or fix, worded for the command line) in a suite's words: each
    ``--flag`` that ``keys`` maps to a suite key becomes that key, with its value as TOML writes it
    (``--trials auto`` -> ``trials = "auto"``, ``--len 2k,4k`` -> ``lengths = ["2k", "4k"]``,
    ``--param window=512`` -> ``params = { window = 512 }``). An option parser words its errors for
    the command line, where most are raised; a suite's user never typed ``--trials`` and must be
    told the key to edit and a value TOML accepts, so the fix they are given works when applied."""

    def toml(key: str, value: str) -> str:
        value = value.strip("'")
        items = value.split(",") if key in _LISTS or "," in value else [value]
        shown = [v if re.fullmatch(r"-?\d+(\.\d+)?([eE]-?\d+)?|true|false", v) else json.dumps(v) for v in items]
        return f"[{', '.join(shown)}]" if key in _LISTS or len(shown) > 1 else shown[0]

    def swap(m: re.Match) -> str:
        flag, value = "--" + m.group(1), m.group(2)
        if flag == "--param" and value and "=" in value:
            name, _, v = value.partition("=")
            return f"params = {{ {name} = {toml('', v)} }}"
        if flag not in keys:
            return m.group(0)
        key = keys[flag]
        if not value or value.strip("'").lower() in _NOT_VALUES or value.startswith("--"):
            return key + (f" {value}" if value else "")
        return f"{key} = {toml(key, value.rstrip('.,;'))}" + ("," if value.endswith(",") else "")

    return _FLAG.sub(swap, text)
