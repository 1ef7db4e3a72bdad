"""Frequency inspector (issue 14): per-pair rows and one figure comparing how methods rescale RoPE.

For pair ``i`` of a model with rotary dim ``d``, base ``b`` and trained length ``L`` the original
inverse frequency is ``theta_i = b^(-2i/d)`` and its wavelength ``lambda_i = 2*pi/theta_i`` (tokens
per full turn). A method replaces ``theta_i`` by ``theta'_i``; its per-pair *scale* is
``theta_i / theta'_i`` (1: the pair is kept, i.e. extrapolated past ``L``; ``s``: it is
interpolated like Position Interpolation). Pairs with ``lambda_i < L`` turn at least once within
the trained context; by-parts methods (yarn, ntk-by-parts, llama3) keep the fastest of them and
interpolate the pairs with ``lambda_i > L``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ctxbench.errors import UserError
from ctxbench.methods import check_derived, frequencies, numpy_namespace, resolve
from ctxbench.methods.grid import resolve_methods
from ctxbench.methods.params import Namespace, Params
from ctxbench.model.geometry import RopeGeometry
from ctxbench.outfiles import save_figure

COLUMNS = ("method", "pair", "inv_freq", "wavelength", "scaled_wavelength", "scale", "attention_scale")


def freq_rows(
    methods: str | list[str],
    geometry: RopeGeometry,
    factor: float,
    seq_len: int | None = None,
    params: Params | None = None,
    xp: Namespace = None,
) -> list[dict[str, Any]]:
    """Long rows, one per (method entry, pair): ``method, pair, inv_freq, wavelength, scaled_wavelength,
    scale, attention_scale``.

    ``wavelength`` is the pair's *original* wavelength ``2*pi/theta_i`` (the same for every method,
    so it can be an x axis); ``scaled_wavelength = 2*pi/inv_freq`` is the method's. ``scale`` is the
    original inverse frequency over the method's; both are ``inf`` for a pair the method does not
    rotate (frequency 0, ``proportional``'s lowest pairs). ``seq_len`` only matters for dynamic methods and
    defaults to ``factor * L`` (the length the factor is meant to reach). ``method`` is the entry's
    label (``yarn(beta_fast=16)``), so two settings of one method stay apart. Computed with NumPy
    unless ``xp`` names another array namespace: the same float32 operations, no torch import.
    ``methods`` and ``params`` are read as ``--method`` and ``--param`` are: a comma list, and
    parameters shared by the methods that take them or given per method (``{"yarn": {...}}``);
    a list value is a grid.
    """
    xp = xp or numpy_namespace()
    if seq_len is None:
        seq_len = max(1, round(factor * geometry.trained_len))

    settings = resolve_methods(methods, params)  # a list value is a grid: one entry per setting
    for setting in settings:  # what each computes here is finite and sensible, or one error naming the value
        check_derived(setting, geometry, factor, [seq_len])
    original = frequencies(resolve("none"), geometry, 1.0, seq_len, xp=xp)[0].tolist()
    rows = []
    for setting in settings:
        inv_freq, attention_scale = frequencies(setting, geometry, factor, seq_len, xp=xp)
        for pair, (theta, new) in enumerate(zip(original, inv_freq.tolist(), strict=True)):
            rows.append(
                {
                    "method": setting.label,
                    "pair": pair,
                    "inv_freq": new,
                    "wavelength": 2 * math.pi / theta,
                    # a pair a method leaves unrotated (frequency 0: proportional) turns never
                    "scaled_wavelength": 2 * math.pi / new if new else math.inf,
                    "scale": theta / new if new else math.inf,
                    "attention_scale": attention_scale,
                }
            )
    return rows


def _pair_at_wavelength(geometry: RopeGeometry, wavelength: float) -> float:
    """Fractional pair index whose original wavelength is ``wavelength``."""
    return geometry.rotary_dim * math.log(wavelength / (2 * math.pi)) / (2 * math.log(geometry.base))


def _fmt_tokens(n: float) -> str:
    if n >= 1024 and n % 1024 == 0:
        return f"{int(n) // 1024}k"
    return f"{n:g}"


def plot_freqs(
    rows: list[dict[str, Any]],
    geometry: RopeGeometry,
    factor: float,
    path: str | Path,
    x: str = "wavelength",
    title: str | None = None,
) -> Path:
    """One figure overlaying each method's per-pair scale, written to ``path`` (PNG by suffix).

    ``x="wavelength"``: log-log against the original wavelength; ``x="pair"``: log scale against the
    pair index. ``L`` is a vertical line (on the pair axis, at the pair whose wavelength is ``L``);
    the ``lambda < L`` side is shaded "extrapolation" (pairs by-parts methods keep, scale 1), the
    other "interpolation" (scale ``s``, a dashed horizontal line). ``title`` prefixes the default
    title (e.g. the model name).
    """
    if x not in ("wavelength", "pair"):
        raise UserError(f"unknown x axis '{x}'", "use x='wavelength' or x='pair'")
    if not rows:
        raise UserError("no frequency rows to plot", "pass at least one method")
    import matplotlib  # start-up: matplotlib only where it runs

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up: matplotlib only where it runs
    from matplotlib import ticker  # start-up: matplotlib only where it runs

    L = geometry.trained_len
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, ax = plt.subplots(figsize=(8.5, 5.0), dpi=120)

    xs_all = [r[x] for r in rows]
    x_lo, x_hi = min(xs_all), max(xs_all)
    if x == "wavelength":
        ax.set_xscale("log")
        x_lo, x_hi = x_lo / 1.6, x_hi * 1.6
        split = float(L)
    else:
        x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
        split = _pair_at_wavelength(geometry, L)
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)

    # regions: lambda < L (turns at least once in L) vs lambda > L
    split_in = min(max(split, x_lo), x_hi)
    ax.axvspan(x_lo, split_in, color="tab:green", alpha=0.07, lw=0, zorder=0)
    ax.axvspan(split_in, x_hi, color="tab:orange", alpha=0.09, lw=0, zorder=0)
    if x_lo < split < x_hi:
        ax.axvline(split, color="0.25", lw=1.2, ls="-", zorder=1)

    ax.axhline(1.0, color="0.55", lw=0.8, ls=":", zorder=1)
    ax.axhline(factor, color="0.35", lw=1.0, ls="--", zorder=1)

    styles = ["-", "--", "-.", ":", (0, (5, 1, 1, 1))]
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    n = len(methods)
    for k, name in enumerate(methods):
        mrows = sorted((r for r in rows if r["method"] == name), key=lambda r: r["pair"])
        xs, ys = [r[x] for r in mrows], [r["scale"] for r in mrows]
        attn = mrows[0]["attention_scale"]
        label = name if attn == 1 else f"{name} (attention ×{attn:.3g})"
        ax.plot(
            xs, ys, ls=styles[k % len(styles)], marker=markers[k % len(markers)], ms=4.0 - 1.0 * k / max(1, n - 1),
            markevery=max(1, len(xs) // 32), lw=3.0 - 1.6 * k / max(1, n - 1), alpha=0.9,
            label=label, zorder=2 + k,  # later methods are thinner and drawn on top, so overlaps stay visible
        )

    # y range: always show 1 and s with room for the region labels above
    ys_all = [r["scale"] for r in rows if math.isfinite(r["scale"])] or [1.0]  # unrotated pairs are left out of the plot
    y_lo = min(min(ys_all), 1.0) / 1.25
    y_hi = max(max(ys_all), float(factor)) * 2.2
    ax.set_ylim(y_lo, y_hi)

    label_y = y_hi / 1.12
    text: dict[str, Any] = dict(fontsize=9, va="top", color="0.2")
    if split_in > x_lo:
        mid = math.sqrt(x_lo * split_in) if x == "wavelength" else (x_lo + split_in) / 2
        ax.text(mid, label_y, "extrapolation\nλ < L: by-parts methods keep pairs (scale 1)", ha="center", **text)
    if split_in < x_hi:
        mid = math.sqrt(split_in * x_hi) if x == "wavelength" else (split_in + x_hi) / 2
        ax.text(mid, label_y, "interpolation\nλ > L: pairs divided by s (scale s)", ha="center", **text)
    if x_lo < split < x_hi:
        ax.annotate(
            (f"L = {_fmt_tokens(L)}" if x == "wavelength" else f"λ = L = {_fmt_tokens(L)}"), xy=(split, y_lo), xytext=(4, 4), textcoords="offset points",
            fontsize=9, color="0.2", ha="left", va="bottom",
        )
    ax.annotate(
        f"s = {factor:g}", xy=(x_lo, factor), xytext=(4, 3), textcoords="offset points",
        fontsize=9, color="0.2", ha="left", va="bottom",
    )

    if x == "wavelength":
        ax.set_xlabel("original wavelength λ = 2π/θ (tokens, log scale)")
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: _fmt_tokens(v) if v >= 1 else f"{v:g}"))
    else:
        ax.set_xlabel(f"pair index i (0 … {geometry.pairs - 1}; high frequency → low)")
    ax.set_ylabel("scale  θ / θ′  (log)")
    ax.yaxis.set_major_locator(ticker.LogLocator(base=2))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    head = f"{title}: " if title else ""
    ax.set_title(
        f"{head}RoPE per-pair frequency scale — d = {geometry.rotary_dim}, base = {geometry.base:g}, "
        f"L = {L}, factor {factor:g}",
        fontsize=10.5,
    )
    ax.legend(loc="center left", fontsize=9, framealpha=0.92)
    ax.grid(True, which="major", alpha=0.25)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        save_figure(fig, path)  # whole or not at all: never a truncated PNG
    finally:
        plt.close(fig)
    return path
