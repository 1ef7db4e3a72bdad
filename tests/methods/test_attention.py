"""Attention-level methods' parameters: defaults derived from ``L`` and ``s``, warnings and errors.

Their maths (each method against a naive float64 reference with an explicit relative-position
matrix, both attention paths, generation with a KV cache) is tested in ``test_patching.py``.
"""

from __future__ import annotations

import pytest
import torch
from helpers import run_settings
from test_patching import relative_positions

from ctxbench.errors import UserError
from ctxbench.methods import effective_params, resolve
from ctxbench.tasks import ppl


def test_default_parameters_follow_the_trained_length_and_factor(tiny_lm):
    geom = tiny_lm.geometry  # L = 64
    assert effective_params(resolve("rerope"), geom, 2.0) == {"window": 16}
    leaky = effective_params(resolve("leaky-rerope"), geom, 4.0)
    assert leaky["window"] == 16 and leaky["k"] == pytest.approx((4 * 64 - 16) / (64 - 16))
    # with those defaults the largest mapped position at s*L tokens stays inside L
    p = relative_positions("leaky-rerope", 4 * 64, 16, leaky["k"])
    assert p.max().item() <= 64 + 1e-9
    se = effective_params(resolve("self-extend"), geom, 4.0)
    assert se == {"window": 16, "group": 5}  # ceil((4*64 - 16) / (64 - 16))
    p = relative_positions("self-extend", 4 * 64, se["window"], 1.0, se["group"])
    assert p.max().item() <= 64
    st = effective_params(resolve("string"), geom, 4.0)
    assert st == {"window": 21, "local_value": 10}  # int(0.33 * 64); the authors' 128 capped at S // 2


def test_window_at_or_above_the_length_warns_that_the_method_is_a_no_op(tiny_lm, corpus_dir):
    settings = ppl.Settings(methods=[resolve("rerope", {"window": 100})], factors=[2.0], lengths=[64, 128], dataset=str(corpus_dir), docs=1)
    notes = run_settings(tiny_lm, "ppl", settings).notes
    assert any("window 100 >= length 64" in n and "equals plain RoPE" in n for n in notes)
    assert not any("length 128" in n for n in notes)


def test_window_of_zero_is_a_user_error_before_the_model_is_used():
    with pytest.raises(UserError, match="rerope parameter window: 0 must be >= 1"):
        resolve("rerope", {"window": 0})


def test_unknown_combination_lists_what_combines():
    with pytest.raises(UserError) as err:
        resolve("rerope+self-extend")
    assert "logn" in str(err.value) and "ntk" in str(err.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_portable_kernel_equals_the_cpu_flash_kernel_with_masks_and_key_chunks(dtype, monkeypatch):
    """Rows whose keys all fall in a later chunk, a chunk fully masked for some rows, no mask."""
    from ctxbench.methods import attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 20, 16, dtype=dtype) for _ in range(3))
    rel = torch.arange(20)[:, None] - torch.arange(20)[None, :]
    masks = [None, (rel >= 0) & (rel < 5), rel >= 7, rel >= 0]
    masks[2][:7] = True  # every row keeps a key
    monkeypatch.setattr(attention, "SCORE_BUDGET", 2 * 3 * 20 * 6)  # keys in chunks of 6
    for mask in masks:
        want_out, want_lse = attention._attend_cpu(q, k, v, 0.25, mask)
        got_out, got_lse = attention._attend_math(q, k, v, 0.25, mask)
        tol = 1e-5 if dtype == torch.float32 else 2e-2  # bf16: the kernel's own rounding of p and out
        assert got_out.dtype == dtype and torch.allclose(got_out.float(), want_out.float(), atol=tol, rtol=tol)
        assert torch.allclose(got_lse, want_lse, atol=1e-5 if dtype == torch.float32 else 2e-2)
