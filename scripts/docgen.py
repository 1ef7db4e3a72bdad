"""What README.md and the docs pages restate from the code and the committed results, written by
cog blocks in those pages (``[[[cog ... ]]]`` ... ``[[[end]]]``).

Regenerate after changing a command, a method, a column or a committed results file:

    .venv/bin/cog -I scripts -r README.md docs/*.md

``tests/test_docs_generated.py`` runs the same with ``--check`` and fails when a page is stale.
Every function here writes markdown through ``cog.outl``; commands run from the repository root.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", "HF_HUB_OFFLINE": "1"}
ENV.pop("FORCE_COLOR", None)


def _out(text: str) -> None:
    import cog

    for line in text.rstrip("\n").split("\n") if text else [""]:
        cog.outl(line)


def _ctxbench(*args: str, cwd: Path = ROOT, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "ctxbench", *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)
    if proc.returncode not in ok:
        raise RuntimeError(f"ctxbench {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


# --- the CLI reference ----------------------------------------------------------------------------


def _plugins() -> set[str]:
    """Commands of installed third-party task plug-ins: left out, so the page is the same everywhere."""
    from ctxbench.tasks import registry

    return {n for n, t in registry().items() if not getattr(t.prepare, "func", t.prepare).__module__.startswith("ctxbench.")}


def _builtin_commands() -> list[str]:
    """Every command of the ``ctxbench`` app in its own order, without third-party task plug-ins."""
    import typer.main

    from ctxbench.cli import app

    return [n for n in typer.main.get_command(app).commands if n not in _plugins()]


def _help(args: list[str]) -> str:
    import typer.main
    from click.testing import CliRunner

    from ctxbench.cli import app

    result = CliRunner().invoke(typer.main.get_command(app), [*args, "--help"], prog_name="ctxbench", terminal_width=100, env=ENV)
    if result.exit_code != 0:
        raise RuntimeError(f"ctxbench {' '.join(args)} --help exited {result.exit_code}: {result.output}")
    return result.output


def cli_reference() -> None:
    """``ctxbench --help`` and every command's ``--help``, each under its own heading."""
    plugins = _plugins()
    top = [ln for ln in _help([]).rstrip().splitlines() if not (ln.startswith("  ") and ln.split()[0] in plugins)]
    _out("## ctxbench\n\n```\n" + "\n".join(top) + "\n```")
    for name in _builtin_commands():
        _out(f"\n## ctxbench {name}\n\n```\n" + _help([name]).rstrip() + "\n```")


# --- methods --------------------------------------------------------------------------------------


def _kind(m) -> str:
    return "attention" if m.attention else ("dynamic" if m.dynamic else "frequency")


def _cell(text: str) -> str:
    """Plain text in a markdown table cell: pipes and emphasis characters escaped."""
    parts = text.replace("|", "\\|").split("`")  # odd parts are code spans: left as they are
    return "`".join(p if i % 2 else p.replace("*", "\\*").replace("_", "\\_") for i, p in enumerate(parts))


def _code(text: str) -> str:
    return f"`{text}`"


def methods_table() -> None:
    """One row per registered method: aliases, kind, parameters with defaults, formula, source."""
    from ctxbench.methods import ALIASES, METHODS

    aliases: dict[str, list[str]] = {}
    for alias, name in ALIASES.items():
        aliases.setdefault(name, []).append(alias)
    lines = ["| method | kind | parameters (default) | formula | source |", "| --- | --- | --- | --- | --- |"]
    for name, m in METHODS.items():
        params = "<br>".join(f"`{p.name}={p.shown_default()}`" for p in m.declared) or "—"
        also = "".join(f" (`{a}`)" for a in aliases.get(name, []))
        lines.append(f"| `{name}`{also} | {_kind(m)} | {params} | {_code(m.formula)} | {_cell(m.source)} |")
    _out("\n".join(lines))


