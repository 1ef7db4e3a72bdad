"""A cell's identity: the one key that resume, ``compare``, the pivot, ``report`` and the plots
match rows on, and the rule that says when a cell in a file is whole.

A *cell* is the unit of work that is resumed: one task, method entry, factor, length (and
stride, depth, variant) on one model and data, run with one seed, dtype, backend (``hf``, or an
engine and its version) and set of task options that change the numbers. Two rows belong to the same cell exactly when their :data:`IDENTITY`
columns agree (after :func:`_norm`): so a ``passkey --chat`` run never resumes from a raw run,
and a bf16 run never stands in for a float32 one.

- :func:`cell_key` — the full identity, digests included: resume and the runner.
- :func:`view_key` — the identity as people and gates see it across machines: the model and
  dataset *names* instead of their digests (a baseline stays comparable on a machine whose
  standard library, the built-in corpus, differs by a patch release; ``compare`` notes differing
  digests). ``compare``, the pivot, ``report`` and the plots use it.

The ``options`` column holds the JSON of the task options declared with ``identity=True``
(:class:`ctxbench.tasks.base.Option`). Files written before that column existed read as the
options their task used then (:meth:`ctxbench.tasks.base.Task.default_identity`, or the task's
``legacy_options``), so they still load, resume and compare.

Whole cells: the runner writes ``cell_rows`` (how many rows the cell has) into every row's
``extra``; a cell whose rows in the file are fewer, or disagree, is partial (a hand-edited file,
a row deleted) and runs again; ``report`` leaves it out and says so. Rows from before
``cell_rows`` existed are judged by their structure: the headline aggregate row is there, its
interval rows come as a pair, and every trial or document its ``trials``/``docs`` count promises.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

from ctxbench.backends import DEFAULT as DEFAULT_BACKEND
from ctxbench.errors import UserError
from ctxbench.methods import METHODS, default_label, resolve
from ctxbench.tasks import registry
from ctxbench.tasks.base import extra_of, headline_of

if TYPE_CHECKING:
    from ctxbench.tasks.base import Task

# One row as a file holds it: column -> value (text, as read; any value, as a task built it).
Record = dict[str, Any]
# What groups rows into cells: cell_key, view_key or table_view_key.
KeyFn = Callable[[Record], tuple[str, ...]]

# Columns whose values identify a cell.
IDENTITY = [
    "model_digest", "data_digest", "task", "method", "label", "method_params", "factor", "length", "stride", "depth",
    "variant", "seed", "dtype", "options", "backend",
]  # fmt: skip
# The same identity across machines: names instead of digests.
VIEW = ["model", "dataset", *[c for c in IDENTITY if c not in ("model_digest", "data_digest", "method")]]
# Columns that identify one value inside a cell (a loss-by-position bucket by where it starts).
WITHIN = ["trial", "doc", "metric", "pos_start"]


@lru_cache(maxsize=1 << 16, typed=True)  # a file repeats few distinct values: keys of 100k rows in seconds, not a minute
def _norm(value: object) -> str:
    """Numbers so that '2', '2.0' and 2.0 compare equal; JSON objects with sorted keys."""
    text = "" if value is None else (repr(value) if isinstance(value, float) else str(value))
    if text[:1] in ("{", "["):
        try:
            return json.dumps(json.loads(text), sort_keys=True)
        except ValueError:
            return text
    try:
        number = float(text)
    except ValueError:
        return text
    return repr(int(number)) if number.is_integer() else repr(number)


@cache
def uses_factor(method: str) -> bool:
    """Whether a method reads the factor; a name this ctxbench does not know counts as reading it."""

    try:
        return resolve(method).uses_factor
    except UserError:
        return True


def normalise(record: Record) -> Record:
    """A row as this release writes it, from any earlier one (done once, when a file is read, so
    every key function reads plain columns): the label derived from the method and its parameters,
    an empty factor for a method that ignores it (older files wrote one), ``{}`` for empty options,
    and a loss-by-position bucket from before ``pos_start`` placed by its ``extra.pos``."""
    if not record.get("label"):
        record["label"] = derived_label(record.get("method", ""), record.get("method_params", ""))
    if record.get("factor", "") != "" and not uses_factor(record.get("method", "")):
        record["factor"] = ""
    if record.get("options", "") == "":
        record["options"] = "{}"
    if record.get("backend", "") == "":  # written before engine backends: transformers ran it
        record["backend"] = DEFAULT_BACKEND
    if record.get("pos_start", "") == "" and record.get("metric") in ("nll_pos", "nll_beyond_L"):
        pos = extra_of(record).get("pos")
        if isinstance(pos, list) and pos:
            record["pos_start"] = str(pos[0])
            if len(pos) > 1 and pos[1] is not None and record.get("pos_end", "") == "":
                record["pos_end"] = str(pos[1])
    return record


def field(record: Record, column: str) -> str:
    """One identity column of a record, normalised as keys compare it (numbers, JSON; an empty
    ``backend`` is ``hf``, as :func:`normalise` reads it)."""
    value = _norm(record.get(column, ""))
    return DEFAULT_BACKEND if column == "backend" and value == "" else value


def _within(record: Record) -> tuple[str, ...]:
    """A row's place in its cell."""
    return tuple(_norm(record.get(c, "")) for c in WITHIN)


