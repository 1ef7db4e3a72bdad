"""Screenshots of ``ctxbench report --html`` for docs/looking-at-results.md: the page of a committed
results file drawn by headless Chromium (Selenium, the browser tests' set-up), saved under
``docs/looking-at-results/``. Run it after changing the page (``ctxbench/report/assets/``) and look at
the PNGs.

    .venv/bin/python scripts/report_screenshots.py

Needs Chromium and its driver (``apt-get install -y chromium chromium-driver``) and ``selenium`` (the
``dev`` extra); nothing is fetched from the network. PNGs are quantised to 256 colours with Pillow.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "looking-at-results"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--window-size=1280,860"]  # fmt: skip
REALDATA = "results/ruler-smollm2-2k4k-realdata.csv"
COMPARE = ["results/backend-hf.csv", "results/backend-vllm.csv"]


def page(files: list[str], out: Path) -> str:
    subprocess.run([str(ROOT / ".venv/bin/ctxbench"), "report", *files, "--html", str(out)], cwd=ROOT, check=True, capture_output=True)
    return out.as_uri()


def shrink(png: Path) -> None:
    from PIL import Image

    with Image.open(png) as img:
        small = img.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(png, optimize=True)


def main() -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or sys.exit("error: no chromium on PATH")
        for flag in [*FLAGS, f"--user-data-dir={tmp}/profile"]:
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
        driver.set_network_conditions(offline=True, latency=0, download_throughput=0, upload_throughput=0)
        try:
            driver.get(page([REALDATA], Path(tmp) / "r.html"))
            shots = {"overview.png": None}
            driver.save_screenshot(str(OUT / "overview.png"))
            title = "niah single_3 accuracy — smollm2-135m, factor 2"
            i = [h.text for h in driver.find_elements(By.CSS_SELECTOR, ".pivot h3")].index(title)
            driver.find_element(By.CSS_SELECTOR, f'td.cell[data-pivot="{i}"][data-label="yarn"][data-length="4096"]').click()
            driver.find_element(By.CSS_SELECTOR, "#trials tr.trial button.show-prompt").click()
            driver.find_element(By.ID, "detail").screenshot(str(OUT / "cell.png"))
            shots["cell.png"] = None
            driver.find_element(By.ID, "tab-provenance").click()
            driver.find_element(By.ID, "provenance").screenshot(str(OUT / "provenance.png"))
            shots["provenance.png"] = None
            driver.get(page(COMPARE, Path(tmp) / "c.html"))
            driver.save_screenshot(str(OUT / "compare.png"))
            shots["compare.png"] = None
        finally:
            driver.quit()
    for name in shots:
        shrink(OUT / name)
        print(f"{(OUT / name).relative_to(ROOT)}  {(OUT / name).stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