def method_parameters() -> None:
    """Every declared parameter of every method: default, accepted values, meaning."""
    from ctxbench.methods import METHODS

    lines = ["| method | parameter | default | accepted values | meaning |", "| --- | --- | --- | --- | --- |"]
    for name, m in METHODS.items():
        for p in m.declared:
            lines.append(f"| `{name}` | `{p.name}` | `{p.shown_default()}` | {_cell(p.type_text(with_auto=False))} | {_cell(p.help)} |")
    _out("\n".join(lines))


def method_families() -> None:
    """The registry's method names by kind, as one sentence per kind (for the README and home page)."""
    from ctxbench.methods import METHODS

    kinds: dict[str, list[str]] = {}
    for name, m in METHODS.items():
        kinds.setdefault(_kind(m), []).append(f"`{name}`")
    words = {"frequency": "frequency methods", "dynamic": "length-dependent frequency methods", "attention": "attention-level methods"}
    _out("\n".join(f"- {len(v)} {words[k]}: {', '.join(v)}" for k, v in kinds.items()))


def factor_free() -> None:
    """The methods that do not read the factor (``uses_factor=False``), as one line."""
    from ctxbench.methods import METHODS

    _out(", ".join(f"`{n}`" for n, m in METHODS.items() if not m.uses_factor) + ".")


# --- the results file -----------------------------------------------------------------------------

COLUMN_MEANINGS = {
    "run_id": "one id per run (shared by every torchrun rank of one launch)",
    "time": "when the row was written (UTC, ISO 8601)",
    "model": "the model as named on the command line (hub id, path or alias)",
    "model_digest": "`sha256:` and the start of the weights files' sha256, or `hub:<revision>`",
    "dataset": "the corpus or data file(s) the task read",
    "data_digest": "the same of the corpus and of which of its documents were scored (passkey: of the prompt template; RULER: with the haystack's text)",
    "task": "the task's name (`ppl`, `passkey`, `niah`, ..., or a plug-in's)",
    "method": "the method as resolved (`yarn`, `ntk+logn`)",
    "label": "the method entry's label: its name plus non-default parameters (`yarn(beta_fast=16)`); names it in every table and plot",
    "factor": "the scale factor; empty for a method that does not read it",
    "length": "the cell's length in tokens",
    "stride": "ppl's window stride (empty: one window per document)",
    "depth": "needle depth in [0, 1] (passkey, and RULER tasks under `--protocol exact`)",
    "variant": "a task's variant (niah's `single_1`, qa's `qa_2`)",
    "trial": "the trial number: trial t is the same prompt for every method",
    "doc": "the document (ppl), or `all` for the aggregate",
    "metric": "what `value` is (`ppl`, `nll`, `accuracy`, `accuracy_lo`, `correct`, `score`, `nll_pos`, `kl`, ...)",
    "value": "the number",
    "tokens": "tokens scored, or the prompt's length",
    "seconds": "wall time of the measurement",
    "status": "`ok`, or why the cell could not be measured (`oom`): a failed cell is a row, not a crash",
    "device": "where it ran (`cpu`, `cuda:0`)",
    "dtype": "the model's dtype",
    "seed": "the run's seed",
    "method_params": "JSON of every parameter the method used, defaults included",
    "options": "JSON of the task options that change numbers (passkey: `{\"chat\": false, \"digits\": 5}`)",
    "ctxbench_version": "the ctxbench version that wrote the row",
    "torch_version": "torch's version",
    "transformers_version": "transformers' version",
    "mode": "ppl's `truncate` or `sliding`",
    "answer": "the model's output (retrieval tasks)",
    "extra": "JSON of everything else (`cell_rows`, `needle_pos`, `answer_nll`, `interval`, ...)",
    "pos_start": "first target position of a loss-by-position row (`nll_pos`, `nll_beyond_L`)",
    "pos_end": "end (exclusive) of that row's target positions",
    "backend": "what ran the cell, part of its identity: `hf` (transformers; rows from before backends read so), or an engine and its version (`vllm 0.32.0`)",
}


