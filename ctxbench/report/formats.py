"""Reports from results CSVs: the one pivot (:mod:`ctxbench.report.pivot`) as a rich table, markdown,
CSV or JSON — the same numbers in every format (CSV and JSON at full precision, accuracy as a
fraction there and as a percent for people), with the effective length of every method (the
per-task rule of :mod:`ctxbench.report.effective`).

Where RULER task rows are present, every format also carries RULER's suite score
(:mod:`ctxbench.report.rulerscore`: ``ruler_avg`` per length with its task coverage, wAvg inc/dec and
RULER's effective length at 85.6, in percent as RULER prints them): a table per suite setting after
the pivots (rich, markdown), ``kind: "ruler_suite"`` objects after the pivots (JSON), and
``ruler_*`` columns on the rows of RULER tasks, the method's suite score at that length (CSV)."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from ctxbench.parsing import len_label
from ctxbench.report.effective import annotate
from ctxbench.report.paired import compare_labels
from ctxbench.report.pivot import (
    Pivot,
    add_paired,
    build,
    effective_all_pass,
    fmt_effective,
    fmt_value,
    ran_out_note,
)
from ctxbench.report.rulerscore import CSV_FIELDS, FAMILIES, csv_fields, rich_table, suites, to_dict
from ctxbench.report.rulerscore import to_markdown as suite_markdown
from ctxbench.textsafe import csv_escape, md_cell, md_line


def pivots(records: list[dict], tasks=None, task=None, method=None, factor=None, length=None, baseline=None,
           threshold=None, check: bool = True) -> list[Pivot]:  # fmt: skip
    """The annotated pivots (``check``: see :func:`ctxbench.report.pivot.build`)."""

    out = build(records, tasks, task=task, method=method, factor=factor, length=length, baseline=baseline, check=check)
    annotate(out, threshold)
    if baseline:

        shown = [r for r in records if (not task or r["task"] in task) and (not length or int(float(r["length"])) in length)
                 and (not method or baseline in (r.get("label"), r["method"]) or r.get("label") in method or r["method"] in method)]  # fmt: skip
        add_paired(out, compare_labels(shown, baseline, tasks=tasks), tasks)  # Holm across the cells shown
    return out


def ruler_suites(ps: list[Pivot]) -> list:
    """RULER's suite score tables of these pivots ([] when none is a RULER task)."""

    return suites(ps) if any(p.task in FAMILIES for p in ps) else []


def ruler_tables(ps: list[Pivot]) -> list:
    """The suite score tables as rich tables."""

    return [rich_table(s) for s in ruler_suites(ps)]


def to_markdown(ps: list[Pivot]) -> str:
    parts = []
    for p in ps:
        cols = [len_label(n) for n in p.lengths] + (["effective length"] if p.effective else [])
        lines = [f"#### {md_line(p.title)}", "", "| method | " + " | ".join(cols) + " |", "| --- |" + " ---: |" * len(cols)]
        for label, cells in p.rows.items():
            row = [fmt_value(p, cells.get(n)) for n in p.lengths]
            if p.effective:
                row.append(fmt_effective(p, label))
            lines.append(f"| {md_cell(label)} | " + " | ".join(md_cell(c) for c in row) + " |")
        if ran_out_note(p):
            lines += ["", md_line(ran_out_note(p))]
        parts.append("\n".join(lines))
    suites = ruler_suites(ps)
    if suites:
        parts.append(suite_markdown(suites).rstrip("\n"))
    return "\n\n".join(parts) + "\n"


