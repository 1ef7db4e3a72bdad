"""Models without RoPE as baselines: ALiBi (BLOOM, MPT) and learned absolute positions (GPT-2).

They run ``none`` and ``native`` (the model as it is); every scaling method on them is one clear
UserError; a learned position table asked past its end is a UserError, never an index crash.
"""

from __future__ import annotations

import pytest
import torch
from transformers import BloomConfig, BloomForCausalLM, GPT2Config, GPT2LMHeadModel, MptConfig

from ctxbench.errors import UserError
from ctxbench.methods import METHODS, check_applicable, effective_params, frequencies, resolve
from ctxbench.methods.patching import applied
from ctxbench.model.geometry import RopeGeometry

VOCAB, TABLE = 258, 64


def bloom():
    torch.manual_seed(0)
    cfg = BloomConfig(hidden_size=32, n_head=2, n_layer=2, vocab_size=VOCAB, bos_token_id=None, eos_token_id=None)
    return BloomForCausalLM(cfg).eval()


def gpt2():
    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=32, n_head=2, n_layer=2, n_positions=TABLE, vocab_size=VOCAB, bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(cfg).eval()


MODELS = {"bloom": bloom, "gpt2": gpt2}
SCALING = [n for n in METHODS if n not in ("none", "native")] + ["ntk+logn", "yarn+rerope", "rerope+logn"]


def logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def test_geometry_says_how_positions_are_encoded():
    b = RopeGeometry.from_config(bloom().config)
    assert (b.position, b.has_rope, b.trained_len) == ("alibi", False, 2048)
    g = RopeGeometry.from_config(gpt2().config)
    assert (g.position, g.has_rope, g.trained_len, g.max_positions) == ("absolute", False, TABLE, TABLE)
    mpt = RopeGeometry.from_config(MptConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=512))
    assert (mpt.position, mpt.trained_len) == ("alibi", 512)


@pytest.mark.parametrize("family", list(MODELS))
@pytest.mark.parametrize("spec", ["none", "native"])
def test_baselines_run_and_leave_the_model_as_it_is(family, spec):
    model = MODELS[family]()
    geom = RopeGeometry.from_config(model.config)
    ids = torch.randint(0, VOCAB, (1, TABLE))
    before = logits(model, ids)
    with applied(model, geom, resolve(spec), 2.0, TABLE) as (inv_freq, scale):
        during = logits(model, ids)
    assert inv_freq is None and scale == 1.0
    assert torch.equal(during, before) and torch.equal(logits(model, ids), before)
    assert effective_params(resolve(spec), geom, 2.0) == ({} if spec == "none" else {"position": geom.position})


@pytest.mark.parametrize("family", list(MODELS))
@pytest.mark.parametrize("spec", SCALING)
def test_every_scaling_method_is_one_clear_user_error(family, spec):
    model = MODELS[family]()
    geom = RopeGeometry.from_config(model.config)
    setting = resolve(spec, {"theta": 1e6} if spec == "theta" else None)
    for call in (lambda: check_applicable(setting, geom), lambda: effective_params(setting, geom, 2.0),
                 lambda: frequencies(setting, geom, 2.0, 32)):  # fmt: skip
        with pytest.raises(UserError, match="has no rotary position embedding") as info:
            call()
        assert f"method '{setting.name}' cannot apply" in info.value.what and "none or native" in info.value.fix
    with pytest.raises(UserError, match="no rotary position embedding"), applied(model, geom, setting, 2.0, 32):
        pass


def test_learned_positions_past_the_table_are_a_user_error_not_an_index_crash():
    model = gpt2()
    geom = RopeGeometry.from_config(model.config)
    check_applicable(resolve("none"), geom, TABLE)  # the whole table is fine
    for spec in ("none", "native"):
        with pytest.raises(UserError, match=f"length {TABLE + 1} is past the learned position table .* \\({TABLE} positions\\)"):
            check_applicable(resolve(spec), geom, TABLE + 1)
        with pytest.raises(UserError, match="past the learned position table"), applied(model, geom, resolve(spec), 1.0, TABLE + 1):
            pass
    with pytest.raises(IndexError):  # what the model itself does there, which ctxbench never lets happen
        logits(model, torch.zeros(1, TABLE + 1, dtype=torch.long))


def test_alibi_runs_past_its_trained_length():
    model = bloom()
    geom = RopeGeometry.from_config(model.config)
    check_applicable(resolve("none"), geom, 4 * geom.trained_len)  # ALiBi has no table to run out of


def test_freqs_on_a_model_without_rope_says_why():
    geom = RopeGeometry.from_config(gpt2().config)
    with pytest.raises(UserError, match="has no rotary frequencies"):
        frequencies(resolve("none"), geom, 1.0, 32)


def test_a_baseline_runs_through_the_ppl_task(tokenizer, corpus_dir):
    from conftest import run_settings

    from ctxbench.backends.hf import wrap
    from ctxbench.tasks import ppl

    lm = wrap(gpt2(), tokenizer, name="tiny-gpt2", digest="tiny-gpt2")
    settings = ppl.Settings(methods=[resolve("none"), resolve("native")], factors=[1.0], lengths=[32, TABLE], dataset=str(corpus_dir), docs=1)
    records = run_settings(lm, "ppl", settings).records
    ppls = {(r["method"], r["length"]): float(r["value"]) for r in records if r["metric"] == "ppl" and r["doc"] == "all"}
    assert set(ppls) == {(m, str(n)) for m in ("none", "native") for n in (32, TABLE)}
    assert ppls[("none", "32")] == ppls[("native", "32")]
    assert {r["status"] for r in records} == {"ok"}
