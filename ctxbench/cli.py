"""The ``ctxbench`` command line: parses values and calls the API; no logic of its own.

User errors print one line ``error: <what> — <how to fix>`` on stderr and exit 2; bugs keep
their traceback and exit 1.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from .errors import UserError

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
    help="Measure what RoPE context-extension methods do to perplexity and retrieval at each length.",
)
console = Console()
err = Console(stderr=True, highlight=False, soft_wrap=True)

# Options shared by the task commands.
MODEL = typer.Option("smollm2-135m", "--model", "-m", help="hub id, local dir, .gguf file or alias (smollm2-135m)")
METHOD = typer.Option("none", "--method", help="comma list of methods, e.g. none,ntk,yarn or ntk+logn (see `ctxbench methods`)")
FACTOR = typer.Option("2", "--factor", "-f", help="comma list of scale factors >= 1")
PARAM = typer.Option(None, "--param", "-p", help="method parameter key=value (repeatable), e.g. beta_fast=16")
DEVICE = typer.Option("auto", "--device", help="auto | cpu | cuda")
DTYPE = typer.Option("auto", "--dtype", help="auto (bf16 on CUDA, fp32 on CPU) | float32 | bfloat16 | float16")
ATTN = typer.Option("sdpa", "--attn", help="attention kernel: sdpa | flash_attention_2 | eager")
SEED = typer.Option(0, "--seed", help="random seed (passkey keys, sampling of anything random)")
RESUME = typer.Option(True, "--resume/--no-resume", help="skip cells already in --out (default) or start the file afresh")
TRUST = typer.Option(False, "--trust-remote-code", help="allow a hub model's own code to run (off by default)")
DEVICE_MAP = typer.Option(None, "--device-map", help="accelerate device map, e.g. auto, to spread a big model over GPUs")
QUANT = typer.Option(None, "--quantization", help="8bit | 4bit (needs bitsandbytes and a GPU)")


def _model_config(model, device, dtype, attn, trust, device_map, quantization):
    from .runner import ModelConfig

    return ModelConfig(model=model, device=device, dtype=dtype, attn=attn, trust_remote_code=trust,
                       device_map=device_map, quantization=quantization)


def _execute(jobs: list[tuple[str, object]], model_config, out: str, resume: bool, seed: int) -> None:
    """Load once, run the grid with a progress bar, print the summary tables.

    Under ``torchrun``/``accelerate launch`` each rank runs its share of the grid into its own
    part file, and rank 0 merges them into ``out`` after a barrier (see ctxbench.distributed).
    """
    from . import distributed
    from .display import progress, summary_tables
    from .results import cell_key, check_writable, read_records
    from .runner import run_task

    check_writable(out)
    w = distributed.world()
    distributed.init(w)
    model_config.device = distributed.rank_device(model_config.device, w)
    show = Console(quiet=w.rank != 0)
    target = distributed.seed_part(out, w.rank) if w.active and resume else out
    if w.active and not resume:
        target = distributed.part_path(out, w.rank)
    with show.status(f"loading {model_config.model} ..."):
        lm = model_config.load()
    bar = progress(show)
    results = []
    for task, settings in jobs:
        state = {}

        def on_start(todo: int, skipped: int, task=task, state=state) -> None:
            if skipped:
                show.print(f"[dim]{task}: {skipped} cell(s) already in {out}: skipped (use --no-resume to redo)[/]")
            state["bar"] = bar.add_task(task, total=todo)
            bar.start()

        def on_cell(cell, rows, state=state) -> None:
            bar.update(state["bar"], advance=1, description=cell.label())

        try:
            results.append(run_task(
                lm, task, settings, out=target, resume=resume if not results else True, seed=seed,
                on_start=on_start, on_cell=on_cell, shard=(w.rank, w.size) if w.active else None,
            ))  # fmt: skip
        finally:
            bar.stop()
    records = [r for res in results for r in res.records]
    if w.active:
        distributed.barrier(w)
        if w.rank == 0:
            distributed.merge(out, keep_existing=resume)
            keys = {cell_key(r) for r in records}
            records = [r for r in read_records(out) if cell_key(r) in keys] if w.rank == 0 else records
        distributed.barrier(w)
        distributed.finish(w)
    for note in (n for res in results for n in res.notes):
        show.print(f"[yellow]{'' if note.startswith('warning:') else 'note: '}{note}[/]", markup=True)
    for table in summary_tables(records, lm.geometry.trained_len):
        show.print(table)
    ran, skipped, failed = (sum(getattr(r, k) for r in results) for k in ("ran", "skipped", "failed"))
    show.print(f"[dim]{ran} cell(s) run, {skipped} resumed, {failed} failed -> {out}[/]")


@app.command()
def ppl(
    model: str = MODEL,
    method: str = METHOD,
    factor: str = FACTOR,
    length: str | None = typer.Option(None, "--len", "-l", help="comma list of lengths (16k = 16384); default L/2,L,2L,4L"),
    stride: str | None = typer.Option(None, "--stride", help="window stride (default = length: one window per document)"),
    dataset: str | None = typer.Option(None, "--dataset", help="HF dataset (pg19, proof-pile, govreport, ...), local file/dir; default: built-in stdlib corpus"),
    split: str = typer.Option("test", "--split", help="dataset split"),
    text_column: str = typer.Option("text", "--text-column", help="column holding the text"),
    docs: int = typer.Option(4, "--docs", help="documents per length (the first ones long enough)"),
    out: str = typer.Option("ctxbench-ppl.csv", "--out", "-o", help="results CSV (appended; finished cells are skipped)"),
    param: list[str] | None = PARAM,
    seed: int = SEED,
    resume: bool = RESUME,
    device: str = DEVICE,
    dtype: str = DTYPE,
    attn: str = ATTN,
    trust_remote_code: bool = TRUST,
    device_map: str | None = DEVICE_MAP,
    quantization: str | None = QUANT,
) -> None:
    """Sliding-window perplexity over methods x factors x lengths."""
    from .api import build_settings
    from .parsing import parse_length, parse_params

    settings = build_settings(
        "ppl", method, factor, length, parse_params(param), stride=parse_length(stride) if stride else None,
        dataset=dataset, split=split, text_column=text_column, docs=docs,
    )
    from .data import check_local_dataset
    from .tasks.ppl import check_settings

    check_settings(settings)
    check_local_dataset(dataset, text_column)  # fail before the model loads
    _execute([("ppl", settings)], _model_config(model, device, dtype, attn, trust_remote_code, device_map, quantization), out, resume, seed)


@app.command()
def passkey(
    model: str = MODEL,
    method: str = METHOD,
    factor: str = FACTOR,
    length: str = typer.Option("4k,8k,16k", "--len", "-l", help="comma list of prompt lengths in tokens"),
    depths: int | None = typer.Option(None, "--depths", help="N evenly spaced depths in [0, 1] (default 5)"),
    depth: str | None = typer.Option(None, "--depth", help="explicit comma list of depths in [0, 1]"),
    trials: int = typer.Option(2, "--trials", help="trials (random keys) per length and depth"),
    digits: int = typer.Option(5, "--digits", help="digits of the pass key"),
    chat: bool = typer.Option(False, "--chat/--raw", help="wrap the prompt in the model's chat template"),
    out: str = typer.Option("ctxbench-passkey.csv", "--out", "-o", help="results CSV (appended; finished cells are skipped)"),
    plot: str | None = typer.Option(None, "--plot", help="directory for a heatmap PNG per method"),
    param: list[str] | None = PARAM,
    seed: int = SEED,
    resume: bool = RESUME,
    device: str = DEVICE,
    dtype: str = DTYPE,
    attn: str = ATTN,
    trust_remote_code: bool = TRUST,
    device_map: str | None = DEVICE_MAP,
    quantization: str | None = QUANT,
) -> None:
    """Passkey retrieval over lengths x depths x methods."""
    from .api import build_settings
    from .parsing import parse_params
    from .tasks.passkey import check_settings, parse_depths

    settings = build_settings(
        "passkey", method, factor, length, parse_params(param), depths=parse_depths(depths, depth),
        trials=trials, digits=digits, seed=seed, chat=chat,
    )
    check_settings(settings)
    if plot:
        _check_plot_dir(plot)
    _execute([("passkey", settings)], _model_config(model, device, dtype, attn, trust_remote_code, device_map, quantization), out, resume, seed)
    if plot:
        from .report import write_plots
        from .results import read_records

        for path in write_plots(read_records(out), plot):
            console.print(f"plot: {path}")


def _check_plot_dir(path: str) -> None:
    from pathlib import Path

    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UserError(f"--plot '{path}' is a file", "give a directory for the PNGs")


@app.command()
def methods() -> None:
    """Every scaling method: parameters with defaults, formula and paper."""
    from rich.table import Table

    from .methods import ALIASES, METHODS

    table = Table(title="RoPE scaling methods (combine one frequency method with one attention method: ntk+logn)")
    for col in ("method", "kind", "parameters (defaults)", "formula", "source"):
        table.add_column(col, overflow="fold")
    aliases = {}
    for alias, name in ALIASES.items():
        aliases.setdefault(name, []).append(alias)
    for name, m in METHODS.items():
        params = ", ".join(f"{k}={'auto' if v is None else v}" for k, v in m.params.items()) or "—"
        label = name + (f" ({', '.join(aliases[name])})" if name in aliases else "")
        kind = "attention" if m.attention else ("dynamic" if m.dynamic else "frequency")
        table.add_row(label, kind, params, m.formula, m.source)
    console.print(table)


@app.command()
def freqs(
    method: str = typer.Option(..., "--method", help="method name"),
    factor: str = typer.Option("1", "--factor", "-f", help="scale factor >= 1"),
    length: str | None = typer.Option(None, "--len", "-l", help="sequence length l for dynamic methods (default: factor x L)"),
    model: str | None = typer.Option(None, "--model", "-m", help="read the geometry from this model's config"),
    head_dim: int | None = typer.Option(None, "--head-dim", help="rotary dims d (without --model)"),
    base: float | None = typer.Option(None, "--base", help="rope base b (without --model)"),
    trained_len: str | None = typer.Option(None, "--trained-len", help="trained context L (without --model)"),
    param: list[str] | None = PARAM,
    fmt: str = typer.Option("table", "--format", help="table | csv"),
    trust_remote_code: bool = TRUST,
) -> None:
    """Per rotary pair: inverse frequency, wavelength and scale of a method."""
    import math

    from .geometry import RopeGeometry
    from .methods import frequencies, resolve
    from .parsing import parse_factor, parse_length, parse_params

    if fmt not in ("table", "csv"):
        raise UserError(f"unknown --format '{fmt}'", "use table or csv")
    setting = resolve(method, parse_params(param))
    s = parse_factor(factor)
    if model:
        from .models import load_config

        geom = RopeGeometry.from_config(load_config(model, trust_remote_code))
    else:
        if head_dim is None or base is None or trained_len is None:
            raise UserError("freqs needs a geometry", "pass --model M, or all of --head-dim D --base B --trained-len L")
        geom = RopeGeometry(head_dim=head_dim, rotary_dim=head_dim, base=base, trained_len=parse_length(trained_len))
    seq_len = parse_length(length) if length else int(round(s * geom.trained_len))
    inv_freq, scale = frequencies(setting, geom, s, seq_len)
    plain, _ = frequencies(resolve("none"), geom, 1.0, seq_len)
    rows = [
        (i, float(f), 2 * math.pi / float(f) if f > 0 else math.inf, float(p) / float(f) if f > 0 else math.inf)
        for i, (f, p) in enumerate(zip(inv_freq.tolist(), plain.tolist(), strict=True))
    ]
    if fmt == "csv":
        sys.stdout.write("pair,inv_freq,wavelength,scale,attention_scale\n")
        for i, f, wl, sc in rows:
            sys.stdout.write(f"{i},{f!r},{wl!r},{sc!r},{scale!r}\n")
        return
    from rich.table import Table

    table = Table(title=f"{setting.name} x{s:g} at l={seq_len}: d={geom.rotary_dim}, b={geom.base:g}, L={geom.trained_len}; attention_scale={scale:.6g}")
    for col in ("pair", "inv_freq", "wavelength", "scale"):
        table.add_column(col, justify="right")
    for i, f, wl, sc in rows:
        table.add_row(str(i), f"{f:.6e}", f"{wl:.1f}", f"{sc:.4f}")
    console.print(table)


# ---- grids, reports and regression gates -----------------------------------------------------


@app.command()
def sweep(
    suite: str = typer.Argument(..., help="TOML suite file, e.g. tasks/quick.toml"),
    out: str | None = typer.Option(None, "--out", "-o", help="results CSV (default: the suite's `out`, else results.csv)"),
    resume: bool = RESUME,
    dry_run: bool = typer.Option(False, "--dry-run", help="print the grid and a rough cost; load nothing"),
    device: str | None = typer.Option(None, "--device", help="override the suite's device"),
) -> None:
    """Every cell of a suite file, model loaded once, resumable."""
    from .suite import load_suite, plan

    spec = load_suite(suite)
    target = out or spec.out or "results.csv"
    if dry_run:
        from rich.table import Table

        rows = plan(spec)
        table = Table(title=f"{suite}: {spec.model} -> {target} (rough cost: default model, 2-core CPU)")
        for col in ("task", "method", "factor", "lengths", "cells", "tokens", "~seconds"):
            table.add_column(col, justify="right" if col in ("cells", "tokens", "~seconds") else "left")
        for r in rows:
            table.add_row(r["task"], r["method"], f"{r['factor']:g}", ",".join(str(n) for n in r["lengths"]),
                          str(r["cells"]), f"{r['tokens']:,}", f"{r['seconds']:,}")  # fmt: skip
        console.print(table)
        total = sum(r["seconds"] for r in rows)
        console.print(f"{sum(r['cells'] for r in rows)} cells, about {total / 60:.0f} min on a 2-core CPU")
        return
    config = _model_config(spec.model, device or spec.device, spec.dtype, spec.attn, spec.trust_remote_code, None, None)
    _execute(spec.jobs, config, target, resume, spec.seed)


@app.command()
def compare(
    base: str = typer.Argument(..., help="baseline results CSV"),
    new: str = typer.Argument(..., help="new results CSV"),
    rtol: float = typer.Option(0.02, "--rtol", help="tolerance: relative for ppl, absolute for accuracy"),
    fmt: str = typer.Option("table", "--format", help="table | markdown"),
) -> None:
    """Per-cell change between two results files; exit 1 if anything got worse."""
    from .compare import compare as run_compare
    from .compare import failed, to_markdown

    if fmt not in ("table", "markdown"):
        raise UserError(f"unknown --format '{fmt}'", "use table or markdown")
    changes, notes = run_compare(base, new, rtol)
    if fmt == "markdown":
        sys.stdout.write(to_markdown(changes, notes, rtol))
    else:
        from rich.table import Table

        colour = {"worse": "red", "missing": "red", "failed": "red", "better": "green", "new": "cyan", "ok": ""}
        table = Table(title=f"{base} -> {new} (rtol {rtol:g})")
        for col in ("task", "method", "factor", "length", "depth", "metric", "base", "new", "change", "status"):
            table.add_column(col)
        from .compare import _fmt, _pct

        for c in changes:
            k = c.key
            style = colour[c.status]
            status = f"[{style}]{c.status}[/]" if style else c.status
            table.add_row(k["task"], k["method"], k["factor"], k["length"], k["depth"] or "—", k["metric"],
                          _fmt(c.base), _fmt(c.new), _pct(c), status)  # fmt: skip
        console.print(table)
        for note in notes:
            console.print(f"[yellow]note:[/] {note}")
    if failed(changes):
        raise typer.Exit(1)


@app.command()
def report(
    files: list[str] = typer.Argument(..., help="one or more results CSVs"),
    plot: str | None = typer.Option(None, "--plot", help="directory for PNG plots"),
    fmt: str = typer.Option("table", "--format", help="table | markdown | csv"),
) -> None:
    """Summary tables and plots from results files."""
    from .api import load_results
    from .report import to_csv, to_markdown, write_plots

    if fmt not in ("table", "markdown", "csv"):
        raise UserError(f"unknown --format '{fmt}'", "use table, markdown or csv")
    if plot:
        _check_plot_dir(plot)
    frame = load_results(*files)
    if fmt == "markdown":
        sys.stdout.write(to_markdown(frame))
    elif fmt == "csv":
        sys.stdout.write(to_csv(frame))
    else:
        from .display import summary_tables

        for table in summary_tables(frame):
            console.print(table)
    if plot:
        for path in write_plots(frame, plot):
            console.print(f"plot: {path}")


@app.command()
def export(
    method: str = typer.Option(..., "--method", help="one method, e.g. yarn (see `ctxbench methods`)"),
    factor: str = typer.Option("2", "--factor", "-f", help="scale factor >= 1"),
    to: str = typer.Option(..., "--to", help="transformers | vllm | llamacpp | json"),
    model: str | None = typer.Option(None, "--model", "-m", help="read the geometry from this model's config"),
    head_dim: int | None = typer.Option(None, "--head-dim", help="rotary dims d (without --model)"),
    base: float | None = typer.Option(None, "--base", help="rope base b (without --model)"),
    trained_len: str | None = typer.Option(None, "--trained-len", help="trained context L (without --model)"),
    param: list[str] | None = PARAM,
    trust_remote_code: bool = TRUST,
) -> None:
    """Print a method and factor as the settings of a serving engine (transformers, vLLM, llama.cpp)."""
    from .export import export as export_text
    from .parsing import parse_params

    text = export_text(method, factor, to, model=model, head_dim=head_dim, base=base, trained_len=trained_len,
                       params=parse_params(param), trust_remote_code=trust_remote_code)  # fmt: skip
    sys.stdout.write(text + "\n")


def main() -> None:
    """Entry point: user errors -> one line and exit 2."""
    try:
        code = app(standalone_mode=False)  # returns the code of a typer.Exit in this mode
        if isinstance(code, int) and code:
            sys.exit(code)
    except UserError as exc:
        err.print(exc.line(), markup=False)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted", markup=False)
        sys.exit(130)
    except Exception as exc:
        # typer's (vendored) click usage errors: unknown option, bad value, missing argument.
        if type(exc).__name__ == "NoArgsIsHelpError":
            console.print(exc.format_message(), markup=False, highlight=False)
            sys.exit(0)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            ctx = getattr(exc, "ctx", None)
            command = f"ctxbench {ctx.info_name}" if ctx is not None and ctx.info_name != "ctxbench" else "ctxbench"
            err.print(f"error: {exc.format_message()} — see `{command} --help`", markup=False)
            sys.exit(2 if exc.exit_code in (1, 2) else exc.exit_code)
        raise


if __name__ == "__main__":
    main()
