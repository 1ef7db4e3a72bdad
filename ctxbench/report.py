"""Reports from a results CSV: pivots (method x length), markdown/CSV text, and PNG plots.

Plots use matplotlib's headless Agg backend: perplexity against length (one line per method,
log y, the trained length marked) per (model, factor), and passkey accuracy heatmaps (depth x
length) per (model, method, factor).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .api import to_frame
from .errors import UserError


def _frame(records_or_frame) -> pd.DataFrame:
    return records_or_frame if isinstance(records_or_frame, pd.DataFrame) else to_frame(records_or_frame)


def _len_label(n) -> str:
    n = int(n)
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _trained_len(frame: pd.DataFrame) -> int | None:
    for text in frame["extra"].dropna():
        try:
            value = json.loads(text).get("trained_len") if text else None
        except (ValueError, AttributeError):
            continue
        if value:
            return int(value)
    return None


def pivots(records_or_frame) -> list[tuple[str, pd.DataFrame]]:
    """(title, table) per task and (model, factor): ppl method x length, passkey method x length accuracy."""
    frame = _frame(records_or_frame)
    ok = frame[frame["status"] == "ok"]
    out = []
    ppl = ok[(ok["task"] == "ppl") & (ok["doc"] == "all") & (ok["metric"] == "ppl")]
    for (model, factor), part in ppl.groupby(["model", "factor"], sort=True):
        table = part.pivot_table(index="method", columns="length", values="value", aggfunc="first")
        table.columns = [_len_label(c) for c in table.columns]
        out.append((f"ppl — {model}, factor {factor:g}", table))
    pk = ok[(ok["task"] == "passkey") & (ok["metric"] == "correct")]
    for (model, factor), part in pk.groupby(["model", "factor"], sort=True):
        table = part.pivot_table(index="method", columns="length", values="value", aggfunc="mean")
        table.columns = [_len_label(c) for c in table.columns]
        out.append((f"passkey accuracy — {model}, factor {factor:g}", table))
    return out


def to_markdown(records_or_frame) -> str:
    parts = []
    for title, table in pivots(records_or_frame):
        cols = [str(c) for c in table.columns]
        lines = [f"#### {title}", "", "| method | " + " | ".join(cols) + " |", "| --- |" + " ---: |" * len(cols)]
        for method, row in table.iterrows():
            lines.append(f"| {method} | " + " | ".join("—" if pd.isna(v) else f"{v:.4g}" for v in row) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def to_csv(records_or_frame) -> str:
    chunks = []
    for title, table in pivots(records_or_frame):
        chunks.append(f"# {title}\n" + table.to_csv())
    return "\n".join(chunks)


def write_plots(records_or_frame, directory: str | Path) -> list[Path]:
    """Write the PNGs into ``directory`` (created if needed); returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise UserError(f"--plot '{directory}' is a file", "give a directory for the PNGs")
    directory.mkdir(parents=True, exist_ok=True)
    frame = _frame(records_or_frame)
    ok = frame[frame["status"] == "ok"]
    trained = _trained_len(frame)
    paths = []
    ppl = ok[(ok["task"] == "ppl") & (ok["doc"] == "all") & (ok["metric"] == "ppl")]
    for (model, factor), part in ppl.groupby(["model", "factor"], sort=True):
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
        for method, rows in part.groupby("method", sort=True):
            rows = rows.sort_values("length")
            ax.plot(rows["length"].astype(int), rows["value"], marker="o", label=method)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        lengths = sorted(part["length"].astype(int).unique())
        ax.set_xticks(lengths, [_len_label(n) for n in lengths])
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0)))
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_locator(ticker.NullLocator())
        if trained:
            ax.axvline(trained, color="grey", linestyle="--", linewidth=1)
            ax.text(trained, ax.get_ylim()[1], f" trained {_len_label(trained)}", va="top", ha="left", color="grey", fontsize=8)
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel("perplexity (log scale)")
        ax.set_title(f"{model}: perplexity vs length, factor {factor:g}")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = directory / f"ppl-{_safe(model)}-x{factor:g}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    pk = ok[(ok["task"] == "passkey") & (ok["metric"] == "correct")].copy()
    pk["depth"] = pd.to_numeric(pk["depth"], errors="coerce")
    for (model, method, factor), part in pk.groupby(["model", "method", "factor"], sort=True):
        table = part.pivot_table(index="depth", columns="length", values="value", aggfunc="mean").sort_index(ascending=False)
        fig, ax = plt.subplots(figsize=(max(4.0, 1.8 + 1.1 * table.shape[1]), max(3.0, 1.4 + 0.6 * table.shape[0])), dpi=120)
        image = ax.imshow(table.values, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(table.shape[1]), [_len_label(c) for c in table.columns])
        ax.set_yticks(range(table.shape[0]), [f"{d:.0%}" for d in table.index])
        for i in range(table.shape[0]):
            for j in range(table.shape[1]):
                value = table.values[i, j]
                if not pd.isna(value):
                    ax.text(j, i, f"{value:.0%}", ha="center", va="center", fontsize=9)
        ax.set_xlabel("prompt length (tokens)")
        ax.set_ylabel("needle depth")
        ax.set_title(f"passkey: {method} x{factor:g}", fontsize=10)
        fig.colorbar(image, ax=ax, fraction=0.05)
        fig.tight_layout()
        path = directory / f"passkey-{_safe(model)}-{_safe(method)}-x{factor:g}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(name))
