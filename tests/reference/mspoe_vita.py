"""Ms-PoE's attention (Zhang et al., "Found in the Middle: How Language Models Use Long Contexts
Better via Plug-and-Play Positional Encoding", NeurIPS 2024, arXiv 2403.04797), transcribed for the tests.

Source: VITA-Group/Ms-PoE (https://github.com/VITA-Group/Ms-PoE, MIT License), commit
a46c3d18a6c7d9fb941b72c17dccffe7863adddc, ``utils/modify_arch/llama.py``:

* ``MsPoELlamaRotaryEmbedding._set_cos_sin_cache``: ``t = arange(n)`` repeated per head, divided by
  ``compress_ratio = min + (max - min) * (arange(H) / H)``, outer product with ``inv_freq``,
  ``emb = cat(freqs, freqs)``: a (H, n, d) cos/sin cache, one row of positions per ratio; built at
  ``max_position_embeddings`` and rebuilt when a longer sequence comes (``forward``);
* ``MsPoELlamaAttention._head_wise_statistics``: ``softmax(q k^T / sqrt(d) + causal mask)`` of the
  *unrotated* queries and keys (keys repeated per query group), float32 softmax cast back;
* ``_calculate_outlier``: ``outlier = -(w > 3 * mean(w)).float().mean(-1)[:, -1]`` (the last query's
  row), ``head_orders = outlier.argsort()``; with ``head_type == "normal"``,
  ``H - 1 - arange(H)`` instead;
* ``forward``: on the first call (``enable_head_metrics``) the head order is computed and kept; every
  call then takes ``cos[self.head_order]`` (head ``h`` gets the positions of ratio index
  ``head_order[h]``), rotates the queries with it and the keys with ``cos[::num_key_value_groups]``
  (``sample_rotary_emb``: key head ``j`` takes the row of query head ``j * groups``), at
  ``position_ids``; rotated keys and values are appended to the cache, and attention is the plain
  ``softmax(q k^T / sqrt(d) + causal mask) v`` with a float32 softmax;
* ``MsPoELlamaForCausalLM``: the layers in ``config.apply_layers`` get this attention, the others
  keep ``LlamaAttention``; ``_reset()`` (called by ``inference.py`` after each ``generate``) turns
  ``enable_head_metrics`` back on, so each input's prefill computes its own order and its decoding
  steps reuse it.
* Defaults: ``inference.py`` ``--compress_ratio_min 1.2 --compress_ratio_max 1.8``; ``src/ms_poe.sh``
  ``--apply_layers 2,...,31`` on 32-layer Vicuna-7B (``--head_type normal`` for answer positions 5,
  7 and 10 of its MDQA runs, the outlier order otherwise).

Adapted, not changed: the module wraps a transformers v5 ``LlamaAttention``'s projections and keeps
its own ``(key, value)`` cache of rotated keys (the authors' ``past_key_value`` tuple; transformers
no longer hands layers one), so tests call :func:`reset` before each new input, as the authors call
``_reset()``; ``pretraining_tp == 1`` only. One deliberate change: ``argsort(stable=True)`` where the
authors call ``argsort()``, whose order among tied scores torch leaves unspecified (ties are common:
a score is a count over the keys divided by their number); ctxbench breaks ties by head index too.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

RATIO_MIN, RATIO_MAX = 1.2, 1.8  # inference.py defaults, used by every src/ms_poe.sh run
FIRST_LAYER = 2  # src/ms_poe.sh: --apply_layers "2,3,...,31"


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def _make_causal_mask(bsz, tgt_len, past_key_values_length, dtype, device):
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
    mask_cond = torch.arange(mask.size(-1), device=device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    if past_key_values_length > 0:
        mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device), mask], dim=-1)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


def apply_rotary_pos_emb_single_scaling(x, cos, sin, position_ids):
    cos = cos[:, position_ids]  # [head, bs, seq_len, dim]
    sin = sin[:, position_ids]  # [head, bs, seq_len, dim]
    cos = cos.transpose(0, 1)  # [bs, head, seq_len, dim]
    sin = sin.transpose(0, 1)  # [bs, head, seq_len, dim]
    return (x * cos) + (rotate_half(x) * sin)


def sample_rotary_emb(cos, sin, num_key_value_groups):
    cos = cos[::num_key_value_groups, ...]
    sin = sin[::num_key_value_groups, ...]
    return cos, sin


class MsPoELlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, min_cratio=1, max_cratio=3, num_heads=32, max_position_embeddings=2048, base=10000, device=None):
        super().__init__()
        self.dim = dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2).float().to(device) / self.dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.min_ratio = min_cratio
        self.max_ratio = max_cratio
        self.num_heads = num_heads
        self._set_cos_sin_cache(seq_len=max_position_embeddings, device=self.inv_freq.device, dtype=torch.get_default_dtype())

    def _set_cos_sin_cache(self, seq_len, device, dtype):
        min_ratio = self.min_ratio
        max_ratio = self.max_ratio
        num_heads = self.num_heads
        self.max_seq_len_cached = seq_len
        t = torch.arange(self.max_seq_len_cached, device=device, dtype=self.inv_freq.dtype).repeat(num_heads, 1)
        compress_ratio = torch.arange(num_heads, device=device, dtype=self.inv_freq.dtype)
        compress_ratio = min_ratio + (max_ratio - min_ratio) * (compress_ratio / num_heads)
        compress_ratio = compress_ratio.unsqueeze(-1)
        t = t / compress_ratio
        freqs = torch.einsum("ki,j->kij", t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos().to(dtype), persistent=False)
        self.register_buffer("sin_cached", emb.sin().to(dtype), persistent=False)

    def forward(self, x, seq_len=None):
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len=seq_len, device=x.device, dtype=x.dtype)
        return (
            self.cos_cached[:, :seq_len].to(dtype=x.dtype),
            self.sin_cached[:, :seq_len].to(dtype=x.dtype),
        )


class MsPoELlamaAttention(nn.Module):
    """The authors' attention on the weights of one transformers ``LlamaAttention``."""

    def __init__(self, original: nn.Module, ratio_min: float, ratio_max: float, head_type: str | None):
        super().__init__()
        config = original.config
        self.config = config
        self.layer_idx = original.layer_idx
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.max_position_embeddings = config.max_position_embeddings
        self.rope_theta = config.rope_parameters["rope_theta"]
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = original.q_proj, original.k_proj, original.v_proj, original.o_proj
        self.compress_ratio_min = ratio_min
        self.compress_ratio_max = ratio_max
        self.enable_head_metrics = True
        self.head_type = head_type
        self.head_order = None
        self.past_key_value = None
        self.rotary_emb = MsPoELlamaRotaryEmbedding(
            self.head_dim,
            min_cratio=self.compress_ratio_min,
            max_cratio=self.compress_ratio_max,
            num_heads=self.num_heads,
            max_position_embeddings=self.max_position_embeddings,
            base=self.rope_theta,
        )

    def _head_wise_statistics(self, query_states, key_states, q_len, kv_seq_len, bsz, attention_mask):
        query_states_new = query_states
        key_states_new = repeat_kv(key_states, self.num_key_value_groups)
        attn_weights = torch.matmul(query_states_new, key_states_new.transpose(2, 3)) / math.sqrt(self.head_dim)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        if len(attn_weights.shape) == 4:
            attn_weights = attn_weights.squeeze(0)
        return self._calculate_outlier(attn_weights)

    def _calculate_outlier(self, attn_weights):
        # attn_weights: [num_heads, q_len, kv_seq_len]
        average = attn_weights.mean(-1).unsqueeze(-1)
        outlier = -(attn_weights > 3 * average).float().mean(-1)[:, -1]
        head_orders = outlier.argsort(stable=True)  # the authors: argsort() (see the module docstring)
        if self.head_type == "normal":
            head_orders = np.arange(self.num_heads)
            head_orders = self.num_heads - head_orders - 1
        return head_orders

    def forward(self, hidden_states, position_ids=None, use_cache=True, **kwargs):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states)
        key_states = self.k_proj(hidden_states)
        value_states = self.v_proj(hidden_states)
        query_states = query_states.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = key_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        value_states = value_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)

        past_key_value = self.past_key_value
        attention_mask = _make_causal_mask(
            bsz=bsz,
            tgt_len=q_len,
            past_key_values_length=past_key_value[0].shape[-2] if past_key_value is not None else 0,
            dtype=query_states.dtype,
            device=query_states.device,
        )
        kv_seq_len = key_states.shape[-2]
        if past_key_value is not None:
            kv_seq_len += past_key_value[0].shape[-2]
        position_length = kv_seq_len
        if not position_ids.nelement() > 1:
            if position_length < position_ids.item() + 1:
                position_length = position_ids.item() + 1
        cos, sin = self.rotary_emb(value_states, seq_len=position_length)

        if self.enable_head_metrics:
            self.head_order = self._head_wise_statistics(query_states, key_states, q_len, kv_seq_len, bsz, attention_mask)
            self.enable_head_metrics = False

        cos = cos[self.head_order, :, :]
        sin = sin[self.head_order, :, :]
        query_states = apply_rotary_pos_emb_single_scaling(query_states, cos, sin, position_ids)
        cos, sin = sample_rotary_emb(cos, sin, self.num_key_value_groups)
        key_states = apply_rotary_pos_emb_single_scaling(key_states, cos, sin, position_ids)

        if past_key_value is not None:
            key_states = torch.cat([past_key_value[0], key_states], dim=2)
            value_states = torch.cat([past_key_value[1], value_states], dim=2)
        self.past_key_value = (key_states, value_states) if use_cache else None

        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, self.hidden_size)
        attn_output = self.o_proj(attn_output)
        return attn_output, None


def reset(model) -> None:
    """The authors' ``MsPoELlamaForCausalLM._reset``: the next forward is a new input's prefill (and
    this transcription's own KV cache is emptied)."""
    for layer in model.model.layers:
        attn = layer.self_attn
        if isinstance(attn, MsPoELlamaAttention):
            attn.enable_head_metrics = True
            attn.head_order = None
            attn.past_key_value = None


@contextmanager
def installed(model, apply_layers, ratio_min=RATIO_MIN, ratio_max=RATIO_MAX, head_type=None):
    """``model`` (a transformers Llama) as ``MsPoELlamaForCausalLM``: the layers in ``apply_layers``
    run the authors' attention, the others transformers' own; restored on exit."""
    saved = [layer.self_attn for layer in model.model.layers]
    try:
        for i, layer in enumerate(model.model.layers):
            if i in apply_layers:
                layer.self_attn = MsPoELlamaAttention(saved[i], ratio_min, ratio_max, head_type)
        yield model
    finally:
        for layer, attn in zip(model.model.layers, saved, strict=True):
            layer.self_attn = attn

