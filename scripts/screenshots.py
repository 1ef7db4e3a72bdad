"""Screenshots of every docs page, as a reader sees them at 1280 px: ``mkdocs build`` into a temporary
folder, serve it on 127.0.0.1, and let headless Chromium draw each page of the nav into
``docs/screenshots/<page>.png`` (the top 2400 px of it). Open them after a change to the docs'
rendering (CSS, tables, the API page): a table cut off or an identifier broken in two shows there
and in no test.

    .venv/bin/python scripts/screenshots.py                 # every page
    .venv/bin/python scripts/screenshots.py methods api     # some pages

Needs ``pip install -e '.[docs]'`` and Chromium (``apt-get install -y chromium``); nothing is fetched
from the network (the site loads no outside fonts or scripts, and Chromium's own background traffic is
switched off). PNGs are quantised to 256 colours when Pillow is present, to keep the repository small.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"
WIDTH, HEIGHT = 1280, 2400
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--no-first-run", f"--window-size={WIDTH},{HEIGHT}"]  # fmt: skip


def pages() -> list[str]:
    """Every page of mkdocs.yml's nav, in order (``index.md``, ``getting-started.md``, ...)."""

    class Loader(yaml.SafeLoader):  # mkdocs.yml may hold !!python/name tags the nav does not need
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)["nav"]
    out: list[str] = []

    def walk(item) -> None:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, list):
            for x in item:
                walk(x)
        elif isinstance(item, dict):
            for x in item.values():
                walk(x)

    walk(nav)
    return out


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if found := shutil.which(name):
            return found
    sys.exit("error: no Chromium on PATH — apt-get install -y chromium (or your system's package)")


def build(site: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)], cwd=ROOT,
                          capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", **__import__("os").environ})  # fmt: skip
    if proc.returncode:
        sys.exit(f"error: mkdocs build failed:\n{proc.stderr}")


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, int]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # one line per page is printed instead
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def shoot(browser: str, url: str, png: Path) -> None:
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}", url],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    if not png.is_file():
        sys.exit(f"error: Chromium drew no {png.name} for {url}:\n{proc.stderr[-2000:]}")


def shrink(png: Path) -> None:
    """256 colours: a text page loses nothing visible and the file a third of its size."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(png) as img:
        small = img.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(png, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "only", nargs="*", help="page names (methods, api, ...); default: every page of the nav"
    )
    args = parser.parse_args()
    wanted = [p for p in pages() if not args.only or Path(p).stem in args.only]
    browser = chromium()
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        build(site)
        server, port = serve(site)
        try:
            for page in wanted:
                path = "" if page == "index.md" else page[: -len(".md")] + "/"
                png = OUT / f"{Path(page).stem}.png"
                shoot(browser, f"http://127.0.0.1:{port}/{path}", png)
                shrink(png)
                print(f"{png.relative_to(ROOT)}  {png.stat().st_size // 1024} KiB")
        finally:
            server.shutdown()


if __name__ == "__main__":
    main()
