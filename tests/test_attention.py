"""Attention-level methods' parameters: defaults derived from ``L`` and ``s``, warnings and errors.

Their maths (each method against a naive float64 reference with an explicit relative-position
matrix, both attention paths, generation with a KV cache) is tested in ``test_patching.py``.
"""

from __future__ import annotations

import pytest
from conftest import run_settings
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


def test_window_at_or_above_the_length_warns_that_the_method_is_a_no_op(tiny_lm, corpus_dir):
    settings = ppl.Settings(methods=[resolve("rerope", {"window": 100})], factors=[2.0], lengths=[64, 128], dataset=str(corpus_dir), docs=1)
    notes = run_settings(tiny_lm, "ppl", settings).notes
    assert any("window 100 >= length 64" in n and "equals plain RoPE" in n for n in notes)
    assert not any("length 128" in n for n in notes)


def test_window_of_zero_is_a_user_error(tiny_lm):
    with pytest.raises(UserError, match="window 0 must be >= 1"):
        effective_params(resolve("rerope", {"window": 0}), tiny_lm.geometry, 2.0)


def test_unknown_combination_lists_what_combines():
    with pytest.raises(UserError) as err:
        resolve("rerope+self-extend")
    assert "logn" in str(err.value) and "ntk" in str(err.value)
