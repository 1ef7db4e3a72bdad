"""STRING's attention (An et al., "Why Does the Effective Context Length of LLMs Fall Short?",
arXiv 2410.18745), re-expressed for the tests.

Source: HKUNLP/STRING (https://github.com/HKUNLP/STRING, MIT License), commit
216cc2f04cee147e8c3cfaa15723b182ecbe321e, ``string_for_llama.py``:

* ``RotaryEmbedding._set_cos_sin_cache``: ``cos_cached``/``sin_cached`` of ``t = arange(n)`` times
  ``inv_freq``, ``emb = cat(freqs, freqs)``, multiplied by ``attention_factor``;
* ``apply_rotary_pos_emb(x, cos, sin, position_ids)``: ``x * cos[ids] + rotate_half(x) * sin[ids]``;
* ``forward`` (the patched ``LlamaAttention.forward``): keys rotated at ``position_ids``; queries
  rotated twice, at ``position_ids`` (``query_states_1``) and at ``position_ids - diag_size +
  local_window`` (``query_states_2``); without a KV cache (prefill) ``string_flash_forward``, with
  one (decoding a token) two ``flash_attn_with_kvcache`` calls merged by their log-sum-exps;
* ``string_flash_forward`` (prefill): ``flash_attn_func(q1, k, v, causal=True, window_size=[S, 0])``
  (query ``i`` sees keys ``i - S <= j <= i``), then for ``triangle_len = n - S >= 0`` the last
  ``triangle_len`` shifted queries against the first ``triangle_len`` keys, ``causal=True`` (query
  ``i >= S`` sees keys ``j <= i - S``), merged on rows ``S..n-1`` by
  ``out = diag * 1/(1+e^(lse_shifted - lse_diag)) + shifted * 1/(1+e^(lse_diag - lse_shifted))``;
* decoding (``has_kv_cache``): the query at ``kv_seq_len - 1`` against the last ``diag_size`` cached
  keys with ``q1`` and against the first ``kv_seq_len - diag_size`` with ``q2``, the same merge;
* ``replace_with_string(max_test_length, shifted_offset, small_local_value=128)``: ``diag_size =
  shifted_offset``, ``local_window = small_local_value``, ``attention_factor = 0.1 * log(2) + 1``;
  README.md and the RULER / InfiniteBench / needle scripts pass ``shifted_offset = int(0.33 * L)``
  (``--shifted_ratio 0.33``) and ``small_local_value = 128`` (``--local_value 128``).
  ``string_for_qwen2.py`` and the vLLM fork (``vllm_string/.../flash_attn_string.py``,
  ``rotary_embedding.py``: queries and keys times ``mscale = 0.1*ln(2) + 1``) do the same.

The authors' code is FlashAttention-only (``flash_attn_func``, ``flash_attn_2_cuda.fwd_kvcache``):
here each flash call is replaced by a naive float64 attention with the same mask semantics
(FlashAttention's documented ``window_size`` and bottom-right-aligned causal mask) that also
returns the log-sum-exp, so the surrounding logic — which rows and keys each branch takes, the
position shift, the merge — is the authors', operation for operation. Note the two paths differ
at exactly one key: the prefill window ``[S, 0]`` includes ``i - j = S`` and so does the shifted
triangle (``j <= i - S``), so prefill scores that key twice, at relative positions ``S`` and ``W``;
decoding takes it once, in the shifted part (``i - j >= S``). Tensors are laid out (batch, heads,
seq, head_dim), one sequence, no padding.
"""

from __future__ import annotations

import math

import torch