def unit_key(record: Record) -> tuple[str, ...]:
    """One unit of a cell across its depths (depth, trial, document, metric, position): where a
    cell run twice holds the same value twice, and the later row stands for it."""
    return (_norm(record.get("depth", "")), *_within(record))


def cell_key(record: Record) -> tuple[str, ...]:
    """The full identity of the cell ``record`` belongs to (digests included)."""
    return tuple(field(record, c) for c in IDENTITY)


def view_key(record: Record) -> tuple[str, ...]:
    """The identity across machines (model and dataset names instead of digests)."""
    return tuple(field(record, c) for c in VIEW)


def table_view_key(record: Record, tasks: dict[str, Task] | None = None) -> tuple[str, ...]:
    """:func:`view_key` with the options that only add rows left out (as :func:`setting_of` does),
    so a cell run with ``--metrics answer_nll`` meets the same cell run without it."""
    key = view_key(record)
    at = VIEW.index("options")
    return (*key[:at], _table_options(key[at], _adds_rows(record.get("task", ""), tasks)), *key[at + 1 :])


def row_key(record: Record) -> tuple[str, ...]:
    """One value inside a cell."""
    return (*cell_key(record), *(_norm(record.get(c, "")) for c in WITHIN))


def options_json(options: dict[str, Any]) -> str:
    return json.dumps(options, sort_keys=True)


def legacy_options(record: Record, tasks: dict[str, Task] | None) -> str:
    """The ``options`` of a row written before the column existed: what its task used then."""
    task = (tasks or {}).get(record.get("task", ""))
    if task is None:
        return "{}"
    options = task.legacy_options(record) if task.legacy_options else task.default_identity()
    return options_json(options)


def complete_options(record: Record, tasks: dict[str, Task] | None, seen: dict[str, dict[str, Any] | None]) -> str:
    """The ``options`` of a row written before one of its task's identity options existed (an
    option added in a later release): the missing ones take what that run used, the task's
    ``legacy_options``, so a cell keeps its key across releases. ``seen`` caches parsed JSON."""
    text: str = record.get("options", "")
    task = (tasks or {}).get(record.get("task", ""))
    if task is None or text == "":
        return text
    if text not in seen:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        seen[text] = parsed if isinstance(parsed, dict) else None
    options = seen[text]
    if options is None:
        return text
    # (an omit_default option is absent exactly when it is at its default: nothing is missing)
    missing = [o.name for o in task.options if o.identity and not o.omit_default and o.name not in options]
    if not missing:
        return text
    before = task.legacy_options(record) if task.legacy_options else task.default_identity()
    return options_json({**options, **{name: before.get(name) for name in missing}})


