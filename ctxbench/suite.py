"""Suite files: a whole grid in TOML, validated with errors that name the file, the key and the fix.

    model = "smollm2-135m"          # optional: device, dtype, attn, seed, out, trust_remote_code
    out = "results/nightly.csv"     # default output (``--out`` overrides)

    [[methods]]                     # every method of the suite, each with its parameters
    name = "yarn"
    params = { beta_fast = 32 }

    [[methods]]
    name = "ntk"

    [ppl]                           # a task section: its options (see ``ctxbench ppl --help``)
    factors = [2]
    lengths = ["4k", "8k"]
    docs = 2
    methods = ["ntk"]               # optional subset of the suite's methods (default: all)

    [passkey]
    factors = [2]
    lengths = ["4k"]
    depths = [0.1, 0.5, 0.9]        # or n_depths = 5
    trials = 2
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UserError, closest
from .methods import resolve
from .models import DEFAULT_MODEL
from .parsing import parse_factors, parse_length, parse_lengths
from .tasks import passkey, ppl

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TOP_KEYS = {"model", "device", "dtype", "attn", "seed", "out", "trust_remote_code", "methods", "ppl", "passkey"}
METHOD_KEYS = {"name", "params"}
TASK_KEYS = {
    "ppl": {"factors", "lengths", "stride", "dataset", "split", "text_column", "docs", "methods"},
    "passkey": {"factors", "lengths", "depths", "n_depths", "trials", "digits", "chat", "methods"},
}


@dataclass
class Suite:
    path: Path
    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"
    attn: str = "sdpa"
    seed: int = 0
    out: str | None = None
    trust_remote_code: bool = False
    jobs: list[tuple[str, object]] = field(default_factory=list)  # (task, Settings)


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


def load_suite(path: str | Path) -> Suite:
    """Read and validate a suite file; every problem is a :class:`UserError` naming file and key."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"suite file '{path}' not found", "give the path of a .toml suite, e.g. tasks/quick.toml")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise _bad(path, f"not valid TOML ({exc})", "fix the syntax (see tasks/quick.toml)") from None
    _check_keys(path, "the top level", data, TOP_KEYS)
    tasks = [t for t in ("ppl", "passkey") if t in data]
    if not tasks:
        raise _bad(path, "no task section", "add a [ppl] and/or [passkey] section")
    methods: dict[str, dict] = {}
    for i, entry in enumerate(data.get("methods") or [{"name": "none"}]):
        where = f"[[methods]] entry {i + 1}"
        if not isinstance(entry, dict) or "name" not in entry:
            raise _bad(path, f"{where} has no name", 'write name = "yarn" (and optionally params = { ... })')
        _check_keys(path, where, entry, METHOD_KEYS)
        setting = _value(path, where, "method", lambda e: resolve(e["name"], e.get("params") or {}), entry)
        methods[str(entry["name"])] = {"setting": setting}
    suite = Suite(
        path=path, model=str(data.get("model", DEFAULT_MODEL)), device=str(data.get("device", "auto")),
        dtype=str(data.get("dtype", "auto")), attn=str(data.get("attn", "sdpa")), seed=int(data.get("seed", 0)),
        out=data.get("out"), trust_remote_code=bool(data.get("trust_remote_code", False)),
    )
    for task in tasks:
        section = data[task]
        where = f"[{task}]"
        if not isinstance(section, dict):
            raise _bad(path, f"{where} must be a table", f"write [{task}] followed by key = value lines")
        _check_keys(path, where, section, TASK_KEYS[task])
        names = section.get("methods") or list(methods)
        for name in names:
            if name not in methods:
                raise _bad(path, f"{where} uses method '{name}' that has no [[methods]] entry", f"add [[methods]] name = \"{name}\" or use one of: {', '.join(methods)}")
        chosen = [methods[n]["setting"] for n in names]
        factors = _value(path, where, "factors", parse_factors, section.get("factors", [1]))
        lengths = _value(path, where, "lengths", parse_lengths, section["lengths"]) if "lengths" in section else None
        if task == "ppl":
            stride = _value(path, where, "stride", parse_length, section["stride"]) if "stride" in section else None
            settings = ppl.Settings(
                methods=chosen, factors=factors, lengths=lengths, stride=stride, dataset=section.get("dataset"),
                split=section.get("split", "test"), text_column=section.get("text_column", "text"), docs=int(section.get("docs", 4)),
            )
            _value(path, where, "settings", ppl.check_settings, settings)
        else:
            if "depths" in section and "n_depths" in section:
                raise _bad(path, f"{where} has both depths and n_depths", "keep one of them")
            depths = _value(path, where, "depths", lambda v: passkey.parse_depths(None, ",".join(map(str, v))), section["depths"]) \
                if "depths" in section else passkey.parse_depths(section.get("n_depths"), None)
            settings = passkey.Settings(
                methods=chosen, factors=factors, lengths=lengths, depths=depths, trials=int(section.get("trials", 2)),
                digits=int(section.get("digits", 5)), seed=suite.seed, chat=bool(section.get("chat", False)),
            )
            _value(path, where, "settings", passkey.check_settings, settings)
        suite.jobs.append((task, settings))
    return suite


def forward_seconds(n: int) -> float:
    """Rough seconds for one forward of ``n`` tokens of the default model on a 2-core CPU
    (fitted to 12 s at 4k and ~100 s at 16k: linear plus quadratic attention cost)."""
    return 1.87e-3 * n + 2.58e-7 * n * n


def plan(suite: Suite, trained_len: int = 8192) -> list[dict]:
    """The grid of each job with a rough cost, without loading the model."""
    out = []
    for task, s in suite.jobs:
        lengths = s.lengths or (ppl.default_lengths(trained_len) if task == "ppl" else [4096, 8192, 16384])
        for method in s.methods:
            for factor in s.factors:
                if task == "ppl":
                    docs = s.docs
                    if method.dynamic or (s.stride is not None):
                        tokens = docs * sum(lengths)
                        seconds = docs * sum(forward_seconds(n) for n in lengths)
                    else:  # one forward per document at the longest length
                        tokens = docs * max(lengths)
                        seconds = docs * forward_seconds(max(lengths))
                    cells = len(lengths)
                else:
                    cells = len(lengths) * len(s.depths)
                    tokens = sum(n * (1 + s.trials) // 2 for n in lengths) * len(s.depths)
                    seconds = sum(forward_seconds(n) * (1 + s.trials) / 2 for n in lengths) * len(s.depths)
                out.append(dict(task=task, method=method.name, factor=factor, lengths=lengths, cells=cells,
                                tokens=tokens, seconds=math.ceil(seconds)))  # fmt: skip
    return out
