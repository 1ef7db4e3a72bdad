"""The plot of a search: every trial's objective against the defaults' on the same documents, in order
(the best so far as a line), then one slice per searched dimension (the same difference against the
trial's value there).

A trial stopped after one document (pruned, guarded, halved) has its objective on that document only,
while the defaults are scored on every tuning document; their raw objectives are means over different
documents and do not compare. The difference does: the trial's mean NLL minus the defaults' over the
positions of the same documents (0 is the defaults; below 0 is better)."""

from __future__ import annotations

import math
from pathlib import Path

from ctxbench.outfiles import save_figure
from ctxbench.parsing import len_label
from ctxbench.tasks.plots import pyplot

MARKERS = {"complete": ("o", "C0"), "pruned": ("x", "C3"), "guarded": ("s", "C1"), "halved": ("^", "C7"), "stopped": ("v", "C7")}


def _value(trial, dim: str, space):
    return space.value(trial.candidate, dim)


def against_defaults(trial, defaults) -> float:
    """``trial``'s objective minus the defaults' on ``trial``'s documents (NaN where the defaults lack one)."""
    mine = {v.instance for v in trial.values}
    theirs = [u for v in defaults.values if v.instance in mine for u in v.units]
    if not mine or {v.instance for v in defaults.values} < mine or not theirs:
        return math.nan
    return trial.objective - sum(s for s, _ in theirs) / sum(w for _, w in theirs)


def plot_trials(trials: list, space, path: str | Path) -> Path:
    """Write the figure to ``path``; trials without a value (stopped before any instance) are left out."""
    plt = pyplot()
    defaults = trials[0] if trials else None
    delta = {t.number: against_defaults(t, defaults) for t in trials if t.values and defaults is not None}
    shown = [t for t in trials if t.values and math.isfinite(delta.get(t.number, math.nan))]
    dims = [d.name for d in space.dims]
    fig, axes = plt.subplots(1, 1 + len(dims), figsize=(4.2 * (1 + len(dims)), 3.8), dpi=110, squeeze=False)
    ax = axes[0][0]
    best, line = math.inf, []
    for t in shown:
        marker, colour = MARKERS.get(t.status, ("o", "C0"))
        ax.scatter([t.number], [delta[t.number]], marker=marker, color=colour, s=28, zorder=3)
        if t.status == "complete":
            best = min(best, delta[t.number])
        line.append((t.number, best))
    pts = [(n, b) for n, b in line if math.isfinite(b)]
    if pts:
        ax.step([n for n, _ in pts], [b for _, b in pts], where="post", color="k", linewidth=1, label="best so far")
    for status, (marker, colour) in MARKERS.items():
        if any(t.status == status for t in shown):
            ax.scatter([], [], marker=marker, color=colour, label=status)
    ax.set_xlabel("trial (0 = published defaults)")
    ax.set_ylabel(f"Δ objective vs the defaults, same documents\n(NLL past L at {len_label(space.target)}, nats/token)")
    ax.set_title(f"{space.method} at {len_label(space.target)}: objective by trial", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    for i, dim in enumerate(dims, start=1):
        ax = axes[0][i]
        for t in shown:
            x = _value(t, dim, space)
            if x is None:  # the default (auto) value: marked at the left edge's text, not plotted
                continue
            marker, colour = MARKERS.get(t.status, ("o", "C0"))
            ax.scatter([x], [delta[t.number]], marker=marker, color=colour, s=28)
        d = next(d for d in space.dims if d.name == dim)
        if d.scale == "log":
            ax.set_xscale("log")
        if shown:
            ax.axhline(0.0, color="k", linestyle=":", linewidth=1, label="defaults")
            ax.legend(fontsize=7)
        ax.set_xlabel(dim)
        ax.set_title(f"slice: {dim}", fontsize=9)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    try:
        save_figure(fig, path)  # whole or not at all: never a truncated PNG
    finally:
        plt.close(fig)
    return path
