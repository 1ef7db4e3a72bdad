"""Patching a loaded model in place, checked against references.

* Frequency methods: a model patched by ctxbench gives the logits of the same weights loaded with
  the equivalent native ``rope_parameters`` (Llama, Qwen2, and GPT-NeoX with partial rotary).
* Restore: after the block the model is exactly what it was.
* Attention-level methods: a naive reference attention written here (full score matrix from an
  explicit relative-position matrix, float64, registered through transformers' AttentionInterface
  while the model's rotary module is set to the identity) against ctxbench's branched attention
  (two-branch methods, dca's three chunk parts; fused and blocked paths), at four times the trained
  length, with grouped-query attention.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from helpers import TRAINED
from transformers import (
    AttentionInterface,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from ctxbench.errors import UserError
from ctxbench.methods import attention, resolve
from ctxbench.methods.patching import applied, rotary_modules
from ctxbench.model.geometry import RopeGeometry

N = 4 * TRAINED  # sequence length of every check: four times the trained context (64)
FACTOR = 4.0
VOCAB = 258
INIT = 0.1  # weights large enough that positions change the logits by O(1), so 1e-5 means something


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny matmuls on one thread


def _finish(model_cls, cfg):
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return model_cls(cfg).eval()


def _gqa(config_cls, model_cls, rope: dict | None, max_pos: int):
    """2 layers, 4 query heads sharing 2 key/value heads (GQA), head dim 16 (8 rotary pairs)."""
    cfg = config_cls(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=VOCAB, max_position_embeddings=max_pos, initializer_range=INIT,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
        rope_parameters={"rope_theta": 10000.0, **(rope or {"rope_type": "default"})},
    )  # fmt: skip
    return _finish(model_cls, cfg)


def llama(rope: dict | None = None, max_pos: int = TRAINED) -> LlamaForCausalLM:
    return _gqa(LlamaConfig, LlamaForCausalLM, rope, max_pos)


def qwen2(rope: dict | None = None, max_pos: int = TRAINED) -> Qwen2ForCausalLM:
    return _gqa(Qwen2Config, Qwen2ForCausalLM, rope, max_pos)


def neox(rope: dict | None = None, max_pos: int = TRAINED) -> GPTNeoXForCausalLM:
    """Head dim 32, partial rotary 0.25: only the first 8 dims (4 pairs) are rotated; no GQA."""
    cfg = GPTNeoXConfig(
        hidden_size=128, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB,
        max_position_embeddings=max_pos, initializer_range=INIT, bos_token_id=None, eos_token_id=None,
        rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": 0.25, **(rope or {"rope_type": "default"})},
    )  # fmt: skip
    return _finish(GPTNeoXForCausalLM, cfg)


FAMILIES = {"llama": llama, "qwen2": qwen2, "gpt_neox": neox}
PAIRS = {"llama": 8, "qwen2": 8, "gpt_neox": 4}


def geometry(model) -> RopeGeometry:
    return RopeGeometry.from_config(model.config)


def logits(model, ids, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, **kwargs).logits


def patched_logits(model, spec, ids, factor=FACTOR, params=None, seq_len=None):
    with applied(model, geometry(model), resolve(spec, params), factor, seq_len or ids.shape[1]):
        return logits(model, ids)


def assert_close(got, want, atol=1e-5):
    diff = (got - want).abs().max().item()
    assert diff <= atol, f"max abs diff {diff:.3g} > {atol}"


@pytest.fixture
def ids():
    torch.manual_seed(3)
    return torch.randint(0, VOCAB, (1, N))


# --- frequency methods against native rope_parameters -----------------------------------------


def native_rope(method: str, pairs: int) -> dict:
    long = [1.0 + 0.75 * i for i in range(pairs)]
    short = [1.0 + 0.05 * i for i in range(pairs)]
    return {
        "linear": {"rope_type": "linear", "factor": FACTOR},
        "dynamic-ntk": {"rope_type": "dynamic", "factor": FACTOR},
        "yarn": {"rope_type": "yarn", "factor": FACTOR, "original_max_position_embeddings": TRAINED},
        "llama3": {"rope_type": "llama3", "factor": FACTOR, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": TRAINED},  # fmt: skip
        "longrope": {"rope_type": "longrope", "factor": FACTOR, "long_factor": long, "short_factor": short,
                     "original_max_position_embeddings": TRAINED},  # fmt: skip
    }[method]


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("method", ["linear", "dynamic-ntk", "yarn", "llama3", "longrope"])
def test_patched_model_matches_the_same_weights_loaded_with_native_rope_parameters(family, method, ids, tmp_path):
    build = FAMILIES[family]
    rope = native_rope(method, PAIRS[family])
    # dynamic takes L from max_position_embeddings; the others from original_max_position_embeddings
    native = build(rope, max_pos=TRAINED if method in ("linear", "dynamic-ntk") else int(TRAINED * FACTOR))
    model = build()
    model.load_state_dict(native.state_dict())
    params = None
    if method == "longrope":  # the plain model has no factors: give them as a file
        path = tmp_path / "factors.json"
        path.write_text(json.dumps({"long_factor": rope["long_factor"], "short_factor": rope["short_factor"]}))
        params = {"factors": str(path)}
    theirs = logits(native, ids)
    ours = patched_logits(model, method, ids, params=params)
    assert_close(ours, theirs)
    assert (ours - logits(model, ids)).abs().max() > 1e-2  # the method changes the logits at all


@pytest.mark.parametrize("seq_len", [TRAINED // 2, N])
def test_longrope_factors_from_the_model_config_match_native_below_and_above_L(seq_len, ids):
    rope = native_rope("longrope", 8)
    native = llama(rope, max_pos=int(TRAINED * FACTOR))
    # same weights and config (the factors are read from it), but its rotary module is plain RoPE:
    # only ctxbench's patch can turn it into longrope
    stripped = llama(rope, max_pos=int(TRAINED * FACTOR))
    stripped.load_state_dict(native.state_dict())
    plain = llama(max_pos=int(TRAINED * FACTOR))
    for module, default in zip(rotary_modules(stripped), rotary_modules(plain), strict=True):
        module.inv_freq, module.attention_scaling, module.rope_type = default.inv_freq.clone(), 1.0, "default"
    x = ids[:, :seq_len]
    want = logits(native, x)
    assert (logits(stripped, x) - want).abs().max() > 1e-2  # plain RoPE is not longrope
    with applied(stripped, geometry(stripped), resolve("longrope"), FACTOR, seq_len):
        ours = logits(stripped, x)
    assert_close(ours, want)


def test_longrope_factors_given_as_a_list_match_native(ids):
    long = [1.0 + 0.5 * i for i in range(8)]
    rope = {"rope_type": "longrope", "factor": FACTOR, "long_factor": long, "short_factor": long,
            "original_max_position_embeddings": TRAINED}  # fmt: skip
    native = llama(rope, max_pos=int(TRAINED * FACTOR))
    model = llama()
    assert_close(patched_logits(model, "longrope", ids, params={"factors": long}), logits(native, ids))


def test_partial_rotary_geometry_is_read_from_the_config():
    model = neox()
    geom = geometry(model)
    assert (geom.head_dim, geom.rotary_dim, geom.pairs, geom.trained_len) == (32, 8, 4, TRAINED)
    assert [m.inv_freq.shape[-1] for m in rotary_modules(model)] == [geom.pairs]


def test_partial_rotary_geometry_from_the_legacy_rotary_pct_field():
    cfg = GPTNeoXConfig(hidden_size=256, num_attention_heads=4, rotary_pct=0.25, rotary_emb_base=10000, max_position_embeddings=2048)
    geom = RopeGeometry.from_config(cfg)
    assert (geom.head_dim, geom.rotary_dim, geom.base, geom.trained_len) == (64, 16, 10000.0, 2048)


# --- restore ------------------------------------------------------------------------------------

EVERY_KIND = [
    ("linear", None), ("ntk", None), ("dynamic-ntk", None), ("yarn", None), ("llama3", None), ("longrope", {"factors": [2.0] * 8}),
    ("rerope", {"window": 16}), ("leaky-rerope", {"window": 16, "k": 2.0}), ("self-extend", {"window": 16, "group": 4}),
    ("logn", None), ("yarn+rerope", {"window": 16}), ("ms-poe", {"first_layer": 0}),
]  # fmt: skip


def _state(model):
    rotaries = rotary_modules(model)
    return {
        "inv_freq": [m.inv_freq for m in rotaries],
        "scaling": [m.attention_scaling for m in rotaries],
        "rope_type": [m.rope_type for m in rotaries],
        "attn": model.config._attn_implementation,
    }


@pytest.mark.parametrize("spec,params", EVERY_KIND)
def test_exit_restores_the_original_buffers_and_exact_logits(spec, params, ids):
    model = llama()
    before, state = logits(model, ids), _state(model)
    during = patched_logits(model, spec, ids, params=params)
    after = _state(model)
    assert all(a is b for a, b in zip(after.pop("inv_freq"), state.pop("inv_freq"), strict=True))
    assert after == state
    assert not any(hasattr(m, "_ctxbench_plan") for m in model.modules())
    assert torch.equal(logits(model, ids), before)
    assert (during - before).abs().max() > 1e-2  # something was applied in between


def test_methods_applied_in_sequence_leak_nothing(ids):
    """Each method in a sequence on one model gives exactly what it gives on a fresh model."""
    shared = llama()
    for spec, params in EVERY_KIND:
        fresh = llama()
        assert torch.equal(patched_logits(shared, spec, ids, params=params), patched_logits(fresh, spec, ids, params=params)), spec


@pytest.mark.parametrize("spec,params", [("yarn", None), ("self-extend", {"window": 16, "group": 4})])
def test_an_exception_inside_the_block_still_restores(spec, params, ids):
    model = llama()
    before, state = logits(model, ids), _state(model)
    with pytest.raises(RuntimeError, match="boom"), applied(model, geometry(model), resolve(spec, params), FACTOR, N):
        logits(model, ids)
        raise RuntimeError("boom")
    after = _state(model)
    assert all(a is b for a, b in zip(after.pop("inv_freq"), state.pop("inv_freq"), strict=True))
    assert after == state
    assert torch.equal(logits(model, ids), before)


def test_native_dynamic_update_does_not_fire_while_a_method_is_applied(ids):
    dynamic = llama({"rope_type": "dynamic", "factor": FACTOR})
    plain = llama()
    with applied(dynamic, geometry(dynamic), resolve("none"), 1.0, N):
        ours = logits(dynamic, ids)
    assert_close(ours, logits(plain, ids), atol=1e-6)
    # afterwards the model's own dynamic scaling is back, as it was
    assert_close(logits(dynamic, ids), logits(llama({"rope_type": "dynamic", "factor": FACTOR}), ids), atol=0)
    assert (logits(dynamic, ids) - ours).abs().max() > 1e-2


def test_native_dynamic_model_under_another_method_gets_exactly_that_method(ids):
    dynamic = llama({"rope_type": "dynamic", "factor": FACTOR})
    assert_close(patched_logits(dynamic, "yarn", ids), patched_logits(llama(), "yarn", ids), atol=1e-6)


def test_model_without_rope_runs_only_baselines_and_has_no_rotary_module():
    """More in test_baselines.py: such a model is a baseline (none, native); scaling it is a UserError."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=10, bos_token_id=0, eos_token_id=0))
    geom = RopeGeometry.from_config(model.config)
    assert geom.position == "absolute" and not geom.has_rope
    with pytest.raises(UserError, match="no rotary position embedding"), applied(model, geom, resolve("ntk"), 2.0, 16):
        pass
    with pytest.raises(UserError, match="no rotary embedding module"):
        rotary_modules(model)


