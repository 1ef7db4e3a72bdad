"""Dual Chunk Attention (An et al., ICML 2024, arXiv 2402.17463) against the authors' code, HKUNLP/ChunkLlama
at commit 2add4d7 (``tests/reference/chunkllama_hkunlp.py``, a transcription of ``chunkllama_attn_replace.py``).

The reference is registered through transformers' AttentionInterface with the model's rotary module set
to the identity, so it rotates queries and keys itself, as the authors' patched forward does, with their
three rotary caches (``q_t``, ``qc_t``, ``k_t``), their chunk loop and log-sum-exp merge (prefill), or
their concatenated softmax (decoding with a KV cache).

* ctxbench's ``dca`` equals both of the authors' paths to float32 tolerance at five times the trained
  length, with chunks small enough that every query past the second chunk has all three parts
  (intra-, successive- and inter-chunk), including ``local_window >= chunk_size - local_window`` where
  the inter-chunk query sits at ``2c - 1`` rather than ``chunk_size``;
* ``yarn+dca --factor 1`` with ``attention_factor`` set to the authors' ``mscale`` equals their code as
  it runs (cos and sin times ``0.05 ln(n/L) + 1``), the one thing ``dca`` leaves out (README, departures);
* the fused path, the blocked path, a KV-cache prefix and greedy decoding agree;
* defaults are the authors' (``chunk_size = L*3//4``, ``local_window = L//8``), bad values one clear line.
The naive relative-position reference of ``tests/test_patching.py`` checks ``dca`` too.
"""

from __future__ import annotations

import pytest
import torch
from helpers import logits_of, max_diff, patched_logits_of, reference_llama, unrotated
from reference import chunkllama_hkunlp
from transformers import AttentionInterface

from ctxbench.errors import UserError
from ctxbench.methods import attention, effective_params, resolve
from ctxbench.methods.export import export
from ctxbench.methods.patching import applied
from ctxbench.model.geometry import RopeGeometry

TRAINED = 64
N = 5 * TRAINED  # past the trained length
VOCAB = 97
REFERENCE: dict = {}

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny matmuls on one thread


def _reference_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Unrotated q (b, h, n, d), k and v (b, kv, n, d) -> (b, n, h, d): the authors' attention, keys and
    values repeated per query group as their ``repeat_kv`` does."""
    rep = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    path = chunkllama_hkunlp.decode_attention if REFERENCE["path"] == "decode" else chunkllama_hkunlp.prefill_attention
    out = path(query, key, value, REFERENCE["inv_freq"], REFERENCE["chunk_size"], REFERENCE["local_window"], REFERENCE["mscale"])
    return out.transpose(1, 2).to(query.dtype).contiguous(), None


AttentionInterface.register("chunkllama-reference", _reference_attention)


def reference_logits(model, ids, chunk_size, local_window, path="decode", mscale=1.0) -> torch.Tensor:
    with unrotated(model, "chunkllama-reference") as inv_freq:
        REFERENCE.update(path=path, inv_freq=inv_freq, chunk_size=chunk_size, local_window=local_window, mscale=mscale)
        try:
            return logits_of(model, ids)
        finally:
            REFERENCE.clear()


def patched_logits(model, spec, ids, params, factor=1.0) -> torch.Tensor:
    return patched_logits_of(model, spec, ids, params, factor)


@pytest.fixture
def ids():
    return torch.randint(0, VOCAB, (1, N), generator=torch.Generator().manual_seed(2))


# (chunk_size, local_window): this model's defaults (48 = 64*3//4, 8 = 64//8: chunks of 40, 8 of them),
# smaller chunks (18), local_window above the chunk length (14: the inter-chunk query at 2c - 1 = 27,
# not 30), and no local window (the successive-chunk query at chunk_size, as the inter-chunk one)
CASES = [(48, 8), (24, 6), (30, 16), (20, 0)]


@pytest.mark.parametrize("chunk_size,local_window", CASES)
@pytest.mark.parametrize("path", ["decode", "prefill"])
def test_dca_logits_equal_the_authors_code(chunk_size, local_window, path, ids):
    model = reference_llama(VOCAB)
    want = reference_logits(model, ids, chunk_size, local_window, path)
    got = patched_logits(model, "dca", ids, {"chunk_size": chunk_size, "local_window": local_window})
    assert max_diff(got, want) <= 1e-5, f"max abs diff {max_diff(got, want):.3g}"
    assert max_diff(want, logits_of(model, ids)) > 1e-2  # chunked positions change the logits here


@pytest.mark.parametrize("chunk_size,local_window", CASES)
def test_the_cases_exercise_all_three_parts(chunk_size, local_window):
    """Every query from the third chunk on has intra-, successive- and inter-chunk keys, and together with
    causality the three parts are each query's keys exactly once."""
    from ctxbench.methods import attention_branches

    setting = resolve("dca", {"chunk_size": chunk_size, "local_window": local_window})
    params = effective_params(setting, RopeGeometry(16, 16, 1e4, TRAINED), 1.0)
    q = torch.arange(N)
    counts = []
    for branch in attention_branches(setting, params):
        lo, hi = branch.keys(q)
        counts.append((hi - lo.clamp(min=0)).clamp(min=0))
    assert torch.equal(sum(counts), q + 1)
    assert all(bool((c[2 * (chunk_size - local_window) :] > 0).all()) for c in counts)


