"""Suite files: a whole grid in TOML, validated with errors that name the file, the key and the fix.

    description = "Nightly grid"    # optional: one line for ``ctxbench suites``
    model = "smollm2-135m"          # optional: device, dtype, attn, seed, out, trust_remote_code
    out = "results/nightly.csv"     # default output (``--out`` overrides), relative to the working folder

    [[methods]]                     # every method of the suite, each with its parameters
    name = "yarn"
    params = { beta_fast = [16, 32] }   # a list is a grid: one entry per value (labels yarn(beta_fast=16), ...)

    [[methods]]
    name = "self-extend"
    params = { group = [2, 4], window = [512, 1024] }   # 4 entries
    label = "se"                    # optional; grid points get se(group=2,window=512), ...

    [ppl]                           # a section per task: its options (see ``ctxbench ppl --help``)
    factors = [2]
    lengths = ["4k", "8k"]
    methods = ["yarn"]              # optional subset, by name (every entry of it) or label

Any registered task (``ctxbench.tasks`` entry point) has its section, with its own options.
Values are typed as TOML types them (``trust_remote_code = true``, not ``"no"``; ``seed = 3``, not
``"3"``), lists are non-empty, and an entry given twice is an error, as ``--method yarn,yarn`` is:
all checked before anything loads.

The built-in suites ship inside the package (``ctxbench/suites/*.toml``, ``tasks/*.toml`` in a
checkout links to them): ``load_suite("nightly")`` reads the built-in one when no file of that name
exists, from any folder.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ctxbench.backends import BACKENDS
from ctxbench.backends import DEFAULT as DEFAULT_BACKEND
from ctxbench.defaults import (
    DEFAULT_ATTN,
    DEFAULT_DEVICE,
    DEFAULT_DTYPE,
    DEFAULT_FACTOR,
    DEFAULT_MODEL,
    DEFAULT_SEED,
)
from ctxbench.errors import UserError, closest, unknown
from ctxbench.parsing import (
    NotAFile,
    check_name_lengths,
    decode_text,
    expand_path,
    kind_of,
    parse_factors,
    parse_lengths,
    read_bounded,
    short,
)
from ctxbench.runner.grid import Job
from ctxbench.runner.settings import (
    DEVICES,
    DTYPES,
    build_settings,
    check_attn,
    check_labels,
    is_device,
    method_entries,
)
from ctxbench.tasks import registry
from ctxbench.tasks.options import suite_wording

if TYPE_CHECKING:
    from ctxbench.methods.setting import MethodSetting
    from ctxbench.tasks.base import Task

T = TypeVar("T")

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TOP_KEYS = {"description", "model", "device", "dtype", "attn", "seed", "out", "trust_remote_code", "methods", "backend",
            "tensor_parallel"}
METHOD_KEYS = {"name", "params", "label"}
GRID_KEYS = {"factors", "lengths", "methods"}
SUITES = Path(__file__).resolve().parents[1] / "suites"  # the built-in suites, package data of the wheel
FORMAT_HINT = "`ctxbench suites quick` prints a built-in suite"  # works after a wheel install, unlike a checkout path


@dataclass(frozen=True)
class Suite:
    path: Path
    description: str = ""
    model: str = DEFAULT_MODEL
    device: str = DEFAULT_DEVICE
    dtype: str = DEFAULT_DTYPE
    attn: str = DEFAULT_ATTN
    seed: int = DEFAULT_SEED
    out: str | None = None
    trust_remote_code: bool = False
    backend: str = DEFAULT_BACKEND  # a name of ctxbench.backends.BACKENDS
    tensor_parallel: int = 1
    jobs: tuple[Job, ...] = field(default_factory=tuple)


def _bad(path: Path, what: str, fix: str) -> UserError:
    return UserError(f"{path}: {what}", fix)


def _toml(value: object) -> str:
    """A value as TOML writes it, for errors: ``"no"``, ``true``, ``1.5``, ``[]``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }" if value else "{}"
    return str(value)


