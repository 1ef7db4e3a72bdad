"""PNG plots for people (matplotlib's headless Agg backend), each with a title naming the model,
task and factor, and a legend. Each task owns its plots (``Task.plots``: perplexity's are in
:mod:`ctxbench.tasks.ppl`); this module holds what they share — the figure helpers and the
accuracy heatmaps (depth x length) per (model, task, method label, factor) that the retrieval
tasks draw — and :func:`write_plots`, which asks every task for its own.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ctxbench.errors import UserError
from ctxbench.outfiles import save_figure
from ctxbench.parsing import NAME_MAX, check_name_lengths, expand_path, len_label
from ctxbench.tasks import registry
from ctxbench.tasks.base import check_records
from ctxbench.tasks.base import extra_of as read


def pyplot():
    import matplotlib  # start-up: matplotlib only where it runs

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up: matplotlib only where it runs

    return plt


def safe_name(name) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(name))


def extra_of(r) -> dict:
    return read(r)


def factor_of(r) -> str:
    try:
        return f"{float(r['factor']):g}"
    except ValueError:
        return ""


def series_style(i: int) -> dict:
    """Line color and style of the ``i``-th series of a plot: matplotlib's ten default colors, then
    the same colors dashed, dash-dotted, dotted, so no two of up to 40 series look alike (a twelve
    method grid drew dca and yarn in the same blue)."""
    return {"color": f"C{i % 10}", "linestyle": ("-", "--", "-.", ":")[i // 10 % 4]}


def legend(ax, beside: bool = False) -> None:
    """The series legend, its handles long enough to show a dashed style (:func:`series_style`);
    ``beside``: right of the axes, for many series or lines that fill the whole height."""
    where = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0) if beside else {}
    ax.legend(fontsize=8, handlelength=3.5, **where)


def mark_trained(ax, trained: int, text: str) -> None:
    ax.axvline(trained, color="grey", linestyle="--", linewidth=1)
    ax.text(trained, ax.get_ylim()[1], f" {text}", va="top", ha="left", color="grey", fontsize=8)


def save(plt, fig, path: Path, paths: list[Path]) -> None:
    path = fitting_name(path)
    fig.tight_layout()
    try:
        save_figure(fig, path)  # whole or not at all: never a truncated PNG
    finally:
        plt.close(fig)
    paths.append(path)


def ok_rows(records, task, metric):
    return [r for r in records if r["task"] == task and r["metric"] == metric and r["status"] == "ok"]


def by_factor(rows: list[dict]) -> dict[tuple, list]:
    """Rows grouped by (model, factor); factor-free rows (methods that ignore the factor) join every group."""
    factors = {(r["model"], factor_of(r)) for r in rows if factor_of(r)}
    out: dict[tuple, list] = {}
    for r in rows:
        f = factor_of(r)
        targets = [k for k in factors if k[0] == r["model"]] if not f else [(r["model"], f)]
        for k in targets or [(r["model"], "")]:
            out.setdefault(k, []).append(r)
    return out


def depth_heatmaps(records: list[dict], directory: Path, task: str, metric: str = "correct") -> list[Path]:
    """Mean per-trial score, depth x length, per (model, variant, method label, factor)."""
    plt = pyplot()
    paths: list[Path] = []
    rows = [r for r in ok_rows(records, task, metric) if r["depth"] not in ("", None)]
    for (model, factor), part in sorted(by_factor(rows).items()):
        for variant, label in sorted({(r.get("variant", ""), r["label"]) for r in part}):
            mine = [r for r in part if r["label"] == label and r.get("variant", "") == variant]
            depths = sorted({float(r["depth"]) for r in mine}, reverse=True)
            lengths = sorted({int(r["length"]) for r in mine})
            grid: list[list[float | None]] = [[None] * len(lengths) for _ in depths]
            counts = [[0] * len(lengths) for _ in depths]
            for r in mine:
                i, j = depths.index(float(r["depth"])), lengths.index(int(r["length"]))
                grid[i][j] = (grid[i][j] or 0.0) + float(r["value"])
                counts[i][j] += 1
            values = [[None if c == 0 or g is None else g / c for g, c in zip(gr, cr, strict=True)] for gr, cr in zip(grid, counts, strict=True)]
            fig, ax = plt.subplots(figsize=(max(4.5, 2.2 + 1.1 * len(lengths)), max(3.2, 1.6 + 0.55 * len(depths))), dpi=120)
            image = ax.imshow([[float("nan") if v is None else v for v in row] for row in values], cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
            ax.set_xticks(range(len(lengths)), [len_label(n) for n in lengths])
            ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
            for i, row in enumerate(values):
                for j, v in enumerate(row):
                    if v is not None:
                        ax.text(j, i, f"{v:.0%}", ha="center", va="center", fontsize=8)
            ax.set_xlabel("prompt length (tokens)")
            ax.set_ylabel("needle depth")
            what = task + (f" {variant}" if variant else "")
            n = max(max(r) for r in counts)
            ax.set_title(f"{what}: {label}, factor {factor or 'any'} — {model} ({n} trials/cell)", fontsize=9)
            fig.colorbar(image, ax=ax, fraction=0.05, label="accuracy")
            save(plt, fig, directory / f"{task}-{safe_name(model)}-{safe_name(variant) + '-' if variant else ''}{safe_name(label)}-x{factor or 'any'}.png", paths)
    return paths


def fitting_name(path: Path) -> Path:
    """``path`` with a name the filesystem can hold: a plot's name is built from the model, the
    method label and the factor, and a grid's label (``yarn(beta_fast=16,beta_slow=2,...)``) can
    pass :data:`~ctxbench.parsing.NAME_MAX` bytes, which made ``savefig`` a traceback after the
    whole run. A long name keeps its start and a digest of the whole, so two plots stay apart."""
    if len(path.name.encode()) <= NAME_MAX:
        return path
    digest = hashlib.sha1(path.name.encode()).hexdigest()[:10]
    stem = path.stem.encode()[: NAME_MAX - len(path.suffix.encode()) - len(digest) - 1].decode(errors="ignore")
    return path.with_name(f"{stem}-{digest}{path.suffix}")


def check_plot_dir(directory: str | Path, flag: str = "--plot") -> Path:
    """The plot folder ``directory`` (``~`` expanded), checked before anything runs (``--dry-run``
    too): a name too long for the filesystem, a file in its place or in place of a folder above
    it, or a folder it cannot be made in is one line, not a traceback after the run."""
    check_name_lengths(directory, flag)
    directory = expand_path(directory)
    if directory.exists() and not directory.is_dir():
        raise UserError(f"{flag} '{directory}' is a file", "give a folder for the PNGs")
    existing = next(p for p in (directory, *directory.parents) if p.exists())
    if not existing.is_dir():
        raise UserError(f"cannot make {flag} '{directory}': '{existing}' is a file, not a folder", "give a folder path under a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"cannot {'write in' if existing == directory else 'make'} {flag} '{directory}': permission denied on '{existing}'",
                        "give a folder you can write to")  # fmt: skip
    return directory


def write_plots(records: list[dict], directory: str | Path, tasks: dict | None = None) -> list[Path]:
    """Every task's plots for ``records`` into ``directory`` (created if needed); a value no run can
    produce is refused before anything is drawn (:func:`ctxbench.tasks.base.check_records`)."""
    directory = check_plot_dir(directory)
    tasks = registry() if tasks is None else tasks
    check_records(records, tasks)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in sorted({r["task"] for r in records}):
        task = tasks.get(name)
        if task is not None and task.plots is not None:
            paths += task.plots([r for r in records if r["task"] == name], directory)
    return paths
