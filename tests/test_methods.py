"""Every method agrees with its reference: transformers' ROPE_INIT_FUNCTIONS where one exists,
else the formula of DESIGN.md computed independently here in float64."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from ctxbench.errors import UserError
from ctxbench.geometry import RopeGeometry
from ctxbench.methods import frequencies, resolve
from ctxbench.parsing import parse_factor, parse_length

HEAD_DIMS = [64, 80, 128]
BASES = [1e4, 1e5, 5e5]
TRAINED = [2048, 4096, 8192]
FACTORS = [1.0, 1.5, 2.0, 4.0, 8.0, 16.0]
GRID = list(itertools.product(HEAD_DIMS, BASES, TRAINED))


def _config(head_dim, base, trained, rope, max_pos=None):
    heads = 4
    return LlamaConfig(
        hidden_size=head_dim * heads, num_attention_heads=heads, num_key_value_heads=heads, head_dim=head_dim,
        num_hidden_layers=1, intermediate_size=8, vocab_size=8, max_position_embeddings=max_pos or trained,
        rope_parameters={"rope_theta": base, **rope},
    )


def _ours(name, head_dim, base, trained, factor, seq_len, **params):
    geom = RopeGeometry(head_dim=head_dim, rotary_dim=head_dim, base=base, trained_len=trained)
    inv, scale = frequencies(resolve(name, params), geom, factor, seq_len)
    return inv.double().numpy(), scale


def _close(ours, theirs, rel=1e-6):
    theirs = np.asarray(theirs, dtype=np.float64)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=rel, atol=0)


@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_linear_matches_transformers(head_dim, base, trained):
    for s in FACTORS:
        theirs, t_scale = ROPE_INIT_FUNCTIONS["linear"](_config(head_dim, base, trained, {"rope_type": "linear", "factor": s}), "cpu")
        ours, scale = _ours("linear", head_dim, base, trained, s, trained)
        _close(ours, theirs)
        assert scale == t_scale == 1.0


@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_dynamic_ntk_matches_transformers_below_and_above_the_trained_length(head_dim, base, trained):
    for s, seq_len in itertools.product(FACTORS, [trained // 2, trained, trained + 1, 3 * trained, 16 * trained]):
        cfg = _config(head_dim, base, trained, {"rope_type": "dynamic", "factor": s})
        theirs, _ = ROPE_INIT_FUNCTIONS["dynamic"](cfg, "cpu", seq_len=seq_len)
        ours, scale = _ours("dynamic-ntk", head_dim, base, trained, s, seq_len)
        _close(ours, theirs)
        assert scale == 1.0


@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_yarn_matches_transformers(head_dim, base, trained):
    for s in FACTORS:
        cfg = _config(head_dim, base, trained, {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": trained}, max_pos=int(trained * s))
        theirs, t_scale = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
        ours, scale = _ours("yarn", head_dim, base, trained, s, int(trained * s))
        _close(ours, theirs)
        assert scale == pytest.approx(t_scale, rel=1e-12)
        assert scale == pytest.approx(0.1 * math.log(s) + 1 if s > 1 else 1.0)


@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_yarn_with_custom_betas_matches_transformers(head_dim, base, trained):
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": trained, "beta_fast": 16, "beta_slow": 2}
    theirs, _ = ROPE_INIT_FUNCTIONS["yarn"](_config(head_dim, base, trained, rope, max_pos=4 * trained), "cpu")
    ours, _ = _ours("yarn", head_dim, base, trained, 4.0, 4 * trained, beta_fast=16, beta_slow=2)
    _close(ours, theirs)


@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_llama3_matches_transformers(head_dim, base, trained):
    for s in FACTORS:
        rope = {"rope_type": "llama3", "factor": s, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": trained}
        theirs, _ = ROPE_INIT_FUNCTIONS["llama3"](_config(head_dim, base, trained, rope, max_pos=int(trained * max(s, 2))), "cpu")
        ours, scale = _ours("llama3", head_dim, base, trained, s, trained)
        _close(ours, theirs)
        assert scale == 1.0


@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_longrope_matches_transformers_with_factors_from_a_file(head_dim, base, trained, tmp_path):
    rng = np.random.default_rng(head_dim + int(base) + trained)
    long = (1 + rng.random(head_dim // 2) * 30).tolist()
    short = (1 + rng.random(head_dim // 2) * 0.2).tolist()
    path = tmp_path / "factors.json"
    path.write_text(json.dumps({"long_factor": long, "short_factor": short}))
    for s, seq_len in itertools.product([1.0, 2.0, 16.0], [trained // 2, trained, trained + 1, 4 * trained]):
        rope = {"rope_type": "longrope", "factor": s, "long_factor": long, "short_factor": short, "original_max_position_embeddings": trained}
        theirs, t_scale = ROPE_INIT_FUNCTIONS["longrope"](_config(head_dim, base, trained, rope, max_pos=int(trained * max(s, 2))), "cpu", seq_len=seq_len)
        ours, scale = _ours("longrope", head_dim, base, trained, s, seq_len, factors=str(path))
        _close(ours, theirs)
        assert scale == pytest.approx(t_scale, rel=1e-12)


def test_longrope_reads_factors_from_the_model_config():
    rope = {"rope_type": "longrope", "factor": 4.0, "long_factor": [2.0] * 32, "short_factor": [1.0] * 32, "original_max_position_embeddings": 4096}
    geom = RopeGeometry.from_config(_config(64, 1e4, 4096, rope, max_pos=16384))
    inv, scale = frequencies(resolve("longrope"), geom, 4.0, 8192)
    theirs, t_scale = ROPE_INIT_FUNCTIONS["longrope"](_config(64, 1e4, 4096, rope, max_pos=16384), "cpu", seq_len=8192)
    _close(inv.double().numpy(), theirs)
    assert scale == pytest.approx(math.sqrt(1 + math.log(4) / math.log(4096))) == pytest.approx(t_scale)


# --- formulas computed independently (float64, plain loops) ---------------------------------


def _theta(d, b):
    return np.array([b ** (-2 * i / d) for i in range(d // 2)])


@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_ntk_base_uses_exponent_d_over_d_minus_2(head_dim, base, trained):
    for s in FACTORS:
        new_base = base * s ** (head_dim / (head_dim - 2))
        ours, _ = _ours("ntk", head_dim, base, trained, s, trained)
        _close(ours, _theta(head_dim, new_base), rel=1e-5)
    wrong = base * 4.0 ** (head_dim / head_dim - 2)  # "dim / dim - 2": a known mistake
    assert not np.allclose(_ours("ntk", head_dim, base, trained, 4.0, trained)[0], _theta(head_dim, wrong), rtol=1e-3)


def _by_parts(d, b, L, s, alpha=1.0, beta=32.0):
    out = []
    for theta in _theta(d, b):
        r = L / (2 * math.pi / theta)
        g = min(1.0, max(0.0, (r - alpha) / (beta - alpha)))
        out.append((1 - g) * theta / s + g * theta)
    return np.array(out)


@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_ntk_by_parts_matches_the_paper_formula(head_dim, base, trained):
    for s in FACTORS:
        ours, _ = _ours("ntk-by-parts", head_dim, base, trained, s, trained)
        _close(ours, _by_parts(head_dim, base, trained, s), rel=1e-5)
    ours, _ = _ours("ntk-by-parts", head_dim, base, trained, 4.0, trained, alpha=2.0, beta=16.0)
    _close(ours, _by_parts(head_dim, base, trained, 4.0, 2.0, 16.0), rel=1e-5)


def test_ntk_by_parts_keeps_high_frequencies_and_interpolates_low_ones():
    ours, _ = _ours("ntk-by-parts", 128, 1e4, 4096, 8.0, 4096)
    plain = _theta(128, 1e4)
    assert ours[0] == pytest.approx(plain[0], rel=1e-6)  # pair 0: wavelength 6.3 tokens, kept
    assert ours[-1] == pytest.approx(plain[-1] / 8, rel=1e-5)  # last pair: longer than L, interpolated


def test_ntk_by_parts_and_yarn_differ():
    by_parts, _ = _ours("ntk-by-parts", 128, 1e4, 4096, 8.0, 4096)
    yarn, _ = _ours("yarn", 128, 1e4, 4096, 8.0, 4096)
    assert np.abs(by_parts - yarn).max() / np.abs(yarn).max() > 1e-4


@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_dynamic_yarn_is_yarn_at_s_equal_l_over_L_and_plain_within_L(head_dim, base, trained):
    for seq_len in [trained // 2, trained, 3 * trained]:
        ours, scale = _ours("dynamic-yarn", head_dim, base, trained, 7.0, seq_len)
        s = max(1.0, seq_len / trained)
        yarn, yarn_scale = _ours("yarn", head_dim, base, trained, s, seq_len)
        _close(ours, yarn, rel=0)
        assert scale == yarn_scale
        if seq_len <= trained:
            _close(ours, _theta(head_dim, base), rel=1e-5)
            assert scale == 1.0


def test_theta_replaces_the_base():
    ours, scale = _ours("theta", 128, 1e4, 4096, 1.0, 4096, theta=1e6)
    _close(ours, _theta(128, 1e6), rel=1e-5)
    assert scale == 1.0


@pytest.mark.parametrize("name", ["linear", "ntk", "yarn", "ntk-by-parts", "llama3"])
def test_factor_one_is_plain_rope(name):
    ours, scale = _ours(name, 128, 1e4, 4096, 1.0, 8192)
    _close(ours, _theta(128, 1e4), rel=1e-5)
    assert scale == 1.0


def test_partial_rotary_geometry_from_config():
    from transformers import GPTNeoXConfig

    cfg = GPTNeoXConfig(hidden_size=256, num_attention_heads=4, rotary_pct=0.25, max_position_embeddings=2048, rotary_emb_base=10000)
    geom = RopeGeometry.from_config(cfg)
    assert (geom.head_dim, geom.rotary_dim, geom.trained_len, geom.base) == (64, 16, 2048, 10000.0)


def test_trained_length_prefers_original_max_position_embeddings():
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    assert RopeGeometry.from_config(_config(64, 1e4, 4096, rope, max_pos=16384)).trained_len == 4096


# --- resolution and parsing ------------------------------------------------------------------


def test_aliases_resolve_to_their_method():
    assert resolve("pi").name == "linear" and resolve("dynamic").name == "dynamic-ntk"


def test_unknown_method_suggests_the_closest_name():
    with pytest.raises(UserError, match="did you mean 'ntk'"):
        resolve("ntkk")


def test_unknown_parameter_suggests_the_closest_key():
    with pytest.raises(UserError, match="did you mean 'beta_fast'"):
        resolve("yarn", {"beta_fats": 16})


def test_frequency_method_combines_with_one_attention_method():
    setting = resolve("ntk+logn")
    assert (setting.name, setting.freq.name, setting.attention.name) == ("ntk+logn", "ntk", "logn")


@pytest.mark.parametrize("spec", ["ntk+yarn", "rerope+self-extend"])
def test_other_combinations_list_what_combines(spec):
    with pytest.raises(UserError, match="combine at most one frequency method") as info:
        resolve(spec)
    assert "logn" in info.value.fix and "yarn" in info.value.fix


@pytest.mark.parametrize("text", ["0", "0.5", "abc", "-2", "nan"])
def test_factor_below_one_or_not_a_number_is_rejected(text):
    with pytest.raises(UserError):
        parse_factor(text)


@pytest.mark.parametrize("text,value", [("16k", 16384), ("4096", 4096), ("1m", 1048576), ("2K", 2048)])
def test_lengths_take_k_and_m_suffixes(text, value):
    assert parse_length(text) == value


def test_inverse_frequencies_are_float32():
    inv, _ = frequencies(resolve("yarn"), RopeGeometry(64, 64, 1e4, 4096), 4.0, 4096)
    assert inv.dtype == torch.float32
