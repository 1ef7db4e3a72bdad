"""The README's "Proxy metrics" section says what the code does: which task takes which metric, the
LongPPL thresholds, windows and cost it quotes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctxbench.errors import UserError
from ctxbench.tasks import proxy, registry

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
SECTION = README.split("### Proxy metrics", 1)[1].split("\n### ", 1)[0]
FLAT = " ".join(SECTION.split())  # line breaks as spaces
SMOLLM2_TRAINED = 8192  # SmolLM2-135M's trained length, as the README states it


def _table() -> dict[str, set[str]]:
    """{metric: {task, ...}} of the section's table."""
    out = {}
    for line in SECTION.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"`[a-z_]+`", cells[0]):
            out[cells[0].strip("`")] = set(re.findall(r"`([a-z]+)`", cells[1]))
    return out


def _accepts(task, metric: str) -> bool:
    option = next((o for o in task.options if o.name == "metrics"), None)
    if option is None:
        return False
    try:
        option.parse(metric)
    except UserError:
        return False
    return True


def test_the_table_names_each_metric_with_exactly_the_tasks_that_take_it():
    table = _table()
    assert set(table) == set(proxy.PPL_METRICS + proxy.ANSWER_METRICS)
    for metric, tasks in table.items():
        takes = {name for name, task in registry().items() if _accepts(task, metric)}
        assert tasks == takes, metric


def test_the_quoted_windows_thresholds_and_cost_are_the_codes():
    L = SMOLLM2_TRAINED
    assert "`L` = 8192" in FLAT
    assert f"short context of {proxy.short_window(L)} tokens shared by {proxy.short_stride(L)} targets" in FLAT
    assert f"long windows of {L} tokens advancing by {proxy.long_stride(L)}" in FLAT
    assert "`L/4`" in FLAT and "`L/16`" in FLAT
    for n in (64, 128, 1000, 4096):  # L/4, L/16, L/4 for any L
        assert (proxy.short_window(n), proxy.short_stride(n), proxy.long_stride(n)) == (n // 4, n // 16, n // 4)
    assert (proxy.ALPHA, proxy.BETA) == (2.0, -2.0) and "more than 2 nats" in FLAT and "log-prob > -2" in FLAT
    assert "fewer than 9x its tokens" in FLAT


@pytest.mark.parametrize("n", [100, 2048, 8192, 8193, 16384, 32768, 131072, 1_000_000])
def test_the_key_token_search_costs_fewer_than_nine_times_the_document(n):
    assert sum(proxy.evaluator_forwards(n, SMOLLM2_TRAINED, ("longppl",))) < 9 * n
