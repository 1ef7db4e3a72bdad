"""Numbers the docs' prose quotes are the committed results' numbers.

A sentence that quotes a number computed from a results file is written by a cog block
(``scripts/docgen.py``, ``say_*``), so ``test_docs_generated.py`` fails when the file changes and the
page does not. What is left in plain prose is checked here: every decimal number on the results,
statistics and suites pages and the README must be one a generated block of the docs shows (up to
the prose's rounding) or be listed below with why; a paired comparison shown twice on a page has
one Holm-adjusted p; the built-in nightly suite quotes the proxy study's rho and no planned time.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import docgen  # noqa: E402

GENERATED = re.compile(r"\[\[\[cog.*?\[\[\[end\]\]\]", re.S)
CHECKED_PAGES = ["README.md", "docs/results.md", "docs/statistics.md", "docs/suites.md", "docs/index.md", "docs/getting-started.md",
                 "docs/reading-the-output.md"]  # fmt: skip
# numbers these pages' prose quotes that no generated block shows, and why each is not a committed result's
NOT_RESULTS = {
    "3.10": "Python's version", "5.19": "transformers' version", "24.04": "Ubuntu's version",
    "85.5": "RULER's published wAvg (Llama-3.1-70B)", "93.7": "RULER's published wAvg (Llama-3.1-70B)",
    "1.17": "4^(1/32^0.625), a formula's value", "0.0625": "a probability, 1/16", "0.029": "a bound of the sign-flip test",
    "1.41": "the speed-and-precision page's measured loss", "1.51": "the speed-and-precision page's measured loss",
    "2.66": "the speed-and-precision page's measured loss", "2.04": "Ms-PoE's loss on the speed-and-precision page",
    "3.08": "the validation file's answer NLL range (per trial)", "2.87": "the validation file's answer NLL range (per trial)",
    "0.78": "the 9-configuration figure, quoted as history", "0.96": "the 9-configuration figure, quoted as history",
    "1.98": "yarn's LongPPL interval", "3.51": "yarn's LongPPL interval", "2.11": "history", "5.17": "history",
    "24.6": "ntk-mixed against none at 1k, a ratio of two table cells",
}  # fmt: skip


def _generated_text() -> str:
    pages = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
    return "\n".join(m.group(0) for p in pages for m in GENERATED.finditer((ROOT / p).read_text()))


def _prose(page: str) -> str:
    text = GENERATED.sub("", (ROOT / page).read_text())
    return re.sub(r"```.*?```", "", text, flags=re.S)


def _shown(number: str, pool: set[float], decimals: dict[float, int]) -> bool:
    """``number`` is a generated number, or one rounded to the prose's decimals (5.47 for 5.472)."""
    value, places = float(number), len(number.split(".")[1])
    return any(round(g, places) == value or f"{g:.{places}f}" == number for g in pool)


def _numbers_outside_tables(text: str) -> list[str]:
    return re.findall(
        r"(?<![\w.\-\[])\d+\.\d+(?![\w.%x])",
        "\n".join(ln for ln in text.splitlines() if not ln.startswith("|")),
    )


@pytest.mark.parametrize("page", [p for p in CHECKED_PAGES if (ROOT / p).is_file()])
def test_every_decimal_number_in_the_prose_is_one_a_generated_block_shows(page):
    pool = {float(n) for n in re.findall(r"\d+\.\d+", _generated_text())}
    prose = _prose(page)
    stray = [n for n in _numbers_outside_tables(prose) if n not in NOT_RESULTS and not _shown(n, pool, {})]
    assert not stray, (
        f"{page} quotes {stray}: generate the sentence (scripts/docgen.py, say_*) or say why in NOT_RESULTS"
    )


def _comparisons(page: str) -> dict[tuple, set[str]]:
    """(baseline, table title, length column, label) -> the Holm-adjusted p of every time the page's
    generated reports show that comparison."""
    out: dict[tuple, set[str]] = {}
    baseline = title = None
    columns: list[str] = []
    for line in (ROOT / page).read_text().splitlines():
        if line.startswith("`ctxbench report "):
            found = re.search(r"--baseline (\S+)", line)
            baseline = found.group(1) if found else None
        elif line.startswith("*") and line.endswith("*"):
            title = line.strip("*")
        elif line.startswith("| method |"):
            columns = [c.strip() for c in line.strip("|").split("|")]
        elif line.startswith("| ") and baseline and title and "Holm" in line:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            for column, cell in zip(columns[1:], cells[1:], strict=False):
                holm = re.search(r"Holm ([\d.e-]+)\)", cell)
                if holm:
                    out.setdefault((baseline, title, column, cells[0]), set()).add(holm.group(1))
    return out


@pytest.mark.parametrize("page", ["README.md", "docs/results.md", "docs/statistics.md"])
def test_a_comparison_shown_twice_on_a_page_has_one_adjusted_p(page):
    twice = {k: v for k, v in _comparisons(page).items() if len(v) > 1}
    assert not twice, f"{page}: one comparison in two Holm families: {twice}"


def test_the_results_page_quotes_each_since_2024_comparison_from_its_one_family():
    text = (ROOT / "docs/results.md").read_text()
    for label, factor in (("string", "2"), ("ms-poe", "2"), ("dca", "2")):
        cell = docgen.paired_cells(*docgen.SINCE_2024_NIAH, metric="accuracy")[(label, factor)]
        assert docgen.p_text(cell) in text
    assert not re.search(r"p ?= ?0\.047\b", text)  # the two-comparison family STRING's niah p once came from


def test_the_4k_against_2k_rise_is_generated_on_every_page_that_states_it():
    change = docgen.ppl_change(2048, 4096)
    lo, hi = min(change.values()), max(change.values())
    assert f"{lo * 100:.1f}%" in docgen.rise_text() and f"{hi * 100:.0f}%" in docgen.rise_text()
    for page in ("docs/results.md", "docs/statistics.md"):
        assert "worse at 4k than at 2k" not in _prose(page), (
            f"{page} states the rise outside its generated block"
        )
        assert "worse at 4k than at 2k" in (ROOT / page).read_text()
    assert "8-17%" not in (ROOT / "ctxbench/report/effective.py").read_text()


def test_the_nightly_suite_quotes_the_proxy_studys_rho_and_no_planned_time():
    text = (ROOT / "ctxbench/suites/nightly.toml").read_text()
    rho, _lo, _hi, configs = docgen.proxy_rho("answer_nll", "niah_16k")
    quoted = re.search(r"rho ([+-]\d\.\d\d) against niah at 16k over (\d+) configurations \(([^,]+),", text)
    assert quoted, "nightly.toml no longer says why it runs answer_nll"
    assert (quoted.group(1), int(quoted.group(2))) == (f"{rho:+.2f}", configs)
    assert (ROOT / quoted.group(3)).is_file()
    assert not re.search(r"\d+ min", text), "a suite's planned time drifts: docs/suites.md generates it"
    assert "--dry-run" in re.search(r'^description = "(.*)"$', text, flags=re.M).group(1)


def test_the_suites_page_states_the_planned_minutes_only_where_it_generates_them():
    prose = _prose("docs/suites.md")
    assert not re.search(r"planned \d", prose)
    assert f"`nightly` {docgen.suite_minutes('nightly')}" in (ROOT / "docs/suites.md").read_text()