# Identity columns that set a table apart (the others are a table's axes -- label, factor, length,
# depth -- or its model, task and variant): the pivot's tables and the paired comparisons' groups.
SETTING = ("dataset", "data_digest", "model_digest", "stride", "options", "dtype", "seed", "backend")
# Options that only add rows, for a file whose task is not installed: the built-in ``--metrics``.
ADDS_ROWS_FALLBACK = frozenset({"metrics"})


def setting_of(record: Record, tasks: dict[str, Task] | None = None) -> tuple[tuple[str, str], ...]:
    """``(column, value)`` for each :data:`SETTING` column of a record, normalised as keys compare
    them: a stride equal to the length (truncate mode) reads as empty, and the ``options`` leave
    out those that only add rows (:attr:`ctxbench.tasks.base.Option.adds_rows`: ``--metrics``),
    so a cell run with ``--metrics answer_nll`` shares its table with one run without it."""
    length = field(record, "length")
    out = []
    for column in SETTING:
        value = field(record, column)
        if column == "stride" and value == length:
            value = ""
        elif column == "options":
            value = _table_options(value, _adds_rows(record.get("task", ""), tasks))
        out.append((column, value))
    return tuple(out)


def paired_setting(record: Record, tasks: dict[str, Task] | None = None) -> tuple[tuple[tuple[str, str], ...], str]:
    """(setting, side) of a record as the paired comparisons group it: :func:`setting_of` with the
    options its task compares side by side (:attr:`ctxbench.tasks.base.Option.label`: the prompt
    mode) taken out of the setting and into ``side``, their text (``chat``; "" when the task has
    none). Such an option changes the prompt a trial is scored on, not its data; the dataset name
    and data digest hold it too (``ruler-niah-chat``), so for such a task they are left out of the
    setting: its cells pair by the seed, the options and each trial's number."""
    setting = setting_of(record, tasks)
    task = (tasks or {}).get(record.get("task", ""))
    axes = task.label_options() if task is not None else {}
    if not axes:
        return setting, ""
    out, side = [], []
    for column, value in setting:
        if column in ("dataset", "data_digest"):
            continue
        if column == "options":
            try:
                options = json.loads(value)
            except ValueError:
                options = None
            if isinstance(options, dict):
                side = [axes[name](options.pop(name)) for name in sorted(axes) if name in options]
                value = json.dumps(options, sort_keys=True)
        out.append((column, value))
    return tuple(out), " ".join(side)


def _adds_rows(task_name: str, tasks: dict[str, Task] | None) -> frozenset[str]:
    task = (tasks or {}).get(task_name)
    if task is None:
        return ADDS_ROWS_FALLBACK
    return frozenset(o.name for o in task.options if o.adds_rows)


@cache
def _table_options(text: str, drop: frozenset[str]) -> str:
    if not drop:
        return text
    try:
        options = json.loads(text)
    except ValueError:
        return text
    if not isinstance(options, dict) or not drop & options.keys():
        return text
    return json.dumps({k: v for k, v in options.items() if k not in drop}, sort_keys=True)


def _is_aggregate(record: Record) -> bool:
    return record.get("doc", "") in ("", "all") and record.get("trial", "") in ("", "all")


