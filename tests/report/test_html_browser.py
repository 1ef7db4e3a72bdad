"""`ctxbench report --html` in a real browser: headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by Selenium) opens the page from disk with the network off, and what it
shows is held to `report --format json` of the same file. Skipped where Chromium is not installed."""

from __future__ import annotations

import json
import math
import shutil
import tempfile

import pytest
from helpers import RESULTS, cli_main

pytestmark = pytest.mark.browser

REALDATA = str(RESULTS / "ruler-smollm2-2k4k-realdata.csv")
HF, VLLM = str(RESULTS / "backend-hf.csv"), str(RESULTS / "backend-vllm.csv")
CHROMIUM, DRIVER = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver") or "/usr/bin/chromedriver"
# Chromium as root, headless, with nothing of its own on the network (no updates, sync, QUIC, first-run fetches).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--window-size=1400,1000"]  # fmt: skip


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module, with a fresh profile and the network switched off."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")
    from selenium.webdriver.chrome.service import Service

    if not (shutil.which(CHROMIUM) and shutil.which(DRIVER)):
        pytest.skip("Chromium is not installed (apt-get install -y chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="ctxbench-chromium-")
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_network_conditions(offline=True, latency=0, download_throughput=0, upload_throughput=0)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """The realdata page, the hf/vllm comparison page, and their `report --format json`."""
    out = tmp_path_factory.mktemp("pages")
    mp = pytest.MonkeyPatch()
    built = {}
    import sys
    from io import StringIO

    for name, files in {"realdata": [REALDATA], "compare": [HF, VLLM]}.items():
        page = out / f"{name}.html"
        stdout, stderr = StringIO(), StringIO()
        mp.setattr(sys, "argv", ["ctxbench", "report", *files, "--format", "json", "--html", str(page)])
        mp.setattr(sys, "stdout", stdout)
        mp.setattr(sys, "stderr", stderr)
        from ctxbench.cli import main

        main()
        mp.undo()
        built[name] = (page.as_uri(), json.loads(stdout.getvalue()))
    return built


def _open(browser, uri):
    from selenium.webdriver.common.by import By

    browser.get(uri)
    browser.find_element(By.CSS_SELECTOR, "#overview")
    return By


def _shown(value: float, fraction: bool) -> str:
    """How the page writes a value: a fraction as a whole percent (JavaScript's Math.round)."""
    return f"{math.floor(100 * value + 0.5)}%" if fraction else f"{value:.4g}"


def test_the_heatmap_has_one_cell_per_json_cell_with_its_value(browser, pages):
    uri, report = pages["realdata"]
    By = _open(browser, uri)
    seen = {}
    for td in browser.find_elements(By.CSS_SELECTOR, "td.cell[data-key]"):
        key = (int(td.get_attribute("data-pivot")), td.get_attribute("data-label"), td.get_attribute("data-length"))
        seen[key] = (float(td.get_attribute("data-value")), td.find_element(By.CSS_SELECTOR, ".v").text)
    expected = {(i, row["method"], n): (c["value"], _shown(c["value"], True))
                for i, p in enumerate(x for x in report if "kind" not in x) for row in p["rows"] for n, c in row["cells"].items()}  # fmt: skip
    assert len(seen) == len(expected) == 28
    assert seen == expected


def test_clicking_a_cell_shows_its_paired_verdict_and_its_trials(browser, pages):
    uri, report = pages["realdata"]
    By = _open(browser, uri)
    titles = [p["title"] for p in report if "kind" not in p]
    i = titles.index("niah single_3 accuracy — smollm2-135m, factor 2")
    browser.find_element(By.CSS_SELECTOR, f'td.cell[data-pivot="{i}"][data-label="yarn"][data-length="4096"]').click()
    verdict = browser.find_element(By.ID, "verdict").text
    assert verdict.startswith("not separated from 'none'") and "Holm-adjusted p" in verdict
    rows = browser.find_elements(By.CSS_SELECTOR, "#trials tr.trial")
    assert len(rows) == 3
    answers = [r.find_element(By.CSS_SELECTOR, "td.answer").text for r in rows]
    assert all(answers)
    first = rows[0]
    first.find_element(By.CSS_SELECTOR, "button.show-prompt").click()
    command = first.find_element(By.CSS_SELECTOR, "code.cmd").text
    assert command == "ctxbench show-prompt " + first.find_element(By.CSS_SELECTOR, "td.row-id").text
    assert command.startswith(f"ctxbench show-prompt {REALDATA}@")


def test_wrong_only_leaves_the_trials_that_scored_below_one(browser, pages):
    uri, report = pages["realdata"]
    By = _open(browser, uri)
    titles = [p["title"] for p in report if "kind" not in p]
    i = titles.index("niah single_3 accuracy — smollm2-135m, factor 2")
    browser.find_element(By.CSS_SELECTOR, f'td.cell[data-pivot="{i}"][data-label="none"][data-length="4096"]').click()
    scores = [float(r.find_element(By.CSS_SELECTOR, "td.score").text.split()[0]) for r in browser.find_elements(By.CSS_SELECTOR, "#trials tr.trial")]
    assert len(scores) == 3 and 0 < sum(s < 1 for s in scores) < 3  # a cell with both kinds (33%)
    browser.find_element(By.ID, "wrong-only").click()
    left = browser.find_elements(By.CSS_SELECTOR, "#trials tr.trial")
    assert len(left) == sum(s < 1 for s in scores) and all("wrong" in r.get_attribute("class") for r in left)
    assert browser.find_element(By.ID, "trial-count").text == f"{len(left)} of 3 trials"


def test_the_provenance_tab_shows_digests_and_the_commands(browser, pages):
    uri, _ = pages["realdata"]
    By = _open(browser, uri)
    browser.find_element(By.ID, "tab-provenance").click()
    table = browser.find_element(By.ID, "provenance-table")
    assert table.is_displayed() and "sha256:b179c9523d0e6a0f" in table.text
    assert any(c.text.startswith("ctxbench niah --model smollm2-135m") for c in table.find_elements(By.CSS_SELECTOR, "code.cmd"))


def test_two_files_show_the_comparison_and_differing_answers_side_by_side(browser, pages):
    uri, _ = pages["compare"]
    By = _open(browser, uri)
    assert browser.find_element(By.ID, "parity").is_displayed()  # two backends: compare --across-backends's verdicts
    browser.find_element(By.CSS_SELECTOR, "#comparison details summary").click()  # and the plain gate's, one click away
    assert len(browser.find_elements(By.CSS_SELECTOR, "#changes tr.change")) == 18
    pairs = browser.find_elements(By.CSS_SELECTOR, "#side-by-side tr.pair")
    assert pairs and all("differ" in p.get_attribute("class") for p in pairs)
    for p in pairs:
        assert p.find_element(By.CSS_SELECTOR, ".base-answer").text != p.find_element(By.CSS_SELECTOR, ".new-answer").text


def test_a_label_that_is_markup_shows_as_text_and_runs_nothing(browser, tmp_path, monkeypatch, capsys):
    from test_html import HOSTILE, _relabelled

    page = tmp_path / "h.html"
    code, _, stderr = cli_main(["report", str(_relabelled(tmp_path, HOSTILE)), "--html", str(page)], monkeypatch, capsys)
    assert code == 0, stderr
    By = _open(browser, page.as_uri())
    labels = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "th.label")]
    assert HOSTILE in labels
    assert browser.execute_script("return window.pwned === undefined")


def test_a_screenshot_of_the_page_is_drawn(browser, pages, tmp_path):
    uri, _ = pages["realdata"]
    By = _open(browser, uri)
    browser.find_element(By.CSS_SELECTOR, "td.cell[data-key]").click()
    png = browser.get_screenshot_as_png()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000


def test_a_perplexity_cell_lists_its_documents_and_draws_the_nll_by_position_curve(browser, tmp_path, monkeypatch, capsys):
    page = tmp_path / "q.html"
    code, _, stderr = cli_main(["report", str(RESULTS / "quickstart-smollm2.csv"), "--html", str(page)], monkeypatch, capsys)
    assert code == 0, stderr
    from ctxbench.report.html import embedded

    samples = embedded(page.read_text())["samples"]
    By = _open(browser, page.as_uri())
    browser.find_element(By.CSS_SELECTOR, 'td.cell[data-label="yarn"][data-length="4096"]').click()
    cell = samples[browser.find_element(By.ID, "detail").get_attribute("data-key")]
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.docs tr")) == 1 + len(cell["docs"])
    points = browser.find_element(By.CSS_SELECTOR, "svg.curve polyline").get_attribute("points").split()
    assert len(points) == len(cell["curve"]) > 2
