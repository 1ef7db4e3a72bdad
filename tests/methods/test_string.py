"""STRING (An et al., arXiv 2410.18745) against the authors' code, HKUNLP/STRING at commit 216cc2f
(``tests/reference/string_hkunlp.py``).

The authors' implementation is FlashAttention-only, so the reference replaces each flash call by a
naive float64 attention with FlashAttention's mask semantics that also returns the log-sum-exp;
everything around those calls (the rotary cache with its attention factor, the two query rotations,
which rows and keys each branch takes, the log-sum-exp merge) is theirs. It is registered through
transformers' AttentionInterface with the model's rotary module set to the identity, so it rotates
queries and keys itself, as the authors' patched forward does.

* ctxbench's ``string`` equals the authors' decoding path (each query row as their KV-cache step
  computes it) to float32 tolerance at four times the trained length; ``yarn+string`` at factor 1
  with ``attention_factor = 0.1 ln 2 + 1`` equals it with the authors' attention factor, i.e. STRING
  exactly as they run it.
* The authors' prefill path scores the key at ``i - j = S`` twice (window ``[S, 0]`` and the shifted
  triangle ``j <= i - S`` both include it): it agrees with ctxbench on rows ``i < S`` and not after,
  and with that key left out of the window it agrees everywhere (README, departures).
* Defaults are the authors' (``S = int(0.33 L)``, ``W = 128``), bad values one clear error.
"""

from __future__ import annotations

import pytest
import torch
from helpers import logits_of, max_diff, patched_logits_of, reference_llama, unrotated
from reference import string_hkunlp
from transformers import AttentionInterface

from ctxbench.errors import UserError
from ctxbench.methods import effective_params, resolve
from ctxbench.methods.patching import applied
from ctxbench.model.geometry import RopeGeometry

TRAINED = 64
N = 4 * TRAINED  # past the trained length
VOCAB = 97
REFERENCE: dict = {}

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny matmuls on one thread


def _reference_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Unrotated q (b, h, n, d), k and v (b, kv, n, d) -> (b, n, h, d): the authors' attention, keys and
    values repeated per query group as their ``repeat_kv`` does."""
    rep = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    path = (
        string_hkunlp.decode_attention if REFERENCE["path"] == "decode" else string_hkunlp.prefill_attention
    )
    out = path(
        query,
        key,
        value,
        REFERENCE["inv_freq"],
        REFERENCE["S"],
        REFERENCE["W"],
        REFERENCE["attention_factor"],
    )
    return out.transpose(1, 2).to(query.dtype).contiguous(), None


AttentionInterface.register("string-reference", _reference_attention)


def reference_logits(model, ids, S, W, path="decode", attention_factor=1.0) -> torch.Tensor:
    with unrotated(model, "string-reference") as inv_freq:
        REFERENCE.update(path=path, inv_freq=inv_freq, S=S, W=W, attention_factor=attention_factor)
        try:
            return logits_of(model, ids)
        finally:
            REFERENCE.clear()


def patched_logits(model, spec, ids, params, factor=4.0) -> torch.Tensor:
    return patched_logits_of(model, spec, ids, params, factor)


@pytest.fixture
def ids():
    return torch.randint(0, VOCAB, (1, N), generator=torch.Generator().manual_seed(2))


# (S, W): the default S of this model (int(0.33 * 64) = 21) with W = S // 2 (what auto gives here),
# a larger S, and W = 0 (the far pairs start at relative position 0, the diagonal's)
CASES = [(21, 10), (40, 16), (24, 0)]


@pytest.mark.parametrize("S,W", CASES)
def test_string_logits_equal_the_authors_decoding_path(S, W, ids):
    model = reference_llama(VOCAB)
    want = reference_logits(model, ids, S, W)
    got = patched_logits(model, "string", ids, {"window": S, "local_value": W})
    assert max_diff(got, want) <= 1e-5, f"max abs diff {max_diff(got, want):.3g}"
    assert max_diff(want, logits_of(model, ids)) > 1e-2  # the shifted far branch matters here


def test_string_default_parameters_give_the_authors_numbers_on_this_model(ids):
    model = reference_llama(VOCAB)
    params = effective_params(resolve("string"), RopeGeometry.from_config(model.config), 4.0)
    assert params == {"window": 21, "local_value": 10}
    assert max_diff(patched_logits(model, "string", ids, None), reference_logits(model, ids, 21, 10)) <= 1e-5


def test_yarn_at_factor_one_with_the_authors_attention_factor_is_string_as_they_run_it(ids):
    """The authors multiply cos and sin by ``0.1 ln 2 + 1`` at every length; yarn at factor 1 leaves the
    frequencies as they are and takes that number as its ``attention_factor``."""
    model = reference_llama(VOCAB)
    want = reference_logits(model, ids, 21, 10, attention_factor=string_hkunlp.ATTENTION_FACTOR)
    params = {"window": 21, "local_value": 10, "attention_factor": string_hkunlp.ATTENTION_FACTOR}
    got = patched_logits(model, "yarn+string", ids, params, factor=1.0)
    assert max_diff(got, want) <= 1e-5, f"max abs diff {max_diff(got, want):.3g}"
    assert max_diff(want, reference_logits(model, ids, 21, 10)) > 1e-2  # the factor matters here


@pytest.mark.parametrize("S,W", CASES[:2])
def test_the_authors_prefill_differs_from_string_only_from_row_S_on(S, W, ids):
    """Their prefill scores the key at ``i - j = S`` twice (at ``S`` and at ``W``): rows before ``S``,
    which have no far key, agree with ctxbench; from row ``S`` on they do not."""
    model = reference_llama(VOCAB)
    want = reference_logits(model, ids, S, W, path="prefill")
    got = patched_logits(model, "string", ids, {"window": S, "local_value": W})
    assert max_diff(got[:, :S], want[:, :S]) <= 1e-5
    assert (got[0, S:] - want[0, S:]).abs().amax(-1).min() > 1e-4  # every later row differs
    decode = reference_logits(model, ids, S, W)
    assert max_diff(decode[:, :S], want[:, :S]) <= 1e-5 and max_diff(decode, want) > 1e-2


def test_without_the_double_counted_key_the_authors_prefill_is_string(ids, monkeypatch):
    """Their prefill with the diagonal window narrowed from ``[S, 0]`` to ``[S - 1, 0]`` (so the key at
    ``i - j = S`` is only in the shifted triangle) gives ctxbench's logits: that key is the whole difference."""
    flash = string_hkunlp.flash_attn

    def window_below_s(q, k, v, causal, window_size=(-1, -1)):
        left = window_size[0] - 1 if window_size[0] >= 0 else window_size[0]
        return flash(q, k, v, causal, (left, window_size[1]))

    monkeypatch.setattr(string_hkunlp, "flash_attn", window_below_s)
    model = reference_llama(VOCAB)
    want = reference_logits(model, ids, 21, 10, path="prefill")
    got = patched_logits(model, "string", ids, {"window": 21, "local_value": 10})
    assert max_diff(got, want) <= 1e-5, f"max abs diff {max_diff(got, want):.3g}"


