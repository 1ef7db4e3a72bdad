"""The one pivot every report format shows: method label x length, per task, variant, factor and
headline metric, each cell with its 95% interval and sample size.

Headline rows are a task's aggregate rows of its headline metric (``ppl`` for perplexity,
``accuracy`` for retrieval tasks; ``doc`` and ``trial`` empty or ``all``). Methods that ignore
the factor are run once and written with an empty factor; the pivot shows them beside every
factor of the same task (the baseline row of each table).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

HEADLINE_FALLBACK = {"ppl": ("ppl", False), "passkey": ("accuracy", True)}


def headline_of(task_name: str, tasks: dict | None) -> tuple[str, bool]:
    """(metric, higher_is_better) of a task, also for files whose task is not installed."""
    if tasks and task_name in tasks:
        t = tasks[task_name]
        return t.metric, t.higher_is_better
    return HEADLINE_FALLBACK.get(task_name, ("accuracy", True))


@dataclass
class PivotCell:
    value: float
    lo: float | None = None
    hi: float | None = None
    n: int | None = None  # trials (accuracy) or documents (ppl)
    change: float | None = None  # against --baseline: relative for ppl, absolute for accuracy


@dataclass
class Pivot:
    model: str
    task: str
    variant: str
    factor: str  # "" only when no row of the table has a factor
    metric: str
    higher_is_better: bool
    lengths: list[int]
    rows: dict[str, dict[int, PivotCell]] = field(default_factory=dict)  # label -> length -> cell
    effective: dict[str, int | None] = field(default_factory=dict)  # label -> effective length
    trained_len: int | None = None

    @property
    def title(self) -> str:
        what = self.task + (f" {self.variant}" if self.variant and self.variant != "default" else "")
        what += "" if self.metric == self.task else f" {self.metric}"
        factor = f"factor {self.factor}" if self.factor else "any factor"
        return f"{what} — {self.model}, {factor}"


def _num(text, default=None):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(value) else value


def _fmt_factor(text) -> str:
    value = _num(text)
    return "" if value is None else f"{value:g}"


def build(records: list[dict], tasks: dict | None = None, task=None, method=None, factor=None, length=None,
          baseline: str | None = None) -> list[Pivot]:  # fmt: skip
    """Pivots from result records (dicts of strings), filtered by task names, method labels or
    names, factors and lengths (lists or None)."""
    groups: dict[tuple, list[dict]] = {}
    bounds: dict[tuple, dict[str, float]] = {}
    per_trial: dict[tuple, set] = {}  # trials seen per depth cell: the count when an old row lacks extra.trials
    for r in records:
        if r.get("status") != "ok":
            continue
        key = (r["model"], r["task"], r.get("variant", ""), r.get("label") or r["method"], _fmt_factor(r["factor"]), int(float(r["length"])))
        if r.get("trial", "") not in ("", "all"):
            per_trial.setdefault((*key, r.get("depth", "")), set()).add(r["trial"])
            continue
        if r.get("doc", "") not in ("", "all"):
            continue
        metric, _ = headline_of(r["task"], tasks)
        if r["metric"] == metric:
            groups.setdefault(key, []).append(r)
        elif r["metric"] in (metric + "_lo", metric + "_hi"):
            bounds.setdefault((*key, r.get("depth", "")), {})[r["metric"][len(metric) + 1 :]] = _num(r["value"])
    if task:
        groups = {k: v for k, v in groups.items() if k[1] in task}
    if method:
        groups = {k: v for k, v in groups.items() if k[3] in method or v[0]["method"] in method}
    if length:
        groups = {k: v for k, v in groups.items() if k[5] in length}
    tables: dict[tuple, Pivot] = {}
    factors: dict[tuple, set[str]] = {}
    for (model, t, variant, _label, f, _n) in groups:
        if f:
            factors.setdefault((model, t, variant), set()).add(f)
    for (model, t, variant, label, f, n), rows in groups.items():
        metric, higher = headline_of(t, tasks)
        # a factor-free cell (the method ignores the factor) joins every factor's table
        targets = [f] if f else sorted(factors.get((model, t, variant), {""}), key=lambda x: _num(x, 0))
        if factor:
            targets = [x for x in targets if _num(x) in factor]
        latest = {row.get("depth", ""): row for row in rows}  # per depth, the last run of the cell
        if len(latest) == 1:
            r = rows[-1]
            extra = _extra(r)
            b = bounds.get((model, t, variant, label, f, n, r.get("depth", "")), {})
            cell = PivotCell(_num(r["value"], float("nan")), b.get("lo"), b.get("hi"), extra.get("trials") or extra.get("docs"))
        else:
            trials = {d: len(per_trial.get((model, t, variant, label, f, n, d), ())) for d in latest}
            cell, extra = _pooled(list(latest.values()), trials)
        for target in targets:
            p = tables.setdefault((model, t, variant, target), Pivot(model, t, variant, target, metric, higher, []))
            p.rows.setdefault(label, {})[n] = cell
            p.trained_len = p.trained_len or extra.get("trained_len")
    out = []
    for key in sorted(tables, key=lambda k: (k[0], k[1], k[2], _num(k[3], 0))):
        p = tables[key]
        p.lengths = sorted({n for cells in p.rows.values() for n in cells})
        if baseline:
            _add_changes(p, baseline)
        out.append(p)
    return out


def _pooled(rows: list[dict], counted: dict) -> tuple[PivotCell, dict]:
    """One accuracy over the depth cells of a length: every trial of every depth counts once
    (RULER's score of a length is the mean over its samples at all depths), with the Wilson
    interval of the pooled count (fractional scores counted as :func:`accuracy_rows` does)."""
    from .stats import wilson

    extras = [_extra(r) for r in rows]
    sizes = [int(e.get("trials") or counted.get(r.get("depth", ""), 0)) for r, e in zip(rows, extras, strict=True)]
    n = sum(sizes)
    if n == 0:
        return PivotCell(float("nan")), extras[-1]
    total = sum(float(e.get("correct", _num(r["value"], 0.0) * k)) for r, e, k in zip(rows, extras, sizes, strict=True))
    lo, hi = wilson(min(n, round(total)), n)
    return PivotCell(total / n, lo, hi, n), {**extras[-1], "trials": n, "depths": len(rows)}


def _extra(record: dict) -> dict:
    try:
        return json.loads(record.get("extra") or "{}")
    except ValueError:
        return {}


def _add_changes(p: Pivot, baseline: str) -> None:
    from .errors import UserError, closest

    if baseline not in p.rows:
        guess = closest(baseline, p.rows)
        raise UserError(f"--baseline '{baseline}' is not a method label of '{p.title}'",
                        (f"did you mean '{guess}'? " if guess else "") + f"labels: {', '.join(p.rows)}")  # fmt: skip
    base = p.rows[baseline]
    for label, cells in p.rows.items():
        for n, cell in cells.items():
            if n in base and label != baseline and not math.isnan(base[n].value):
                if p.higher_is_better:
                    cell.change = cell.value - base[n].value
                else:
                    cell.change = cell.value / base[n].value - 1 if base[n].value else None


def fmt_value(p: Pivot, cell: PivotCell | None, intervals: bool = True) -> str:
    """A cell for people: ``75% [47-92%] n=12`` for accuracy, ``5.726 [5.61-5.85]`` for ppl."""
    if cell is None or math.isnan(cell.value):
        return "—"
    percent = p.higher_is_better
    text = f"{cell.value:.0%}" if percent else f"{cell.value:.4g}"
    if intervals and cell.lo is not None and cell.hi is not None:
        text += f" [{cell.lo:.0%}–{cell.hi:.0%}]" if percent else f" [{cell.lo:.4g}–{cell.hi:.4g}]"
    if percent and cell.n:
        text += f" n={int(cell.n)}"
    if cell.change is not None:
        text += f" ({cell.change * 100:+.0f} pts)" if percent else f" ({cell.change:+.1%})"
    return text


def len_label(n) -> str:
    n = int(n)
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)