def _check_keys(path: Path, where: str, got: dict[str, Any], allowed: set[str]) -> None:
    for key in got:
        if key not in allowed:
            guess = closest(key, allowed)
            hint = f"did you mean '{guess}'? " if guess else ""
            raise _bad(path, f"unknown key '{key}' in {where}", f"{hint}allowed keys: {', '.join(sorted(allowed))}")


def _suite_keys() -> dict[str, str]:
    """Each task option's ``--flag`` (and old spelling) -> its suite key, and ``--len``/``--factor``
    -> ``lengths``/``factors``: what an error worded for the command line is said as here."""
    keys = {"--len": "lengths", "--factor": "factors"}
    for task in registry().values():
        for o in task.options:
            keys.update({flag: o.name for flag in (o.cli_flag, *o.aliases)})
    return keys


def _value(path: Path, where: str, key: str, fn: Callable[[Any], T], value: object) -> T:
    try:
        return fn(value)
    except UserError as exc:  # worded for the command line: said with the suite's keys, which the user edits
        keys = _suite_keys()
        raise _bad(path, f"bad {key} in {where}: {suite_wording(exc.what, keys)}", suite_wording(exc.fix, keys)) from None
    except (TypeError, ValueError):
        raise _bad(path, f"bad {key} in {where}: {value!r}", f"see the suite format ({FORMAT_HINT})") from None


# ---- top-level keys: each a TOML type, checked before anything loads ---------------------------

def _text(path: Path, key: str, value: object, example: str) -> str:
    if not isinstance(value, str) or not value.strip():
        problem = "is empty" if isinstance(value, str) else f"is {_kind(value)}, not text"
        raise _bad(path, f"{key} = {_toml(value)} {problem}", f'write {key} = "{example}" (quoted text)')
    return value


def _choice(path: Path, key: str, value: object, ok: Callable[[str], bool], choices: tuple[str, ...]) -> str:
    value = _text(path, key, value, choices[0])  # (the same value, known to be text)
    if not ok(value):
        guess = closest(value, choices)
        hint = f"did you mean '{guess}'? " if guess else ""
        raise _bad(path, f"unknown {key} = {_toml(value)}", f"{hint}choose one of: {', '.join(choices)}")
    return value


def _kind(value: object) -> str:
    """``an integer``, ``a string``...: the TOML type of a value, for errors."""
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "a list", dict: "a table"}.get(
        type(value), f"a {type(value).__name__}")


