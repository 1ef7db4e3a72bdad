"""Dual Chunk Attention (An et al., "Training-Free Long-Context Scaling of Large Language Models",
ICML 2024, arXiv 2402.17463), re-expressed for the tests.

Source: HKUNLP/ChunkLlama (https://github.com/HKUNLP/ChunkLlama, Apache-2.0), commit
2add4d7c99d24dcc1ab03414cc602abb2e28cf2c, ``chunkllama_attn_replace.py`` (unchanged there since its last
change, commit 847ae71af21fa70129d5e1e130c7a42a802335e5):

* ``replace_with_chunkllama(pretraining_length=4096, local_window_size=None)``: ``chunk_size =
  pretraining_length * 3 // 4``, ``local_window = local_window_size or pretraining_length // 8``;
* ``ChunkLlamaRotaryEmbedding._set_cos_sin_cache(seq_len)``: ``chunk_len = chunk_size - local_window``;
  ``q_t = arange(chunk_len)``, ``qc_t = (arange(chunk_len) + chunk_len).clamp(max=chunk_size)``,
  ``k_t = arange(seq_len + MAX_NEW_TOKENS) % chunk_len`` (``scaling_factor`` 1), each ``cat(freqs,
  freqs)`` of ``outer(t, inv_freq)``, cos and sin times ``mscale = get_mscale(seq_len /
  max_position_embeddings)`` (``0.05 ln(s) + 1`` for ``s > 1``, else 1). The module is built with
  ``seq_len = max_position_embeddings`` (``mscale`` 1) and rebuilt in ``forward`` whenever a longer
  ``seq_len`` comes; so a fresh model's first forward of ``n > L`` tokens runs with
  ``mscale(n / L)``, which :func:`mscale` gives (``L`` = ``max_position_embeddings``);
* ``forward``: keys rotated with ``k_cos``/``k_sin`` at ``position_ids`` (position ``j mod chunk_len``),
  ``position_ids %= chunk_len``; without a KV cache (prefill) the first chunk attends itself causally
  with ``q_t``, and each later chunk ``[begin, end)``: its own keys causally with ``q_t`` (intra), the
  previous chunk's keys with ``qc_t`` (successive, non-causal), and when ``begin > chunk_len`` the keys
  ``[0, begin - chunk_len)`` with the query at ``qc_t[chunk_len - 1]`` for every row (inter,
  non-causal); ``merge_attn_outputs`` merges the three outputs by their log-sum-exps. With a KV cache
  (one query at ``kv_seq_len - 1``, ``chunk_num_curr = (kv_seq_len - 1) // chunk_len``): scores of
  the keys ``[0, chunk_len (chunk_num_curr - 1))`` (inter, query at ``qc_t[chunk_len - 1]``),
  ``[chunk_len (chunk_num_curr - 1), chunk_len chunk_num_curr)`` (successive, ``qc_t``) and the rest
  (intra, ``q_t``) concatenated and soft-maxed in fp32.

The authors' prefill is FlashAttention-only (``flash_attn_func(..., return_attn_probs=True)``): here
each call is replaced by a naive float64 attention with FlashAttention's mask semantics (causal
aligned bottom-right) that also returns the log-sum-exp, so which rows and keys each part takes, the
positions and the merge are theirs, operation for operation. One cast is left out: their merge
rounds the softmax weights to bfloat16 (``lse_s.to(torch.bfloat16)``) because their flash outputs are
bfloat16; here the weights stay float64. Tensors are (batch, heads, seq, head_dim), one sequence, no
padding; keys and values already repeated per query group (their ``repeat_kv``).
"""

from __future__ import annotations

import math

import torch

MAX_NEW_TOKENS = 512  # their k_t cache covers seq_len + MAX_NEW_TOKENS positions


def defaults(pretraining_length: int, local_window_size: int | None = None) -> tuple[int, int]:
    """``replace_with_chunkllama``: ``(chunk_size, local_window)``."""
    chunk_size = pretraining_length * 3 // 4
    local_window = local_window_size if local_window_size else pretraining_length // 8
    return chunk_size, local_window


def mscale(seq_len: int, max_position_embeddings: int) -> float:
    """``get_mscale(seq_len / max_position_embeddings)``: ``0.05 ln(s) + 1`` past 1."""
    scale = seq_len / max_position_embeddings
    return 1.0 if scale <= 1 else 0.05 * math.log(scale) + 1.0


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def caches(inv_freq: torch.Tensor, chunk_size: int, local_window: int, seq_len: int, scale: float = 1.0):
    """``_set_cos_sin_cache``: (cos, sin) of ``q_t``, ``qc_t`` and ``k_t``, each times ``scale`` (their mscale)."""
    chunk_len = chunk_size - local_window
    q_t = torch.arange(chunk_len, dtype=inv_freq.dtype)
    qc_t = (torch.arange(chunk_len, dtype=inv_freq.dtype) + chunk_len).clamp(max=chunk_size)
    k_t = torch.arange(seq_len + MAX_NEW_TOKENS, dtype=inv_freq.dtype) % chunk_len
    out = []
    for t in (q_t, qc_t, k_t):
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        out.append((emb.cos() * scale, emb.sin() * scale))
    return out


def apply_rotary_pos_emb(x, cos, sin, position_ids):
    """Their ``apply_rotary_pos_emb``: cos/sin gathered at ``position_ids``."""
    return x * cos[position_ids][None, None] + rotate_half(x) * sin[position_ids][None, None]