def _long_rows(ps: list[Pivot], suites=()) -> list[dict]:

    rows = []
    for p in ps:
        for label, cells in p.rows.items():
            for n in p.lengths:
                c = cells.get(n)
                rows.append(dict(
                    model=p.model, task=p.task, variant=p.variant, factor=p.factor, metric=p.metric, method=label, length=n,
                    value=None if c is None else c.value, lo=None if c is None else c.lo, hi=None if c is None else c.hi,
                    n=None if c is None else c.n, change=None if c is None else c.change,
                    effective_length=p.effective.get(label) if p.effective else None,
                    effective_lo=(p.effective_ci.get(label) or (None, None))[0], effective_hi=(p.effective_ci.get(label) or (None, None))[1],
                    effective_all_pass=effective_all_pass(p, label) if p.effective.get(label) else None,
                    **{k: None if c is None else getattr(c, k) for k in ("delta", "delta_lo", "delta_hi", "p_value", "p_holm", "paired_n")},
                    setting=p.setting,
                ))  # fmt: skip
                if suites:
                    rows[-1].update(dict.fromkeys(CSV_FIELDS), **csv_fields(suites, p, label, n))
    return rows


def to_csv(ps: list[Pivot]) -> str:
    """The pivot as long rows (one per method label and length), full precision; with RULER task
    rows, the ``ruler_*`` columns (:data:`ctxbench.report.rulerscore.CSV_FIELDS`) after the others."""

    suites = ruler_suites(ps)
    buf = io.StringIO()
    fields = ["model", "task", "variant", "factor", "metric", "method", "length", "value", "lo", "hi", "n", "change", "effective_length",
              "effective_lo", "effective_hi", "effective_all_pass",
              "delta", "delta_lo", "delta_hi", "p_value", "p_holm", "paired_n", "setting"]  # fmt: skip
    fields += CSV_FIELDS if suites else []
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in _long_rows(ps, suites):
        writer.writerow({k: ("" if v is None else (repr(v) if isinstance(v, float) else csv_escape(str(v)))) for k, v in r.items()})
    return buf.getvalue()


def to_json(ps: list[Pivot]) -> str:
    out = []
    for p in ps:
        out.append(dict(
            title=p.title, model=p.model, task=p.task, variant=p.variant, factor=p.factor, metric=p.metric, setting=p.setting,
            higher_is_better=p.higher_is_better, lengths=p.lengths,
            rows=[dict(method=label, effective_length=p.effective.get(label) if p.effective else None,
                       effective_interval=list(p.effective_ci[label]) if label in p.effective_ci else None,
                       effective_all_pass=effective_all_pass(p, label) if p.effective.get(label) else None,
                       cells={str(n): {k: v for k, v in vars(c).items() if k != "source"} for n, c in cells.items()})
                  for label, cells in p.rows.items()],
        ))  # fmt: skip

    out += [to_dict(s) for s in ruler_suites(ps)]  # after the pivots: ``out[i]`` is still pivot i
    return strict_json(out)


def strict_json(data, reasons: dict[str, str] | None = None) -> str:
    """``data`` as strict JSON (RFC 8259: ``json.dumps(..., allow_nan=False)``): a NaN or infinite
    number, which Python would write as the bare ``NaN``/``Infinity`` that other tools' parsers
    refuse, is ``null``, and the object that held it gains ``null_reasons`` saying for each such
    field what it was and why (``reasons``: the writer's words by field name, where the field says
    more than what the number was)."""
    return json.dumps(_json_ready(data, reasons or {}), indent=1, allow_nan=False) + "\n"


def _not_finite(value) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _why(value: float) -> str:
    return "NaN: not a number (no value was measured, or it is undefined here)" if math.isnan(value) else \
        f"{'-' if value < 0 else ''}Infinity: not a finite number"  # fmt: skip


def _json_ready(data, reasons: dict[str, str]):
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        why: dict[str, str] = {}
        for key, value in data.items():
            if _not_finite(value):
                out[key], why[key] = None, reasons.get(key, _why(value))
                continue
            out[key] = _json_ready(value, reasons)
            if isinstance(value, (list, tuple)) and _holds_not_finite(value):
                why[key] = reasons.get(key, "null entries are NaN or infinite: not finite numbers")
        if why:
            out["null_reasons"] = why
        return out
    if isinstance(data, (list, tuple)):
        return [None if _not_finite(x) else _json_ready(x, reasons) for x in data]
    return data


def _holds_not_finite(values) -> bool:
    return any(_not_finite(x) or (isinstance(x, (list, tuple)) and _holds_not_finite(x)) for x in values)
