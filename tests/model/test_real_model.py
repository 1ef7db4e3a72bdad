"""Slow tests on the real default model: offline loading, generation, and a real perplexity."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import DATA, run_settings

from ctxbench.methods import resolve
from ctxbench.methods.patching import applied
from ctxbench.tasks import ppl
from ctxbench.tasks.common import parse_depths

pytestmark = pytest.mark.slow


def test_default_model_loads_offline_with_its_rope_geometry(real_lm, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    g = real_lm.geometry
    assert (g.head_dim, g.rotary_dim, g.base, g.trained_len) == (64, 64, 100000.0, 8192)
    assert real_lm.digest.startswith("sha256:")


def test_default_model_generates_a_sensible_answer(real_lm):
    tok = real_lm.tokenizer
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    out = real_lm.model.generate(ids, max_new_tokens=4, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1]:])


@pytest.fixture(scope="module")
def plain_yarn():
    """The default model as plain transformers reads it from the GGUF file (its own loader, none of
    ctxbench's), with transformers' own YaRN x2 set in the config."""
    from transformers import AutoModelForCausalLM

    from ctxbench.model.files import locate

    _, path, gguf = locate("smollm2-135m")
    return AutoModelForCausalLM.from_pretrained(
        str(path), gguf_file=gguf, dtype=torch.float32,
        rope_parameters={"rope_type": "yarn", "factor": 2.0, "rope_theta": 100000.0, "original_max_position_embeddings": 8192},
    ).eval()  # fmt: skip


def test_patched_default_model_matches_native_yarn_logits(real_lm, plain_yarn):
    ids = torch.randint(0, 49152, (1, 256))
    with torch.no_grad(), applied(real_lm.model, real_lm.geometry, resolve("yarn"), 2.0, 256):
        ours = real_lm.model(ids).logits
    with torch.no_grad():
        theirs = plain_yarn(ids).logits
    assert (ours - theirs).abs().max().item() < 1e-4


def test_ctxbench_reads_the_gguf_weights_plain_transformers_reads_to_the_bit(real_lm, plain_yarn):
    """ctxbench reads the file once for transformers' four calls (``load._gguf_loading``); the weights
    are the same (the rotary tables differ: YaRN is set on the plain model)."""
    ours = real_lm.model.state_dict()
    theirs = {k: v for k, v in plain_yarn.state_dict().items() if "rotary_emb" not in k}
    assert set(theirs) <= set(ours) and len(theirs) > 200
    assert all(torch.equal(ours[k], v) for k, v in theirs.items()), [k for k, v in theirs.items() if not torch.equal(ours[k], v)][:3]


def test_default_model_perplexity_on_the_builtin_corpus_is_plausible(real_lm):
    settings = ppl.Settings(methods=[resolve("none")], factors=[1.0], lengths=[512], docs=1)
    records = run_settings(real_lm, "ppl", settings).records
    value = next(float(r["value"]) for r in records if r["doc"] == "all" and r["metric"] == "ppl")
    assert 1.5 < value < 30 and math.isfinite(value)  # Python source: low but not trivial perplexity


def test_default_model_finds_the_passkey_at_2k_with_plain_rope(real_lm):
    from ctxbench.tasks import passkey

    settings = passkey.Settings(methods=[resolve("none")], factors=[2.0], lengths=[2048], depths=parse_depths(3), trials=1)
    records = run_settings(real_lm, "passkey", settings).records
    trials = [r for r in records if r["metric"] == "correct"]
    assert len(trials) == 3
    assert all(r["value"] == "1" for r in trials), [(r["depth"], r["answer"]) for r in trials]


def test_default_model_finds_the_ruler_needle_at_2k_with_plain_rope(real_lm):
    """RULER niah single_1 at 2k: the default model passes nearly every trial (all 10 of the
    committed run at 1k-4k did); one miss in four is allowed, as RULER's own small models miss some."""
    from ctxbench.runner.settings import build_settings
    from ctxbench.tasks import get

    settings = build_settings(get("niah"), "none", 2.0, "2k", {"variants": "single_1", "depths": "0.25,0.75", "trials": 2, "protocol": "exact"})
    scores = [float(r["value"]) for r in run_settings(real_lm, "niah", settings).records if r["metric"] == "score"]
    assert len(scores) == 4 and sum(scores) >= 3, scores


def test_cached_dequantised_weights_give_the_gguf_logits(real_lm, monkeypatch):
    from ctxbench.backends.hf import load_model as load

    monkeypatch.setenv("CTXBENCH_NO_MODEL_CACHE", "1")
    fresh = load("smollm2-135m", device="cpu", dtype="float32")  # straight from the GGUF file
    ids = torch.randint(0, 49152, (1, 64))
    with torch.no_grad():
        assert torch.equal(fresh.model(ids).logits, real_lm.model(ids).logits)
    assert fresh.digest == real_lm.digest
    assert fresh.tokenizer("def f(x):\n  return x")["input_ids"] == real_lm.tokenizer("def f(x):\n  return x")["input_ids"]


@pytest.mark.parametrize("spec", ["rerope", "leaky-rerope", "self-extend"])
def test_fused_and_blocked_attention_paths_give_the_same_losses_on_the_default_model(real_lm, spec, monkeypatch):
    """At 1k tokens with a 256-token window (far branch in play), 30 layers deep."""
    from ctxbench.methods import attention
    from ctxbench.model.scoring import token_nll
    from ctxbench.tasks.corpus import Tokenized, load_corpus

    tokens = Tokenized(load_corpus(None), real_lm.tokenizer)
    ids = tokens[tokens.select([1024], 1)[1024][0]][:1024]
    setting = resolve(spec, {"window": 256})

    def losses():
        with applied(real_lm.model, real_lm.geometry, setting, 2.0, 1024):
            return token_nll(real_lm.model, ids)

    fused = losses()
    monkeypatch.setattr(attention, "FUSED_DEVICES", ())
    blocked = losses()
    assert torch.allclose(fused, blocked, rtol=0, atol=1e-4)
    with applied(real_lm.model, real_lm.geometry, resolve("none"), 1.0, 1024):
        assert (token_nll(real_lm.model, ids) - fused).abs().max() > 1e-2  # the method changed something


def test_bos_auto_keeps_the_cells_of_the_committed_nightly_baseline(real_lm):
    """Runs made before --bos existed stay the same cells (resume and compare match them): the data
    digest of ``--bos auto`` is the committed one, and auto feeds the tokenizer's ids unchanged
    (SmolLM2's tokenizer adds no BOS), so the numbers are the same too."""
    import csv
    import json

    baseline = DATA / "baseline-nightly-2026-11-23.csv"  # the nightly baseline before --bos
    row = next(r for r in csv.DictReader(baseline.open()) if r["task"] == "ppl" and r["metric"] == "ppl" and r["doc"] == "all")
    settings = ppl.Settings(methods=[resolve("none")], factors=[2.0], lengths=[4096, 8192, 12288], dataset="stdlib", docs=1)
    context = ppl.prepare(real_lm, settings)
    if context.state.corpus_digest != json.loads(row["extra"])["corpus_digest"]:
        pytest.skip("this Python's standard library differs from the one the baseline was measured on")
    assert context.data_digest == row["data_digest"]
    assert real_lm.tokenizer("def f():")["input_ids"][0] != real_lm.tokenizer.bos_token_id
