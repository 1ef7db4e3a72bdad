"""Attention-level methods against a naive reference written plainly here: the full score matrix
from an explicit relative-position matrix, on a tiny Llama with grouped-query attention."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import TRAINED
from transformers.models.llama import modeling_llama

from ctxbench import attention
from ctxbench.methods import effective_params, frequencies, resolve
from ctxbench.patching import applied

N = 200  # > 3x the trained length of the tiny model (64)


def relative_positions(kind: str, n: int, window: int = 0, k: float = 1.0, group: int = 1) -> torch.Tensor:
    """P[i, j]: the relative position the method gives query i and key j (j <= i)."""
    i = torch.arange(n, dtype=torch.float64)[:, None]
    j = torch.arange(n, dtype=torch.float64)[None, :]
    p = i - j
    if kind == "plain":
        return p
    if kind == "rerope":
        return torch.where(p < window, p, torch.full_like(p, window))
    if kind == "leaky-rerope":
        return torch.where(p < window, p, window + (p - window) / k)
    if kind == "self-extend":
        grouped = (torch.div(i, group, rounding_mode="floor") + window - window // group) - torch.div(j, group, rounding_mode="floor")
        return torch.where(p < window, p, grouped)
    raise ValueError(kind)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference_logits(model, ids, inv_freq, positions, logn_trained=None):
    """Forward with every attention layer computed naively: q rotated by P[i, j] against unrotated k."""

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None, **kwargs):
        b, n, _ = hidden_states.shape
        shape = (b, n, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2).double()  # (b, h, n, d)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2).double()  # (b, kv, n, d)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2).double()
        k = modeling_llama.repeat_kv(k, self.num_key_value_groups)  # (b, h, n, d)
        v = modeling_llama.repeat_kv(v, self.num_key_value_groups)
        angles = positions[:n, :n, None] * inv_freq.double()  # (n, n, d/2)
        cos = torch.cat((angles.cos(), angles.cos()), -1)  # (n, n, d)
        sin = torch.cat((angles.sin(), angles.sin()), -1)
        q_rot = q[:, :, :, None, :] * cos + _rotate_half(q)[:, :, :, None, :] * sin  # (b, h, n, n, d)
        scores = (q_rot * k[:, :, None, :, :]).sum(-1) * self.scaling  # (b, h, n, n)
        if logn_trained is not None:
            m = torch.arange(1, n + 1, dtype=torch.float64)
            factor = torch.where(m > logn_trained, torch.log(m) / math.log(logn_trained), torch.ones_like(m))
            scores = scores * factor[:, None]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        out = torch.softmax(scores, -1) @ v  # (b, h, n, d)
        out = out.transpose(1, 2).reshape(b, n, -1).to(hidden_states.dtype)
        return self.o_proj(out), None

    original = modeling_llama.LlamaAttention.forward
    modeling_llama.LlamaAttention.forward = forward
    try:
        with torch.no_grad():
            return model(ids).logits
    finally:
        modeling_llama.LlamaAttention.forward = original


def _ours(tiny_lm, spec, params, ids, factor=2.0):
    with torch.no_grad(), applied(tiny_lm.model, tiny_lm.geometry, resolve(spec, params), factor, ids.shape[1]):
        return tiny_lm.model(ids).logits


@pytest.fixture
def ids():
    torch.manual_seed(1)
    return torch.randint(0, 256, (1, N))


@pytest.mark.parametrize(
    "spec,params,kind",
    [
        ("rerope", {"window": 16}, "rerope"),
        ("rerope", {"window": 50}, "rerope"),
        ("leaky-rerope", {"window": 16, "k": 3.0}, "leaky-rerope"),
        ("self-extend", {"window": 16, "group": 4}, "self-extend"),
        ("self-extend", {"window": 24, "group": 3}, "self-extend"),
    ],
)
def test_method_equals_naive_reference(tiny_lm, ids, spec, params, kind):
    inv_freq, _ = frequencies(resolve("none"), tiny_lm.geometry, 2.0, N)
    extra = {k: v for k, v in params.items() if k != "window"}
    positions = relative_positions(kind, N, params["window"], **extra)
    ref = reference_logits(tiny_lm.model, ids, inv_freq, positions)
    assert torch.allclose(_ours(tiny_lm, spec, params, ids), ref, atol=1e-5)


@pytest.mark.parametrize("spec", ["logn", "ntk+logn"])
def test_logn_equals_naive_reference(tiny_lm, ids, spec):
    inv_freq, _ = frequencies(resolve(spec), tiny_lm.geometry, 2.0, N)
    ref = reference_logits(tiny_lm.model, ids, inv_freq, relative_positions("plain", N), logn_trained=TRAINED)
    assert torch.allclose(_ours(tiny_lm, spec, {}, ids), ref, atol=1e-5)


def test_reference_without_changes_equals_the_plain_model(tiny_lm, ids):
    """The reference itself is right: plain positions give transformers' own logits."""
    inv_freq, _ = frequencies(resolve("none"), tiny_lm.geometry, 1.0, N)
    with torch.no_grad():
        plain = tiny_lm.model(ids).logits
    assert torch.allclose(reference_logits(tiny_lm.model, ids, inv_freq, relative_positions("plain", N)), plain, atol=1e-5)