def results_columns() -> None:
    """The results CSV's columns in file order (``ctxbench.results.COLUMNS``) with their meaning."""
    from ctxbench.results import COLUMNS

    missing = [c for c in COLUMNS if c not in COLUMN_MEANINGS]
    if missing:
        raise RuntimeError(f"scripts/docgen.py: say what column(s) {missing} hold in COLUMN_MEANINGS")
    lines = ["| # | column | holds |", "| ---: | --- | --- |"]
    lines += [f"| {i} | `{c}` | {_cell(COLUMN_MEANINGS[c])} |" for i, c in enumerate(COLUMNS, 1)]
    _out("\n".join(lines))


# --- findings from the committed results ----------------------------------------------------------


@cache
def _report(args: tuple[str, ...], fmt: str = "markdown") -> str:
    """What ``ctxbench report ARGS --format FMT`` prints, run in this process (no interpreter start
    per report: that is most of a small report's time)."""
    import contextlib
    import io

    from ctxbench.cli import app

    for f in (a for a in args if a.endswith(".csv")):
        if not (ROOT / f).is_file():
            raise RuntimeError(f"{f} is not a committed results file")
    out, err = io.StringIO(), io.StringIO()
    cwd = Path.cwd()
    try:
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = app(args=["report", *args, "--format", fmt], prog_name="ctxbench", standalone_mode=False)
    finally:
        os.chdir(cwd)
    if code:
        raise RuntimeError(f"ctxbench report {' '.join(args)} exited {code}: {err.getvalue()}")
    return out.getvalue()


def _sections(text: str) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("#### "):
            out.append((line[5:], []))
        elif out:
            out[-1][1].append(line)
    return [(title, body[: len(body) - next((i for i, x in enumerate(reversed(body)) if x.strip()), 0)]) for title, body in out]


def report(*args: str, only: str | tuple[str, ...] = "") -> None:
    """The tables of ``ctxbench report ARGS --format markdown`` whose title starts with ``only``
    (all when empty), each under its title in italics; the command itself is printed above."""
    only = (only,) if isinstance(only, str) else only
    picked = [(t, b) for t, b in _sections(_report(tuple(args))) if not any(only) or t.startswith(only)]
    if not picked:
        raise RuntimeError(f"ctxbench report {' '.join(args)}: no table titled {only}")
    shown = " ".join(f'"{a}"' if "(" in a else a for a in args)
    text = [f"`ctxbench report {shown} --format markdown`:"]
    for title, body in picked:
        text += ["", f"*{title}*", *body]
    _out("\n".join(text))


def _json(*args: str) -> list[dict]:
    return json.loads(_report(tuple(args), "json"))


def _length(n) -> str:
    return "—" if n is None else (f"{int(n) // 1024}k" if int(n) % 1024 == 0 else str(n))


def headline_ppl(path: str = "results/ppl-smollm2-x4-1k-32k.csv") -> None:
    """The factor-4 perplexity pivot without intervals: every cell to 4 significant digits, and the
    effective length (the README's headline table)."""
    (pivot,) = [p for p in _json(path) if p.get("kind") is None and p["metric"] == "ppl"]
    lengths = [str(n) for n in pivot["lengths"]]
    lines = ["| method | " + " | ".join(_length(n) for n in lengths) + " | effective length |",
             "| --- |" + " ---: |" * (len(lengths) + 1)]  # fmt: skip
    values = {n: [r["cells"][n]["value"] for r in pivot["rows"] if n in r["cells"]] for n in lengths}
    best = {n: min(v) for n, v in values.items() if v.count(min(v)) == 1}  # bold where one method is best
    for row in pivot["rows"]:
        cells = []
        for n in lengths:
            c = row["cells"].get(n)
            v = "" if c is None else f"{c['value']:.4g}"
            cells.append(f"**{v}**" if c is not None and c["value"] == best.get(n) else v)
        name = f"`{row['method']}`" if "(" in row["method"] else row["method"]
        eff = ("≥" if row.get("effective_all_pass") else "") + _length(row["effective_length"])  # ≥: every length passed
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {eff} |")
    _out("\n".join(lines))


