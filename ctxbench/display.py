"""Rich displays for people, always derived from the result rows (pandas pivots of the CSV)."""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from .api import to_frame


def progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console, transient=False,
    )


def _fmt_len(n) -> str:
    n = int(n)
    return f"{n // 1024}k" if n % 1024 == 0 and n >= 1024 else str(n)


def ppl_tables(frame: pd.DataFrame, trained_len: int | None = None) -> list[Table]:
    """One table per (model, factor): methods x lengths of aggregate ppl, best per length in bold green."""
    frame = frame[(frame["task"] == "ppl") & (frame["doc"] == "all") & (frame["metric"] == "ppl") & (frame["status"] == "ok")]
    tables = []
    for (model, factor), part in frame.groupby(["model", "factor"], sort=True):
        pivot = part.pivot_table(index="method", columns="length", values="value", aggfunc="first")
        mode = ", ".join(sorted(set(part["mode"].astype(str)))) or "truncate"
        title = f"perplexity — {model}, factor {factor:g} ({mode})"
        if trained_len:
            title += f", trained at {_fmt_len(trained_len)}"
        table = Table(title=title)
        table.add_column("method", style="bold")
        for n in pivot.columns:
            marker = " *" if trained_len and int(n) > trained_len else ""
            table.add_column(_fmt_len(n) + marker, justify="right")
        best = pivot.min(axis=0)
        for method, row in pivot.iterrows():
            cells = []
            for n, value in row.items():
                if value is None or (isinstance(value, float) and math.isnan(value)):
                    cells.append("—")
                elif value == best[n]:
                    cells.append(f"[bold green]{value:.3f}[/]")
                else:
                    cells.append(f"{value:.3f}")
            table.add_row(str(method), *cells)
        tables.append(table)
    return tables


def _colour(acc: float) -> str:
    return "green" if acc >= 0.9 else "yellow" if acc >= 0.5 else "red"


def passkey_tables(frame: pd.DataFrame) -> list[Table]:
    """One table per (model, method, factor): accuracy lengths x depths, coloured by accuracy."""
    frame = frame[(frame["task"] == "passkey") & (frame["metric"] == "correct") & (frame["status"] == "ok")].copy()
    tables = []
    if frame.empty:
        return tables
    frame["depth"] = pd.to_numeric(frame["depth"], errors="coerce")
    for (model, method, factor), part in frame.groupby(["model", "method", "factor"], sort=True):
        pivot = part.pivot_table(index="length", columns="depth", values="value", aggfunc="mean")
        overall = part.groupby("length")["value"].mean()
        table = Table(title=f"passkey accuracy — {model}, {method}, factor {factor:g}")
        table.add_column("length", style="bold")
        for depth in pivot.columns:
            table.add_column(f"{depth:.0%}", justify="right")
        table.add_column("all", justify="right", style="bold")
        for length, row in pivot.iterrows():
            cells = [f"[{_colour(v)}]{v:.0%}[/]" if not math.isnan(v) else "—" for v in row]
            table.add_row(_fmt_len(length), *cells, f"[{_colour(overall[length])}]{overall[length]:.0%}[/]")
        tables.append(table)
    return tables


def summary_tables(records_or_frame, trained_len: int | None = None) -> list[Table]:
    frame = records_or_frame if isinstance(records_or_frame, pd.DataFrame) else to_frame(records_or_frame)
    return ppl_tables(frame, trained_len) + passkey_tables(frame)
