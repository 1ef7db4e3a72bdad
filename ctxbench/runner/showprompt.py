"""``ctxbench show-prompt ROW-ID``: the exact prompt one trial of a results file was given.

Prompts are not stored in results files; every random choice of a trial's prompt derives from
what its row holds (task, variant, length, depth, seed, trial, the task options in ``options``),
and the data it read is pinned by ``data_digest``. So the prompt is rebuilt by the task's own
builder (``Task.prompt``, the function ``run_group`` calls) from settings made of the row, and
proven to be the one the run used before it is shown: the model's digest must be the row's
``model_digest``, the data the task prepares must have the row's ``data_digest``, and the prompt
must have the row's token count. Options the row does not record because the data digest covers
them (a haystack, a QA data path) are given with ``--option NAME=VALUE``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ctxbench.errors import UserError
from ctxbench.model.describe import describe
from ctxbench.runner.settings import build_settings
from ctxbench.tasks import get
from ctxbench.tasks.base import Cell

if TYPE_CHECKING:
    from ctxbench.tasks.base import Task


def trial_row(row: dict[str, str], where: str) -> tuple[int, str]:
    """(trial number, task name) of a row that is one trial; one clear line for any other row."""
    trial = row.get("trial", "")
    if not trial.isdigit():
        raise UserError(f"{where} is not a trial row (trial '{trial or '—'}', metric {row.get('metric', '')}): only a trial has a prompt",
                        "give the id of a row with a numbered trial (the trial rows `ctxbench report --html` lists under a cell)")  # fmt: skip
    return int(trial), row["task"]


def settings_of(task: Task, row: dict[str, str], options: dict[str, str] | None = None) -> Any:
    """The task's settings for the row's cell alone: its length, variant, depth and identity
    options, enough trials to reach its own, and ``options`` (values the row does not hold)."""
    names = set(task.option_names())
    raw: dict[str, Any] = {}
    try:
        stored = json.loads(row.get("options") or "{}")
    except ValueError:
        stored = {}
    raw.update({k: v for k, v in stored.items() if k in names})
    if row.get("variant") and "variants" in names:
        raw["variants"] = [row["variant"]]
    if row.get("depth", "") != "" and "depths" in names:
        raw["depths"] = [float(row["depth"])]
    if "trials" in names:
        raw["trials"] = int(row["trial"]) + 1
    raw.update(options or {})
    return build_settings(task, "none", lengths=[int(float(row["length"]))], options=raw)


def prompt_ids(row: dict[str, str], lm: Any, tasks: dict[str, Task], options: dict[str, str] | None = None, where: str = "the row") -> tuple[int, ...]:
    """The token ids of the prompt of the trial ``row`` holds, rebuilt with ``lm``'s tokenizer and
    checked against the row (model digest, data digest, token count)."""
    trial, name = trial_row(row, where)
    task = get(name, tasks)
    if task.prompt is None:
        raise UserError(f"task {name} does not rebuild a trial's prompt (no Task.prompt)", "show-prompt works for tasks that declare one: " +
                        ", ".join(sorted(n for n, t in tasks.items() if t.prompt is not None)))  # fmt: skip
    if row.get("model_digest") and lm.digest != row["model_digest"]:
        raise UserError(f"the model given has digest {lm.digest}, {where} was run on {row['model_digest']} ({row.get('model', '')})",
                        "give the row's model with --model")  # fmt: skip
    settings = task.settled(lm, settings_of(task, row, options))
    ctx = replace(task.prepare(lm, settings), seed=int(row.get("seed") or 0))
    dataset, digest = ctx.data_of(row.get("variant", ""))
    if row.get("data_digest") and digest != row["data_digest"]:
        unset = [o.name for o in task.options if not o.identity and o.name not in ("variants", "depths", "trials", "max_trials", "budget", "baseline")]
        raise UserError(f"the data prepared now ({dataset}, {digest}) is not what {where} read ({row.get('dataset', '')}, {row['data_digest']})",
                        "name the data the run used with --option NAME=VALUE" + (f" (this task's: {', '.join(unset)})" if unset else ""))  # fmt: skip
    depth = float(row["depth"]) if row.get("depth", "") != "" else None
    cell = Cell(name, settings.methods[0], None, int(float(row["length"])), depth=depth, variant=row.get("variant", ""))
    ids = tuple(int(i) for i in task.prompt(lm, ctx, settings, cell, trial))
    tokens = row.get("tokens", "")
    if tokens.isdigit() and int(tokens) != len(ids):
        raise UserError(f"the rebuilt prompt has {len(ids)} tokens, {where} says {tokens}: it is not the prompt the run used",
                        "check the tokenizer and the --option values (the run's ctxbench version: " + (row.get("ctxbench_version") or "?") + ")")  # fmt: skip
    return ids


def parse_options(values: list[str] | None) -> dict[str, str]:
    """``--option NAME=VALUE`` values as a dict (names with ``-`` or ``_``)."""
    out = {}
    for text in values or []:
        name, sep, value = text.partition("=")
        if not sep or not name.strip():
            raise UserError(f"--option '{text}' is not NAME=VALUE", "e.g. --option haystack=essays")
        out[name.strip().replace("-", "_")] = value
    return out


def describe_model(spec: str) -> SimpleNamespace:
    """What rebuilding a prompt needs of a model, read from its files without loading the weights:
    the tokenizer, the geometry and the digest (:func:`ctxbench.model.describe.describe`)."""

    d = describe(spec)
    return SimpleNamespace(tokenizer=d.tokenizer, geometry=d.geometry, digest=d.digest, name=d.name)