RULER_2K_ASKED = {
    "niah single_1": "one number among repeated noise sentences",
    "niah single_2": "one number in essay prose",
    "niah single_3": "one uuid in essay prose",
    "niah multikey_1": "one number, three other needles as distractors",
    "niah multikey_2": "one number among needles filling the haystack",
    "niah multikey_3": "one uuid keyed by a uuid among uuid needles",
    "niah multivalue": "all four numbers of one key",
    "niah multiquery": "the numbers of four keys",
    "vt": "the five variables a value was passed through (1 chain, 4 hops)",
    "cwe": "the 10 most common of the listed words",
    "fwe": "the 3 most frequent coded words",
}


def _pct_interval(c: dict) -> str:
    return f"{c['value']:.0%} [{c['lo'] * 100:.0f}-{c['hi']:.0%}]"


def ruler_tasks_2k(exact: str = "results/ruler-smollm2-2k.csv", ruler: str = "results/ruler-smollm2-2k-protocol.csv") -> None:
    """Each RULER task at 2k with plain RoPE under both protocols, from the two files' reports."""
    scores: dict[str, dict[str, str]] = {}
    for column, path in (("exact", exact), ("ruler", ruler)):
        for p in _json(path):
            if p.get("kind") is None and p["metric"] == "accuracy":
                task = p["title"].split(" accuracy")[0]
                ((n, c),) = p["rows"][0]["cells"].items()
                scores.setdefault(task, {})[column] = _pct_interval(c)
    if set(scores) != set(RULER_2K_ASKED):
        raise RuntimeError(f"RULER tasks in the 2k files: {sorted(scores)}; RULER_2K_ASKED says what is asked in {sorted(RULER_2K_ASKED)}")
    lines = ["| variant | what is asked | exact, depth 0.5 | ruler |", "| --- | --- | ---: | ---: |"]
    for task, asked in RULER_2K_ASKED.items():
        name = task.split(" ")[1] if task.startswith("niah ") else f"`{task}`"
        lines.append(f"| {name} | {asked} | {scores[task]['exact']} | {scores[task]['ruler']} |")
    _out("\n".join(lines))


def prompt_tokens(path: str = "results/niah-smollm2-x2-ruler.csv") -> None:
    """The range of prompt lengths (template included) of every length of a RULER results file."""
    spans: dict[int, list[int]] = {}
    with open(ROOT / path, newline="") as f:
        for r in csv.DictReader(f):
            if r["metric"] == "score":
                spans.setdefault(int(r["length"]), []).append(int(r["tokens"]))
    parts = [f"{min(t)}-{max(t)} at {_length(n)}" for n, t in sorted(spans.items())]
    parts[0] = parts[0].replace(" at ", " tokens at ")
    _out("Prompts, template included, are " + ", ".join(parts[:-1]) + f" and {parts[-1]} (`{path}`).")


