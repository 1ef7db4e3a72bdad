"""The method commands: ``ctxbench methods`` (the registry), ``ctxbench freqs`` (per-pair
frequencies and scales) and ``ctxbench export`` (a method as a serving engine's settings)."""

from __future__ import annotations

import csv
import sys

import typer
from rich.table import Table

from ctxbench.cli.console import console, err
from ctxbench.cli.options import PARAM, TRUST
from ctxbench.defaults import DEFAULT_FACTOR
from ctxbench.errors import UserError
from ctxbench.methods import ALIASES, METHODS
from ctxbench.methods.export import export as export_text
from ctxbench.methods.freqplot import COLUMNS, freq_rows, plot_freqs
from ctxbench.model.files import load_geometry
from ctxbench.model.geometry import RopeGeometry
from ctxbench.parsing import check_name_lengths, expand_path, parse_factor, parse_length, parse_params


def methods() -> None:
    """Every scaling method: parameters with defaults, type and range, formula and paper."""
    table = Table(title="RoPE scaling methods (combine one frequency method with one attention method: ntk+logn)")
    for col in ("method", "kind", "parameters (default: type)", "formula", "source"):
        table.add_column(col, overflow="fold")
    aliases: dict[str, list[str]] = {}
    for alias, name in ALIASES.items():
        aliases.setdefault(name, []).append(alias)
    for name, m in METHODS.items():
        params = "\n".join(f"{p.name}={p.shown_default()}: {p.type_text(with_auto=False)}" for p in m.declared) or "—"
        label = name + (f" ({', '.join(aliases[name])})" if name in aliases else "")
        kind = "attention" if m.attention else ("dynamic" if m.dynamic else "frequency")
        table.add_row(label, kind, params, m.formula, m.source)
    console.print(table)


def freqs(
    method: str = typer.Option(..., "--method", help="comma list of methods, e.g. none,linear,ntk,yarn,llama3"),
    factor: str = typer.Option("1", "--factor", "-f", help="scale factor >= 1"),
    length: str | None = typer.Option(None, "--len", "-l", help="sequence length l for dynamic methods (default: factor x L)"),
    model: str | None = typer.Option(None, "--model", "-m", help="read the geometry from this model's config"),
    head_dim: int | None = typer.Option(None, "--head-dim", help="rotary dims d (without --model)"),
    base: float | None = typer.Option(None, "--base", help="rope base b (without --model)"),
    trained_len: str | None = typer.Option(None, "--trained-len", help="trained context L (without --model)"),
    param: list[str] | None = PARAM,
    fmt: str = typer.Option("table", "--format", help="table | csv (long rows: one per method and pair)"),
    plot: str | None = typer.Option(None, "--plot", help="also write a PNG overlaying every method's per-pair scale"),
    x_axis: str = typer.Option("wavelength", "--x", help="plot x axis: wavelength | pair"),
    trust_remote_code: bool = TRUST,
) -> None:
    """Per rotary pair: inverse frequency, wavelength and scale of one or more methods."""
    if fmt not in ("table", "csv"):
        raise UserError(f"unknown --format '{fmt}'", "use table or csv")
    if x_axis not in ("wavelength", "pair"):
        raise UserError(f"unknown --x '{x_axis}'", "use wavelength or pair")
    if plot and not plot.lower().endswith(".png"):
        raise UserError(f"--plot '{plot}' is not a .png file name", "pass e.g. --plot freqs.png")
    if plot:
        check_name_lengths(plot, "--plot")
        plot = str(expand_path(plot))
    s = parse_factor(factor)
    if model:
        geom = load_geometry(model, trust_remote_code)
    else:
        if head_dim is None or base is None or trained_len is None:
            raise UserError("freqs needs a geometry", "pass --model M, or all of --head-dim D --base B --trained-len L")
        geom = RopeGeometry(head_dim=head_dim, rotary_dim=head_dim, base=base, trained_len=parse_length(trained_len))
    seq_len = parse_length(length) if length else int(round(s * geom.trained_len))
    rows = freq_rows(method, geom, s, seq_len, parse_params(param))
    if plot:
        written = plot_freqs(rows, geom, s, plot, x=x_axis, title=model)
        err.print(f"plot -> {written}", style="dim")
    if fmt == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()} for row in rows)
        return

    labels = list(dict.fromkeys(r["method"] for r in rows))
    attention = {r["method"]: r["attention_scale"] for r in rows}
    head = f"x{s:g} at l={seq_len}: d={geom.rotary_dim}, b={geom.base:g}, L={geom.trained_len}"
    if len(labels) == 1:
        table = Table(title=f"{labels[0]} {head}; attention_scale={attention[labels[0]]:.6g}")
        for col in ("pair", "inv_freq", "wavelength", "scale"):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(str(r["pair"]), f"{r['inv_freq']:.6e}", f"{r['scaled_wavelength']:.1f}", f"{r['scale']:.4f}")
    else:  # one scale column per method: theta / theta' (1 = kept, s = interpolated)
        table = Table(title=f"per-pair scale θ/θ′, {head}")
        table.add_column("pair", justify="right")
        table.add_column("wavelength", justify="right")
        for label in labels:
            table.add_column(label if attention[label] == 1 else f"{label}\nattn ×{attention[label]:.4g}", justify="right")
        by_pair: dict[int, dict] = {}
        for r in rows:
            by_pair.setdefault(r["pair"], {"wavelength": r["wavelength"]})[r["method"]] = r["scale"]
        for pair, values in by_pair.items():
            table.add_row(str(pair), f"{values['wavelength']:.1f}", *(f"{values[label]:.4f}" for label in labels))
    console.print(table)


def export(
    method: str = typer.Option(..., "--method", help="one method, e.g. yarn (see `ctxbench methods`)"),
    factor: str = typer.Option(f"{DEFAULT_FACTOR:g}", "--factor", "-f", help="scale factor >= 1"),
    to: str = typer.Option(..., "--to", help="transformers | vllm | llamacpp | json"),
    model: str | None = typer.Option(None, "--model", "-m", help="read the geometry from this model's config"),
    head_dim: int | None = typer.Option(None, "--head-dim", help="rotary dims d (without --model)"),
    base: float | None = typer.Option(None, "--base", help="rope base b (without --model)"),
    trained_len: str | None = typer.Option(None, "--trained-len", help="trained context L (without --model)"),
    param: list[str] | None = PARAM,
    trust_remote_code: bool = TRUST,
) -> None:
    """Print a method and factor as the settings of a serving engine (transformers, vLLM, llama.cpp)."""
    text = export_text(method, factor, to, model=model, head_dim=head_dim, base=base, trained_len=trained_len,
                       params=parse_params(param), trust_remote_code=trust_remote_code)  # fmt: skip
    sys.stdout.write(text + "\n")
