"""``ctxbench longbench2 --template lm-eval`` on the real default model picks the letters lm-evaluation-harness
picks, with its log-likelihoods: ``tests/data/longbench2-lmeval/expected.json`` holds what lm-eval
0.4.13's own ``longbench2`` task (``_longbench_common_yaml``, ``HFLM``, ``max_length`` 512, float32)
gave on the 8 items of ``items.jsonl``, written once outside CI by ``scripts/lmeval_longbench2.py``
(the JSON names the command). Four of the items are longer than 512 tokens and cut from the left."""

from __future__ import annotations

import json

import pytest
from helpers import DATA, run_settings

from ctxbench.methods import resolve
from ctxbench.runner.settings import build_settings
from ctxbench.tasks import get

pytestmark = pytest.mark.slow

FIXTURE = DATA / "longbench2-lmeval"
# ctxbench scores a letter after the prompt's KV cache, lm-eval in one forward over prompt + letter:
# the same float32 arithmetic in another order. Measured: at most 1.4e-5 nats apart (the letters'
# log-likelihoods are -1 to -11, the closest two of an item 0.03 apart). A cross-entropy over the
# vocabulary on dim 1 (ctxbench's before) was 2.0e-4 off, outside this bound.
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads((FIXTURE / "expected.json").read_text())


@pytest.fixture(scope="module")
def ours(real_lm, expected) -> dict:
    """Per item id, ctxbench's log-likelihood of each letter (minus its NLL) and its pick."""
    assert real_lm.digest == expected["model_digest"] and real_lm.dtype == expected["dtype"]
    task = get("longbench2")
    settings = build_settings(task, [resolve("none")], 2.0, str(expected["max_length"]),
                              {"data": str(FIXTURE / "items.jsonl"), "template": "lm-eval"})  # fmt: skip
    rows = [r for r in run_settings(real_lm, "longbench2", settings).records if r["metric"] == "score"]
    out = {}
    for r in rows:
        extra = json.loads(r["extra"]) if isinstance(r["extra"], str) else r["extra"]
        out[extra["id"]] = ({x: -nll for x, nll in extra["letter_nll"].items()}, r["answer"])
    return out


def test_the_fixture_is_what_lm_eval_ran(expected):
    """Each item carries both layouts: the ``choices`` list lm-eval's ``doc_to_text`` reads (the hub's
    ``recursal/longbench-v2``) and THUDM's ``choice_A``..``choice_D``, the same four strings."""
    raw = [json.loads(line) for line in (FIXTURE / "items.jsonl").read_text().splitlines()]
    assert [i["_id"] for i in expected["items"]] == [r["_id"] for r in raw] and len(raw) == 8
    assert all(r["choices"] == [r[f"choice_{x}"] for x in "ABCD"] for r in raw)
    assert expected["lm_eval"] == "0.4.13"


def test_lm_eval_template_picks_lm_evals_letter_on_every_item(ours, expected):
    assert {i["_id"]: ours[i["_id"]][1] for i in expected["items"]} == {i["_id"]: i["pick"] for i in expected["items"]}


def test_lm_eval_template_gives_lm_evals_log_likelihoods(ours, expected):
    gaps = {(i["_id"], x): abs(ours[i["_id"]][0][x] - ll) for i in expected["items"] for x, ll in i["loglik"].items()}
    worst = max(gaps, key=gaps.get)
    assert gaps[worst] <= TOLERANCE, (worst, gaps[worst])