def flash_attn(q, k, v, causal: bool):
    """Stand-in for ``flash_attn_func``: (out, lse). With ``causal`` query ``a`` of ``n_q`` sees key ``b``
    of ``n_k`` when ``b <= a + n_k - n_q`` (bottom-right aligned); softmax scale ``head_dim ** -0.5``."""
    n_q, n_k = q.shape[2], k.shape[2]
    scores = (q.double() @ k.double().transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        keep = torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None] + n_k - n_q
        scores = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.softmax(scores, dim=-1) @ v.double(), lse


def merge_attn_outputs(flash_results):
    """Theirs: the first chunk's output as it is, each later chunk's parts weighted by
    ``exp(lse - max) / sum`` (the bfloat16 rounding of the weights left out, see above)."""
    outputs = [flash_results[0][0]]
    for per_chunk in flash_results[1:]:
        attn = torch.stack([o for o, _ in per_chunk])
        logits = torch.stack([lse for _, lse in per_chunk])
        weights = torch.exp(logits - logits.max(dim=0).values[None])
        weights = weights / weights.sum(dim=0)
        outputs.append((attn * weights[..., None]).sum(dim=0))
    return torch.cat(outputs, dim=2)


def prefill_attention(query, key, value, inv_freq, chunk_size, local_window, scale=1.0):
    """Their ``forward`` without a KV cache, unrotated (b, h, n, d) in, (b, h, n, d) float64 out."""
    n = query.shape[2]
    chunk_len = chunk_size - local_window
    (q_cos, q_sin), (qc_cos, qc_sin), (k_cos, k_sin) = caches(inv_freq.double(), chunk_size, local_window, n, scale)
    position_ids = torch.arange(n)
    key_states = apply_rotary_pos_emb(key.double(), k_cos, k_sin, position_ids)
    position_ids = position_ids % chunk_len
    query_states, value_states = query.double(), value.double()

    q_intra = apply_rotary_pos_emb(query_states[:, :, :chunk_len], q_cos, q_sin, position_ids[:chunk_len])
    k_prev, v_prev = key_states[:, :, :chunk_len], value_states[:, :, :chunk_len]
    flash_results = [flash_attn(q_intra, k_prev, v_prev, True)]
    remain_len = n - chunk_len
    while remain_len > 0:
        per_chunk = []
        begin = n - remain_len
        curr_chunk_len = min(chunk_len, remain_len)
        end = begin + curr_chunk_len
        q_intra = apply_rotary_pos_emb(query_states[:, :, begin:end], q_cos, q_sin, position_ids[begin:end])
        k_intra, v_intra = key_states[:, :, begin:end], value_states[:, :, begin:end]
        per_chunk.append(flash_attn(q_intra, k_intra, v_intra, True))
        q_succ = apply_rotary_pos_emb(query_states[:, :, begin:end], qc_cos, qc_sin, position_ids[begin:end])
        per_chunk.append(flash_attn(q_succ, k_prev, v_prev, False))
        if begin - k_prev.shape[-2] > 0:
            prev_len = k_prev.shape[-2]
            inter_ids = position_ids[chunk_len - 1].repeat(curr_chunk_len)
            q_inter = apply_rotary_pos_emb(query_states[:, :, begin:end], qc_cos, qc_sin, inter_ids)
            per_chunk.append(flash_attn(q_inter, key_states[:, :, : begin - prev_len], value_states[:, :, : begin - prev_len], False))
        flash_results.append(per_chunk)
        k_prev, v_prev = k_intra, v_intra
        remain_len = remain_len - chunk_len
    return merge_attn_outputs(flash_results)


def decode_attention(query, key, value, inv_freq, chunk_size, local_window, scale=1.0):
    """Their ``forward`` with a KV cache, one query row at a time: row ``i`` as the decoding step whose
    cache holds keys ``0..i`` computes it. (b, h, n, d) in, (b, h, n, d) float64 out."""
    n = query.shape[2]
    chunk_len = chunk_size - local_window
    (q_cos, q_sin), (qc_cos, qc_sin), (k_cos, k_sin) = caches(inv_freq.double(), chunk_size, local_window, n, scale)
    key_states = apply_rotary_pos_emb(key.double(), k_cos, k_sin, torch.arange(n))
    value_states = value.double()
    rows = []
    for i in range(n):
        kv_seq_len = i + 1
        query_states = query.double()[:, :, i : i + 1]
        position_ids = torch.tensor([i]) % chunk_len
        chunk_num_curr = (kv_seq_len - 1) // chunk_len
        q_intra = apply_rotary_pos_emb(query_states, q_cos, q_sin, position_ids)
        k_intra = key_states[:, :, chunk_len * chunk_num_curr : kv_seq_len]
        scores = [q_intra @ k_intra.transpose(2, 3) / math.sqrt(query.shape[-1])]
        if chunk_num_curr >= 1:
            q_succ = apply_rotary_pos_emb(query_states, qc_cos, qc_sin, position_ids)
            k_succ = key_states[:, :, chunk_len * (chunk_num_curr - 1) : chunk_len * chunk_num_curr]
            scores = [q_succ @ k_succ.transpose(2, 3) / math.sqrt(query.shape[-1])] + scores
        if chunk_num_curr >= 2:
            q_inter = apply_rotary_pos_emb(query_states, qc_cos, qc_sin, torch.tensor([chunk_len - 1]))
            k_inter = key_states[:, :, : chunk_len * (chunk_num_curr - 1)]
            scores = [q_inter @ k_inter.transpose(2, 3) / math.sqrt(query.shape[-1])] + scores
        weights = torch.softmax(torch.cat(scores, dim=-1), dim=-1)
        rows.append(weights @ value_states[:, :, :kv_seq_len])
    return torch.cat(rows, dim=2)
