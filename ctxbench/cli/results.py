"""Reading results files: ``ctxbench report`` (the pivot in any format, plots, the HTML page),
``ctxbench rank`` (methods at one length with paired tests) and ``ctxbench show-prompt`` (one
trial's exact prompt), and the one reader of the rows ``report`` and ``rank`` show."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from ctxbench.cli.console import console, err
from ctxbench.errors import UserError, unknown
from ctxbench.parsing import len_label, parse_factors, parse_length, parse_lengths, split_list, split_methods
from ctxbench.report.display import pivot_table
from ctxbench.report.effective import check_threshold
from ctxbench.report.formats import pivots, ruler_tables, to_csv, to_json, to_markdown
from ctxbench.report.html import check_output, save
from ctxbench.report.paired import rank as rank_methods
from ctxbench.report.ranking import ranking_json, ranking_markdown, ranking_table
from ctxbench.results.rowid import find, row_id
from ctxbench.runner.showprompt import describe_model, parse_options, prompt_ids, trial_row
from ctxbench.tasks import registry
from ctxbench.tasks.base import check_numbers
from ctxbench.tasks.plots import check_plot_dir, write_plots


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
    from ctxbench.results.store import read_records  # start-up: loads filelock

    if fmt not in ("table", "markdown", "csv", "json"):
        raise UserError(f"unknown --format '{fmt}'", "use table, markdown, csv or json")
    check_threshold(threshold)
    if plot:
        check_plot_dir(plot)
    if html_out:
        check_output(html_out, files)
    filters: dict[str, Any] = dict(
        task=split_list(task, "--task") if task else None, method=split_methods(method, "--method") if method else None,
        factor=parse_factors(factor) if factor else None, length=parse_lengths(length) if length else None,
    )

    tasks = registry()
    records, by_file, ids = [], [], {}
    for f in files:
        rows = read_records(f)
        if html_out:  # each row's id (ctxbench.results.rowid), for show-prompt

            if not rows:
                raise UserError(f"results file '{f}' holds no rows", "give a results CSV that ctxbench wrote rows to")
            ids.update({id(r): row_id(f, r) for r in rows})
        whole = _shown_rows(f, rows, tasks)
        records += whole
        by_file.append((f, whole))
    _check_filters(records, filters)
    ps = pivots(records, tasks, baseline=baseline, threshold=threshold, **filters)
    if html_out:
        size = save(html_out, files, by_file, ids, ps, tasks, filters=filters, baseline=baseline, threshold=threshold, notes=[])
        err.print(f"html: {html_out} ({size / 1e3:,.0f} kB)", markup=False, highlight=False)
    if fmt == "markdown":
        sys.stdout.write(to_markdown(ps))
    elif fmt == "csv":
        sys.stdout.write(to_csv(ps))
    elif fmt == "json":
        sys.stdout.write(to_json(ps))
    else:
        for p in ps:
            console.print(pivot_table(p))
        for t in ruler_tables(ps):  # RULER's suite score, where RULER task rows are present
            console.print(t)
        if not ps:
            console.print("[yellow]no aggregate rows match[/]")
    if plot:
        for path in write_plots(records, plot):
            console.print(f"plot: {path}")


def rank(
    files: list[str] = typer.Argument(..., help="one or more results CSVs"),
    length: str = typer.Option(..., "--len", "-l", help="the length to rank the methods at, e.g. 16k"),
    task: str | None = typer.Option(None, "--task", help="only these tasks (comma list)"),
    alpha: float = typer.Option(0.05, "--alpha", help="family-wise error rate of the pairwise tests (Holm)"),
    fmt: str = typer.Option("table", "--format", help="table | markdown | json"),
) -> None:
    """Methods at one length, best first, and which pairs are separated: paired tests on the same
    documents or trials, Holm-adjusted; methods sharing a letter are not separated."""
    from ctxbench.results.store import read_records  # start-up: loads filelock
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
        have = sorted({int(float(r["length"])) for r in records})
        raise UserError(f"no cell at length {n} in these results", f"rank at one of: {', '.join(len_label(x) for x in have)}")
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


def show_prompt(
    row: str = typer.Argument(..., help="FILE@KEY as `report --html` shows it, or FILE:N (the row's number from 1 below the header)"),
    model: str | None = typer.Option(None, "--model", "-m", help="the model whose tokenizer renders it (default: the row's model)"),
    option: list[str] | None = typer.Option(None, "--option", help="NAME=VALUE of a task option the row does not record (its data digest does), e.g. haystack=essays; repeatable"),
    ids: bool = typer.Option(False, "--ids", help="print the token ids (a JSON list) instead of the text"),
) -> None:
    """Print the prompt one trial of a results file was given, rebuilt by its task from the row
    (task, variant, length, depth, seed, trial, options) and checked against it: the model's and
    the data's digests and the token count must be the row's."""
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
    from ctxbench.results.store import check_results  # start-up: loads filelock
    whole, partial = check_results(path, rows, tasks)
    check_numbers(whole, tasks, where=f"'{path}': ")
    if partial:
        err.print(f"note: {path}: {len(partial)} partial cell(s) left out ({'; '.join(partial[:3])}{' ...' if len(partial) > 3 else ''}): "
                  "some of their rows are not in the file (deleted, or left out of a filtered copy) — rerun the command that wrote them to complete them", markup=False)  # fmt: skip
    return whole


def _check_filters(records: list[dict], filters: dict) -> None:
    """A --task or --method that no row has is a typo until shown otherwise: did-you-mean."""
    present = {
        "task": {r["task"] for r in records},
        "method": {r.get("label") or r["method"] for r in records} | {r["method"] for r in records},
    }
    for name, have in present.items():
        for wanted in filters.get(name) or []:
            if wanted not in have:
                raise unknown(f"{name} in these results", wanted, have)
