"""Before an engine answers anything, its rotary tables and softmax scale are compared with ctxbench's
own for the method and factor (ctxbench.backends.vllm.compare_tables): an override the engine ignored
or read differently is one error naming the method, the engine and the first differing pair."""

from __future__ import annotations

import math

import pytest
import torch

from ctxbench.backends.vllm import compare_tables
from ctxbench.errors import UserError
from ctxbench.methods import frequencies, resolve
from ctxbench.model.geometry import RopeGeometry

GEOM = RopeGeometry(head_dim=64, rotary_dim=64, base=100000.0, trained_len=8192)  # the default model's
LEN = 16384


def _table(method: str, factor: float, length: int = LEN, dtype=torch.float32, mscale: float | None = None,
           params: dict | None = None):  # fmt: skip
    """The table an engine that computes ``method`` builds: (positions, rotary_dim), cos then sin, times
    the attention scale, rounded to ``dtype`` (vLLM's layout of ``cos_sin_cache``)."""
    inv_freq, scale = frequencies(resolve(method, params), GEOM, factor, length)
    angles = torch.arange(length, dtype=torch.float32)[:, None] * inv_freq[None, :]  # float32, as engines compute them
    scale = scale if mscale is None else mscale
    table = torch.cat([angles.cos(), angles.sin()], dim=-1) * scale
    return table.to(dtype).float()


def _found(table, scales=(64**-0.5,)):
    return {"rotary": [("RotaryEmbedding", table)], "scales": list(scales)}


@pytest.mark.parametrize("method", ["none", "linear", "ntk", "yarn", "llama3"])
def test_the_engine_computing_the_method_passes_in_bf16_and_float32(method):
    for dtype in (torch.float32, torch.bfloat16):
        compare_tables(_found(_table(method, 2.0, dtype=dtype)), resolve(method), GEOM, 2.0, LEN, dtype=str(dtype))


def test_a_yarn_without_its_attention_scale_is_refused_naming_position_and_pair():
    table = _table("yarn", 2.0, mscale=1.0)  # vLLM's yarn once ignored mscale (SGLang's did)
    with pytest.raises(UserError) as err:
        compare_tables(_found(table), resolve("yarn"), GEOM, 2.0, LEN, dtype="torch.bfloat16")
    text = str(err.value)
    assert "yarn x2" in text and "vLLM" in text and "position" in text and "frequency pair" in text
    assert "attention scale 1.0693" in text


def test_an_override_the_engine_ignored_is_refused():
    # the engine ran plain RoPE where yarn x4 was asked for (SGLang dropping rope_parameters)
    with pytest.raises(UserError, match="does not compute yarn x4"):
        compare_tables(_found(_table("none", 1.0)), resolve("yarn"), GEOM, 4.0, LEN, dtype="torch.bfloat16")


def test_a_factor_read_differently_is_refused():
    with pytest.raises(UserError, match="does not compute linear x2"):
        compare_tables(_found(_table("linear", 3.0)), resolve("linear"), GEOM, 2.0, LEN, dtype="torch.bfloat16")


def test_a_table_shorter_than_the_run_is_refused():
    # vLLM's yarn table holds original_max_position_embeddings x factor positions: 16384 at x2
    with pytest.raises(UserError, match="16384 positions .* the run needs 16394"):
        compare_tables(_found(_table("yarn", 2.0)), resolve("yarn"), GEOM, 2.0, 16394, dtype="torch.bfloat16")


def test_a_changed_softmax_scale_is_refused():
    with pytest.raises(UserError, match="softmax scale"):
        compare_tables(_found(_table("none", 1.0), scales=(0.1,)), resolve("none"), GEOM, 1.0, LEN)


def test_a_config_that_sets_its_own_softmax_scale_is_held_to_it():
    """Gemma-3 27B: ``query_pre_attn_scalar`` 168 with head dim 128, so its scale is 168^-0.5 in
    transformers and vLLM alike; the check expects that, and still refuses head_dim^-0.5 there."""
    from types import SimpleNamespace

    from ctxbench.backends.vllm import softmax_scale

    gemma27b = SimpleNamespace(query_pre_attn_scalar=168, head_dim=128)
    scale = softmax_scale(gemma27b, GEOM)
    assert scale == 168**-0.5 and softmax_scale(SimpleNamespace(), GEOM) == GEOM.head_dim**-0.5
    compare_tables(_found(_table("none", 1.0), scales=(168**-0.5,)), resolve("none"), GEOM, 1.0, LEN, softmax_scale=scale)
    with pytest.raises(UserError, match="softmax scale 0.125, where ctxbench has the config's"):
        compare_tables(_found(_table("none", 1.0), scales=(64**-0.5,)), resolve("none"), GEOM, 1.0, LEN, softmax_scale=scale)


def test_the_tolerance_is_below_the_smallest_difference_that_matters():
    # a relative error of 1e-5 in one frequency moves the angle at position 16383 by 0.16 rad at pair 0
    inv_freq, _ = frequencies(resolve("none"), GEOM, 1.0, LEN)
    assert 16383 * float(inv_freq[0]) * 1e-5 > 0.1 > 2**-7 + 4 * LEN * 2**-24
    assert math.isclose(64**-0.5, 0.125)


def test_longrope_is_read_from_the_half_of_vllms_long_short_table_the_engine_uses():
    """vLLM's LongRoPE keeps the short table (original length rows) and the long one in one buffer and
    reads the long half when its max_model_len passes the original length."""
    from types import SimpleNamespace

    from ctxbench.backends.vllm import _tables

    L, n = 64, 256
    long_t, short_t = torch.full((n, 8), 2.0), torch.full((L, 8), 1.0)
    module = SimpleNamespace(long_short_cos_sin_cache=torch.cat([short_t, long_t]), original_max_position_embeddings=L, use_long_rope=True)
    model = SimpleNamespace(named_modules=lambda remove_duplicate=True: [("model.layers.0.self_attn.rotary_emb", module)])
    [(_, table, layers)] = _tables(model)["rotary"]
    assert torch.equal(table, long_t) and layers == (0,)
    module.use_long_rope = False
    [(_, table, _)] = _tables(model)["rotary"]
    assert torch.equal(table, short_t)