def whole(rows: list[Record], headline: str) -> bool:
    """Whether one cell's rows (all ``ok``) are every row it was written with.

    New rows carry ``extra.cell_rows``; older ones are judged by structure: the headline
    aggregate is there, with as many numbered trials / documents as its ``trials``/``docs`` say.
    """
    distinct = {_within(r) for r in rows}
    expected = {extra_of(r).get("cell_rows") for r in rows}
    if expected != {None}:
        return len(expected) == 1 and len(distinct) == len(rows) == next(iter(expected))
    aggregates = [r for r in rows if _is_aggregate(r) and r.get("metric") == headline]
    if not aggregates:
        return False
    bounds = {r.get("metric") for r in rows if _is_aggregate(r)} & {headline + "_lo", headline + "_hi"}
    if len(bounds) == 1:  # an interval comes as a pair of rows
        return False
    info = extra_of(aggregates[-1])
    trials = {str(r.get("trial")) for r in rows if str(r.get("trial", "")).isdigit()}
    docs = {r.get("doc") for r in rows if r.get("doc", "") not in ("", "all")}
    if len(distinct) != len(rows):  # a row given twice
        return False
    # (aggregates from before trials were rows hold a trial count and no trial rows)
    if isinstance(info.get("trials"), int) and trials and len(trials) < info["trials"]:
        return False
    if isinstance(info.get("docs"), int) and len(docs) < info["docs"]:
        return False
    counted = [r for r in rows if _is_aggregate(r) and r.get("metric") == "docs"]  # perplexity's document count row
    if counted and _norm(counted[-1].get("value")) != _norm(len(docs)):
        return False
    return True


def cells_of(records: Iterable[Record], key: KeyFn = cell_key) -> dict[tuple[str, ...], list[Record]]:
    """Records grouped by cell, in file order."""
    out: dict[tuple[str, ...], list[Record]] = {}
    for r in records:
        out.setdefault(key(r), []).append(r)
    return out


def headline(task_name: str, tasks: dict[str, Task] | None) -> str:

    return headline_of(task_name, tasks)[0]


def finished(records: Iterable[Record], tasks: dict[str, Task] | None = None, key: KeyFn = cell_key) -> dict[tuple[str, ...], int]:
    """The finished cells of ``records`` — every row ``ok`` and the cell whole — each with how many
    distinct numbered trials it holds (0 for a cell of documents or summary rows only)."""
    if tasks is None:

        tasks = registry()
    out = {}
    for k, rows in cells_of(records, key).items():
        if any(r.get("status") != "ok" for r in rows):
            continue
        if not whole(rows, headline(rows[0].get("task", ""), tasks)):
            continue
        out[k] = len({str(r["trial"]) for r in rows if str(r.get("trial", "")).isdigit()})
    return out


def partial(records: Iterable[Record], tasks: dict[str, Task] | None = None, key: KeyFn = view_key) -> set[tuple[str, ...]]:
    """Cells (by ``key``) whose rows are all ``ok`` but not whole: never shown as if they were."""
    if tasks is None:

        tasks = registry()
    return {
        k for k, rows in cells_of(records, key).items()
        if all(r.get("status") == "ok" for r in rows) and not whole(rows, headline(rows[0].get("task", ""), tasks))
    }  # fmt: skip


def drop_partial(records: list[Record], tasks: dict[str, Task] | None = None) -> tuple[list[Record], list[str]]:
    """The records of one file without its partial cells, and a description of each left out
    (``report`` and ``compare`` never present a partial cell as if it were whole)."""
    if tasks is None:

        tasks = registry()
    bad = partial(records, tasks, key=cell_key)
    if not bad:
        return records, []
    described = []
    for r in records:
        k = cell_key(r)
        if k in bad:
            what = " ".join(x for x in (r.get("task", ""), r.get("variant", ""), r.get("label", ""),
                                        f"x{r['factor']}" if r.get("factor") else "", r.get("length", ""),
                                        f"depth {r['depth']}" if r.get("depth") else "") if x)  # fmt: skip
            if what not in described:
                described.append(what)
    return [r for r in records if cell_key(r) not in bad], described


def derived_label(method: str, params_json: str) -> str:
    """The label of a row written before labels existed: the method name plus every parameter
    that differs from a fixed registry default (values the method derives itself — ``auto`` —
    cannot be told from user-set ones, so they are left out)."""

    try:
        params = json.loads(params_json) if params_json else {}
    except ValueError:
        return method
    defaults = {}
    for part in method.split("+"):
        if part in METHODS:
            defaults.update(METHODS[part].params)
    shown = {k: v for k, v in params.items() if defaults.get(k, 0) is not None}
    return default_label(method, shown, defaults)
