"""How ``ctxbench rank`` shows a :class:`ctxbench.report.paired.Ranking`: methods best first with their
headline, a compact letter display (methods sharing a letter are not separated) and the matrix
of Holm-adjusted pairwise p-values, each with the test's own p beside it, as a rich table,
markdown or JSON."""

from __future__ import annotations

import math

from ctxbench.parsing import len_label
from ctxbench.report.formats import strict_json
from ctxbench.textsafe import md_cell, md_line


def _title(r) -> str:

    what = r.task + (f" {r.variant}" if r.variant and r.variant != "default" else "")
    factor = f"factor {r.factor}" if r.factor else "any factor"
    return (f"{what} at {len_label(r.length)} — {r.model}, {factor}: paired on {r.n} {r.unit}, "
            f"Holm-adjusted p (raw p), alpha {r.alpha:g}")  # fmt: skip


def _value(r, i: int) -> str:
    v = r.values[i]
    return f"{v:.0%}" if r.metric == "accuracy" else f"{v:.4g}"


def _p(r, i: int, j: int) -> str:
    if i == j:
        return "—"
    p = r.p_holm[i][j]
    mark = "≠" if r.separated[i][j] else "="
    if math.isnan(p):
        return "?"
    raw = r.p_raw[i][j] if r.p_raw else math.nan
    return f"{mark} {p:.2g}" + ("" if math.isnan(raw) else f" ({raw:.2g})")


def _columns(r) -> list[str]:
    return ["rank", "method", r.metric, "group", *r.labels]


def _rows(r) -> list[list[str]]:
    return [[str(i + 1), label, _value(r, i), r.letters[i], *(_p(r, i, j) for j in range(len(r.labels)))]
            for i, label in enumerate(r.labels)]  # fmt: skip


def ranking_table(r):
    from rich.table import Table  # start-up: rich only where it runs

    table = Table(title=_title(r), caption="group: methods sharing a letter are not separated; ≠ separated, = not: Holm-adjusted p (raw p)")
    for col in _columns(r):
        table.add_column(col, justify="left" if col in ("method", "group") else "right")
    for row in _rows(r):
        table.add_row(*row)
    return table


def ranking_markdown(rankings) -> str:
    parts = []
    for r in rankings:
        cols = _columns(r)
        lines = [f"#### {md_line(_title(r))}", "", "| " + " | ".join(md_cell(c) for c in cols) + " |", "|" + " --- |" * len(cols)]
        lines += ["| " + " | ".join(md_cell(x) for x in row) + " |" for row in _rows(r)]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def ranking_json(rankings) -> str:
    """The rankings as strict JSON: a NaN (the p-value of a method against itself, a value with no
    units) is ``null`` with a ``null_reasons`` entry, never the bare ``NaN`` other parsers refuse."""
    out = [dict(title=_title(r), model=r.model, task=r.task, variant=r.variant, factor=r.factor, length=r.length,
                metric=r.metric, alpha=r.alpha, n=r.n, unit=r.unit, labels=list(r.labels), values=list(r.values),
                letters=list(r.letters), separated=[list(x) for x in r.separated],
                p_holm=[list(row) for row in r.p_holm], p_value=[list(row) for row in r.p_raw],
                delta=[list(x) for x in r.delta])
           for r in rankings]  # fmt: skip
    return strict_json(out, {"p_holm": "a method is not tested against itself (the diagonal)",
                             "p_value": "a method is not tested against itself (the diagonal)"})