def test_default_parameters_give_the_authors_numbers_on_this_model(ids):
    model = reference_llama(VOCAB)
    params = effective_params(resolve("dca"), RopeGeometry.from_config(model.config), 4.0)
    assert params == {"chunk_size": 48, "local_window": 8}
    assert max_diff(patched_logits(model, "dca", ids, None), reference_logits(model, ids, 48, 8)) <= 1e-5


def test_yarn_at_factor_one_with_the_authors_mscale_is_dca_as_they_run_it(ids):
    """Their rotary module multiplies cos and sin by ``0.05 ln(n/L) + 1`` once ``n > L`` (a fresh model's
    forward of ``n`` tokens); yarn at factor 1 keeps the frequencies and takes it as ``attention_factor``."""
    model = reference_llama(VOCAB)
    scale = chunkllama_hkunlp.mscale(N, TRAINED)
    assert scale == pytest.approx(0.05 * torch.log(torch.tensor(5.0)).item() + 1)
    want = reference_logits(model, ids, 48, 8, mscale=scale)
    got = patched_logits(model, "yarn+dca", ids, {"chunk_size": 48, "local_window": 8, "attention_factor": scale})
    assert max_diff(got, want) <= 1e-5, f"max abs diff {max_diff(got, want):.3g}"
    assert max_diff(want, reference_logits(model, ids, 48, 8)) > 1e-2  # the temperature matters here


@pytest.mark.parametrize("chunk_size,local_window", [(48, 8), (30, 16)])
def test_fused_blocked_cached_and_decoded_paths_agree(chunk_size, local_window, ids, monkeypatch):
    """The fused block partition (blocks of 12 queries, cut at chunk starts), the blocked path (blocks of
    20 queries), a 100-token cache then 220 queries, and greedy decoding token by token."""
    model = reference_llama(VOCAB)
    setting = resolve("dca", {"chunk_size": chunk_size, "local_window": local_window})
    want = reference_logits(model, ids, chunk_size, local_window)
    monkeypatch.setattr(attention, "NEAR_BLOCK", 12)
    geom = RopeGeometry.from_config(model.config)
    with applied(model, geom, setting, 1.0, N), torch.no_grad():
        fused = model(ids).logits
        first = model(ids[:, :100], use_cache=True)
        rest = model(ids[:, 100:], past_key_values=first.past_key_values, use_cache=True).logits
        monkeypatch.setattr(attention, "FUSED_DEVICES", ())
        monkeypatch.setattr(attention, "SCORE_BUDGET", 4 * N * 20)  # the blocked path in blocks of 20 queries
        blocked = model(ids).logits
        monkeypatch.undo()
        prompt, new = ids[:, : N - 6], 6
        out = model.generate(prompt, max_new_tokens=new, do_sample=False, pad_token_id=0,
                             return_dict_in_generate=True, output_logits=True)  # fmt: skip
        seq = prompt
        for step in range(new):
            full = model(seq, use_cache=False).logits[0, -1]
            assert max_diff(out.logits[step][0], full) <= 1e-5
            seq = torch.cat([seq, full.argmax().view(1, 1)], dim=1)
    for got in (fused, torch.cat([first.logits, rest], dim=1), blocked):
        assert max_diff(got, want) <= 1e-5, f"max abs diff {max_diff(got, want):.3g}"


