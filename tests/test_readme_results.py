"""The README's measured RULER niah table says what `ctxbench report` says about the committed file."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).parent.parent
RULER_NIAH = ROOT / "results" / "niah-smollm2-x2-ruler.csv"
ANCHOR = "The same grid as RULER measures it"


def _readme_table(anchor: str) -> tuple[list[str], dict[str, list[str]]]:
    """(header, {method: cells}) of the first markdown table after ``anchor``."""
    text = (ROOT / "README.md").read_text()
    lines = text[text.index(anchor) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| method"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    header, body = rows[0], rows[2:]
    return header, {r[0]: r[1:] for r in body}


def _pct(x: float) -> str:
    return f"{round(100 * x)}%"


def _length(n: int) -> str:
    return f"{n // 1024}k"


def _report() -> dict:
    proc = subprocess.run(
        ["ctxbench", "report", str(RULER_NIAH), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    (pivot,) = [p for p in json.loads(proc.stdout) if p.get("kind") is None]
    return pivot


def test_the_ruler_niah_table_shows_the_committed_files_accuracy_and_interval_per_cell():
    header, table = _readme_table(ANCHOR)
    pivot = _report()
    lengths = [str(n) for n in pivot["lengths"]]
    assert header[1 : 1 + len(lengths)] == [_length(int(n)) for n in lengths]
    assert set(table) == {row["method"] for row in pivot["rows"]}
    for row in pivot["rows"]:
        cells = table[row["method"]]
        for i, n in enumerate(lengths):
            c = row["cells"][n]
            shown = cells[i].replace("*", "")
            assert shown.split()[0] == _pct(c["value"]), (row["method"], n, shown)
            if "[" in shown:  # an interval is printed where the score is not 100%
                assert f"[{_pct(c['lo'])[:-1]}-{_pct(c['hi'])}]" in shown, (row["method"], n, shown)


def test_the_ruler_niah_table_shows_each_methods_effective_length_and_its_interval():
    header, table = _readme_table(ANCHOR)
    col = header.index("effective length [95%]") - 1
    for row in _report()["rows"]:
        shown = table[row["method"]][col]
        assert shown.split()[0] == _length(row["effective_length"]), (row["method"], shown)
        lo, hi = row["effective_interval"]
        assert (f"[{_length(lo)}-{_length(hi)}]" in shown) == (lo != hi), (row["method"], shown)


def test_the_ruler_niah_tables_prompt_lengths_are_the_files():
    import csv

    text = (ROOT / "README.md").read_text()
    quoted = dict(re.findall(r"(\d+-\d+)(?: tokens)? at (\dk|16k)", text[text.index(ANCHOR) :][:3000]))
    quoted = {v: k for k, v in quoted.items()}
    spans: dict[int, list[int]] = {}
    with open(RULER_NIAH, newline="") as f:
        for r in csv.DictReader(f):
            if r["metric"] == "score":
                spans.setdefault(int(r["length"]), []).append(int(r["tokens"]))
    assert {_length(n): f"{min(t)}-{max(t)}" for n, t in spans.items()} == quoted


PPL_X4 = ROOT / "results" / "ppl-smollm2-x4-1k-32k.csv"
PPL_X4_ANCHOR = "Perplexity at factor 4 from 1k to 32k"


def test_the_factor_4_perplexity_table_shows_the_committed_files_numbers_and_effective_lengths():
    """Every method of results/ppl-smollm2-x4-1k-32k.csv is a row (by its label), each cell its
    perplexity to 4 significant digits, and the last column its effective length."""
    header, table = _readme_table(PPL_X4_ANCHOR)
    proc = subprocess.run(["ctxbench", "report", str(PPL_X4), "--format", "json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (pivot,) = [p for p in json.loads(proc.stdout) if p.get("kind") is None]
    lengths = [str(n) for n in pivot["lengths"]]
    assert header[1:] == [_length(int(n)) for n in lengths] + ["effective length"]
    assert set(table) == {f"`{row['method']}`" if "(" in row["method"] else row["method"] for row in pivot["rows"]}
    for row in pivot["rows"]:
        cells = table[f"`{row['method']}`" if "(" in row["method"] else row["method"]]
        for i, n in enumerate(lengths):
            assert cells[i].replace("*", "") == f"{row['cells'][n]['value']:.4g}", (row["method"], n, cells[i])
        assert cells[-1] == _length(row["effective_length"]), (row["method"], cells[-1])


NIAH_FILES = [str(ROOT / "results" / f) for f in ("niah-smollm2-x2-ruler.csv", "niah-smollm2-validation.csv",
                                                   "niah-smollm2-string-16k.csv", "niah-smollm2-newmethods.csv")]  # fmt: skip
NEW_METHODS_ANCHOR = "RULER niah `single_1` from 2k to 16k for the methods since 2024"
NEW_METHODS_TABLES = {
    "2": "yarn,rerope,self-extend,dca,string,yarn+ssmax,ms-poe",
    "4": "yarn,dca,ntk-mixed(mixed_b=0.625)",
}


def test_the_new_methods_niah_tables_are_what_report_prints_for_the_committed_files():
    """Each factor's table under the anchor is, line for line, the accuracy table of `ctxbench
    report FILES --method ... --factor F --format markdown` (cells, intervals, effective lengths)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(NEW_METHODS_ANCHOR) :]
    for factor, methods in NEW_METHODS_TABLES.items():
        proc = subprocess.run(["ctxbench", "report", *NIAH_FILES, "--method", methods, "--factor", factor, "--format", "markdown"],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        start = lines.index(f"#### niah single_1 accuracy — smollm2-135m, factor {factor}") + 2
        table = lines[start : lines.index("", start)]
        assert "\n".join(table) in section, f"factor {factor}: README table differs from\n" + "\n".join(table)
