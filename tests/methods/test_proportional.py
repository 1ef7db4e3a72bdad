"""``proportional``: transformers' ``proportional`` RoPE (p-RoPE, Gemma 4's full-attention layers).

Frequencies against ``ROPE_INIT_FUNCTIONS["proportional"]`` of the installed transformers (5.24,
``src/transformers/modeling_rope_utils.py``, ``_compute_proportional_rope_parameters``), bit for
bit; logits of a tiny random Llama patched by ctxbench against the same Llama built by
transformers with ``rope_type: proportional``; the transformers export of a model that rotates
only part of its head, and the engines that cannot take it, are one clear error.
"""

from __future__ import annotations

import itertools
import json
import math
import re

import pytest
import torch
from test_patching import FACTOR, VOCAB, N, assert_close, llama, logits, patched_logits
from transformers import LlamaConfig, StableLmConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from ctxbench.errors import UserError
from ctxbench.methods import frequencies, numpy_namespace, resolve
from ctxbench.methods.export import SUPPORTED, export, rope_parameters
from ctxbench.model.geometry import RopeGeometry

HEAD_DIMS = [16, 64, 80, 128, 256]
PROPORTIONS = [0.25, 0.3, 0.5, 0.75, 1.0]
FACTORS = [1.0, 2.0, 4.0, 8.0]
BASES = [1e4, 1e6]

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny matmuls on one thread


def transformers_proportional(head_dim: int, base: float, p: float, s: float) -> tuple[torch.Tensor, float]:
    """What transformers computes for a model config with ``rope_type: proportional``."""
    cfg = LlamaConfig(
        hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim, num_hidden_layers=1,
        rope_parameters={"rope_type": "proportional", "rope_theta": base, "partial_rotary_factor": p, "factor": s},
    )  # fmt: skip
    return ROPE_INIT_FUNCTIONS["proportional"](cfg, "cpu")


def ours(g: RopeGeometry, p: float, s: float, xp=None):
    setting = resolve("proportional", {"partial_rotary_factor": p}, runnable=True)
    return frequencies(setting, g, s, int(s * g.trained_len), xp=xp)


@pytest.mark.parametrize("head_dim,p,s,base", list(itertools.product(HEAD_DIMS, PROPORTIONS, FACTORS, BASES)))
def test_frequencies_equal_transformers_proportional(head_dim, p, s, base):
    got, scale = ours(RopeGeometry(head_dim, head_dim, base, 4096), p, s)
    want, want_scale = transformers_proportional(head_dim, base, p, s)
    assert got.dtype == want.dtype == torch.float32
    assert torch.equal(got, want)  # the same float32 operations in the same order: bit-equal
    assert scale == want_scale == 1.0


def test_the_lowest_pairs_are_not_rotated_and_the_others_are_divided_by_s():
    g = RopeGeometry(128, 128, 1e4, 4096)
    got, _ = ours(g, 0.25, 4.0)
    plain, _ = frequencies(resolve("none"), g, 1.0, 4096)
    assert torch.equal(got[:16], plain[:16] / 4.0)  # int(0.25 * 128 // 2) = 16 pairs rotate
    assert torch.count_nonzero(got[16:]) == 0
    assert torch.equal(ours(g, 1.0, 4.0)[0], frequencies(resolve("linear"), g, 4.0, 4096)[0])  # p = 1 is linear


def test_a_model_that_rotates_part_of_its_head_gets_proportional_within_its_rotary_dims():
    """StableLM with its own ``partial_rotary_factor`` 0.25: head dim 64, 16 rotated dims. ctxbench
    applies proportional to the 8 pairs the rotary module rotates, as transformers does on a head of
    16 dims; transformers' own ``proportional`` on that config rotates the whole head instead."""
    cfg = StableLmConfig(hidden_size=256, num_attention_heads=4, partial_rotary_factor=0.25, max_position_embeddings=4096)
    g = RopeGeometry.from_config(cfg)
    assert (g.head_dim, g.rotary_dim) == (64, 16)
    for p, s in [(0.5, 4.0), (0.25, 2.0), (0.75, 8.0), (1.0, 1.0)]:
        got, scale = ours(g, p, s)
        want, want_scale = transformers_proportional(16, g.base, p, s)
        assert torch.equal(got, want) and scale == want_scale
    # transformers on StableLM's own config reads its 0.25 as the proportion of the 64-dim head: 32 entries
    cfg.rope_parameters = {"rope_type": "proportional", "rope_theta": g.base}
    whole_head, _ = ROPE_INIT_FUNCTIONS["proportional"](cfg, "cpu")
    assert whole_head.shape == (32,) and ours(g, 0.25, 1.0)[0].shape == (8,)
    setting = resolve("proportional", {"partial_rotary_factor": 0.5}, runnable=True)
    with pytest.raises(UserError, match="transformers cannot express proportional on a model that rotates 16 of its 64 head dims"):
        rope_parameters(setting, g, 2.0)


