"""Every scaling method against a reference.

Methods transformers also has (``linear``, ``dynamic-ntk``, ``yarn``, ``longrope``, ``llama3``) are
compared with its ``ROPE_INIT_FUNCTIONS`` (rel 1e-6, equal attention scale); the others with the
formulas of DESIGN.md computed here in float64 with plain Python loops (rel 1e-5, ctxbench
computes in float32). Then method resolution and factor parsing.
"""

from __future__ import annotations

import itertools
import json
import math
import re

import numpy as np
import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from ctxbench.errors import UserError
from ctxbench.methods import METHODS, frequencies, resolve
from ctxbench.model.geometry import RopeGeometry
from ctxbench.parsing import parse_factor

HEAD_DIMS = [64, 80, 128]
BASES = [1e4, 1e5, 5e5]
TRAINED = [2048, 4096, 8192]
FACTORS = [1.0, 1.5, 2.0, 4.0, 8.0, 16.0]
GRID = list(itertools.product(HEAD_DIMS, BASES, TRAINED))
GRID_S = list(itertools.product(HEAD_DIMS, BASES, TRAINED, FACTORS))


def hf_config(head_dim, base, trained, rope, max_pos=None, partial=None):
    """A Llama config whose RoPE is ``rope``; ``max_pos`` defaults to the trained length."""
    heads = 2
    params = {"rope_theta": base, **rope}
    if partial is not None:
        params["partial_rotary_factor"] = partial
    return LlamaConfig(
        hidden_size=head_dim * heads, num_attention_heads=heads, num_key_value_heads=heads, head_dim=head_dim,
        num_hidden_layers=1, intermediate_size=8, vocab_size=8, max_position_embeddings=max_pos or trained,
        rope_parameters=params,
    )  # fmt: skip


def hf(rope_type, cfg, seq_len=None):
    kwargs = {} if seq_len is None else {"seq_len": seq_len}
    inv, scale = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu", **kwargs)
    return inv.double().numpy(), scale


def ours(name, head_dim, base, trained, factor, seq_len, rotary_dim=None, **params):
    geom = RopeGeometry(head_dim=head_dim, rotary_dim=rotary_dim or head_dim, base=base, trained_len=trained)
    inv, scale = frequencies(resolve(name, params), geom, factor, seq_len)
    assert inv.dtype == torch.float32
    return inv.double().numpy(), scale


def assert_rel(got, want, rel):
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rel, atol=0)


def seq_lens(trained):
    """Below, at, just above and far above the trained length."""
    return [trained // 2, trained, trained + 1, 3 * trained, 16 * trained]


# --- methods transformers also has ------------------------------------------------------------


@pytest.mark.parametrize("head_dim,base,trained,s", GRID_S)
def test_linear_matches_transformers(head_dim, base, trained, s):
    want, want_scale = hf("linear", hf_config(head_dim, base, trained, {"rope_type": "linear", "factor": s}))
    got, scale = ours("linear", head_dim, base, trained, s, trained)
    assert_rel(got, want, 1e-6)
    assert scale == want_scale == 1.0


@pytest.mark.parametrize("head_dim,base,trained,s", GRID_S)
def test_dynamic_ntk_matches_transformers_dynamic_below_and_above_the_trained_length(head_dim, base, trained, s):
    # transformers' dynamic takes L from config.max_position_embeddings
    cfg = hf_config(head_dim, base, trained, {"rope_type": "dynamic", "factor": s}, max_pos=trained)
    for seq_len in seq_lens(trained):
        want, want_scale = hf("dynamic", cfg, seq_len)
        got, scale = ours("dynamic-ntk", head_dim, base, trained, s, seq_len)
        assert_rel(got, want, 1e-6)
        assert scale == want_scale == 1.0


@pytest.mark.parametrize("head_dim,base,trained,s", GRID_S)
def test_yarn_matches_transformers(head_dim, base, trained, s):
    rope = {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": trained}
    want, want_scale = hf("yarn", hf_config(head_dim, base, trained, rope, max_pos=int(trained * s)))
    got, scale = ours("yarn", head_dim, base, trained, s, int(trained * s))
    assert_rel(got, want, 1e-6)
    assert scale == pytest.approx(want_scale, rel=1e-12)


@pytest.mark.parametrize("beta_fast,beta_slow,truncate", [(16, 2, True), (64, 0.5, True), (32, 1, False), (8, 4, False)])
@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_yarn_parameters_match_transformers(head_dim, base, trained, beta_fast, beta_slow, truncate):
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": trained,
            "beta_fast": beta_fast, "beta_slow": beta_slow, "truncate": truncate}  # fmt: skip
    want, _ = hf("yarn", hf_config(head_dim, base, trained, rope, max_pos=4 * trained))
    got, _ = ours("yarn", head_dim, base, trained, 4.0, 4 * trained, beta_fast=beta_fast, beta_slow=beta_slow, truncate=truncate)
    assert_rel(got, want, 1e-6)


def test_yarn_attention_factor_parameter_matches_transformers():
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "attention_factor": 1.25}
    want, want_scale = hf("yarn", hf_config(128, 1e4, 4096, rope, max_pos=16384))
    got, scale = ours("yarn", 128, 1e4, 4096, 4.0, 16384, attention_factor=1.25)
    assert_rel(got, want, 1e-6)
    assert scale == want_scale == 1.25