@pytest.mark.parametrize("spec,params", [("rerope", {"window": N}), ("self-extend", {"window": N, "group": 4}), ("leaky-rerope", {"window": N + 5, "k": 2.0})])
def test_window_covering_the_sequence_is_plain_rope(tiny_lm, ids, spec, params):
    with torch.no_grad():
        plain = tiny_lm.model(ids).logits
    assert torch.allclose(_ours(tiny_lm, spec, params, ids), plain, atol=1e-5)


def test_yarn_frequencies_combine_with_rerope(tiny_lm, ids):
    setting = resolve("yarn+rerope", {"window": 16})
    inv_freq, scale = frequencies(setting, tiny_lm.geometry, 2.0, N)
    positions = relative_positions("rerope", N, 16)
    model = tiny_lm.model
    # the attention scale multiplies cos and sin of q and k: logits scale by scale**2 — emulate by q and k scaling
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(scale)
            layer.self_attn.k_proj.weight.mul_(scale)
        try:
            ref = reference_logits(model, ids, inv_freq, positions)
        finally:
            for layer in model.model.layers:
                layer.self_attn.q_proj.weight.div_(scale)
                layer.self_attn.k_proj.weight.div_(scale)
    assert scale > 1
    assert torch.allclose(_ours(tiny_lm, "yarn+rerope", {"window": 16}, ids), ref, atol=1e-5)


def test_query_blocks_give_the_same_logits(tiny_lm, ids, monkeypatch):
    whole = _ours(tiny_lm, "self-extend", {"window": 16, "group": 4}, ids)
    monkeypatch.setattr(attention, "SCORE_BUDGET", 4 * N * 20)  # blocks of ~20 queries
    assert attention._block_size(4, N) < N
    assert torch.allclose(_ours(tiny_lm, "self-extend", {"window": 16, "group": 4}, ids), whole, atol=1e-6)


@pytest.mark.parametrize("spec,params", [("rerope", {"window": 16}), ("self-extend", {"window": 16, "group": 4}), ("ntk+logn", {})])
def test_generation_with_a_kv_cache_matches_full_recomputation(tiny_lm, ids, spec, params):
    model = tiny_lm.model
    prompt = ids[:, :120]
    new = 8
    with applied(model, tiny_lm.geometry, resolve(spec, params), 2.0, prompt.shape[1] + new), torch.no_grad():
        cached = model.generate(prompt, max_new_tokens=new, do_sample=False, pad_token_id=0)[0, prompt.shape[1] :].tolist()
        seq = prompt
        plain = []
        for _ in range(new):
            token = model(seq, use_cache=False).logits[0, -1].argmax()
            plain.append(int(token))
            seq = torch.cat([seq, token.view(1, 1)], dim=1)
    assert cached == plain


def test_patching_restores_the_attention_implementation(tiny_lm, ids):
    with torch.no_grad():
        before = tiny_lm.model(ids).logits
    _ours(tiny_lm, "rerope", {"window": 16}, ids)
    assert tiny_lm.model.config._attn_implementation == "sdpa"
    with torch.no_grad():
        assert torch.equal(tiny_lm.model(ids).logits, before)


def test_default_parameters_follow_the_trained_length_and_factor(tiny_lm):
    geom = tiny_lm.geometry
    assert effective_params(resolve("rerope"), geom, 2.0) == {"window": 16}
    leaky = effective_params(resolve("leaky-rerope"), geom, 4.0)
    assert leaky["window"] == 16 and leaky["k"] == pytest.approx((4 * 64 - 16) / (64 - 16))
    # with those defaults the largest mapped position at s*L tokens stays inside L
    p = relative_positions("leaky-rerope", 4 * 64, 16, k=leaky["k"])
    assert p.max().item() <= 64 + 1e-9
    se = effective_params(resolve("self-extend"), geom, 4.0)
    p = relative_positions("self-extend", 4 * 64, se["window"], group=se["group"])
    assert p.max().item() <= 64


def test_window_at_or_above_the_length_warns_that_the_method_is_a_no_op(tiny_lm, corpus_dir):
    from ctxbench.runner import run_task
    from ctxbench.tasks import ppl

    settings = ppl.Settings(methods=[resolve("rerope", {"window": 100})], factors=[2.0], lengths=[64, 128], dataset=str(corpus_dir), docs=1)
    notes = run_task(tiny_lm, "ppl", settings).notes
    assert any("window 100 >= length 64" in n and "equals plain RoPE" in n for n in notes)
    assert not any("length 128" in n for n in notes)


def test_window_of_zero_is_a_user_error(tiny_lm):
    from ctxbench.errors import UserError

    with pytest.raises(UserError, match="window 0 must be >= 1"):
        effective_params(resolve("rerope", {"window": 0}), tiny_lm.geometry, 2.0)