ATTENTION_FACTOR = 0.1 * math.log(2) + 1  # replace_with_string's attention_factor
SHIFT_RATIO, LOCAL_VALUE = 0.33, 128  # --shifted_ratio, --local_value defaults of the scripts


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def cos_sin_cache(
    inv_freq: torch.Tensor, seq_len: int, attention_factor: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``RotaryEmbedding._set_cos_sin_cache``: (seq_len, head_dim) cos and sin times the attention factor."""
    t = torch.arange(seq_len, dtype=inv_freq.dtype)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return attention_factor * emb.cos(), attention_factor * emb.sin()


def apply_rotary_pos_emb(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_ids: torch.Tensor
) -> torch.Tensor:
    """The authors' ``apply_rotary_pos_emb``: cos/sin gathered at ``position_ids`` (negative ids index
    from the end of the cache, as in their code; those rows are never used)."""
    return x * cos[position_ids][None, None] + rotate_half(x) * sin[position_ids][None, None]


def flash_attn(q, k, v, causal: bool, window_size=(-1, -1)):
    """Stand-in for ``flash_attn_func`` / ``fwd_kvcache``: (out, lse). Query ``a`` of ``n_q`` sees key
    ``b`` of ``n_k`` when ``b <= a + n_k - n_q`` (causal, bottom-right aligned) and
    ``a + n_k - n_q - left <= b`` (a left window), softmax scale ``head_dim ** -0.5``."""
    n_q, n_k = q.shape[2], k.shape[2]
    scores = (q.double() @ k.double().transpose(-1, -2)) * q.shape[-1] ** -0.5
    a = torch.arange(n_q)[:, None] + n_k - n_q
    b = torch.arange(n_k)[None, :]
    keep = torch.ones(n_q, n_k, dtype=torch.bool)
    if causal:
        keep &= b <= a
    if window_size[0] >= 0:
        keep &= b >= a - window_size[0]
    scores = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (b, h, n_q)
    return torch.softmax(scores, dim=-1) @ v.double(), lse


def string_flash_forward(q1, q2, k, v, diag_size: int):
    """``string_flash_forward``: the prefill of ``n`` queries and keys."""
    kv_seq_len = k.shape[2]
    diag_out, diag_lse = flash_attn(q1, k, v, causal=True, window_size=(diag_size, 0))
    triangle_len = kv_seq_len - diag_size
    if triangle_len < 0:
        return diag_out
    shifted_out, shifted_lse = flash_attn(
        q2[:, :, -triangle_len:], k[:, :, :triangle_len], v[:, :, :triangle_len], causal=True
    )
    s = diag_out.shape[2] - shifted_out.shape[2]
    diag_lse_tail = diag_lse[:, :, s:]
    lse_gap = 1 / (1 + torch.exp(diag_lse_tail - shifted_lse))
    lse_gap_re = 1 / (1 + torch.exp(shifted_lse - diag_lse_tail))
    tail = diag_out[:, :, s:] * lse_gap_re[..., None] + shifted_out * lse_gap[..., None]
    return torch.cat([diag_out[:, :, :s], tail], dim=2)


def decode_step(q1, q2, k_cache, v_cache, diag_size: int):
    """The ``has_kv_cache`` branch: one query (the last position) against a cache of ``kv_seq_len``
    keys. The authors' slices assume ``kv_seq_len > diag_size`` (their runs decode after prompts far
    longer than ``S``); below that every key is in the diagonal part, what their prefill gives."""
    kv_seq_len = k_cache.shape[2]
    shifted_size = kv_seq_len - diag_size
    if shifted_size <= 0:
        return flash_attn(q1, k_cache, v_cache, causal=False)[0]
    out1, lse1 = flash_attn(q1, k_cache[:, :, shifted_size:], v_cache[:, :, shifted_size:], causal=False)
    out2, lse2 = flash_attn(q2, k_cache[:, :, :shifted_size], v_cache[:, :, :shifted_size], causal=False)
    gap21 = 1 / (1 + torch.exp(lse2 - lse1))
    gap12 = 1 / (1 + torch.exp(lse1 - lse2))
    return out1 * gap21[..., None] + out2 * gap12[..., None]


def rotated(query, key, inv_freq, diag_size: int, local_window: int, attention_factor: float):
    """Keys at ``position_ids``; queries at ``position_ids`` and ``position_ids - diag_size + local_window``."""
    n = key.shape[2]
    # a cache longer than the sequence, as the authors' (max_position_embeddings or more): the shifted
    # ids of queries i < S - W are negative and index from its end; those rows are never used
    cos, sin = cos_sin_cache(inv_freq.double(), n + diag_size, attention_factor)
    position_ids = torch.arange(n)
    k = apply_rotary_pos_emb(key.double(), cos, sin, position_ids)
    q1 = apply_rotary_pos_emb(query.double(), cos, sin, position_ids)
    q2 = apply_rotary_pos_emb(query.double(), cos, sin, position_ids - diag_size + local_window)
    return q1, q2, k


def prefill_attention(
    query, key, value, inv_freq, diag_size: int, local_window: int, attention_factor: float = ATTENTION_FACTOR
):
    """Unrotated q (b, h, n, d), k and v (b, h, n, d) -> the authors' prefill output (b, h, n, d), float64."""
    q1, q2, k = rotated(query, key, inv_freq, diag_size, local_window, attention_factor)
    return string_flash_forward(q1, q2, k, value, diag_size)


def decode_attention(
    query, key, value, inv_freq, diag_size: int, local_window: int, attention_factor: float = ATTENTION_FACTOR
):
    """Every query row as the authors' decoding step computes it: row ``i`` against the cache of keys
    ``0..i`` -> (b, h, n, d), float64."""
    q1, q2, k = rotated(query, key, inv_freq, diag_size, local_window, attention_factor)
    rows = [decode_step(q1[:, :, i : i + 1], q2[:, :, i : i + 1], k[:, :, : i + 1], value[:, :, : i + 1], diag_size)
            for i in range(query.shape[2])]  # fmt: skip
    return torch.cat(rows, dim=2)
