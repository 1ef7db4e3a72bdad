"""Regression gate: join two results files cell by cell and flag what got worse beyond noise.

Compared values are each task's headline aggregates (``ppl`` over documents, ``accuracy`` per
cell) and the effective length of every method. A cell is worse when

- its value moved the wrong way by more than ``rtol`` (relative for perplexity, absolute for
  accuracy) AND outside the noise: the two 95% intervals (``*_lo``/``*_hi`` rows) do not overlap
  (:func:`ctxbench.stats.changed_beyond_noise`; files without intervals use the size test alone);
- it failed in NEW but not in BASE, or it is missing from NEW;
- or (row ``effective_length``) the method's effective length shrank.

Cells match on model, dataset, task, variant, method label, method parameters, factor, length,
stride, depth and seed — not on the digests, so a baseline stays comparable across machines whose
standard library (the built-in corpus) differs by a patch release; differing digests are noted.
A method that ignores the factor matches with an empty factor (older files wrote the factor).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import UserError
from .results import read_records

MATCH = ["model", "dataset", "task", "variant", "label", "method_params", "factor", "length", "stride", "depth", "seed", "metric"]


@dataclass(frozen=True)
class Change:
    key: dict
    base: float | None
    new: float | None
    status: str  # ok | worse | better | missing | new | failed
    reason: str = ""
    base_ci: tuple | None = None
    new_ci: tuple | None = None

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


def _factor(record: dict, cache: dict) -> str:
    method = record["method"]
    if method not in cache:
        from .methods import resolve

        try:
            cache[method] = resolve(method).uses_factor
        except UserError:
            cache[method] = True
    return _num(record["factor"]) if cache[method] and record["factor"] != "" else ""


def _aggregates(records: list[dict], tasks) -> tuple[dict[tuple, dict], dict[tuple, dict]]:
    """(compared row of each cell: its headline aggregate or its failure row; its interval rows)."""
    from .pivot import headline_of

    out, bounds, uses = {}, {}, {}
    for r in records:
        metric, _ = headline_of(r["task"], tasks)
        aggregate = r.get("doc", "") in ("", "all") and r.get("trial", "") in ("", "all")
        key = tuple(metric if c == "metric" else (_factor(r, uses) if c == "factor" else _num(r.get(c, ""))) for c in MATCH)
        if (aggregate and r["metric"] == metric) or r["status"] != "ok":
            out[key] = r
        elif aggregate and r["metric"] in (metric + "_lo", metric + "_hi"):
            bounds.setdefault(key, {})[r["metric"][len(metric) + 1 :]] = _value(r)
    return out, bounds


def compare(base_path: str, new_path: str, rtol: float = 0.02, threshold: float | None = None) -> tuple[list[Change], list[str]]:
    """Per-cell changes and notes; raises UserError for unreadable or foreign files."""
    from .effective import check_threshold
    from .tasks import registry

    if not rtol >= 0:
        raise UserError(f"--rtol {rtol} must be >= 0", "e.g. --rtol 0.02 (2%)")
    check_threshold(threshold)
    tasks = registry()
    base_records, new_records = read_records(base_path), read_records(new_path)
    (base, base_b), (new, new_b) = _aggregates(base_records, tasks), _aggregates(new_records, tasks)
    if not base:
        raise UserError(f"'{base_path}' has no aggregate rows", "give a CSV written by ctxbench")
    notes = []
    digests = lambda rows: {(r["model_digest"], r["data_digest"]) for r in rows.values()}  # noqa: E731
    if digests(base) != digests(new):
        notes.append("model or data digests differ between the files (different weights, or another Python's stdlib corpus)")
    changes = []
    for key in sorted(base.keys() | new.keys(), key=lambda k: tuple(map(str, k))):
        b, n = base.get(key), new.get(key)
        info = dict(zip(MATCH, key, strict=True))
        if n is None:
            changes.append(Change(info, _value(b), None, "missing", "cell missing from NEW"))
            continue
        if b is None:
            changes.append(Change(info, None, _value(n), "new"))
            continue
        if n["status"] != "ok":
            changes.append(Change(info, _value(b), None, "failed" if b["status"] == "ok" else "ok", f"status {n['status']} in NEW"))
            continue
        bv, nv = _value(b), _value(n)
        bci, nci = _ci(base_b.get(key)), _ci(new_b.get(key))
        status, reason = _verdict(info, bv, nv, rtol, bci, nci, tasks)
        changes.append(Change(info, bv, nv, status, reason, bci, nci))
    changes += _effective_changes(base_records, new_records, tasks, threshold)
    return changes, notes


def _ci(b: dict | None) -> tuple | None:
    if not b or b.get("lo") is None or b.get("hi") is None:
        return None
    return (b["lo"], b["hi"])


def _value(record: dict) -> float | None:
    try:
        value = float(record["value"])
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _verdict(info, base, new, rtol, bci, nci, tasks) -> tuple[str, str]:
    from .pivot import headline_of
    from .stats import changed_beyond_noise

    if base is None or new is None:
        return "ok", ""
    _, higher_is_better = headline_of(info["task"], tasks)
    return changed_beyond_noise(base, *(bci or (None, None)), new, *(nci or (None, None)), rtol, not higher_is_better)


def _effective_changes(base_records, new_records, tasks, threshold) -> list[Change]:
    """An effective length that shrank makes the method's row worse."""
    from .report import pivots

    def lengths(records):
        out = {}
        for p in pivots(records, tasks, threshold=threshold):
            for label, eff in p.effective.items():
                out[(p.model, p.task, p.variant, label, p.factor)] = eff
        return out

    base, new = lengths(base_records), lengths(new_records)
    changes = []
    for key in sorted(base.keys() & new.keys(), key=lambda k: tuple(map(str, k))):
        b, n = base[key], new[key]
        info = dict(model=key[0], task=key[1], variant=key[2], label=key[3], factor=key[4], length="", depth="", metric="effective_length")
        if b is not None and (n is None or n < b):
            changes.append(Change(info, b, n, "worse", f"effective length shrank from {b} to {n or 'none'}"))
        else:
            changes.append(Change(info, b, n, "better" if (n or 0) > (b or 0) else "ok"))
    return changes