def test_numpy_frequencies_equal_the_torch_ones():
    g = RopeGeometry(128, 128, 5e5, 4096)
    got, _ = ours(g, 0.25, 4.0, xp=numpy_namespace())
    want, _ = ours(g, 0.25, 4.0)
    assert str(got.dtype) == "float32"
    assert got.tolist() == pytest.approx(want.tolist(), rel=2.4e-7, abs=0)  # at most 2 float32 ulp; the zeros exact


def test_freqs_shows_unrotated_pairs_as_never_turning_and_plots_the_rest(tmp_path):
    """``ctxbench freqs``: a pair with frequency 0 has wavelength and scale ``inf`` (no division by zero)."""
    from ctxbench.methods.freqplot import freq_rows, plot_freqs

    g = RopeGeometry(64, 64, 1e4, 2048)
    rows = freq_rows("proportional,linear", g, 4.0, params={"partial_rotary_factor": 0.25})
    mine = [r for r in rows if r["method"].startswith("proportional")]
    assert [r["scale"] for r in mine[:8]] == pytest.approx([4.0] * 8)
    assert all(r["scale"] == r["scaled_wavelength"] == math.inf for r in mine[8:])
    assert plot_freqs(rows, g, 4.0, tmp_path / "f.png").stat().st_size > 0


@pytest.mark.parametrize("p", [0.25, 0.5, 1.0])
def test_logits_equal_transformers_llama_with_proportional_rope(p):
    """A plain tiny Llama (head dim 16) patched by ctxbench at 4x its trained length against the same
    weights in a Llama that transformers builds with ``rope_type: proportional``."""
    ids = torch.randint(0, VOCAB, (1, N), generator=torch.Generator().manual_seed(3))
    params = {"partial_rotary_factor": p}
    native = llama({"rope_type": "proportional", "factor": FACTOR, "partial_rotary_factor": p})
    plain = llama()
    plain.load_state_dict(native.state_dict())
    want = logits(native, ids)
    got = patched_logits(plain, "proportional", ids, params=params)
    assert_close(got, want, atol=0)
    assert (want - logits(plain, ids)).abs().max() > 1e-2  # the method changes the logits


def test_transformers_export_is_the_rope_type_and_no_other_engine_takes_it():
    geom = {"head_dim": 16, "base": 1e4, "trained_len": 64}
    params = {"partial_rotary_factor": 0.5}
    v5 = json.loads(export("proportional", 4, "transformers", params=params, **geom))["transformers>=5"]
    assert v5 == {"rope_parameters": {"rope_theta": 1e4, "rope_type": "proportional", "factor": 4.0, "partial_rotary_factor": 0.5}}
    for engine, why in [("vllm", "reads no factor"), ("llamacpp", "no proportional")]:
        with pytest.raises(UserError, match=re.escape(f"{engine} cannot express method 'proportional'") + ".*" + why) as info:
            export("proportional", 4, engine, params=params, **geom)
        assert f"{engine} supports: {', '.join(SUPPORTED[engine])}" in info.value.fix
    assert "proportional" in SUPPORTED["transformers"]


def test_it_needs_its_proportion_before_anything_runs():
    with pytest.raises(UserError, match="method 'proportional' needs parameter partial_rotary_factor"):
        resolve("proportional", runnable=True)
    with pytest.raises(UserError, match="proportional parameter partial_rotary_factor: 1.5 must be <= 1"):
        resolve("proportional", {"partial_rotary_factor": 1.5})
    with pytest.raises(UserError, match="proportional parameter partial_rotary_factor: 0 must be > 0"):
        resolve("proportional", {"partial_rotary_factor": 0})
