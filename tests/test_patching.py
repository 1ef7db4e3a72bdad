"""A model patched in place by ctxbench gives the logits of the same weights loaded with the
equivalent native ``rope_parameters``, and is restored exactly afterwards."""

from __future__ import annotations

import pytest
import torch
from conftest import TRAINED, tiny_llama
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, Qwen2Config, Qwen2ForCausalLM

from ctxbench.errors import UserError
from ctxbench.geometry import RopeGeometry
from ctxbench.methods import resolve
from ctxbench.patching import applied, rotary_modules

N = 3 * TRAINED + 8
FACTOR = 4.0
HALF = 8  # rotary pairs of the tiny Llama/Qwen2 (head dim 16)


def _neox(rope):
    cfg = GPTNeoXConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=258,
                        max_position_embeddings=TRAINED, rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": 0.5, **rope})  # fmt: skip
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return GPTNeoXForCausalLM(cfg).eval()


def _qwen2(rope):
    cfg = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      vocab_size=258, max_position_embeddings=TRAINED, rope_parameters={"rope_theta": 10000.0, **rope})  # fmt: skip
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg).eval()


def _llama(rope):
    return tiny_llama({"rope_theta": 10000.0, **rope})


FAMILIES = {"llama": _llama, "qwen2": _qwen2, "gpt_neox": _neox}
LONG = [1.0 + 0.5 * i for i in range(HALF)]
NATIVE = {
    "linear": {"rope_type": "linear", "factor": FACTOR},
    "dynamic-ntk": {"rope_type": "dynamic", "factor": FACTOR},
    "yarn": {"rope_type": "yarn", "factor": FACTOR, "original_max_position_embeddings": TRAINED},
    "llama3": {"rope_type": "llama3", "factor": FACTOR, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": TRAINED},
}


@pytest.fixture
def ids():
    torch.manual_seed(3)
    return torch.randint(0, 258, (1, N))


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt_neox"])
@pytest.mark.parametrize("method", list(NATIVE))
def test_patched_model_matches_native_rope_parameters(family, method, ids):
    build = FAMILIES[family]
    model = build({"rope_type": "default"})
    native = build(NATIVE[method])
    native.load_state_dict(model.state_dict())
    geom = RopeGeometry.from_config(model.config)
    with torch.no_grad(), applied(model, geom, resolve(method), FACTOR, N):
        ours = model(ids).logits
    with torch.no_grad():
        theirs = native(ids).logits
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_longrope_matches_native_with_factors_from_the_config(ids):
    rope = {"rope_type": "longrope", "factor": FACTOR, "long_factor": LONG, "short_factor": [1.0] * HALF,
            "original_max_position_embeddings": TRAINED}  # fmt: skip
    native = tiny_llama({"rope_theta": 10000.0, **rope}, max_position_embeddings=int(TRAINED * FACTOR))
    model = tiny_llama()
    model.load_state_dict(native.state_dict())
    geom = RopeGeometry.from_config(native.config)  # factors read from the model config
    with torch.no_grad(), applied(model, geom, resolve("longrope"), FACTOR, N):
        ours = model(ids).logits
    with torch.no_grad():
        theirs = native(ids).logits
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_partial_rotary_geometry_is_read_from_the_config():
    geom = RopeGeometry.from_config(_neox({"rope_type": "default"}).config)
    assert (geom.head_dim, geom.rotary_dim) == (16, 8)


def test_exit_restores_the_original_buffers_and_logits(tiny_lm, ids):
    model = tiny_lm.model
    originals = [m.inv_freq for m in rotary_modules(model)]
    with torch.no_grad():
        before = model(ids).logits
    for method in ("yarn", "dynamic-ntk", "rerope"):
        with applied(model, tiny_lm.geometry, resolve(method), FACTOR, N):
            pass
    assert all(m.inv_freq is o for m, o in zip(rotary_modules(model), originals, strict=True))
    assert all(m.attention_scaling == 1.0 for m in rotary_modules(model))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, before)


def test_an_error_inside_the_block_still_restores(tiny_lm, ids):
    with torch.no_grad():
        before = tiny_lm.model(ids).logits
    with pytest.raises(RuntimeError), applied(tiny_lm.model, tiny_lm.geometry, resolve("yarn"), FACTOR, N):
        raise RuntimeError("boom")
    with torch.no_grad():
        assert torch.equal(tiny_lm.model(ids).logits, before)


def test_native_dynamic_update_does_not_fire_while_a_method_is_applied(ids):
    dynamic = tiny_llama({"rope_theta": 10000.0, "rope_type": "dynamic", "factor": FACTOR})
    plain = tiny_llama()
    plain.load_state_dict(dynamic.state_dict())
    geom = RopeGeometry.from_config(dynamic.config)
    with torch.no_grad(), applied(dynamic, geom, resolve("none"), 1.0, N):
        ours = dynamic(ids).logits
    with torch.no_grad():
        assert torch.allclose(ours, plain(ids).logits, atol=1e-6)
        assert not torch.allclose(dynamic(ids).logits, plain(ids).logits, atol=1e-4)  # its own scaling is back


def test_model_without_rope_is_a_user_error():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=10, bos_token_id=0, eos_token_id=0))
    with pytest.raises(UserError, match="no rotary position embedding"):
        RopeGeometry.from_config(model.config)
    with pytest.raises(UserError, match="no rotary embedding module"):
        rotary_modules(model)