def attention_table(path: str = "results/attention-smollm2-16k.csv") -> None:
    """Perplexity, passkey, tokens/s and peak memory at 16k of the attention-level methods."""
    pivots = [p for p in _json(path) if p.get("kind") is None]
    ppl = {r["method"]: r["cells"] for p in pivots if p["metric"] == "ppl" for r in p["rows"]}
    acc = {r["method"]: r["cells"] for p in pivots if p["metric"] == "accuracy" for r in p["rows"]}
    speed: dict[str, dict[str, float]] = {}
    params: dict[str, str] = {}
    with open(ROOT / path, newline="") as f:
        for r in csv.DictReader(f):
            if r["task"] == "ppl" and r["metric"] in ("tokens_per_s", "peak_mem_mb"):
                label = r.get("label") or r["method"]  # files of 0.1.0 have no label column
                speed.setdefault(label, {})[r["metric"]] = float(r["value"])
                params[label] = ", ".join(f"{k} {v:.3g}" if v % 1 else f"{k} {v:.0f}" for k, v in json.loads(r["method_params"] or "{}").items())
    lines = ["| method | parameters | ppl 16k | passkey 16k | tokens/s | peak MB |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for m in ppl:
        (p,) = ppl[m].values()
        a = next(iter(acc[m].values()), None) if m in acc else None
        passkey = f"{round(a['value'] * a['n'])}/{a['n']}" if a else "—"
        lines.append(f"| {m} | {params.get(m, '')} | {p['value']:.4g} | {passkey} | {speed[m]['tokens_per_s']:.0f} | {speed[m]['peak_mem_mb']:.0f} |")
    _out("\n".join(lines))


def proxy_study(prefix: str = "results/proxy-study-smollm2") -> None:
    """The proxy study's two tables from its committed CSVs, as ``scripts/proxy_study.py`` prints them."""
    import importlib.util

    import pandas as pd

    spec = importlib.util.spec_from_file_location("proxy_study", ROOT / "scripts" / "proxy_study.py")
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    table = pd.read_csv(ROOT / f"{prefix}-configs.csv")
    corr = pd.read_csv(ROOT / f"{prefix}-correlations.csv")
    _out(study.readme_tables(table, corr))


# --- proxy metrics and errors ---------------------------------------------------------------------


def proxy_metrics() -> None:
    """Which task takes which ``--metrics`` name, read from each registered task's option."""
    from ctxbench.tasks import registry

    takes: dict[str, list[str]] = {}
    for name, task in sorted(registry().items()):
        option = next((o for o in task.options if o.name == "metrics"), None)
        if option is None or not getattr(task.prepare, "func", task.prepare).__module__.startswith("ctxbench."):
            continue
        listed = re.search(r"proxy metrics to add \(([^)]*)\)", option.help)
        for metric in (m.strip() for m in listed.group(1).split(",")):
            option.parse(metric)  # raises if the task does not take it
            takes.setdefault(metric, []).append(f"`{name}`")
    lines = ["| metric | tasks that take it |", "| --- | --- |"]
    lines += [f"| `{m}` | {', '.join(t)} |" for m, t in takes.items()]
    _out("\n".join(lines))


ERROR_CASES = [
    ["ppl", "--len", "16q"],
    ["ppl", "--factor", "0.5"],
    ["ppl", "--method", "ntkk"],
    ["ppl", "--method", "yarn", "--param", "beta_fats=16"],
    ["ppl", "--method", "ntk+yarn"],
    ["ppl", "--len", "2k,2048"],
    ["ppl", "--dataset", "nope.txt"],
    ["ppl", "--metrics", "longpl"],
    ["ppl", "--out", "missing/dir/out.csv"],
    ["passkey", "--depths", "0.5,1.5"],
    ["niah", "--variant", "single1"],
    ["niah", "--depths", "0.5"],
    ["niah", "--haystack", "image.txt"],
    ["sweep", "suite.toml"],
    ["report", "missing.csv"],
    ["compare", "foreign.csv", "foreign.csv"],
    ["freqs", "--method", "ntk"],
    ["export", "--method", "rerope", "--to", "vllm", "--head-dim", "64", "--base", "1e4", "--trained-len", "4k"],
]


def error_examples() -> None:
    """What a few bad inputs print (run in an empty folder with a foreign CSV, a binary file and a
    suite with a typo), each the one line on stderr; all exit 2 before loading a model."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "foreign.csv").write_text("name,score\nfoo,1\n")
        (d / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
        (d / "suite.toml").write_text('model = "smollm2-135m"\n[ppl]\nfactors = [2]\nlenghts = ["1k"]\n')

        def run(argv):
            extra = [] if argv[0] not in ("ppl", "passkey", "niah") else ["--dry-run"] if "--out" in argv else ["--out", "r.csv", "--dry-run"]
            proc = _ctxbench(*argv, *extra, cwd=d, ok=(2,))
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            if len(lines) != 1:
                raise RuntimeError(f"ctxbench {' '.join(argv)}: expected one error line, got {proc.stderr}")
            return lines[0].replace(tmp, ".")

        with ThreadPoolExecutor(max_workers=4) as pool:
            lines = list(pool.map(run, ERROR_CASES))
    text = []
    for argv, line in zip(ERROR_CASES, lines, strict=True):
        text += [f"$ ctxbench {' '.join(argv)}", line]
    _out("```\n" + "\n".join(text) + "\n```")


def cog_gap() -> None:
    """An empty line between two generated tables."""
    _out("")


# --- the vLLM backend's parity with transformers ------------------------------------------------------

# (transformers file, vLLM file) of the same grids: the transformers side is the committed reference runs
PARITY_FILES = (
    ("results/ppl-smollm2-x4-1k-32k.csv", "results/vllm-ppl-smollm2-x4.csv"),
    ("results/ppl-smollm2-factor2.csv", "results/vllm-ppl-smollm2-x2.csv"),
    ("results/niah-smollm2-x2-ruler.csv", "results/vllm-niah-smollm2.csv"),
    ("results/niah-smollm2-validation.csv", "results/vllm-niah-smollm2.csv"),
    ("results/passkey-smollm2-yarn-heatmap.csv", "results/vllm-passkey-smollm2.csv"),
    ("results/parity-ntk-alpha-longrope-hf.csv", "results/parity-ntk-alpha-longrope-vllm.csv"),
    ("results/backend-hf.csv", "results/backend-vllm.csv"),
    ("results/backend-hf-2k4k.csv", "results/backend-vllm-2k4k.csv"),
)


@cache
def _parity_rows() -> tuple[tuple[str, ...], ...]:
    """The rows of ``ctxbench compare --across-backends HF VLLM --format markdown`` over every pair of
    :data:`PARITY_FILES` (run in this process), each cell once (the first file that holds it)."""
    import contextlib
    import io

    from ctxbench.cli import app

    rows, seen = [], set()
    for hf, vllm in PARITY_FILES:
        if not (ROOT / vllm).is_file():
            continue
        out = io.StringIO()
        cwd = Path.cwd()
        try:
            os.chdir(ROOT)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                app(args=["compare", "--across-backends", hf, vllm, "--format", "markdown"], prog_name="ctxbench", standalone_mode=False)
        except SystemExit:
            pass  # exit 1: a cell differs, which the table shows
        finally:
            os.chdir(cwd)
        for line in out.getvalue().splitlines():
            cells = tuple(c.strip() for c in line.strip().strip("|").split("|"))
            if len(cells) != 10 or cells[0] in ("task", "---"):
                continue
            key = cells[:6]
            if key not in seen:
                seen.add(key)
                rows.append(cells)
    return tuple(rows)


def parity_table() -> None:
    """Every paired cell: the docs' full table."""
    lines = ["| task | method | factor | length | depth | metric | hf float32 | vllm bf16 | verdict | detail |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | --- | --- |"]  # fmt: skip
    lines += ["| " + " | ".join(_cell(c) if i == 1 else c for i, c in enumerate(r)) + " |" for r in _parity_rows()]
    _out("\n".join(lines))


def _k(n: int) -> str:
    """1024 -> 1k, 16384 -> 16k."""
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def parity_summary() -> None:
    """Per method and factor: perplexity's largest relative difference over its lengths, and the trials
    answered the same on niah and on passkey (the README's table)."""
    by: dict = {}
    for task, label, factor, length, _depth, metric, _a, _b, verdict, detail in _parity_rows():
        entry = by.setdefault((label, factor), {"ppl": [], "niah": [0, 0, 0], "passkey": [0, 0, 0], "differs": 0, "lengths": set()})
        entry["lengths"].add(int(length))
        entry["differs"] += verdict == "differs"
        if metric == "ppl":
            entry["ppl"].append(abs(float(detail.split("%")[0])))
        elif metric == "accuracy" and task in ("niah", "passkey"):
            same, of = detail.split(" same answers")[0].split("/")
            scored = detail.split(" same score")[0].split("(")[-1].split("/")[0]
            entry[task][0] += int(same)
            entry[task][1] += int(of)
            entry[task][2] += int(scored)
    lines = ["| method | factor | ppl: largest difference | niah: same answers (same score) | passkey: same answers (same score) | lengths | cells that differ |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: |"]  # fmt: skip
    order = {m: i for i, m in enumerate(("none", "linear", "ntk", "yarn", "llama3"))}
    for (label, factor), e in sorted(by.items(), key=lambda kv: (order.get(kv[0][0], 9), kv[0][0], kv[0][1])):
        ppl = f"{max(e['ppl']):.2f}% ({len(e['ppl'])} cells)" if e["ppl"] else "-"
        same = {t: f"{e[t][0]}/{e[t][1]} ({e[t][2]}/{e[t][1]})" if e[t][1] else "-" for t in ("niah", "passkey")}
        lengths = "-".join(_k(n) for n in (min(e["lengths"]), max(e["lengths"])))
        lines.append(f"| {_cell(label)} | {factor} | {ppl} | {same['niah']} | {same['passkey']} | {lengths} | {e['differs']} |")
    _out("\n".join(lines))


def dtype_control(hf: str = "results/backend-hf.csv", vllm: str = "results/backend-vllm-float32.csv") -> None:
    """The dtype control of the bench: vLLM in float32 on the bench's cells it holds, against transformers."""
    from ctxbench.report.parity import parity

    pairs = [p for p in parity(str(ROOT / hf), str(ROOT / vllm))[0] if p.metric == "accuracy" and p.verdict != "unpaired"]
    cells = ", ".join(f"{p.task} {_cell(p.label)} at {_k(int(p.length))}" for p in pairs)
    same, n = sum(p.same for p in pairs), sum(p.trials for p in pairs)
    _out(f"vLLM in float32 against transformers in float32 ({cells}, `{vllm}`): {same}/{n} trials give the same answer text.")


def backend_methods() -> None:
    """The methods ``--backend vllm`` runs (the registry's, as ``export --to vllm`` expresses them)."""
    from ctxbench.backends.vllm import runs

    _out("`--backend vllm` runs: " + ", ".join(f"`{m}`" for m in runs()) + ".")


def backend_bench(path: str = "results/backend-bench.md") -> None:
    """The table ``scripts/bench_backend.py`` wrote on its last committed run, and per task the trials
    scored the same on both backends (from the run's committed CSVs, through the parity code)."""
    from ctxbench.report.parity import parity

    text = (ROOT / path).read_text().strip()
    if "| same score |" not in text and (ROOT / "results/backend-vllm.csv").is_file():
        pairs, _ = parity(str(ROOT / "results/backend-hf.csv"), str(ROOT / "results/backend-vllm.csv"))
        per = {}
        for p in pairs:
            if p.metric == "accuracy" and p.verdict != "unpaired":
                n = per.setdefault(p.task, [0, 0, 0])
                n[0], n[1], n[2] = n[0] + p.same, n[1] + p.same_score, n[2] + p.trials
        text += "\n\nPer trial, the same answer text and the same score (two different wrong answers both score 0): " + "; ".join(
            f"{task} {same}/{n} same answers, {scored}/{n} same score" for task, (same, scored, n) in per.items()) + "."
    _out(text)


# --- the README's commands, with what their plans cost ----------------------------------------------

COMMANDS = (
    ("ctxbench ppl --method ntk --factor 4", "perplexity at L/2, L, 2L, 4L of the trained length L"),
    ("ctxbench passkey --method none,yarn --factor 2 --len 12k --depths 0.5", "passkey past the trained 8k, where methods differ ({passkey})"),
    ("ctxbench niah --variant single_1 --len 4k,8k", "a RULER task: needle in a haystack"),
    ("ctxbench sweep nightly", "a built-in suite by name: a whole grid, resumable"),
    ("ctxbench sweep tasks/nightly.toml", "... or a suite file by path"),
)
ABOUT = re.compile(r"about (\d+) (s|min)\b")
ESTIMATED = re.compile(r"this run is estimated at (\d+) (s|min)\b")


def planned_seconds(command: str) -> float:
    """What ``COMMAND --dry-run`` plans, in seconds, at the cost model's reference throughput of a
    2-core CPU in float32 (an empty cache: no throughput measured on this machine; device and dtype
    pinned, so the page is the same on every machine)."""
    args = command.split()[1:]
    with tempfile.TemporaryDirectory() as cache:
        env = {**ENV, "CTXBENCH_CACHE": cache}
        extra = [] if args[0] == "sweep" else ["--device", "cpu", "--dtype", "float32"]
        proc = subprocess.run([sys.executable, "-m", "ctxbench", *args, *extra, "--dry-run"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
    text = " ".join(proc.stdout.split())
    if proc.returncode != 0 or "2-core CPU" not in text:
        raise RuntimeError(f"{command} --dry-run did not plan at the reference throughput:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    total = ESTIMATED.search(text)
    found = [total] if total else list(ABOUT.finditer(text))  # a suite's total, else each job's plan
    return sum(float(m.group(1)) * (60 if m.group(2) == "min" else 1) for m in found)


def _planned(seconds: float) -> str:
    return f"~{seconds / 60:.0f} min" if seconds >= 90 else f"~{seconds:.0f} s"


def _passkey_12k(path: str = "results/baseline-nightly.csv") -> str:
    """What the committed nightly baseline scored on the passkey cells the README's example runs."""
    right: dict[str, list[int]] = {}
    with open(ROOT / path, newline="") as f:
        for r in csv.DictReader(f):
            factor_ok = r["method"] == "none" or (r["factor"] and float(r["factor"]) == 2)  # plain RoPE has no factor
            if (r["task"], r["metric"], r["length"], r["depth"]) == ("passkey", "correct", "12288", "0.5") and factor_ok:
                right.setdefault(r["method"], []).append(int(float(r["value"])))
    if set(right) != {"none", "yarn"}:
        raise RuntimeError(f"{path}: no passkey none/yarn cells at 12k, factor 2, depth 0.5")
    return f"committed: none {sum(right['none'])}/{len(right['none'])}, yarn {sum(right['yarn'])}/{len(right['yarn'])} in {path}"


def commands() -> None:
    """The README's example commands, each under a comment with its planned cost (``--dry-run``, a 2-core CPU)."""
    with ThreadPoolExecutor(4) as pool:
        costs = list(pool.map(planned_seconds, [c for c, _ in COMMANDS]))
    lines = ["```"]
    for (command, why), seconds in zip(COMMANDS, costs, strict=True):
        lines += [f"# {why.format(passkey=_passkey_12k()) if '{' in why else why}: {_planned(seconds)}", command]
    lines += ["# in CI: exit 1 when a cell got worse; seconds", "ctxbench compare results/baseline-nightly.csv new.csv", "```"]
    _out("\n".join(lines))


QUICKSTART = "ctxbench ppl --method none,ntk,yarn --factor 2 --len 1k,2k,4k --docs 2"


def quickstart_cost() -> None:
    """The Quickstart run's planned cost, as a sentence."""
    _out(f"The run plans {_planned(planned_seconds(QUICKSTART))} on a 2-core CPU (`--dry-run` prints any command's plan and stops); "
         "the first set-up takes a few minutes more.")
