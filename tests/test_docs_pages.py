"""What the docs pages state in prose about the code and the committed results, where no cog block
generates it (those are checked by test_docs_generated.py): the LongPPL windows, thresholds and cost
the tasks page quotes, and the proxy-study correlations the results page quotes."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from ctxbench.tasks import proxy

DOCS = Path(__file__).resolve().parents[1] / "docs"
RESULTS = Path(__file__).resolve().parents[1] / "results"
SMOLLM2_TRAINED = 8192  # SmolLM2-135M's trained length, as the tasks page states it


def _prose(page: str) -> str:
    """The page without its generated (cog) blocks, line breaks as spaces."""
    text = (DOCS / page).read_text()
    text = re.sub(r"\[\[\[cog.*?\[\[\[end\]\]\]", "", text, flags=re.S)
    return " ".join(text.split())


def _proxy_section() -> str:
    return _prose("tasks.md").split("## Proxy metrics", 1)[1]


def test_the_quoted_longppl_windows_thresholds_and_cost_are_the_codes():
    flat, L = _proxy_section(), SMOLLM2_TRAINED
    assert "`L` = 8192" in flat
    assert f"short context of {proxy.short_window(L)} tokens shared by {proxy.short_stride(L)} targets" in flat
    assert f"long windows of {L} tokens advancing by {proxy.long_stride(L)}" in flat
    assert "`L/4`" in flat and "`L/16`" in flat
    for n in (64, 128, 1000, 4096):  # L/4, L/16, L/4 for any L
        assert (proxy.short_window(n), proxy.short_stride(n), proxy.long_stride(n)) == (n // 4, n // 16, n // 4)
    assert (proxy.ALPHA, proxy.BETA) == (2.0, -2.0) and "more than 2 nats" in flat and "log-prob > -2" in flat
    assert "fewer than 9x its tokens" in flat


@pytest.mark.parametrize("n", [100, 2048, 8192, 8193, 16384, 32768, 131072, 1_000_000])
def test_the_key_token_search_costs_fewer_than_nine_times_the_document(n):
    assert sum(proxy.evaluator_forwards(n, SMOLLM2_TRAINED, ("longppl",))) < 9 * n


def test_every_correlation_the_results_prose_quotes_is_a_committed_one():
    """``+0.91 [+0.67, +0.98]`` in the results page's prose (outside the generated tables) is a rho
    and its interval from results/proxy-study-smollm2-correlations.csv."""
    corr = pd.read_csv(RESULTS / "proxy-study-smollm2-correlations.csv")
    committed = {f"{r.rho:+.2f} [{r.rho_lo:+.2f}, {r.rho_hi:+.2f}]" for r in corr.itertuples()}
    quoted = re.findall(r"[+-]\d\.\d\d \[[+-]\d\.\d\d, [+-]\d\.\d\d\]", _prose("results.md"))
    assert len(quoted) >= 4
    stale = [q for q in quoted if q not in committed and q != "+0.78 [+0.14, +0.96]"]  # the 9-configuration figure, quoted as history
    assert not stale, stale