@pytest.mark.parametrize("head_dim,base,trained,s", GRID_S)
def test_llama3_matches_transformers(head_dim, base, trained, s):
    rope = {"rope_type": "llama3", "factor": s, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": trained}  # fmt: skip
    want, want_scale = hf("llama3", hf_config(head_dim, base, trained, rope, max_pos=16 * trained))
    got, scale = ours("llama3", head_dim, base, trained, s, trained)
    assert_rel(got, want, 1e-6)
    assert scale == want_scale == 1.0


@pytest.mark.parametrize("low,high", [(1.0, 8.0), (2.0, 4.0), (0.5, 2.0)])
def test_llama3_frequency_factors_match_transformers(low, high):
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": low, "high_freq_factor": high,
            "original_max_position_embeddings": 8192}  # fmt: skip
    want, _ = hf("llama3", hf_config(128, 5e5, 8192, rope, max_pos=131072))
    got, _ = ours("llama3", 128, 5e5, 8192, 8.0, 8192, low_freq_factor=low, high_freq_factor=high)
    assert_rel(got, want, 1e-6)


def _random_longrope_factors(head_dim, base, trained):
    rng = np.random.default_rng(head_dim * 7 + int(math.log10(base) * 100) + trained)
    long = (1.0 + rng.random(head_dim // 2) * 40.0).tolist()  # per pair, 1 .. 41
    short = (1.0 + rng.random(head_dim // 2) * 0.3).tolist()  # per pair, 1 .. 1.3
    return long, short


@pytest.mark.parametrize("head_dim,base,trained,s", GRID_S)
def test_longrope_matches_transformers_with_random_factors_from_a_json_file(head_dim, base, trained, s, tmp_path):
    long, short = _random_longrope_factors(head_dim, base, trained)
    path = tmp_path / "factors.json"
    path.write_text(json.dumps({"long_factor": long, "short_factor": short}))
    rope = {"rope_type": "longrope", "factor": s, "long_factor": long, "short_factor": short,
            "original_max_position_embeddings": trained}  # fmt: skip
    cfg = hf_config(head_dim, base, trained, rope, max_pos=16 * trained)
    for seq_len in seq_lens(trained):
        want, want_scale = hf("longrope", cfg, seq_len)
        got, scale = ours("longrope", head_dim, base, trained, s, seq_len, factors=str(path))
        assert_rel(got, want, 1e-6)
        assert scale == pytest.approx(want_scale, rel=1e-12)


@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_longrope_matches_transformers_with_factors_given_as_a_list(head_dim, base, trained):
    long, _ = _random_longrope_factors(head_dim, base, trained)
    rope = {"rope_type": "longrope", "factor": 8.0, "long_factor": long, "short_factor": long,
            "original_max_position_embeddings": trained}  # fmt: skip
    cfg = hf_config(head_dim, base, trained, rope, max_pos=16 * trained)
    for seq_len in (trained // 2, 4 * trained):
        want, want_scale = hf("longrope", cfg, seq_len)
        got, scale = ours("longrope", head_dim, base, trained, 8.0, seq_len, factors=long)
        assert_rel(got, want, 1e-6)
        assert scale == pytest.approx(want_scale, rel=1e-12)


def test_longrope_uses_short_factors_up_to_L_and_long_ones_beyond():
    long, short = [4.0] * 32, [1.0] * 32
    geom = RopeGeometry(64, 64, 1e4, 4096, native={"long_factor": long, "short_factor": short})
    plain, _ = frequencies(resolve("none"), geom, 1.0, 4096)
    at_L, _ = frequencies(resolve("longrope"), geom, 4.0, 4096)
    beyond, _ = frequencies(resolve("longrope"), geom, 4.0, 4097)
    assert torch.equal(at_L, plain)
    assert torch.allclose(beyond, plain / 4, rtol=1e-6, atol=0)


def test_longrope_reads_factors_from_the_model_config():
    long, short = _random_longrope_factors(64, 1e4, 4096)
    rope = {"rope_type": "longrope", "factor": 4.0, "long_factor": long, "short_factor": short,
            "original_max_position_embeddings": 4096}  # fmt: skip
    cfg = hf_config(64, 1e4, 4096, rope, max_pos=16384)
    geom = RopeGeometry.from_config(cfg)
    for seq_len in (2048, 8192):
        inv, scale = frequencies(resolve("longrope"), geom, 4.0, seq_len)
        want, want_scale = hf("longrope", cfg, seq_len)
        assert_rel(inv.double().numpy(), want, 1e-6)
        assert scale == pytest.approx(want_scale, rel=1e-12)


@pytest.mark.parametrize("partial", [0.25, 0.5])
@pytest.mark.parametrize("rope_type", ["linear", "dynamic", "yarn", "llama3", "longrope"])
def test_partial_rotary_models_match_transformers(rope_type, partial):
    """With partial rotary, ``d`` is the rotary dim: geometry read from the config, frequencies as transformers."""
    head_dim, trained, s = 128, 4096, 4.0
    pairs = int(head_dim * partial) // 2
    rope = {"rope_type": rope_type, "factor": s}
    if rope_type in ("yarn", "llama3", "longrope"):
        rope["original_max_position_embeddings"] = trained
    if rope_type == "llama3":
        rope.update(low_freq_factor=1.0, high_freq_factor=4.0)
    if rope_type == "longrope":
        rope.update(long_factor=[1.0 + i for i in range(pairs)], short_factor=[1.0 + 0.01 * i for i in range(pairs)])
    max_pos = trained if rope_type in ("linear", "dynamic") else int(trained * s)
    cfg = hf_config(head_dim, 1e4, trained, rope, max_pos=max_pos, partial=partial)
    geom = RopeGeometry.from_config(cfg)
    assert (geom.head_dim, geom.rotary_dim, geom.trained_len) == (head_dim, int(head_dim * partial), trained)
    name = {"dynamic": "dynamic-ntk"}.get(rope_type, rope_type)
    for seq_len in (trained // 2, 3 * trained):
        want, want_scale = hf(rope_type, cfg, seq_len if rope_type in ("dynamic", "longrope") else None)
        got, scale = frequencies(resolve(name), geom, s, seq_len)
        assert_rel(got.double().numpy(), want, 1e-6)
        assert scale == pytest.approx(want_scale, rel=1e-12)


# --- formulas of DESIGN.md, computed independently in float64 ------------------------------------


def theta64(d, b):
    """``theta_i = b^(-2i/d)``, float64, one pair at a time."""
    return np.array([b ** (-2.0 * i / d) for i in range(d // 2)])


@pytest.mark.parametrize("head_dim,base,trained,s", GRID_S)
def test_ntk_raises_the_base_with_exponent_d_over_d_minus_2(head_dim, base, trained, s):
    d = head_dim
    want = theta64(d, base * s ** (d / (d - 2)))
    got, scale = ours("ntk", head_dim, base, trained, s, trained)
    assert_rel(got, want, 1e-5)
    assert scale == 1.0


def test_ntk_exponent_is_not_dim_over_dim_minus_2_without_parentheses():
    d, base, s = 128, 1e4, 4.0
    wrong = theta64(d, base * s ** (d / d - 2))  # "dim / dim - 2" = -1: a known mistake
    got, _ = ours("ntk", d, base, 4096, s, 4096)
    assert np.abs(got / wrong - 1).max() > 0.1


def test_ntk_exponent_uses_the_rotary_dim_not_the_head_dim():
    got, _ = ours("ntk", 128, 1e4, 4096, 8.0, 4096, rotary_dim=32)
    assert_rel(got, theta64(32, 1e4 * 8.0 ** (32 / 30)), 1e-5)


@pytest.mark.parametrize("head_dim,base,trained,s", GRID_S)
def test_dynamic_ntk_matches_the_formula(head_dim, base, trained, s):
    d = head_dim
    for seq_len in seq_lens(trained):
        if seq_len <= trained:
            want = theta64(d, base)
        else:
            want = theta64(d, base * (s * seq_len / trained - (s - 1)) ** (d / (d - 2)))
        got, _ = ours("dynamic-ntk", head_dim, base, trained, s, seq_len)
        assert_rel(got, want, 1e-5)


def by_parts64(d, b, L, s, alpha=1.0, beta=32.0):
    out = []
    for i in range(d // 2):
        theta = b ** (-2.0 * i / d)
        wavelength = 2 * math.pi / theta
        r = L / wavelength
        g = min(1.0, max(0.0, (r - alpha) / (beta - alpha)))
        out.append((1 - g) * theta / s + g * theta)
    return np.array(out)


@pytest.mark.parametrize("head_dim,base,trained,s", GRID_S)
def test_ntk_by_parts_matches_the_paper_formula(head_dim, base, trained, s):
    got, scale = ours("ntk-by-parts", head_dim, base, trained, s, trained)
    assert_rel(got, by_parts64(head_dim, base, trained, s), 1e-5)
    assert scale == 1.0


@pytest.mark.parametrize("alpha,beta", [(2.0, 16.0), (0.5, 64.0)])
def test_ntk_by_parts_alpha_beta_parameters_match_the_formula(alpha, beta):
    got, _ = ours("ntk-by-parts", 128, 1e4, 4096, 8.0, 4096, alpha=alpha, beta=beta)
    assert_rel(got, by_parts64(128, 1e4, 4096, 8.0, alpha, beta), 1e-5)


@pytest.mark.parametrize("name", ["ntk-by-parts", "yarn"])
def test_high_frequency_pairs_are_kept_and_low_frequency_pairs_interpolated(name):
    d, base, L, s = 128, 1e4, 4096, 8.0
    got, _ = ours(name, d, base, L, s, L)
    ratio = got / theta64(d, base)  # 1 = kept (extrapolated), 1/s = interpolated
    r = np.array([L * b / (2 * math.pi) for b in theta64(d, base)])  # rotations in L per pair
    assert r[0] > 32 and r[-1] < 1  # the geometry spans both regimes
    assert ratio[0] == pytest.approx(1.0, rel=1e-6)  # pair 0: wavelength 6.3 tokens, kept
    assert ratio[-1] == pytest.approx(1 / s, rel=1e-5)  # last pair: longer than L, interpolated
    assert np.all(np.abs(ratio[r >= 32] - 1) < 1e-6)
    assert np.all(np.abs(ratio[r <= 1] * s - 1) < 1e-5)
    assert np.all(np.diff(ratio) <= 1e-6)  # from kept to interpolated as i grows, never back


def test_ntk_by_parts_and_yarn_differ():
    by_parts, _ = ours("ntk-by-parts", 128, 1e4, 4096, 8.0, 4096)
    yarn, _ = ours("yarn", 128, 1e4, 4096, 8.0, 4096)
    assert np.abs(by_parts / yarn - 1).max() > 1e-2


@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_dynamic_yarn_is_yarn_at_s_equal_l_over_L(head_dim, base, trained):
    for seq_len in (trained + 1, 3 * trained, 5 * trained + 17):
        s = seq_len / trained
        rope = {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": trained}
        want, want_scale = hf("yarn", hf_config(head_dim, base, trained, rope, max_pos=seq_len))
        got, scale = ours("dynamic-yarn", head_dim, base, trained, 7.0, seq_len)  # the given factor is not used
        assert_rel(got, want, 1e-6)
        assert scale == pytest.approx(0.1 * math.log(s) + 1, rel=1e-12)


@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_dynamic_yarn_is_plain_rope_within_the_trained_length(head_dim, base, trained):
    for seq_len in (1, trained // 2, trained):
        got, scale = ours("dynamic-yarn", head_dim, base, trained, 7.0, seq_len)
        assert_rel(got, theta64(head_dim, base), 1e-5)
        assert scale == 1.0


@pytest.mark.parametrize("new_base", [5e5, 1e6, 1e7])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_theta_replaces_the_base(head_dim, new_base):
    got, scale = ours("theta", head_dim, 1e4, 4096, 1.0, 4096, theta=new_base)
    assert_rel(got, theta64(head_dim, new_base), 1e-5)
    assert scale == 1.0


def test_theta_without_a_new_base_is_a_user_error():
    with pytest.raises(UserError, match="needs a new base"):
        ours("theta", 64, 1e4, 4096, 1.0, 4096)


@pytest.mark.parametrize("name", ["linear", "ntk", "yarn", "ntk-by-parts", "llama3"])
@pytest.mark.parametrize("head_dim,base,trained", GRID)
def test_factor_one_is_plain_rope(name, head_dim, base, trained):
    got, scale = ours(name, head_dim, base, trained, 1.0, 4 * trained)
    assert_rel(got, theta64(head_dim, base), 1e-5)
    assert scale == 1.0


@pytest.mark.parametrize("s", FACTORS)
def test_none_is_plain_rope_whatever_the_factor(s):
    got, scale = ours("none", 80, 1e5, 4096, s, 16 * 4096)
    assert_rel(got, theta64(80, 1e5), 1e-5)
    assert scale == 1.0


@pytest.mark.parametrize("s", FACTORS)
def test_attention_scales_follow_the_formulas(s):
    _, yarn = ours("yarn", 64, 1e4, 4096, s, 4096)
    _, longrope = ours("longrope", 64, 1e4, 4096, s, 8192, factors=[1.0] * 32)
    assert yarn == pytest.approx(1.0 if s == 1 else 0.1 * math.log(s) + 1, rel=1e-12)
    assert longrope == pytest.approx(1.0 if s == 1 else math.sqrt(1 + math.log(s) / math.log(4096)), rel=1e-12)


def test_factor_below_one_is_rejected_by_frequencies():
    with pytest.raises(UserError, match="bad factor 0.5"):
        ours("linear", 64, 1e4, 4096, 0.5, 4096)


# --- resolution and parsing -----------------------------------------------------------------------


@pytest.mark.parametrize("alias,name", [("pi", "linear"), ("PI", "linear"), (" pi ", "linear"), ("dynamic", "dynamic-ntk"),
                                        ("abf", "theta"), ("plain", "none")])  # fmt: skip
def test_aliases_resolve_to_their_method(alias, name):
    setting = resolve(alias)
    assert setting.name == name and setting.freq is METHODS[name] and setting.attention is None


def test_alias_gives_the_same_frequencies_as_its_method():
    geom = RopeGeometry(64, 64, 1e4, 4096)
    assert torch.equal(frequencies(resolve("pi"), geom, 4.0, 4096)[0], frequencies(resolve("linear"), geom, 4.0, 4096)[0])


@pytest.mark.parametrize("typo,guess", [("ntkk", "ntk"), ("yran", "yarn"), ("self_extend", "self-extend"), ("longrop", "longrope")])
def test_unknown_method_is_a_user_error_suggesting_the_closest_name(typo, guess):
    with pytest.raises(UserError, match=f"unknown method '{typo}'") as info:
        resolve(typo)
    assert f"did you mean '{guess}'?" in info.value.fix


def test_unknown_method_in_a_combination_is_a_user_error():
    with pytest.raises(UserError, match="did you mean 'logn'"):
        resolve("ntk+lgn")


def test_unknown_parameter_is_a_user_error_suggesting_the_closest_key():
    with pytest.raises(UserError, match="unknown parameter 'beta_fats'") as info:
        resolve("yarn", {"beta_fats": 16})
    assert "did you mean 'beta_fast'?" in info.value.fix


def test_parameter_of_another_method_is_rejected():
    with pytest.raises(UserError, match="unknown parameter 'window' for method 'ntk'"):
        resolve("ntk", {"window": 16})


def test_parameters_fill_defaults_and_override_them():
    assert resolve("yarn").param_dict == {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True, "attention_factor": None}
    assert resolve("yarn", {"beta_fast": 16}).param_dict["beta_fast"] == 16


@pytest.mark.parametrize("spec,name,freq,attn", [("ntk+logn", "ntk+logn", "ntk", "logn"), ("logn+ntk", "ntk+logn", "ntk", "logn"),
                                                 ("yarn+rerope", "yarn+rerope", "yarn", "rerope"), ("rerope", "rerope", "none", "rerope")])  # fmt: skip
def test_one_frequency_method_combines_with_one_attention_method(spec, name, freq, attn):
    setting = resolve(spec)
    assert (setting.name, setting.freq.name, setting.attention.name) == (name, freq, attn)


def test_combined_method_takes_the_parameters_of_both_parts():
    setting = resolve("yarn+rerope", {"beta_fast": 16, "window": "1k"})
    assert setting.freq_params()["beta_fast"] == 16 and setting.attention_params() == {"window": 1024}


@pytest.mark.parametrize("spec", ["ntk+yarn", "rerope+self-extend", "linear+ntk+logn", "logn+logn", "rerope+self-extend+logn",
                                  "rerope+rerope+logn", "native+ntk"])
def test_other_combinations_are_user_errors_listing_what_combines(spec):
    with pytest.raises(UserError, match=re.escape(f"cannot combine '{spec}'")) as info:
        resolve(spec)
    fix = info.value.fix
    assert all(name in fix for name in METHODS)
    freq_part, attn_part = fix.split("with one attention method")
    assert "yarn" in freq_part and "logn" not in freq_part and "logn" in attn_part and "self-extend" in attn_part
    assert all(f"{n}+logn" in attn_part for n in ("rerope", "leaky-rerope", "self-extend"))


@pytest.mark.parametrize("spec,name,freq,attn", [("rerope+logn", "rerope+logn", "none", "rerope"), ("logn+rerope", "rerope+logn", "none", "rerope"),
                                                 ("leaky-rerope+logn", "leaky-rerope+logn", "none", "leaky-rerope"),
                                                 ("logn+self-extend", "self-extend+logn", "none", "self-extend"),
                                                 ("ntk+rerope+logn", "ntk+rerope+logn", "ntk", "rerope"),
                                                 ("logn+rerope+yarn", "yarn+rerope+logn", "yarn", "rerope")])  # fmt: skip
def test_two_branch_methods_combine_with_logn(spec, name, freq, attn):
    setting = resolve(spec, {"window": 16})
    assert (setting.name, setting.freq.name, setting.attention.name, setting.logn) == (name, freq, attn, True)
    assert setting.scales_queries and setting.attention_params()["window"] == 16
    assert resolve(name, {"window": 16}) == setting  # the canonical name resolves to itself


def test_existing_names_keep_their_meaning():
    """Committed results name these: nothing about them changes."""
    for spec in ("rerope", "ntk+logn", "logn", "yarn+rerope", "self-extend"):
        setting = resolve(spec)
        assert setting.name == spec and not setting.logn
    assert resolve("ntk+logn").scales_queries and not resolve("rerope").scales_queries


@pytest.mark.parametrize("text", ["0", "0.5", "abc", "-2", "nan", "inf", "", None])
def test_parse_factor_rejects_values_below_one_and_non_numbers(text):
    with pytest.raises(UserError, match="bad factor"):
        parse_factor(text)


@pytest.mark.parametrize("text,value", [("1", 1.0), ("1.5", 1.5), ("4", 4.0), (" 16 ", 16.0), (8, 8.0)])
def test_parse_factor_accepts_numbers_from_one_up(text, value):
    assert parse_factor(text) == value
