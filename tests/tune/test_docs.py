"""What docs/tune.md states in prose about the code (its cog blocks are checked by
tests/test_docs_generated.py): the guard's default, the pruning threshold, halving's third."""

from __future__ import annotations

import re
from pathlib import Path

from ctxbench.tune.run import DEFAULT_GUARD
from ctxbench.tune.search import ETA, PRUNE_ALPHA

PAGE = Path(__file__).resolve().parents[2] / "docs" / "tune.md"


def _prose() -> str:
    text = re.sub(r"\[\[\[cog.*?\[\[\[end\]\]\]", "", PAGE.read_text(), flags=re.S)
    return " ".join(text.split())


def test_the_quoted_constants_are_the_codes():
    flat = _prose()
    assert f"The default, {DEFAULT_GUARD:g} (a perplexity ratio of at most e^{DEFAULT_GUARD:g}" in flat
    assert f"worse at p < {PRUNE_ALPHA:g} stops it" in flat
    assert ETA == 3 and "the best third of a batch goes on to three times as many" in flat


def test_the_page_is_in_the_nav():
    assert "tune.md" in (PAGE.parents[1] / "mkdocs.yml").read_text()