def _top_level(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """The typed top-level values (those given): booleans are TOML booleans, the seed an integer,
    the rest non-empty text from their choices; the attention kernel must run on the device."""

    out: dict[str, Any] = {}
    if "description" in data:
        out["description"] = _text(path, "description", data["description"], "what the suite measures")
    if "model" in data:
        out["model"] = _text(path, "model", data["model"], DEFAULT_MODEL)
    if "out" in data:
        out["out"] = _text(path, "out", data["out"], "results/suite.csv")
    if "device" in data:
        out["device"] = _choice(path, "device", data["device"], is_device, (*DEVICES, "cuda:N"))
    if "dtype" in data:
        out["dtype"] = _choice(path, "dtype", data["dtype"], lambda v: v in DTYPES, DTYPES)
    if "backend" in data:
        out["backend"] = _choice(path, "backend", data["backend"], lambda v: v in BACKENDS, tuple(BACKENDS))
    if "tensor_parallel" in data:
        tp = data["tensor_parallel"]
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise _bad(path, f"tensor_parallel = {_toml(tp)} is not a whole number >= 1", "write the number of GPUs, e.g. tensor_parallel = 2")
        out["tensor_parallel"] = tp
    if "seed" in data:
        seed = data["seed"]
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            problem = "is negative" if isinstance(seed, int) and not isinstance(seed, bool) else f"is {_kind(seed)}, not an integer"
            raise _bad(path, f"seed = {_toml(seed)} {problem}", "write a whole number >= 0 without quotes, e.g. seed = 0")
        out["seed"] = seed
    if "trust_remote_code" in data:
        flag = data["trust_remote_code"]
        if not isinstance(flag, bool):
            raise _bad(path, f"trust_remote_code = {_toml(flag)} is {_kind(flag)}, not a boolean",
                       "write trust_remote_code = true or false, without quotes")  # fmt: skip
        out["trust_remote_code"] = flag
    if "attn" in data:
        attn = _text(path, "attn", data["attn"], "sdpa")
        try:
            check_attn(attn, out.get("device", DEFAULT_DEVICE), flag="attn =")
        except UserError as exc:
            raise _bad(path, exc.what, exc.fix) from None
        out["attn"] = attn
    return out


# ---- methods ------------------------------------------------------------------------------------

def _methods(path: Path, entries: object) -> list[MethodSetting]:

    if isinstance(entries, dict):
        raise _bad(path, "[methods] is one table", 'write each method as its own [[methods]] table (double brackets) with name = "..."')
    if not isinstance(entries, list) or not entries:
        problem = "lists no method" if isinstance(entries, list) else f"is {_kind(entries)}, not [[methods]] tables"
        raise _bad(path, f"methods = {_toml(entries)} {problem}",
                   'write a [[methods]] table with name = "..." for each method, or leave methods out to run plain RoPE (none)')  # fmt: skip
    out: list[MethodSetting] = []
    seen: list[tuple[int, MethodSetting]] = []  # (entry number, setting)
    for i, entry in enumerate(entries):
        where = f"[[methods]] entry {i + 1}"
        if not isinstance(entry, dict):
            raise _bad(path, f"{where} is {_toml(entry)}, not a table", 'write [[methods]] then name = "yarn" (and optionally params = { ... })')
        if "name" not in entry:
            raise _bad(path, f"{where} has no name", 'write name = "yarn" (and optionally params = { ... })')
        _check_keys(path, where, entry, METHOD_KEYS)
        name, params, label = entry["name"], entry.get("params", {}), entry.get("label")
        if not isinstance(name, str) or not name.strip():
            raise _bad(path, f"{where} has name = {_toml(name)}", 'write the method\'s name as text, e.g. name = "yarn" (see `ctxbench methods`)')
        if not isinstance(params, dict):
            raise _bad(path, f"{where} has params = {_toml(params)}, not a table", "write params = { beta_fast = 16 }")
        if label is not None and (not isinstance(label, str) or not label.strip()):
            raise _bad(path, f"{where} has label = {_toml(label)}", 'write a non-empty label as text, e.g. label = "yarn-16"')
        for setting in _value(path, where, "method", lambda a: method_entries(*a), (name, params, label)):
            twin = next(((j, s) for j, s in seen if _same(s, setting)), None)
            if twin is not None:  # the CLI refuses --method yarn,yarn the same way
                j, other = twin
                what = f"method '{setting.label}'" + (f" (also labelled '{other.label}')" if other.label != setting.label else "")
                places = f"[[methods]] entries {j} and {i + 1}" if j != i + 1 else where
                raise _bad(path, f"{what} is given twice ({places})", "list each method once")
            seen.append((i + 1, setting))
            out.append(setting)
    _value(path, "[[methods]]", "methods", check_labels, out)
    return out


def _same(a: MethodSetting, b: MethodSetting) -> bool:
    """The same computation, whatever the labels: it would run every cell twice."""
    return (a.name, a.params, a.logn) == (b.name, b.params, b.logn)


def _section_methods(path: Path, where: str, wanted: object, methods: list[MethodSetting]) -> list[MethodSetting]:
    if not isinstance(wanted, list) or not wanted:
        problem = "lists no method" if isinstance(wanted, list) else f"is {_kind(wanted)}, not a list of names"
        raise _bad(path, f"methods = {_toml(wanted)} in {where} {problem}",
                   f"list names or labels of [[methods]] entries, e.g. methods = [\"{methods[0].label}\"], or leave it out for all")  # fmt: skip
    chosen = []
    for i, name in enumerate(wanted):
        if not isinstance(name, str):
            raise _bad(path, f"methods in {where} has {_toml(name)}, not a name", 'write names as text, e.g. methods = ["none", "yarn"]')
        if name in wanted[:i]:
            raise _bad(path, f"methods in {where} lists '{name}' twice", "list each method once")
        hits = [m for m in methods if name in (m.label, m.name)]
        if not hits:
            raise _bad(path, f"{where} uses method '{name}' that has no [[methods]] entry",
                       f"add [[methods]] name = \"{name}\" or use one of: {', '.join(m.label for m in methods)}")  # fmt: skip
        chosen += [m for m in hits if m not in chosen]
    return chosen


def _grid_list(path: Path, where: str, key: str, value: object) -> list[Any]:
    """``factors``/``lengths`` as a non-empty TOML list of numbers (lengths: or text such as "4k")."""
    example = "factors = [2, 4]" if key == "factors" else 'lengths = ["4k", "8k"]'
    if not isinstance(value, list) or not value:
        problem = "is an empty list" if isinstance(value, list) else f"is {_kind(value)}, not a list"
        raise _bad(path, f"{key} = {_toml(value)} in {where} {problem}", f"write e.g. {example}")
    for item in value:
        number = isinstance(item, (int, float)) and not isinstance(item, bool)
        if not (number or (key == "lengths" and isinstance(item, str))):
            raise _bad(path, f"{key} in {where} has {_toml(item)}, {_kind(item)}",
                       f"write {'numbers' if key == 'factors' else 'token counts or text such as 4k'}, e.g. {example}")  # fmt: skip
    return value


def load_suite(path: str | os.PathLike[str], tasks: dict[str, Task] | None = None) -> Suite:
    """Read and validate a suite file; every problem is a :class:`UserError` naming file and key."""

    check_name_lengths(path, "suite file")  # a too-long name: one line, not a stat's traceback
    typed = os.fspath(path)
    path = builtin_suite(typed)  # a bare name may be a built-in; a path (~ expanded) is a path
    try:  # a path is read as a file whatever it is: a pipe (/dev/stdin, <(...)) too, never blocking
        raw = read_bounded(path, SUITE_MOST, streams=True)
    except NotAFile as exc:
        raise _unreadable(typed, exc) from None
    if not raw.strip() and not path.is_file():  # /dev/null, a FIFO nobody wrote to, an empty pipe
        raise _bad(path, f"{_kind_of_path(path)} with nothing written to it", "give a TOML suite file, or pipe one in (ctxbench sweep /dev/stdin < suite.toml)")
    try:
        data = tomllib.loads(decode_text(raw, f"suite file '{path}'", "give a TOML suite file"))
    except tomllib.TOMLDecodeError as exc:
        raise _bad(path, f"not valid TOML ({exc})", f"fix the syntax ({FORMAT_HINT})") from None
    except UnicodeDecodeError:
        raise _bad(path, "not a text file", "give a TOML suite file, or a built-in suite's name (`ctxbench suites` lists them)") from None
    tasks = registry() if tasks is None else tasks
    _check_keys(path, "the top level", data, TOP_KEYS | set(tasks))
    top = _top_level(path, data)
    names = [t for t in data if t in tasks]  # in the order of the file
    if not names:
        raise _bad(path, "no task section", f"add a section for one of the tasks: {', '.join(f'[{t}]' for t in tasks)}")
    methods = _methods(path, data["methods"] if "methods" in data else [{"name": "none"}])
    jobs = []
    for name in names:
        task, section, where = tasks[name], data[name], f"[{name}]"
        if not isinstance(section, dict):
            raise _bad(path, f"{where} must be a table", f"write [{name}] followed by key = value lines")
        _check_keys(path, where, section, GRID_KEYS | set(task.option_names()))
        chosen = _section_methods(path, where, section["methods"], methods) if "methods" in section else methods
        options = {k: v for k, v in section.items() if k not in GRID_KEYS}
        for key in ("factors", "lengths"):
            if key in section:
                _value(path, where, key, _parser(key), _grid_list(path, where, key, section[key]))
        for option in task.options:  # parsed one by one so an error names its key
            if option.name in options and option.parse:
                _value(path, where, option.name, option.parse, options[option.name])
        args = (task, chosen, section.get("factors", [DEFAULT_FACTOR]), section.get("lengths"), options)
        settings = _value(path, where, "settings", lambda a: build_settings(*a), args)
        jobs.append(Job(task, settings))
    return Suite(path=path, jobs=tuple(jobs), **top)


def _parser(key: str) -> Callable[[Any], list[Any]]:

    return parse_factors if key == "factors" else parse_lengths


# ---- the built-in suites -----------------------------------------------------------------------

def builtin_suites() -> dict[str, Path]:
    """The built-in suites by name: ``{"nightly": .../ctxbench/suites/nightly.toml, ...}``."""
    return {p.stem: p for p in sorted(SUITES.glob("*.toml"))}


def builtin_suite(name: str | Path) -> Path:
    """What the user meant by ``name``: a path is a path. Anything that exists in any form (a file,
    a link even a dangling one or a loop, a FIFO, a folder, ``/dev/stdin``) or that holds a folder
    separator or a suffix (``./nightly``, ``nightly/``, ``nightly.toml``) is the file it names, and
    reading it says what is wrong with it. Only a bare name that names nothing (``nightly``) is a
    built-in suite; an unknown one is an error naming the closest built-in."""

    suites, text = builtin_suites(), os.fspath(name)  # the text as typed: Path("./nightly") would read "nightly"
    bare = "/" not in text and os.sep not in text and not Path(text).suffix and text not in (".", "..", "~") and not text.startswith("~")
    if not bare or os.path.lexists(text):
        return expand_path(text)
    if text in suites:
        return suites[text]
    if not suites:
        raise UserError(f"unknown suite '{short(text)}'", f"this install has no built-in suites (none in {SUITES}): reinstall ctxbench, or give a .toml file")
    bad = unknown("suite", short(text), suites)
    raise UserError(bad.what, f"{bad.fix} (`ctxbench suites` lists them), or give the path of a .toml suite file")


# The largest suite file: a grid written by hand or by a script is a few kB (the ceiling keeps
# /dev/zero or a runaway generator from filling memory).
SUITE_MOST = 1 << 20


def _kind_of_path(path: Path) -> str:
    try:
        return kind_of(os.stat(path).st_mode)
    except OSError:
        return "a stream"


def _unreadable(typed: str, exc: NotAFile) -> UserError:
    """One line for a suite path that cannot be read (as the user typed it): only what is not
    there is "not found"."""
    text = short(typed)
    if exc.missing:
        suites = builtin_suites()
        stem = Path(text.rstrip("/")).stem  # tasks/quick.toml outside a checkout: the built-in quick is there
        guess = stem if stem in suites else closest(stem, suites)
        hint = f"did you mean the built-in suite `ctxbench sweep {guess}`? " if guess else ""
        return UserError(f"suite file '{text}' not found", f"{hint}give an existing .toml file, or a built-in suite: {', '.join(suites)}")
    return UserError(f"suite file '{text}' is {exc.reason}, not a readable file",
                     "give a .toml suite file, or a built-in suite's bare name (`ctxbench suites` lists them)")


def describe(suite: Suite) -> str:
    """A suite's one line: its ``description``, else the first line of the comment it starts with."""
    if suite.description:
        return suite.description
    for line in suite.path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            break
        if line.strip("# \t"):
            return line.strip("# \t")
    return ""


def default_out(suite: Suite, make: bool) -> tuple[str | None, bool]:
    """The suite's own ``out`` (relative to the working folder, as ever) and whether its folder
    exists: a built-in suite's ``results/NAME.csv`` works from any folder because a run (``make``)
    makes the folder the suite names. A folder typed with ``--out`` is never made (a typo guard)."""

    if suite.out is None:
        return None, True
    folder = expand_path(suite.out).parent
    if make and not folder.exists():
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # a file in the way, no permission: the results file's own check says which, in one line
    return suite.out, folder.is_dir()
