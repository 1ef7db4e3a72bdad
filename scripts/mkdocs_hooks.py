"""mkdocs hooks: the committed result plots (``results/plots/*.png``) are served as ``plots/NAME.png``,
so the results pages show the very files the README and ``ctxbench report --plot`` use, without a
copy under ``docs/``; ``ctxbench tune``'s committed plots (``results/tune/<search>/trials.png``) as
``plots/tune-<search>.png``; and a code span with a space in it (a command, a formula) gets the class
``wrap``, so that in a table cell it may wrap at its spaces while an identifier never wraps
(docs/stylesheets/extra.css)."""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

PLOTS = Path(__file__).resolve().parents[1] / "results" / "plots"


TUNE = PLOTS.parent / "tune"  # ctxbench tune's committed searches: results/tune/<search>/trials.png


def on_files(files, config):
    for png in sorted(PLOTS.glob("*.png")):
        files.append(File.generated(config, f"plots/{png.name}", abs_src_path=str(png)))
    for png in sorted(TUNE.glob("*/trials.png")):  # served as plots/tune-<search>.png
        files.append(File.generated(config, f"plots/tune-{png.parent.name}.png", abs_src_path=str(png)))
    return files


SPACED_CODE = re.compile(r"<code>([^<]*? [^<]*)</code>")


def on_page_content(html, page, config, files):
    return SPACED_CODE.sub(r'<code class="wrap">\1</code>', html)
