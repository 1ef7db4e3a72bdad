"""``native``: the model as shipped, its config's own RoPE scaling applied exactly.

Tiny Llama models built with each rope type transformers has give the same logits under
``native`` as unpatched (transformers' own rotary module), below and above the trained length;
``none`` differs from them wherever the config scales.
"""

from __future__ import annotations

import json

import pytest
import torch
from test_patching import FACTOR, TRAINED, N, assert_close, geometry, llama, logits, patched_logits
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from ctxbench.methods import effective_params, frequencies, resolve
from ctxbench.model.geometry import RopeGeometry

LONG = [1.0 + 0.75 * i for i in range(8)]
SHORT = [1.0 + 0.05 * i for i in range(8)]
ORIG = {"original_max_position_embeddings": TRAINED}

# (id, rope_parameters, max_position_embeddings): one config per rope type, as real models ship them
CONFIGS = [
    ("linear", {"rope_type": "linear", "factor": FACTOR}, TRAINED),  # LongChat
    ("dynamic", {"rope_type": "dynamic", "factor": FACTOR}, TRAINED),
    ("yarn", {"rope_type": "yarn", "factor": FACTOR, **ORIG}, N),  # Qwen2.5 long configs, YaRN fine-tunes
    ("yarn-betas", {"rope_type": "yarn", "factor": FACTOR, "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False, **ORIG}, N),
    ("yarn-attention-factor", {"rope_type": "yarn", "factor": FACTOR, "attention_factor": 1.3, **ORIG}, N),
    ("yarn-mscale", {"rope_type": "yarn", "factor": FACTOR, "mscale": 0.8, "mscale_all_dim": 0.6, **ORIG}, N),  # DeepSeek-style
    ("longrope", {"rope_type": "longrope", "factor": FACTOR, "long_factor": LONG, "short_factor": SHORT, **ORIG}, N),
    ("longrope-phi3", {"rope_type": "longrope", "long_factor": LONG, "short_factor": SHORT, **ORIG}, N),  # factor from the lengths
    ("llama3", {"rope_type": "llama3", "factor": FACTOR, "low_freq_factor": 1.0, "high_freq_factor": 4.0, **ORIG}, N),
]


@pytest.fixture
def ids():
    torch.manual_seed(3)
    return torch.randint(0, 258, (1, N))


@pytest.mark.parametrize("seq_len", [TRAINED // 2, N])
@pytest.mark.parametrize("name,rope,max_pos", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_native_equals_the_unpatched_model_and_none_does_not(name, rope, max_pos, seq_len, ids):
    x = ids[:, :seq_len]
    shipped = llama(rope, max_pos=max_pos)
    want = logits(shipped, x)  # transformers' own rotary module, dynamic updates included
    got = patched_logits(shipped, "native", x)
    assert_close(got, want)
    fresh = llama(rope, max_pos=max_pos)  # the dynamic types keep state between calls: compare on a fresh model
    assert_close(logits(fresh, x), want, atol=0)
    stripped = (patched_logits(shipped, "none", x) - want).abs().max().item()
    if name in ("dynamic", "longrope-phi3") and seq_len <= TRAINED:
        return  # these scale only beyond L (longrope's short factors do scale, see the other case)
    assert stripped > 1e-3, f"none equals the shipped model for {name} at {seq_len}"


def test_native_without_scaling_in_the_config_is_none(ids):
    model = llama()
    assert torch.equal(patched_logits(model, "native", ids), patched_logits(model, "none", ids))
    geom = geometry(model)
    assert effective_params(resolve("native"), geom, 1.0) == {"rope_type": "default"}
    assert torch.equal(frequencies(resolve("native"), geom, 1.0, N)[0], frequencies(resolve("none"), geom, 1.0, N)[0])


@pytest.mark.parametrize("name,rope,max_pos", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_native_records_the_configs_parameters_and_ignores_the_factor(name, rope, max_pos):
    geom = geometry(llama(rope, max_pos=max_pos))
    params = effective_params(resolve("native"), geom, 2.0)
    assert json.loads(json.dumps(params)) == {**rope, "rope_type": rope["rope_type"]}
    a = frequencies(resolve("native"), geom, 1.0, N)
    b = frequencies(resolve("native"), geom, 8.0, N)
    assert torch.equal(a[0], b[0]) and a[1] == b[1]


@pytest.mark.parametrize("name,rope,max_pos", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_native_frequencies_equal_transformers_rope_init_functions(name, rope, max_pos):
    model = llama(rope, max_pos=max_pos)
    for seq_len in (TRAINED // 2, TRAINED + 1, 3 * N):
        want, want_scale = ROPE_INIT_FUNCTIONS[rope["rope_type"]](model.config, "cpu", seq_len=seq_len)
        got, scale = frequencies(resolve("native"), geometry(model), 1.0, seq_len)
        assert torch.equal(got, want) and scale == want_scale


def test_native_covers_every_rope_type_of_the_installed_transformers():
    """A rope type transformers adds later goes through its own function; these tests name each one."""
    tested = {rope["rope_type"] for _, rope, _ in CONFIGS}
    assert set(ROPE_INIT_FUNCTIONS) - tested <= {"proportional"}  # Gemma-4's per-layer layout, refused below


def test_native_of_an_unknown_rope_type_is_a_user_error():
    from ctxbench.errors import UserError

    geom = RopeGeometry(64, 64, 1e4, 4096, native={"rope_type": "warp-drive", "factor": 2.0})
    with pytest.raises(UserError, match="RoPE type 'warp-drive'.*installed transformers"):
        frequencies(resolve("native"), geom, 1.0, 4096)


def test_native_combines_with_attention_methods(ids):
    """``native+rerope``: the shipped frequencies in ReRoPE's two branches."""
    shipped = llama({"rope_type": "yarn", "factor": FACTOR, **ORIG}, max_pos=N)
    plain = llama()
    plain.load_state_dict(shipped.state_dict())
    assert_close(patched_logits(shipped, "native+rerope", ids, params={"window": 16}),
                 patched_logits(plain, "yarn+rerope", ids, params={"window": 16}))  # fmt: skip


def test_native_is_dynamic_only_where_the_config_is():
    setting = resolve("native")
    assert setting.dynamic  # without a model: safe
    assert setting.dynamic_for(geometry(llama({"rope_type": "dynamic", "factor": FACTOR})))
    assert setting.dynamic_for(geometry(llama({"rope_type": "longrope", "factor": FACTOR, "long_factor": LONG, "short_factor": SHORT, **ORIG}, max_pos=N)))
    assert not setting.dynamic_for(geometry(llama({"rope_type": "yarn", "factor": FACTOR, **ORIG}, max_pos=N)))
    assert not setting.dynamic_for(geometry(llama()))
    assert not resolve("yarn").dynamic_for(geometry(llama())) and resolve("dynamic-ntk").dynamic_for(geometry(llama()))