def test_chunks_covering_the_sequence_are_plain_rope(ids):
    model = reference_llama(VOCAB)
    assert max_diff(patched_logits(model, "dca", ids, {"chunk_size": N + 8, "local_window": 8}), logits_of(model, ids)) <= 1e-5


# --- defaults and bad values ------------------------------------------------------------------------


@pytest.mark.parametrize("L", [4096, 8192, 32768, 64, 2])
def test_defaults_are_the_authors_three_quarters_and_an_eighth_of_L(L):
    """``replace_with_chunkllama(pretraining_length=L)``: chunk_size ``L * 3 // 4`` (3072 for Llama 2's 4096,
    as the paper's), local_window ``L // 8``."""
    cs, lw = chunkllama_hkunlp.defaults(L)
    assert effective_params(resolve("dca"), RopeGeometry(16, 16, 1e4, L), 2.0) == {"chunk_size": max(1, cs), "local_window": lw}


def test_a_chunk_size_given_alone_keeps_chunks():
    geom = RopeGeometry(16, 16, 1e4, 4096)
    assert effective_params(resolve("dca", {"chunk_size": 256}), geom, 1.0) == {"chunk_size": 256, "local_window": 128}
    assert effective_params(resolve("dca", {"local_window": 1024}), geom, 1.0) == {"chunk_size": 3072, "local_window": 1024}


def test_the_factor_is_not_used():
    setting = resolve("dca")
    assert not setting.uses_factor and setting.attention.branches is not None and not setting.two_branch


@pytest.mark.parametrize("params,words", [
    ({"chunk_size": 0}, ["dca parameter chunk_size", "0 must be >= 1", "chunk_size="]),
    ({"local_window": -1}, ["dca parameter local_window", "-1 must be >= 0", "local_window="]),
    ({"chunk_size": "abc"}, ["dca parameter chunk_size", "'abc' is not a length"]),
    ({"local_window": 2.5}, ["dca parameter local_window", "2.5 is not a whole number"]),
    ({"window": 16}, ["unknown parameter 'window' for method 'dca'", "chunk_size, local_window"]),
])  # fmt: skip
def test_bad_values_are_one_clear_error(params, words):
    with pytest.raises(UserError) as info:
        resolve("dca", params)
    line = info.value.line()
    assert "\n" not in line and all(w in line for w in words), line


@pytest.mark.parametrize("params", [{"chunk_size": 16, "local_window": 16}, {"chunk_size": 100, "local_window": 200}])
def test_local_window_not_below_the_chunk_size_is_one_clear_error(params):
    with pytest.raises(UserError) as info:
        effective_params(resolve("dca", params), RopeGeometry(16, 16, 1e4, TRAINED), 2.0)
    line = info.value.line()
    assert "\n" not in line and "dca local_window" in line and "must be < chunk_size" in line, line
    assert "--param local_window=N" in line


def test_dca_does_not_stack_with_logn():
    with pytest.raises(UserError, match="cannot combine 'dca\\+logn'"):
        resolve("dca+logn")


# --- export -------------------------------------------------------------------------------------------


def test_vllm_export_is_refused_naming_the_engines_that_run_it():
    """vLLM 0.11 removed dual-chunk attention (its V0 backend); the refusal names SGLang's backend and
    the last vLLM that ran it, instead of printing a command no current vLLM can serve."""
    with pytest.raises(UserError) as err:
        export("dca", 1, "vllm", head_dim=128, base=1e6, trained_len="32k")
    text = str(err.value)
    assert "vLLM 0.11 removed" in text and "dual_chunk_flash_attn" in text and "vLLM <= 0.10" in text


@pytest.mark.parametrize("kwargs,words", [
    (dict(method="dca", to="transformers"), "transformers cannot express method 'dca': .*transformers has no dual chunk attention"),
    (dict(method="dca", to="llamacpp"), "llamacpp cannot express method 'dca': .*llama.cpp has no dual chunk attention"),
    (dict(method="yarn+dca", to="vllm"), "vllm cannot express method 'yarn\\+dca': vLLM 0.11 removed"),
])  # fmt: skip
def test_engines_without_dca_refuse_it_in_one_line(kwargs, words):
    with pytest.raises(UserError, match=words) as info:
        export(factor=2, head_dim=128, base=1e4, trained_len=4096, **kwargs)
    assert "\n" not in info.value.line()