def failed(changes: list[Change]) -> bool:
    return any(c.status in ("worse", "missing", "failed") for c in changes)


def to_markdown(changes: list[Change], notes: list[str], rtol: float) -> str:
    bad = [c for c in changes if c.status in ("worse", "missing", "failed")]
    head = f"### ctxbench compare: {'FAIL' if bad else 'PASS'} — {len(bad)} of {len(changes)} cells worse (rtol {rtol:g}, beyond noise)\n"
    lines = [head, *[f"> {n}" for n in notes], "",
             "| task | method | factor | length | depth | metric | base | new | change | status | why |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for c in changes:
        lines.append("| " + " | ".join([
            c.key["task"] + (f" {c.key['variant']}" if c.key.get("variant") else ""), c.key["label"], c.key["factor"] or "any",
            c.key["length"], c.key["depth"] or "—", c.key["metric"], fmt(c.base, c.base_ci, c.key["metric"]), fmt(c.new, c.new_ci, c.key["metric"]), pct(c),
            ("**" + c.status + "**") if c.status in ("worse", "missing", "failed") else c.status, c.reason,
        ]) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def fmt(value: float | None, ci: tuple | None = None, metric: str = "") -> str:
    if value is None:
        return "—"
    if metric == "effective_length":
        from .pivot import len_label

        return len_label(int(value))
    text = f"{value:.4g}"
    return text + (f" [{ci[0]:.4g}–{ci[1]:.4g}]" if ci else "")


def pct(c: Change) -> str:
    if c.delta is None:
        return "—"
    if c.key["metric"] == "effective_length" and c.delta:
        from .pivot import len_label

        return ("+" if c.delta > 0 else "-") + len_label(abs(int(c.delta)))
    if c.key["metric"] == "ppl" and c.base:
        return f"{100 * c.delta / c.base:+.2f}%"
    return f"{c.delta:+.3g}"
