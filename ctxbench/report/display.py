"""Rich tables for people, always derived from the result rows through the one pivot
(:mod:`ctxbench.report.pivot`): method label x length per task, variant, factor and metric, with the
95% interval and sample size of every cell and the best value per length in bold green."""

from __future__ import annotations

import math

from ctxbench.parsing import len_label
from ctxbench.report.effective import annotate
from ctxbench.report.pivot import Pivot, build, fmt_effective, fmt_value, ran_out_note
from ctxbench.tasks import registry


def pivot_table(p: Pivot):
    from rich.table import Table  # start-up: rich only where it runs

    title = p.title + (f", trained at {len_label(p.trained_len)}" if p.trained_len else "")
    beyond = p.trained_len and any(n > p.trained_len for n in p.lengths)
    captions = [f"* past the trained {len_label(p.trained_len)}" if beyond else "", ran_out_note(p)]
    table = Table(title=title, caption="\n".join(c for c in captions if c) or None)
    table.add_column("method", style="bold")
    for n in p.lengths:
        table.add_column(len_label(n) + (" *" if p.trained_len and n > p.trained_len else ""), justify="right")
    if p.effective:
        table.add_column("effective length", justify="right")
    best = {}
    for n in p.lengths:
        values = [cells[n].value for cells in p.rows.values() if n in cells and not math.isnan(cells[n].value)]
        if values:
            best[n] = max(values) if p.higher_is_better else min(values)
    for label, cells in p.rows.items():
        row = []
        for n in p.lengths:
            text = fmt_value(p, cells.get(n))
            row.append(f"[bold green]{text}[/]" if n in cells and cells[n].value == best.get(n) else text)
        if p.effective:
            row.append(fmt_effective(p, label))
        table.add_row(label, *row)
    return table


def summary_tables(records_or_frame, trained_len: int | None = None, task_names=None) -> list:
    """One table per pivot of ``records`` (dicts of strings, or a DataFrame of them)."""

    records = records_or_frame.astype(str).replace({"nan": "", "<NA>": ""}).to_dict("records") \
        if hasattr(records_or_frame, "to_dict") else records_or_frame  # fmt: skip
    tasks = registry()
    pivots = build(records, tasks, task=task_names)

    annotate(pivots)
    return [pivot_table(p) for p in pivots]