# --- attention-level methods against a naive reference -------------------------------------------


@functools.cache
def relative_positions(kind: str, n: int, w: int = 0, k: float = 1.0, g: int = 1) -> torch.Tensor:
    """P[i, j]: the relative position a method gives query i and key j <= i, one entry at a time
    (``string``: ``w`` is its shift ``S`` and ``k`` its ``W``; ``dca``: ``w`` is its chunk_size and ``k``
    its local_window, chunks of ``c = w - k``)."""
    P = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1):
            p = i - j
            if kind == "rerope":
                P[i, j] = min(p, w)
            elif kind == "leaky-rerope":
                P[i, j] = p if p < w else w + (p - w) / k
            elif kind == "self-extend":
                P[i, j] = p if p < w else (i // g + w - w // g) - j // g
            elif kind == "string":  # w is S, k is W
                P[i, j] = p if p < w else p - w + k
            elif kind == "dca":  # the paper's query position by chunk distance, minus the key's j mod c
                c = int(w - k)
                q = i % c if i // c == j // c else min(i % c + c, w) if i // c == j // c + 1 else min(2 * c - 1, w)
                P[i, j] = q - j % c
            else:  # plain RoPE (also logn)
                P[i, j] = p
    return torch.from_numpy(P)


REFERENCE = {}  # what the naive attention computes for the current forward


def naive_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Unrotated q (b, h, n, hd), k and v (b, kv, n, hd) -> (b, n, h, hd), all in float64.

    score(i, j) = sum over rotary pairs t of
        [(q1 k1 + q2 k2) cos(theta_t P[i,j]) + (q1 k2 - q2 k1) sin(theta_t P[i,j])] * scale**2
      + q . k over the unrotated dims, times ``scaling`` (and log_L(i+1) for logn past L).
    """
    ref = REFERENCE
    q, k, v = query.double(), key.double(), value.double()
    b, h, n, hd = q.shape
    kv_heads, half, rd = k.shape[1], ref["pairs"], 2 * ref["pairs"]
    angle = ref["positions"][:n, :n, None] * ref["inv_freq"][None, None, :]  # (n, n, pairs)
    cos, sin = angle.cos(), angle.sin()
    per_head = ref["per_head"](module, q, k, scaling) if ref.get("per_head") else None  # (h, n, n) or None
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    out = torch.zeros(b, n, h, hd, dtype=torch.float64)
    for head in range(h):
        if per_head is not None:  # this head's own relative positions (Ms-PoE)
            angle = per_head[head][:, :, None] * ref["inv_freq"][None, None, :]
            cos, sin = angle.cos(), angle.sin()
        kv = head // (h // kv_heads)  # query heads share key/value heads in order
        q1, q2, q_rest = q[:, head, :, :half], q[:, head, :, half:rd], q[:, head, :, rd:]
        k1, k2, k_rest = k[:, kv, :, :half], k[:, kv, :, half:rd], k[:, kv, :, rd:]
        same = q1[:, :, None] * k1[:, None] + q2[:, :, None] * k2[:, None]  # (b, n, n, pairs)
        cross = q1[:, :, None] * k2[:, None] - q2[:, :, None] * k1[:, None]
        scores = (same * cos + cross * sin).sum(-1) * ref["scale"] ** 2 + q_rest @ k_rest.transpose(-1, -2)
        scores = scores * scaling
        if ref["logn"]:
            m = torch.arange(1, n + 1, dtype=torch.float64)
            factor = torch.where(m > TRAINED, torch.log(m) / math.log(TRAINED), torch.ones_like(m))
            scores = scores * factor[:, None]
        probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        out[:, :, head] = probs @ v[:, kv]
    return out.to(query.dtype), None


AttentionInterface.register("naive-reference", naive_attention)


def mspoe_positions(module, q, k, scaling, first_layer, lo, hi, keys="per-head"):
    """P[h, i, j] = i / r_q(h) - j / r_k(h) for Ms-PoE (arXiv 2403.04797), from the paper's recipe as
    the authors' code runs it, in float64: ratios ``lo + (hi - lo) k / H``; head statistic ``-share of
    keys with weight > 3 x mean`` in the last query's softmax of the unrotated ``q k^T``; head ``h``
    takes ratio index ``argsort(statistic)[h]``; keys the query head's own ratio (``per-head``: the
    paper's ``(i - j) / r``) or the ratio of their group's first query head (``group-first``, the
    authors' code); plain ``i - j`` on layers before ``first_layer``."""
    b, h, n, _ = q.shape
    i = torch.arange(n, dtype=torch.float64)
    plain = (i[:, None] - i[None, :]).expand(h, n, n)
    if module.layer_idx < first_layer:
        return plain
    g = h // k.shape[1]
    w = torch.softmax((q[0, :, -1:] @ k[0].repeat_interleave(g, dim=0).transpose(-1, -2))[:, 0] * scaling, dim=-1)  # (h, n)
    statistic = -(w > 3 * w.mean(-1, keepdim=True)).double().mean(-1)
    ratios = lo + (hi - lo) * torch.arange(h, dtype=torch.float64) / h
    r_q = ratios[torch.argsort(statistic, stable=True)]
    r_k = r_q[::g].repeat_interleave(g) if keys == "group-first" else r_q
    return i[None, :, None] / r_q[:, None, None] - i[None, None, :] / r_k[:, None, None]


@contextmanager
def reference(model, positions, inv_freq, scale=1.0, logn=False, per_head=None):
    """Route the model's attention through :func:`naive_attention`, with the rotary module turned into
    the identity (cos 1, sin 0) so q and k arrive unrotated."""
    rotaries = [m for m in model.modules() if isinstance(getattr(m, "inv_freq", None), torch.Tensor)]
    saved = [(m, m.inv_freq) for m in rotaries]
    impl = model.config._attn_implementation
    REFERENCE.update(positions=positions, inv_freq=torch.as_tensor(inv_freq, dtype=torch.float64),
                     pairs=len(inv_freq), scale=scale, logn=logn, per_head=per_head)  # fmt: skip
    try:
        for m, original in saved:
            m.inv_freq = torch.zeros_like(original)
        model.set_attn_implementation("naive-reference")
        yield
    finally:
        for m, original in saved:
            m.inv_freq = original
        model.set_attn_implementation(impl)
        REFERENCE.clear()


def theta64(d: int, base: float) -> np.ndarray:
    return np.array([base ** (-2.0 * i / d) for i in range(d // 2)])


def reference_frequencies(model, freq: str) -> tuple[np.ndarray, float]:
    """Frequencies and attention scale of the frequency part, computed independently of ctxbench."""
    geom = geometry(model)
    d, base = geom.rotary_dim, geom.base
    if freq == "none":
        return theta64(d, base), 1.0
    if freq == "ntk":
        return theta64(d, base * FACTOR ** (d / (d - 2))), 1.0
    if freq == "yarn":
        cfg = copy.deepcopy(model.config)
        cfg.rope_parameters = {**cfg.rope_parameters, "rope_type": "yarn", "factor": FACTOR, "original_max_position_embeddings": TRAINED}
        inv, scale = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
        return inv.double().numpy(), scale
    raise ValueError(freq)


def reference_logits(model, ids, kind, freq="none", w=0, k=1.0, g=1, logn=False):
    """``logn=True`` with a two-branch kind: both effects, the method's positions and log-n queries."""
    inv_freq, scale = reference_frequencies(model, freq)
    positions = relative_positions("plain" if kind == "logn" else kind, ids.shape[1], w, k, g)
    with reference(model, positions, inv_freq, scale, logn=logn or kind == "logn"):
        return logits(model, ids)


ATTENTION_CASES = [
    # (spec, ctxbench params, reference kind, frequency part, w, k, G)
    ("rerope", {"window": 16}, "rerope", "none", 16, 1.0, 1),
    ("rerope", {"window": 40}, "rerope", "none", 40, 1.0, 1),
    ("leaky-rerope", {"window": 16, "k": 3.0}, "leaky-rerope", "none", 16, 3.0, 1),
    ("leaky-rerope", {"window": 24, "k": 1.5}, "leaky-rerope", "none", 24, 1.5, 1),
    ("self-extend", {"window": 16, "group": 4}, "self-extend", "none", 16, 1.0, 4),
    ("self-extend", {"window": 24, "group": 3}, "self-extend", "none", 24, 1.0, 3),
    ("self-extend", {"window": 8, "group": 8}, "self-extend", "none", 8, 1.0, 8),
    ("string", {"window": 21, "local_value": 10}, "string", "none", 21, 10, 1),
    ("string", {"window": 40, "local_value": 0}, "string", "none", 40, 0, 1),
    ("logn", None, "logn", "none", 0, 1.0, 1),
    ("ntk+logn", None, "logn", "ntk", 0, 1.0, 1),
    ("yarn+rerope", {"window": 16}, "rerope", "yarn", 16, 1.0, 1),
    ("ntk+self-extend", {"window": 16, "group": 4}, "self-extend", "ntk", 16, 1.0, 4),
    ("yarn+string", {"window": 24, "local_value": 8}, "string", "yarn", 24, 8, 1),
    ("dca", {"chunk_size": 48, "local_window": 8}, "dca", "none", 48, 8, 1),
    ("dca", {"chunk_size": 30, "local_window": 16}, "dca", "none", 30, 16, 1),
    ("ntk+dca", {"chunk_size": 24, "local_window": 6}, "dca", "ntk", 24, 6, 1),
]


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_naive_reference_with_plain_positions_is_the_unpatched_model(family, ids):
    """The reference itself is right: plain RoPE positions give transformers' own logits."""
    model = FAMILIES[family]()
    assert_close(reference_logits(model, ids, "plain"), logits(model, ids))


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
@pytest.mark.parametrize("spec,params,kind,freq,w,k,g", ATTENTION_CASES)
def test_attention_method_matches_the_naive_reference(family, spec, params, kind, freq, w, k, g, ids):
    model = FAMILIES[family]()
    want = reference_logits(model, ids, kind, freq, w, k, g)
    got = patched_logits(model, spec, ids, params=params)
    assert_close(got, want)
    assert (want - reference_logits(model, ids, "plain")).abs().max() > 1e-2  # both branches matter here


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
@pytest.mark.parametrize("keys", ["per-head", "group-first"])
@pytest.mark.parametrize("spec,params,freq,first,lo,hi", [
    ("ms-poe", {"first_layer": 0}, "none", 0, 1.2, 1.8),
    ("ms-poe", {"first_layer": 1, "ratio_min": 1.0, "ratio_max": 3.0}, "none", 1, 1.0, 3.0),
    ("yarn+ms-poe", {"first_layer": 0}, "yarn", 0, 1.2, 1.8),
])  # fmt: skip
def test_ms_poe_matches_the_naive_reference(family, spec, params, freq, first, lo, hi, keys, ids):
    """Each head's own relative positions ``i / r_q - j / r_k`` in the full matrix (GQA on llama,
    partial rotary on gpt_neox), the head order from float64 statistics."""
    model = FAMILIES[family]()
    inv_freq, scale = reference_frequencies(model, freq)
    per_head = functools.partial(mspoe_positions, first_layer=first, lo=lo, hi=hi, keys=keys)
    with reference(model, relative_positions("plain", N), inv_freq, scale, per_head=per_head):
        want = logits(model, ids)
    # 2e-5: ctxbench rounds each position p / r to float32 before the angle, as the authors' rotary
    # cache does (float32 tolerance against their code in test_mspoe.py); here, up to 1.1e-5 at 4L with yarn
    assert_close(patched_logits(model, spec, ids, params={**params, "keys": keys}), want, atol=2e-5)
    assert (want - reference_logits(model, ids, "plain", freq)).abs().max() > 1e-2  # the per-head positions matter here


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
@pytest.mark.parametrize("spec,params", [("rerope", {"window": N}), ("rerope", {"window": 10 * N}),
                                         ("self-extend", {"window": N, "group": 4}), ("leaky-rerope", {"window": N, "k": 3.0})])  # fmt: skip
def test_window_covering_the_sequence_is_plain_rope(family, spec, params, ids):
    model = FAMILIES[family]()
    assert_close(patched_logits(model, spec, ids, params=params), logits(model, ids))


def test_logn_within_the_trained_length_is_plain_rope(ids):
    model = llama()
    x = ids[:, :TRAINED]
    assert_close(patched_logits(model, "logn", x), logits(model, x))


@pytest.mark.parametrize("spec,params", [("rerope", {"window": 16}), ("leaky-rerope", {"window": 16, "k": 3.0}),
                                         ("self-extend", {"window": 16, "group": 4}), ("ntk+logn", None),
                                         ("string", {"window": 21, "local_value": 10}),
                                         ("dca", {"chunk_size": 24, "local_window": 6}),
                                         # Ms-PoE with an order that no input changes (its KV cache: test_mspoe.py)
                                         ("ms-poe", {"first_layer": 0, "head_order": "reversed"})])  # fmt: skip
def test_greedy_generation_with_a_kv_cache_matches_full_forwards(spec, params, ids):
    model = llama()
    prompt, new = ids[:, : N - 8], 8
    with applied(model, geometry(model), resolve(spec, params), FACTOR, N), torch.no_grad():
        out = model.generate(prompt, max_new_tokens=new, do_sample=False, pad_token_id=0,
                             return_dict_in_generate=True, output_logits=True)  # fmt: skip
        seq = prompt
        for step in range(new):
            full = model(seq, use_cache=False).logits[0, -1]  # no cache: recomputed from scratch
            assert_close(out.logits[step][0], full)
            seq = torch.cat([seq, full.argmax().view(1, 1)], dim=1)
    assert out.sequences.tolist() == seq.tolist()


@pytest.mark.parametrize("spec,params", [("rerope", {"window": 16}), ("self-extend", {"window": 16, "group": 4}), ("logn", None),
                                         ("dca", {"chunk_size": 24, "local_window": 6}),
                                         ("ms-poe", {"first_layer": 0, "head_order": "reversed"})])  # fmt: skip
def test_prefill_in_chunks_with_a_cache_equals_one_forward(spec, params, ids):
    """Queries that are not the whole sequence (q positions offset into the keys), several at a time."""
    model = llama()
    with applied(model, geometry(model), resolve(spec, params), FACTOR, N), torch.no_grad():
        whole = model(ids, use_cache=False).logits
        first = model(ids[:, :100], use_cache=True)
        second = model(ids[:, 100:], past_key_values=first.past_key_values, use_cache=True).logits
    assert_close(torch.cat([first.logits, second], dim=1), whole)


@pytest.mark.parametrize(
    "spec,params,kind,freq,w,k,g",
    [
        ("rerope", {"window": 16}, "rerope", "none", 16, 1.0, 1),
        ("leaky-rerope", {"window": 16, "k": 3.0}, "leaky-rerope", "none", 16, 3.0, 1),
        ("self-extend", {"window": 24, "group": 3}, "self-extend", "none", 24, 1.0, 3),
        ("string", {"window": 21, "local_value": 10}, "string", "none", 21, 10, 1),
        ("dca", {"chunk_size": 24, "local_window": 6}, "dca", "none", 24, 6, 1),
    ],
)
def test_small_score_budget_splits_queries_into_blocks_with_the_same_result(spec, params, kind, freq, w, k, g, ids, monkeypatch):
    model = llama()
    whole = patched_logits(model, spec, ids, params=params)
    steps = []
    block_size = attention._block_size

    def spy(heads, keys):
        steps.append(block_size(heads, keys))
        return steps[-1]

    monkeypatch.setattr(attention, "_block_size", spy)
    monkeypatch.setattr(attention, "FUSED_DEVICES", ())  # the blocked path even for a full prefill on CPU
    monkeypatch.setattr(attention, "SCORE_BUDGET", 4 * N * 20)  # blocks of 20 queries
    blocked = patched_logits(model, spec, ids, params=params)
    assert steps and max(steps) == 20  # N / 20 -> 13 blocks per layer
    assert_close(blocked, whole)
    assert_close(blocked, reference_logits(model, ids, kind, freq, w, k, g))


def test_small_score_budget_splits_logn_queries_into_blocks_with_the_same_result(ids, monkeypatch):
    model = llama()
    monkeypatch.setattr(attention, "SCORE_BUDGET", 4 * N * 16)  # blocks of 16 queries
    assert attention._block_size(4, N) == 16
    with applied(model, geometry(model), resolve("logn"), FACTOR, N), torch.no_grad():
        first = model(ids[:, :60], use_cache=True)
        rest = model(ids[:, 60:], past_key_values=first.past_key_values, use_cache=True).logits  # 196 queries
    assert_close(torch.cat([first.logits, rest], dim=1), reference_logits(model, ids, "logn"))


@pytest.mark.parametrize(
    "spec,params,kind,freq,w,k,g",
    [
        ("rerope", {"window": 16}, "rerope", "none", 16, 1.0, 1),
        ("rerope", {"window": 40}, "rerope", "none", 40, 1.0, 1),
        ("leaky-rerope", {"window": 24, "k": 1.5}, "leaky-rerope", "none", 24, 1.5, 1),
        ("self-extend", {"window": 8, "group": 8}, "self-extend", "none", 8, 1.0, 8),
        ("string", {"window": 30, "local_value": 5}, "string", "none", 30, 5, 1),
        ("dca", {"chunk_size": 24, "local_window": 6}, "dca", "none", 24, 6, 1),
        ("dca", {"chunk_size": 30, "local_window": 16}, "dca", "none", 30, 16, 1),
    ],
)
@pytest.mark.parametrize("kernel", ["cpu-flash", "portable"])
def test_fused_path_in_blocks_shorter_than_the_window_matches_the_reference(spec, params, kind, freq, w, k, g, ids, kernel, monkeypatch):
    """The block partition every device runs, in blocks of 12 queries (near bands reaching back
    over several blocks, far keys split into the part every query of a block sees and the part
    only later ones do), for a whole prefill and for 156 queries after a 100-token cache, against
    the naive reference and the blocked path; with CPU's flash kernel and with the portable one
    (in key chunks of 40 scores per query row) that devices without a fused kernel call."""
    if kernel == "portable":
        monkeypatch.setattr(attention, "KERNELS", {})
        monkeypatch.setattr(attention, "SCORE_BUDGET", 4 * 12 * 40)  # (b=1, h=4, 12 queries) x 40 keys per chunk
    model = llama()
    calls = []
    fused = attention._fused
    monkeypatch.setattr(attention, "_fused", lambda *a: calls.append(1) or fused(*a))
    monkeypatch.setattr(attention, "NEAR_BLOCK", 12)
    want = reference_logits(model, ids, kind, freq, w, k, g)
    got = patched_logits(model, spec, ids, params=params)
    assert len(calls) == model.config.num_hidden_layers
    assert_close(got, want)
    with applied(model, geometry(model), resolve(spec, params), FACTOR, N), torch.no_grad():
        first = model(ids[:, :100], use_cache=True)
        rest = model(ids[:, 100:], past_key_values=first.past_key_values, use_cache=True).logits
    assert len(calls) == 3 * model.config.num_hidden_layers
    assert_close(torch.cat([first.logits, rest], dim=1), want)
    monkeypatch.setattr(attention, "FUSED_DEVICES", ())
    assert_close(got, patched_logits(model, spec, ids, params=params))


# --- two-branch methods with log-n (ReRoPE as its author ran it) -----------------------------------

LOGN_CASES = [
    # (spec, ctxbench params, reference kind, frequency part, w, k, G)
    ("rerope+logn", {"window": 16}, "rerope", "none", 16, 1.0, 1),
    ("leaky-rerope+logn", {"window": 16, "k": 3.0}, "leaky-rerope", "none", 16, 3.0, 1),
    ("self-extend+logn", {"window": 16, "group": 4}, "self-extend", "none", 16, 1.0, 4),
    ("ntk+rerope+logn", {"window": 24}, "rerope", "ntk", 24, 1.0, 1),
    ("yarn+self-extend+logn", {"window": 8, "group": 8}, "self-extend", "yarn", 8, 1.0, 8),
]


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
@pytest.mark.parametrize("spec,params,kind,freq,w,k,g", LOGN_CASES)
def test_two_branch_method_with_logn_matches_the_naive_reference_with_both_effects(family, spec, params, kind, freq, w, k, g, ids, monkeypatch):
    model = FAMILIES[family]()
    want = reference_logits(model, ids, kind, freq, w, k, g, logn=True)
    fused = patched_logits(model, spec, ids, params=params)
    monkeypatch.setattr(attention, "FUSED_DEVICES", ())  # the blocked path too
    blocked = patched_logits(model, spec, ids, params=params)
    assert_close(fused, want)
    assert_close(blocked, want)
    # both effects matter at 4L: without log-n, or with plain positions, the logits differ
    assert (want - reference_logits(model, ids, kind, freq, w, k, g)).abs().max() > 1e-2
    assert (want - reference_logits(model, ids, "logn", freq)).abs().max() > 1e-2


def test_logn_query_scale_is_the_authors_formula():
    """bojone/rerope: ``q *= clip(log(position_ids + 1) / log(training_length), 1)`` with 0-based ids."""
    q = torch.ones(1, 1, 300, 2)
    pos = torch.arange(300)
    got = attention._logn_queries(q, pos, 64)[0, 0, :, 0]
    want = np.clip(np.log(np.arange(300) + 1) / np.log(64), 1, None)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    assert got[63] == 1 and got[64] > 1  # position 63 is the 64th token: still inside L


@pytest.mark.parametrize("spec,params", [("rerope+logn", {"window": 16}), ("self-extend+logn", {"window": 16, "group": 4})])
def test_two_branch_logn_generation_with_a_kv_cache_matches_full_forwards(spec, params, ids):
    model = llama()
    prompt, new = ids[:, : N - 6], 6
    with applied(model, geometry(model), resolve(spec, params), FACTOR, N), torch.no_grad():
        out = model.generate(prompt, max_new_tokens=new, do_sample=False, pad_token_id=0,
                             return_dict_in_generate=True, output_logits=True)  # fmt: skip
        seq = prompt
        for step in range(new):
            full = model(seq, use_cache=False).logits[0, -1]
            assert_close(out.logits[step][0], full)
            seq = torch.cat([seq, full.argmax().view(1, 1)], dim=1)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@CUDA
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-4), (torch.bfloat16, 0.15)])  # bf16: 8 significant bits
@pytest.mark.parametrize("spec,params,kind,freq,w,k,g", [c for c in ATTENTION_CASES if c[2] != "logn"])
def test_fused_path_on_cuda_matches_the_naive_reference(spec, params, kind, freq, w, k, g, ids, dtype, atol, monkeypatch):
    """The same block partition as on CPU, through CUDA's memory-efficient kernel, in blocks of 12
    queries; the reference runs on CPU in float32."""
    model = llama()
    want = reference_logits(model, ids, kind, freq, w, k, g)
    monkeypatch.setattr(attention, "NEAR_BLOCK", 12)
    gpu = copy.deepcopy(model).to("cuda", dtype)
    got = patched_logits(gpu, spec, ids.cuda(), params=params).float().cpu()
    assert_close(got, want, atol=atol)
