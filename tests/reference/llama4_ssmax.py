"""Llama 4's attention temperature tuning (Scalable-Softmax, arXiv 2501.19399), re-expressed for the tests.

Source: huggingface/transformers (Apache-2.0, Copyright The HuggingFace Team), release v5.24.0 (the
one in this project's .venv), src/transformers/models/llama4/modeling_llama4.py,
``Llama4TextAttention.forward``: when ``attn_temperature_tuning`` is on (and on Llama 4's NoPE
layers) the query states (batch, seq, heads, head_dim), after any rotation, are multiplied by

    attn_scales = log1p(floor((positions.float() + 1.0) / floor_scale)) * attn_scale + 1.0

with ``positions = arange(seq) + past_seen_tokens`` (0-based positions of the queries in the whole
sequence), viewed as (1, seq, 1, 1), and the product cast back to the query dtype. Defaults of
``Llama4TextConfig`` (configuration_llama4.py, same release): ``attn_scale=0.1``, ``floor_scale=8192``.
Older releases (e.g. commit 63210d0e3b74c2119b7998ff65bc6a2729283626) write ``log(floor(...) + 1.0)``,
the same function. The same operations, written as free functions; Apache-2.0 permits this use with
attribution, given above.
"""

from __future__ import annotations

import torch


def attn_scales(seq_len: int, past_seen_tokens: int = 0, attn_scale: float = 0.1, floor_scale: int = 8192) -> torch.Tensor:
    """The factor of each query position, shape (seq_len,), float32."""
    positions = torch.arange(seq_len) + past_seen_tokens
    return torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) * attn_scale + 1.0


def scale_query_states(query_states: torch.Tensor, past_seen_tokens: int = 0, attn_scale: float = 0.1,
                       floor_scale: int = 8192) -> torch.Tensor:  # fmt: skip
    """Llama 4's step on query states laid out (batch, seq, heads, head_dim)."""
    batch, seq = query_states.shape[:2]
    scales = attn_scales(seq, past_seen_tokens, attn_scale, floor_scale)
    scales = scales.view((1, seq, 1, 1)).expand((batch, seq, 1, 1))
    return (query_states * scales).to(query_states.dtype)
