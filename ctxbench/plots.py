"""PNG plots for people (matplotlib's headless Agg backend), each with a title naming the model,
task and factor, and a legend:

- perplexity against length per (model, factor), one line per method label with its 95% band,
  the trained length marked;
- loss by position per (model, factor, length): mean NLL per 512-position bucket for each method
  label, the trained length marked;
- accuracy heatmaps (depth x length) per (model, task, method label, factor) for the retrieval
  tasks.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import UserError
from .pivot import len_label


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _safe(name) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(name))


def _extra(r) -> dict:
    try:
        return json.loads(r.get("extra") or "{}")
    except ValueError:
        return {}


def _factor(r) -> str:
    try:
        return f"{float(r['factor']):g}"
    except ValueError:
        return ""


def _mark_trained(ax, trained: int, text: str) -> None:
    ax.axvline(trained, color="grey", linestyle="--", linewidth=1)
    ax.text(trained, ax.get_ylim()[1], f" {text}", va="top", ha="left", color="grey", fontsize=8)


def _save(plt, fig, path: Path, paths: list[Path]) -> None:
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    paths.append(path)


def _ok(records, task, metric):
    return [r for r in records if r["task"] == task and r["metric"] == metric and r["status"] == "ok"]


def _by_factor(rows):
    """Rows grouped by (model, factor); factor-free rows (methods that ignore the factor) join every group."""
    factors = {(r["model"], _factor(r)) for r in rows if _factor(r)}
    out: dict[tuple, list] = {}
    for r in rows:
        f = _factor(r)
        targets = [k for k in factors if k[0] == r["model"]] if not f else [(r["model"], f)]
        for k in targets or [(r["model"], "")]:
            out.setdefault(k, []).append(r)
    return out


def ppl_plots(records: list[dict], directory: Path) -> list[Path]:
    from matplotlib import ticker

    plt = _plt()
    paths = []
    rows = _ok(records, "ppl", "ppl")
    bounds = {(r["model"], r["label"], _factor(r), r["length"], r["metric"]): float(r["value"])
              for r in records if r["task"] == "ppl" and r["metric"] in ("ppl_lo", "ppl_hi") and r["status"] == "ok"}  # fmt: skip
    for (model, factor), part in sorted(_by_factor([r for r in rows if r["doc"] == "all"]).items()):
        fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
        trained = None
        for label in sorted({r["label"] for r in part}):
            mine = sorted((r for r in part if r["label"] == label), key=lambda r: int(r["length"]))
            xs = [int(r["length"]) for r in mine]
            ys = [float(r["value"]) for r in mine]
            line, = ax.plot(xs, ys, marker="o", label=label)
            lo = [bounds.get((model, label, _factor(r), r["length"], "ppl_lo")) for r in mine]
            hi = [bounds.get((model, label, _factor(r), r["length"], "ppl_hi")) for r in mine]
            if all(v is not None for v in lo + hi):
                ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
            trained = trained or _extra(mine[0]).get("trained_len")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        lengths = sorted({int(r["length"]) for r in part})
        ax.set_xticks(lengths, [len_label(n) for n in lengths])
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0)))
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_locator(ticker.NullLocator())
        if trained:
            _mark_trained(ax, trained, f"trained {len_label(trained)}")
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel("perplexity (log scale; band: 95% bootstrap)")
        ax.set_title(f"ppl vs length — {model}, factor {factor or 'any'}", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
        _save(plt, fig, directory / f"ppl-{_safe(model)}-x{factor or 'any'}.png", paths)
    paths += position_plots(records, directory)
    return paths


def position_plots(records: list[dict], directory: Path) -> list[Path]:
    """NLL against position, one figure per (model, factor, length) that has nll_pos rows."""
    plt = _plt()
    paths = []
    rows = _ok(records, "ppl", "nll_pos")
    for (model, factor), part in sorted(_by_factor(rows).items()):
        for length in sorted({int(r["length"]) for r in part}):
            mine = [r for r in part if int(r["length"]) == length]
            fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
            trained = None
            for label in sorted({r["label"] for r in mine}):
                pts = sorted((_extra(r)["pos"], float(r["value"])) for r in mine if r["label"] == label)
                xs = [(a + b) / 2 for (a, b), _ in pts]
                ax.plot(xs, [v for _, v in pts], label=label, linewidth=1.4, marker="o" if len(pts) <= 8 else None, markersize=4)  # few buckets: show them
                trained = trained or _extra(mine[0]).get("trained_len")
            if trained and trained < length:
                _mark_trained(ax, trained, f"trained L = {len_label(trained)}")
            ax.set_xlabel("target position (tokens; 512-token buckets)")
            ax.set_ylabel("mean NLL (nats)")
            ax.set_title(f"loss by position — {model}, {len_label(length)} tokens, factor {factor or 'any'}", fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
            _save(plt, fig, directory / f"nll-position-{_safe(model)}-{len_label(length)}-x{factor or 'any'}.png", paths)
    return paths


def depth_heatmaps(records: list[dict], directory: Path, task: str, metric: str = "correct") -> list[Path]:
    """Mean per-trial score, depth x length, per (model, variant, method label, factor)."""
    plt = _plt()
    paths = []
    rows = [r for r in _ok(records, task, metric) if r["depth"] not in ("", None)]
    for (model, factor), part in sorted(_by_factor(rows).items()):
        for variant, label in sorted({(r.get("variant", ""), r["label"]) for r in part}):
            mine = [r for r in part if r["label"] == label and r.get("variant", "") == variant]
            depths = sorted({float(r["depth"]) for r in mine}, reverse=True)
            lengths = sorted({int(r["length"]) for r in mine})
            grid = [[None] * len(lengths) for _ in depths]
            counts = [[0] * len(lengths) for _ in depths]
            for r in mine:
                i, j = depths.index(float(r["depth"])), lengths.index(int(r["length"]))
                grid[i][j] = (grid[i][j] or 0.0) + float(r["value"])
                counts[i][j] += 1
            values = [[None if c == 0 else g / c for g, c in zip(gr, cr, strict=True)] for gr, cr in zip(grid, counts, strict=True)]
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
            _save(plt, fig, directory / f"{task}-{_safe(model)}-{_safe(variant) + '-' if variant else ''}{_safe(label)}-x{factor or 'any'}.png", paths)
    return paths


def write_plots(records: list[dict], directory: str | Path, tasks: dict | None = None) -> list[Path]:
    """Every task's plots for ``records`` into ``directory`` (created if needed)."""
    from .tasks import registry

    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise UserError(f"--plot '{directory}' is a file", "give a directory for the PNGs")
    directory.mkdir(parents=True, exist_ok=True)
    tasks = registry() if tasks is None else tasks
    paths = []
    for name in sorted({r["task"] for r in records}):
        task = tasks.get(name)
        if task is not None and task.plots is not None:
            paths += task.plots([r for r in records if r["task"] == name], directory)
    return paths
