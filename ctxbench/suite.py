"""Suite files: a whole grid in TOML, validated with errors that name the file, the key and the fix.

    model = "smollm2-135m"          # optional: device, dtype, attn, seed, out, trust_remote_code
    out = "results/nightly.csv"     # default output (``--out`` overrides)

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
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UserError, closest
from .runner import DEFAULT_MODEL, Job

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TOP_KEYS = {"model", "device", "dtype", "attn", "seed", "out", "trust_remote_code", "methods"}
METHOD_KEYS = {"name", "params", "label"}
GRID_KEYS = {"factors", "lengths", "methods"}


@dataclass(frozen=True)
class Suite:
    path: Path
    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"
    attn: str = "sdpa"
    seed: int = 0
    out: str | None = None
    trust_remote_code: bool = False
    jobs: tuple[Job, ...] = field(default_factory=tuple)


def _bad(path: Path, what: str, fix: str) -> UserError:
    return UserError(f"{path}: {what}", fix)


def _check_keys(path: Path, where: str, got: dict, allowed: set[str]) -> None:
    for key in got:
        if key not in allowed:
            guess = closest(key, allowed)
            hint = f"did you mean '{guess}'? " if guess else ""
            raise _bad(path, f"unknown key '{key}' in {where}", f"{hint}allowed keys: {', '.join(sorted(allowed))}")


def _value(path: Path, where: str, key: str, fn, value):
    try:
        return fn(value)
    except UserError as exc:
        raise _bad(path, f"bad {key} in {where}: {exc.what}", exc.fix) from None
    except (TypeError, ValueError):
        raise _bad(path, f"bad {key} in {where}: {value!r}", "see the suite format in tasks/quick.toml") from None


def _methods(path: Path, entries) -> list:
    from .settings import check_labels, method_entries

    out = []
    for i, entry in enumerate(entries):
        where = f"[[methods]] entry {i + 1}"
        if not isinstance(entry, dict) or "name" not in entry:
            raise _bad(path, f"{where} has no name", 'write name = "yarn" (and optionally params = { ... })')
        _check_keys(path, where, entry, METHOD_KEYS)
        out += _value(path, where, "method", lambda e: method_entries(str(e["name"]), e.get("params") or {}, e.get("label")), entry)
    _value(path, "[[methods]]", "methods", check_labels, out)
    return out


def load_suite(path: str | Path, tasks: dict | None = None) -> Suite:
    """Read and validate a suite file; every problem is a :class:`UserError` naming file and key."""
    from .settings import build_settings
    from .tasks import registry

    path = Path(path)
    if not path.is_file():
        raise UserError(f"suite file '{path}' not found", "give the path of a .toml suite, e.g. tasks/quick.toml")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise _bad(path, f"not valid TOML ({exc})", "fix the syntax (see tasks/quick.toml)") from None
    except UnicodeDecodeError:
        raise _bad(path, "not a text file", "give a TOML suite such as tasks/quick.toml") from None
    tasks = registry() if tasks is None else tasks
    _check_keys(path, "the top level", data, TOP_KEYS | set(tasks))
    names = [t for t in data if t in tasks]  # in the order of the file
    if not names:
        raise _bad(path, "no task section", f"add a section for one of the tasks: {', '.join(f'[{t}]' for t in tasks)}")
    methods = _methods(path, data.get("methods") or [{"name": "none"}])
    jobs = []
    for name in names:
        task, section, where = tasks[name], data[name], f"[{name}]"
        if not isinstance(section, dict):
            raise _bad(path, f"{where} must be a table", f"write [{name}] followed by key = value lines")
        _check_keys(path, where, section, GRID_KEYS | set(task.option_names()))
        chosen = methods
        if "methods" in section:
            chosen = []
            for wanted in section["methods"]:
                hits = [m for m in methods if wanted in (m.label, m.name)]
                if not hits:
                    raise _bad(path, f"{where} uses method '{wanted}' that has no [[methods]] entry",
                               f"add [[methods]] name = \"{wanted}\" or use one of: {', '.join(m.label for m in methods)}")  # fmt: skip
                chosen += [m for m in hits if m not in chosen]
        options = {k: v for k, v in section.items() if k not in GRID_KEYS}
        for key in ("factors", "lengths"):
            if key in section:
                _value(path, where, key, _parser(key), section[key])
        for option in task.options:  # parsed one by one so an error names its key
            if option.name in options and option.parse:
                _value(path, where, option.name, option.parse, options[option.name])
        args = (task, chosen, section.get("factors", [1]), section.get("lengths"), options)
        settings = _value(path, where, "settings", lambda a: build_settings(*a), args)
        jobs.append(Job(task, settings))
    return Suite(
        path=path, model=str(data.get("model", DEFAULT_MODEL)), device=str(data.get("device", "auto")),
        dtype=str(data.get("dtype", "auto")), attn=str(data.get("attn", "sdpa")), seed=int(data.get("seed", 0)),
        out=data.get("out"), trust_remote_code=bool(data.get("trust_remote_code", False)), jobs=tuple(jobs),
    )


def _parser(key: str):
    from .parsing import parse_factors, parse_lengths

    return parse_factors if key == "factors" else parse_lengths
