"""More model families, proven: patched against native logits on tiny random models.

For each family (Qwen3, Mistral, Phi-3 with partial rotary, StableLM with partial rotary, Gemma,
OLMo; Llama, Qwen2 and GPT-NeoX are in ``test_patching.py``): a model patched by ctxbench gives
the logits of the same weights loaded with the equivalent ``rope_parameters``; ``native`` gives
the unpatched model's logits; a two-branch method with log-n matches the naive float64 reference.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from test_patching import (
    FACTOR,
    INIT,
    TRAINED,
    VOCAB,
    N,
    assert_close,
    geometry,
    logits,
    patched_logits,
    reference_logits,
)

from ctxbench.errors import UserError
from ctxbench.model.geometry import RopeGeometry

# family -> (config class, model class, config kwargs); head dim 16 (or 32 with partial rotary), GQA where the family has it
FAMILIES = {
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16)),
    "mistral": ("MistralConfig", "MistralForCausalLM",
                dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=None)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM",
             dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, partial_rotary_factor=0.5, pad_token_id=None,
                  original_max_position_embeddings=TRAINED)),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM",
                 dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=4, partial_rotary_factor=0.25)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16)),
    "olmo": ("OlmoConfig", "OlmoForCausalLM", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2)),
}  # fmt: skip
ROTARY = {"qwen3": (16, 16), "mistral": (16, 16), "phi3": (32, 16), "stablelm": (32, 8), "gemma": (16, 16), "olmo": (16, 16)}


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny matmuls on one thread


def build(family: str, rope: dict | None = None, max_pos: int = TRAINED):
    config_name, model_name, kwargs = FAMILIES[family]
    partial = kwargs.get("partial_rotary_factor")
    rope_parameters = {"rope_theta": 10000.0, **(rope or {"rope_type": "default"})}
    if partial is not None:
        rope_parameters["partial_rotary_factor"] = partial
    cfg = getattr(transformers, config_name)(
        intermediate_size=128, num_hidden_layers=2, vocab_size=VOCAB, max_position_embeddings=max_pos,
        initializer_range=INIT, bos_token_id=None, eos_token_id=None, rope_parameters=rope_parameters,
        **{k: v for k, v in kwargs.items() if k != "partial_rotary_factor"},
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return getattr(transformers, model_name)(cfg).eval()


def scaled(method: str, pairs: int) -> tuple[dict, int]:
    """The native ``rope_parameters`` equivalent to a ctxbench method at FACTOR, and max_position_embeddings."""
    orig = {"original_max_position_embeddings": TRAINED}
    return {
        "linear": ({"rope_type": "linear", "factor": FACTOR}, TRAINED),
        "dynamic-ntk": ({"rope_type": "dynamic", "factor": FACTOR}, TRAINED),
        "yarn": ({"rope_type": "yarn", "factor": FACTOR, **orig}, N),
        "llama3": ({"rope_type": "llama3", "factor": FACTOR, "low_freq_factor": 1.0, "high_freq_factor": 4.0, **orig}, N),
        "longrope": ({"rope_type": "longrope", "factor": FACTOR, "long_factor": [1.0 + 0.75 * i for i in range(pairs)],
                      "short_factor": [1.0 + 0.05 * i for i in range(pairs)], **orig}, N),  # fmt: skip
    }[method]


@pytest.fixture
def ids():
    torch.manual_seed(3)
    return torch.randint(0, VOCAB, (1, N))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_geometry_is_read_from_the_config(family):
    geom = geometry(build(family))
    assert (geom.head_dim, geom.rotary_dim, geom.trained_len) == (*ROTARY[family], TRAINED)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("method", ["linear", "dynamic-ntk", "yarn", "llama3", "longrope"])
def test_patched_model_matches_the_same_weights_loaded_with_native_rope_parameters(family, method, ids, tmp_path):
    if family == "phi3" and method != "longrope":
        pytest.skip("Phi3Config accepts only longrope (and default) rope_parameters")
    pairs = ROTARY[family][1] // 2
    rope, max_pos = scaled(method, pairs)
    native = build(family, rope, max_pos)
    model = build(family)
    model.load_state_dict(native.state_dict())
    params = None
    if method == "longrope":
        path = tmp_path / "factors.json"
        path.write_text(json.dumps({"long_factor": rope["long_factor"], "short_factor": rope["short_factor"]}))
        params = {"factors": str(path)}
    theirs = logits(native, ids)
    ours = patched_logits(model, method, ids, params=params)
    assert_close(ours, theirs)
    assert (ours - logits(model, ids)).abs().max() > 1e-2
    # and the scaled model as shipped is what `native` gives; `none` strips its scaling
    assert_close(patched_logits(native, "native", ids), theirs)
    assert (patched_logits(native, "none", ids) - theirs).abs().max() > 1e-2


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("spec,params,kind,freq,w,k,g", [
    ("rerope+logn", {"window": 16}, "rerope", "none", 16, 1.0, 1),
    ("ntk+self-extend", {"window": 16, "group": 4}, "self-extend", "ntk", 16, 1.0, 4),
])  # fmt: skip
def test_attention_methods_match_the_naive_reference(family, spec, params, kind, freq, w, k, g, ids):
    model = build(family)
    want = reference_logits(model, ids, kind, freq, w, k, g, logn=spec.endswith("+logn"))
    # float32 model against a float64 reference: Phi-3's wider, fused projections land at 1.01e-5
    assert_close(patched_logits(model, spec, ids, params=params), want, atol=2e-5)
    assert_close(reference_logits(model, ids, "plain"), logits(model, ids), atol=2e-5)  # the reference is right here


# --- layouts ctxbench cannot drive are clear errors --------------------------------------------------


@pytest.mark.parametrize("config_name", ["GPTJConfig", "CodeGenConfig"])
def test_interleaved_rotary_layouts_are_user_errors(config_name):
    cfg = getattr(transformers, config_name)(n_embd=64, n_head=4, n_layer=1, rotary_dim=8, vocab_size=VOCAB)
    with pytest.raises(UserError, match="rotary layout ctxbench does not support"):
        RopeGeometry.from_config(cfg)


def test_per_layer_type_rope_is_read_for_the_full_attention_layers():
    """Gemma 3 is no longer refused: its geometry is the full-attention layers' (tests/test_layer_types.py);
    six layers, so its default pattern (five sliding, one full) has a full-attention layer."""
    cfg = transformers.Gemma3TextConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                        num_hidden_layers=6, intermediate_size=64, vocab_size=VOCAB)  # fmt: skip
    geom = RopeGeometry.from_config(cfg)
    assert (geom.layer_type, geom.base) == ("full_attention", 1_000_000.0)


def test_rotary_module_of_another_size_is_a_user_error_not_a_mis_patch(ids):
    """A model whose rotary module holds more frequencies than the geometry says (as with proportional RoPE)."""
    from ctxbench.methods import resolve
    from ctxbench.methods.patching import applied

    model = build("olmo")
    geom = geometry(model)
    wrong = RopeGeometry(geom.head_dim, geom.rotary_dim // 2, geom.base, geom.trained_len)
    with pytest.raises(UserError, match="RoPE layout is not supported"), applied(model, wrong, resolve("yarn"), FACTOR, N):
        pass
