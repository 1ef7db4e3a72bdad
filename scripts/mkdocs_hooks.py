"""mkdocs hook: the committed result plots (``results/plots/*.png``) are served as ``plots/NAME.png``,
so the results pages show the very files the README and ``ctxbench report --plot`` use, without a
copy under ``docs/``."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

PLOTS = Path(__file__).resolve().parents[1] / "results" / "plots"


def on_files(files, config):
    for png in sorted(PLOTS.glob("*.png")):
        files.append(File.generated(config, f"plots/{png.name}", abs_src_path=str(png)))
    return files