def test_string_is_plain_rope_when_S_covers_the_sequence_or_W_equals_S(ids):
    model = reference_llama(VOCAB)
    plain = logits_of(model, ids)
    assert max_diff(patched_logits(model, "string", ids, {"window": N, "local_value": 128}), plain) <= 1e-5
    assert max_diff(patched_logits(model, "string", ids, {"window": 30, "local_value": 30}), plain) <= 1e-5


def test_string_generation_with_a_kv_cache_matches_full_forwards(ids):
    model = reference_llama(VOCAB)
    prompt, new = ids[:, : N - 6], 6
    setting = resolve("string", {"window": 21, "local_value": 10})
    with applied(model, RopeGeometry.from_config(model.config), setting, 4.0, N), torch.no_grad():
        out = model.generate(prompt, max_new_tokens=new, do_sample=False, pad_token_id=0,
                             return_dict_in_generate=True, output_logits=True)  # fmt: skip
        seq = prompt
        for step in range(new):
            full = model(seq, use_cache=False).logits[0, -1]
            assert max_diff(out.logits[step][0], full) <= 1e-5
            seq = torch.cat([seq, full.argmax().view(1, 1)], dim=1)


# --- defaults and bad values ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "L,S,W", [(131072, 43253, 128), (4096, 1351, 128), (2048, 675, 128), (64, 21, 10), (2, 1, 0)]
)
def test_defaults_are_the_authors_int_033_L_and_128(L, S, W):
    """README.md of HKUNLP/STRING: ``shifted_offset=int(0.33 * L)`` (43253 for Llama 3.1's 131072),
    ``small_local_value=128``; W is capped at S // 2 where 128 would not fit under S."""
    assert effective_params(resolve("string"), RopeGeometry(16, 16, 1e4, L), 2.0) == {
        "window": S,
        "local_value": W,
    }


def test_the_factor_is_not_used():
    setting = resolve("string")
    assert not setting.uses_factor and setting.two_branch


@pytest.mark.parametrize("params,words", [
    ({"window": 0}, ["string parameter window", "0 must be >= 1", "shifted_offset"]),
    ({"local_value": -1}, ["string parameter local_value", "-1 must be >= 0", "local_value"]),
    ({"local_value": "abc"}, ["string parameter local_value", "'abc' is not a length"]),
    ({"window": 2.5}, ["string parameter window", "2.5 is not a whole number"]),
])  # fmt: skip
def test_bad_values_are_one_clear_error(params, words):
    with pytest.raises(UserError) as info:
        resolve("string", params)
    line = info.value.line()
    assert "\n" not in line and all(w in line for w in words), line


@pytest.mark.parametrize("params", [{"window": 100, "local_value": 200}, {"local_value": 30}])
def test_local_value_above_the_shift_is_one_clear_error(params):
    with pytest.raises(UserError) as info:
        effective_params(resolve("string", params), RopeGeometry(16, 16, 1e4, TRAINED), 2.0)
    line = info.value.line()
    assert "\n" not in line and "string local_value" in line and "must be <= window" in line, line
