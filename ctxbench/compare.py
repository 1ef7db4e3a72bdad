"""Regression gate: join two results files cell by cell and flag what got worse.

Compared values are the aggregates: ``ppl`` over documents (``doc = all``) and passkey
``accuracy`` per cell (``trial = all``). A cell is worse when its perplexity rose by more than
``rtol`` (relative), its accuracy fell by more than ``rtol`` (absolute), it failed in NEW but
not in BASE, or it is missing from NEW. Cells are matched on model, dataset, task, method,
method parameters, factor, length, stride, depth and seed — not on the digests, so a baseline
stays comparable across machines whose standard library (the built-in corpus) differs by a patch
release; differing digests are reported as a note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import UserError
from .results import read_records

MATCH = ["model", "dataset", "task", "method", "method_params", "factor", "length", "stride", "depth", "seed", "metric"]
HIGHER_IS_WORSE = {"ppl": True, "accuracy": False}


@dataclass
class Change:
    key: dict
    base: float | None
    new: float | None
    status: str  # ok | worse | better | missing | new | failed

    @property
    def delta(self) -> float | None:
        if self.base is None or self.new is None:
            return None
        return self.new - self.base


def _num(text: str) -> str:
    try:
        value = float(text)
    except ValueError:
        return text
    return repr(int(value)) if value.is_integer() else repr(value)


def _aggregates(records: list[dict]) -> dict[tuple, dict]:
    """The compared row of each cell: its aggregate ppl/accuracy, or its failure row."""
    out = {}
    for r in records:
        metric = "ppl" if r["task"] == "ppl" else "accuracy"
        aggregate = r["metric"] == metric and (r["doc"] if r["task"] == "ppl" else r["trial"]) == "all"
        if aggregate or r["status"] != "ok":
            out[tuple(metric if c == "metric" else _num(r[c]) for c in MATCH)] = r
    return out


def compare(base_path: str, new_path: str, rtol: float = 0.02) -> tuple[list[Change], list[str]]:
    """Per-cell changes and notes; raises UserError for unreadable or foreign files."""
    if not rtol >= 0:
        raise UserError(f"--rtol {rtol} must be >= 0", "e.g. --rtol 0.02 (2%)")
    base, new = _aggregates(read_records(base_path)), _aggregates(read_records(new_path))
    if not base:
        raise UserError(f"'{base_path}' has no aggregate ppl or passkey rows", "give a CSV written by ctxbench ppl/passkey/sweep")
    notes = []
    digests = lambda rows: {(r["model_digest"], r["data_digest"]) for r in rows.values()}  # noqa: E731
    if digests(base) != digests(new):
        notes.append("model or data digests differ between the files (different weights, or another Python's stdlib corpus)")
    changes = []
    for key in sorted(base.keys() | new.keys(), key=lambda k: tuple(map(str, k))):
        b, n = base.get(key), new.get(key)
        info = dict(zip(MATCH, key, strict=True))
        if n is None:
            changes.append(Change(info, _value(b), None, "missing"))
            continue
        if b is None:
            changes.append(Change(info, None, _value(n), "new"))
            continue
        if n["status"] != "ok":
            changes.append(Change(info, _value(b), None, "failed" if b["status"] == "ok" else "ok"))
            continue
        bv, nv = _value(b), _value(n)
        changes.append(Change(info, bv, nv, _verdict(info["metric"], bv, nv, rtol)))
    return changes, notes


def _value(record: dict) -> float | None:
    try:
        value = float(record["value"])
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _verdict(metric: str, base: float | None, new: float | None, rtol: float) -> str:
    if base is None or new is None:
        return "ok"
    if HIGHER_IS_WORSE[metric]:
        if new > base * (1 + rtol):
            return "worse"
        return "better" if new < base * (1 - rtol) else "ok"
    if new < base - rtol:
        return "worse"
    return "better" if new > base + rtol else "ok"


def failed(changes: list[Change]) -> bool:
    return any(c.status in ("worse", "missing", "failed") for c in changes)


def to_markdown(changes: list[Change], notes: list[str], rtol: float) -> str:
    bad = [c for c in changes if c.status in ("worse", "missing", "failed")]
    head = f"### ctxbench compare: {'FAIL' if bad else 'PASS'} — {len(bad)} of {len(changes)} cells worse (rtol {rtol:g})\n"
    lines = [head, *[f"> {n}" for n in notes], "",
             "| task | method | factor | length | depth | metric | base | new | change | status |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for c in changes:
        lines.append("| " + " | ".join([
            c.key["task"], c.key["method"], c.key["factor"], c.key["length"], c.key["depth"] or "—", c.key["metric"],
            _fmt(c.base), _fmt(c.new), _pct(c), ("**" + c.status + "**") if c.status in ("worse", "missing", "failed") else c.status,
        ]) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def _pct(c: Change) -> str:
    if c.delta is None:
        return "—"
    if c.key["metric"] == "ppl" and c.base:
        return f"{100 * c.delta / c.base:+.2f}%"
    return f"{c.delta:+.3f}"
