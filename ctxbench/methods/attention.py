"""Attention-level methods: log-n scaling, Scalable-Softmax, ReRoPE, leaky ReRoPE, Self-Extend, STRING,
Dual Chunk Attention and Ms-PoE.

How they plug in: while one of these methods is applied, the model's rotary modules return the
identity rotation (cos = 1, sin = 0), so queries and keys reach the attention function — and
the KV cache — unrotated. :func:`ctxbench_attention`, registered with transformers'
``AttentionInterface`` as ``"ctxbench"``, rotates them itself with the positions each method
prescribes. Keys sit at positions ``0..kv-1`` and the ``q`` queries at the last ``q`` of them
(one unpadded sequence per batch row, as every ctxbench task feeds).

Memory stays linear in length, never a ``heads x n x n`` score matrix. A forward of many queries
(a ppl window, a passkey prefix, the passkey suffix after a cached prefix) runs each branch through
the device's fused attention kernel, block by block, and merges the parts by log-sum-exp: about the
time of one plain attention. Decoding steps use the blocked path, whose score blocks are at most
``heads x block x keys`` (about 128 MB in fp32).

Relative position ``p = i - j`` of query ``i`` and key ``j``; window ``w``; trained length ``L``.
This module never asks which method it runs: the registry entry (:mod:`ctxbench.methods`) says,
and :func:`ctxbench.methods.patching.applied` hands its answers over in the :class:`AttentionPlan`.

* A method with positions of its own partitions each query's keys into branches
  (:class:`ctxbench.methods.Branch`: a key range ``lo(i) <= j < hi(i)`` and where it rotates the query
  and the key), which the plan carries bound to the method's parameters
  (:attr:`AttentionPlan.branches`). A two-branch method (``rerope``, ``leaky-rerope``, ``self-extend``,
  ``string``) keeps ``p`` where ``p < w`` (the near branch, plain RoPE) and gives far pairs its own
  positions: its entry's ``far`` says where it puts each query and key and with which frequencies
  (ReRoPE: every far pair at ``w``; leaky ReRoPE: ``w + (p - w) / k``; Self-Extend: ``(i // G + w -
  w // G) - j // G``; STRING, whose ``w`` is its shift ``S``: ``p - S + W``). ``dca`` (Dual Chunk
  Attention) has three branches, by chunk of query and key (``c = chunk_size - local_window``): its
  own chunk, the previous one, every earlier one; keys at ``j mod c`` and the query at ``i mod c``,
  ``min(i mod c + c, chunk_size)`` and ``min(2c - 1, chunk_size)`` respectively.
* The log-n family (``logn``: the query at 1-based position ``m > L`` times ``log_L(m)``;
  ``ssmax``, Scalable-Softmax as Llama 4: ``1 + attn_scale * ln(1 + floor((p + 1) / floor_scale))``)
  is plain RoPE attention with each query multiplied by a factor of its position, which the entry
  computes (``Method.query_scale``); the plan carries it as :attr:`AttentionPlan.query_scale`.
  ``rerope+logn``, ``leaky-rerope+logn`` and ``self-extend+logn`` (or ``+ssmax``) do both, as
  ReRoPE's author's code (bojone/rerope, and the yarn repository's copy) always does with log-n:
  every query, in both branches, is multiplied by the factor before the positions are applied.

* A per-head method (``ms-poe``) is plain RoPE attention in which head ``h`` reads every position
  divided by a ratio of its own; which ratio is the input's: the entry orders the heads from their
  position-free attention at the input's last query (one row, memory linear in length), computed
  when a forward starts an input (no KV cache) and kept in the layer's plan (:attr:`AttentionPlan.memo`)
  for the forwards that continue its cache, as the authors' module keeps it for decoding. The plan
  carries the ratios and the ordering as :attr:`AttentionPlan.head_ratios` / ``order_heads``, and
  the ratios its keys take as ``key_ratios`` (one per key head, or one per query head on its own
  copy of the group's keys); layers the method leaves (its ``first_layer``) get a plan of plain RoPE.

On a per-layer-type model (Gemma 3) the method runs on the full-attention layers only;
:func:`ctxbench.methods.patching.applied` gives each sliding-window layer ``plan=None`` and its window
(``_ctxbench_window``), and :func:`_windowed` runs it as shipped: its own rotary already applied,
keys ``0 <= i - j < window`` (transformers' ``sliding_window_overlay``), counted from the last key,
so a cache that keeps only the window's keys gives the same result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AttentionInterface

from ctxbench.methods import Branch, kernels, logn_query_scale

NAME = "ctxbench"
# Elements of one fp32 score block (heads x block x keys): 2**25 floats = 128 MB.
SCORE_BUDGET = 2**25
# Device types where a forward of more than one query runs the two branches through the block
# partition of _fused (every device type: only the kernel it calls differs, see _attend);
# single-token decoding steps take the blocked path. Tests empty it to force the blocked path.
FUSED_DEVICES = ("cpu", "cuda", "mps", "xpu")
# Queries per block of the fused path; its widest mask is (block, block + w - 1).
NEAR_BLOCK = 512
# Device types where a forward of more than one query runs the branches as whole-sequence kernel calls
# (:func:`_whole`: a two-branch method's near band in one windowed call and its far keys in one shifted
# causal call; dca's three parts in calls over whole chunks), through the kernel :func:`kernels.choose`
# picks; elsewhere, and where no kernel takes a call, the block partition (:func:`_fused`). CPU keeps
# the block partition (about the time of plain attention there); tests add "cpu" to run the whole-sequence
# calls through the reference kernel.
WHOLE_DEVICES = ("cuda",)
# A decomposition into more calls than this (a branch whose key range steps at almost every query)
# keeps the block partition.
MAX_CALLS = 4096
# Each branch's (lo, hi) key bounds per query, and its (rotated queries, rotated keys).
Bounds = list[tuple[Tensor, Tensor]]
Rotated = list[tuple[Tensor, Tensor]]
Pair = tuple[Tensor, Tensor]  # (output, log-sum-exp)


@dataclass(frozen=True)
class AttentionPlan:
    """What :func:`ctxbench_attention` needs: the frequencies, and what the method's entry says about
    queries (``query_scale``) and how it partitions their keys (``branches``), bound to its parameters."""

    inv_freq: torch.Tensor  # (d/2,) float32
    scale: float  # multiplies cos and sin
    rotary_dim: int
    trained_len: int
    # the parts each query's keys fall into, each with its own query and key positions
    # (``methods.attention_branches``: a two-branch method's near and far, dca's three); (): one
    # branch, plain RoPE (the log-n family)
    branches: tuple[Branch, ...] = ()
    # 0-based query positions -> the factor multiplying each query (float32), for the log-n family
    # (``logn``, ``ssmax``) alone or stacked on a two-branch method; None: queries as they are
    query_scale: Callable[[torch.Tensor], torch.Tensor] | None = None
    # A per-head method (``ms-poe``): num_heads -> the (h,) float32 ratios that divide positions
    # (``methods.head_ratios``), and the position-free attention of the input's last query (b, h, n)
    # -> the (b, h) index of the ratio each head takes (``methods.order_heads``); None: one set of
    # positions for every head
    head_ratios: Callable[[int], torch.Tensor] | None = None
    order_heads: Callable[[torch.Tensor], torch.Tensor] | None = None
    # the (b, h) query-head ratios and the number of key heads -> the ratios keys take: (b, kv_heads),
    # or (b, h) where each query head reads its own copy of its group's key head (``methods.key_ratios``)
    key_ratios: Callable[[torch.Tensor, int], torch.Tensor] | None = None
    # what one layer keeps between the forwards of one input: the head order its prefill computed
    # (``"order"``), reused by the forwards that continue its KV cache (one plan per layer)
    memo: dict[object, Any] = field(default_factory=dict, compare=False)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, scale: float, rotary_dim: int) -> torch.Tensor:
    """RoPE as transformers applies it: the first ``rotary_dim`` dims of ``x`` (batch, heads, seq, dim)
    turned by ``positions`` (seq,) times ``inv_freq``, cos and sin multiplied by ``scale``."""
    freqs = positions[:, None].float() * inv_freq.to(device=x.device, dtype=torch.float)  # (seq, d/2)
    return _turn(x, freqs, scale, rotary_dim)


def _turn(x: torch.Tensor, freqs: torch.Tensor, scale: float, rotary_dim: int) -> torch.Tensor:
    """``x`` (batch, heads, seq, dim) rotated by the angles ``freqs`` (seq, d/2), or per head
    (batch, heads, seq, d/2), as transformers rotates: ``x cos + rotate_half(x) sin``."""
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = (emb.cos() * scale).to(x.dtype)
    sin = (emb.sin() * scale).to(x.dtype)
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    rot = rot * cos + _rotate_half(rot) * sin
    return torch.cat((rot, rest), dim=-1) if rest.shape[-1] else rot


def _block_size(heads: int, keys: int) -> int:
    return max(16, min(4096, SCORE_BUDGET // max(1, heads * keys)))


def _grouped(q: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """(b, h, n, d) -> (b, kv_heads, h/kv_heads, n, d) so one key head serves its query group."""
    b, h, n, d = q.shape
    return q.view(b, kv_heads, h // kv_heads, n, d)


def _scale_queries(q: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Queries (b, h, n, d) times one factor per query position (n,)."""
    return q * factor.to(q.dtype)[None, None, :, None]


def _logn_queries(q: torch.Tensor, q_pos: torch.Tensor, trained_len: int) -> torch.Tensor:
    """Query at 1-based position ``m`` times ``log_L(m)`` when ``m > L`` (``max(1, log_L(m))``)."""
    import array_api_compat.torch as xp  # optional: array_api_compat only where it is used

    return _scale_queries(q, logn_query_scale(q_pos, trained_len, xp=xp))


def _scaled_attention(plan: AttentionPlan, q: Tensor, k: Tensor, v: Tensor, scaling: float, q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """The log-n family: rotate normally, multiply each query by its position's factor
    (``plan.query_scale``: ``log_L(m)`` past ``L`` for logn, Llama 4's temperature for ssmax), then SDPA;
    without a query scale, plain RoPE (the layers a per-layer method leaves as they are)."""
    qr = rotate(q, q_pos, plan.inv_freq, plan.scale, plan.rotary_dim)
    kr = rotate(k, k_pos, plan.inv_freq, plan.scale, plan.rotary_dim)
    if plan.query_scale is not None:
        qr = _scale_queries(qr, plan.query_scale(q_pos))
    return _causal(qr, kr, v, scaling, q_pos, k_pos)


def _causal(qr: Tensor, kr: Tensor, v: Tensor, scaling: float, q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """Causal attention of rotated queries (b, h, n_q, d) over rotated keys (b, kv, n_k, d): one SDPA
    call for a whole sequence, else blocks of queries each with its (block, keys) mask."""
    gqa = qr.shape[1] != kr.shape[1]
    n_q, n_k = qr.shape[2], kr.shape[2]
    if n_q == n_k:
        kernels.note("sdpa")
        return F.scaled_dot_product_attention(qr, kr, v, is_causal=True, scale=scaling, enable_gqa=gqa)
    if n_q > 1 and qr.device.type in WHOLE_DEVICES:  # a suffix after a cached prefix: one lower-right call
        kernel = kernels.choose(qr, windowed=False, length=n_q)
        if kernel is not None:
            rep = qr.shape[1] // kr.shape[1]
            kr, v = (t.repeat_interleave(rep, dim=1) if rep > 1 else t for t in (kr, v))
            kernels.note(f"whole-{kernel.name}")
            return kernel(qr, kr, v, causal_offset=n_k - n_q, scale=scaling)[0]
    kernels.note("sdpa-masked")
    out = []
    step = _block_size(qr.shape[1], n_k)
    for a in range(0, n_q, step):
        pos = q_pos[a : a + step]
        last = int(pos[-1]) + 1
        mask = k_pos[None, :last] <= pos[:, None]  # (block, keys) causal with offset
        out.append(
            F.scaled_dot_product_attention(
                qr[:, :, a : a + step], kr[:, :, :last], v[:, :, :last], attn_mask=mask, scale=scaling, enable_gqa=gqa
            )
        )
    return torch.cat(out, dim=2)


def _last_query_attention(q: Tensor, k: Tensor, scaling: float) -> torch.Tensor:
    """(b, h, n): each head's attention of the last query over every key, from unrotated ``q`` and
    ``k`` (no positions), softmax in float32 and then ``q``'s dtype, as Ms-PoE's authors compute it
    for their head statistics (``_head_wise_statistics``). One query row: memory linear in length."""
    b, h, _, d = q.shape
    kv_heads = k.shape[1]
    last = _grouped(q[:, :, -1:], kv_heads)  # (b, kv, g, 1, d)
    scores = torch.matmul(last, k[:, :, None].transpose(-1, -2)) * scaling  # (b, kv, g, 1, n)
    return torch.softmax(scores.float(), dim=-1).to(q.dtype).reshape(b, h, -1)


def _rotate_heads(x: Tensor, positions: Tensor, ratios: Tensor, plan: AttentionPlan) -> torch.Tensor:
    """``x`` (b, heads, n, d) with each head's positions divided by its ratio, ``ratios`` (b, heads):
    the angle of pair ``i`` at position ``p`` is ``(p / r) * theta_i``, float32, as Ms-PoE's rotary
    cache computes it (``t / compress_ratio``, then the outer product with ``inv_freq``)."""
    pos = positions.float()[None, None, :] / ratios.float()[..., None]  # (b, heads, n)
    freqs = pos[..., None] * plan.inv_freq.to(device=x.device, dtype=torch.float)  # (b, heads, n, d/2)
    return _turn(x, freqs, plan.scale, plan.rotary_dim)


def _head_scaled_attention(plan: AttentionPlan, q: Tensor, k: Tensor, v: Tensor, scaling: float, q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """A per-head method (``ms-poe``): head ``h`` reads every position divided by the ratio of index
    ``order[h]``; keys take the ratios ``plan.key_ratios`` gives, one per key head or one per query
    head (then each query head reads its own rotated copy of its group's keys: memory ``h / kv``
    times the keys', still linear in length). A forward that starts an input (no KV cache) computes the order
    from its last query (``plan.order_heads``) and keeps it in the layer's ``plan.memo``; a forward
    that continues a cache reuses the order of the prefill that built it, as the authors' module,
    which computes its head order on its first call and keeps it for the decoding steps."""
    b, h = q.shape[0], q.shape[1]
    assert plan.head_ratios is not None and plan.order_heads is not None  # a per-head method's plan has both
    if q.shape[2] == k.shape[2]:
        plan.memo["order"] = plan.order_heads(_last_query_attention(q, k, scaling))
    order = plan.memo.get("order")
    if order is None or order.shape[0] not in (1, b):
        raise RuntimeError(
            "a per-head method continued a KV cache whose prefill it did not see: prefill each input in one "
            "forward with the method applied (ctxbench.model.decoding shares no prefix for such a method)"
        )
    ratios = plan.head_ratios(h).to(q.device)[order].expand(b, h)  # (b, h)
    qr = _rotate_heads(q, q_pos, ratios, plan)
    k_ratios = ratios if plan.key_ratios is None else plan.key_ratios(ratios, k.shape[1])  # (b, kv) or (b, h)
    if k_ratios.shape[1] != k.shape[1]:  # each query head its own copy of its group's key head
        group = k_ratios.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (b, h, n_k, d)
    return _causal(qr, _rotate_heads(k, k_pos, k_ratios, plan), v, scaling, q_pos, k_pos)


def _branched_attention(plan: AttentionPlan, q: Tensor, k: Tensor, v: Tensor, scaling: float, q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """Each branch of the plan scored with its own query and key positions over its own keys."""
    n_q = q.shape[2]
    inv, scale, rd = plan.inv_freq, plan.scale, plan.rotary_dim
    if plan.query_scale is not None:  # rotation is linear: scaling before it is scaling every branch's scores
        q = _scale_queries(q, plan.query_scale(q_pos))
    rotated, bounds = [], []
    for branch in plan.branches:
        b_q, b_k, b_inv = branch.positions(q_pos, k_pos, inv)
        rotated.append((rotate(q, b_q, b_inv, scale, rd), rotate(k, b_k, b_inv, scale, rd)))
        bounds.append(branch.keys(q_pos))  # (lo, hi) of each query
    if n_q > 1 and q.device.type in WHOLE_DEVICES:  # whole-sequence kernel calls, where a kernel takes them
        out = _whole(plan, bounds, rotated, v, scaling)
        if out is not None:
            return out
    if q.device.type in FUSED_DEVICES and n_q > 1:  # prefill or a long suffix: the shared block partition
        return _fused(plan.branches, bounds, rotated, v, scaling, q_pos)
    return _blocked(bounds, rotated, v, scaling, q_pos)


def _blocked(bounds: Bounds, rotated: Rotated, v: Tensor, scaling: float, q_pos: Tensor) -> Tensor:
    """Any device, any query offset (decoding steps): per query block, scores only for the key range
    each branch can reach, merged into one (b, kv_heads, group, block, keys) fp32 matrix, soft-maxed
    and applied to ``v``. ``bounds`` holds each branch's (lo, hi) per query, ``rotated`` its rotated
    (q, k)."""
    b, h, n_q, d = rotated[0][0].shape
    kv_heads, n_k = v.shape[1], v.shape[2]
    qs = [_grouped(r_q, kv_heads) for r_q, _ in rotated]  # (b, kv, g, n_q, d)
    ks = [r_k[:, :, None] for _, r_k in rotated]  # (b, kv, 1, n_k, d)
    vg = v[:, :, None]
    kernels.note("blocked")
    out = torch.empty(b, kv_heads, h // kv_heads, n_q, v.shape[-1], dtype=v.dtype, device=v.device)
    k_idx = torch.arange(n_k, device=v.device)
    step = _block_size(h, n_k)
    for a in range(0, n_q, step):
        pos = q_pos[a : a + step]  # (B,)
        keys = int(pos[-1]) + 1
        scores = torch.full((b, kv_heads, h // kv_heads, len(pos), keys), float("-inf"), dtype=torch.float32, device=v.device)
        for (lo, hi), g_q, g_k in zip(bounds, qs, ks, strict=True):
            lo, hi = lo[a : a + step], hi[a : a + step]
            start, stop = max(0, int(lo.min())), min(keys, int(hi.max()))  # keys some query of the block sees here
            if stop <= start:
                continue
            s = torch.matmul(g_q[:, :, :, a : a + step].float(), g_k[:, :, :, start:stop].float().transpose(-1, -2))
            j = k_idx[None, start:stop]
            keep = (j >= lo[:, None]) & (j < hi[:, None])  # the branches are disjoint: each score set once
            scores[..., start:stop] = torch.where(keep, s, scores[..., start:stop])
        probs = torch.softmax(scores * scaling, dim=-1)  # (b, kv, g, B, keys)
        out[:, :, :, a : a + step] = torch.matmul(probs.to(v.dtype), vg[:, :, :, :keys])
    return out.view(b, h, n_q, -1)


def _attend(q: Tensor, k: Tensor, v: Tensor, scaling: float, mask: Tensor | None = None) -> Pair:
    """Attention that also returns the log-sum-exp of each query's scores: the one call of the
    block partition (:func:`_fused`) that depends on the device.

    q (b, h, n_q, d), k and v (b, h, n_k, d), mask (n_q, n_k) bool, True = attend; every row
    must keep at least one key -> output (b, h, n_q, d), lse (b, h, n_q) fp32 (natural log).
    """
    return KERNELS.get(q.device.type, _attend_math)(q, k, v, scaling, mask)


def _additive(mask: Tensor, dtype: torch.dtype, device: torch.device, pad_to: int = 1) -> Tensor:
    """Bool mask (n_q, n_k) -> additive mask of ``dtype``: 0 where True, -inf elsewhere; its last
    dim allocated as a multiple of ``pad_to`` and sliced back (kernels that want aligned rows)."""
    n_q, n_k = mask.shape
    full = torch.zeros((n_q, -(-n_k // pad_to) * pad_to), dtype=dtype, device=device)
    return full[:, :n_k].masked_fill_(~mask, float("-inf"))


def _attend_cpu(q: Tensor, k: Tensor, v: Tensor, scaling: float, mask: Tensor | None = None) -> Pair:
    """PyTorch's fused flash-attention kernel for CPU (it returns the log-sum-exp)."""
    bias = None if mask is None else _additive(mask, q.dtype, q.device)
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=bias, scale=scaling)
    return out, lse.to(kernels.acc_dtype(q.dtype))  # float32; float64 for float64 inputs


def _attend_cuda(q: Tensor, k: Tensor, v: Tensor, scaling: float, mask: Tensor | None = None) -> Pair:
    """PyTorch's memory-efficient attention kernel on CUDA: it takes an additive bias (rows
    aligned to 16 elements, as SDPA's own front end pads them) and returns the log-sum-exp,
    padded to a multiple of 32 queries."""
    b, h, n_q, _ = q.shape
    bias = None if mask is None else _additive(mask, q.dtype, q.device, pad_to=16).expand(b, h, n_q, k.shape[2])
    out, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, False, scale=scaling)
    return out, lse[:, :, :n_q].float()


def _attend_math(q: Tensor, k: Tensor, v: Tensor, scaling: float, mask: Tensor | None = None) -> Pair:
    """Any device: plain matmul and softmax in fp32 over key chunks of at most ``SCORE_BUDGET``
    scores, merged by log-sum-exp, so memory stays bounded however many keys there are."""
    b, h, n_q, _ = q.shape
    out = torch.zeros(b, h, n_q, v.shape[-1], dtype=torch.float32, device=q.device)
    lse = torch.full((b, h, n_q), float("-inf"), dtype=torch.float32, device=q.device)
    step = max(1, SCORE_BUDGET // max(1, b * h * n_q))
    for a in range(0, k.shape[2], step):
        scores = torch.matmul(q.float(), k[:, :, a : a + step].float().transpose(-1, -2)) * scaling  # (b, h, n_q, keys)
        if mask is not None:
            scores.masked_fill_(~mask[:, a : a + step], float("-inf"))
        part_lse = torch.logsumexp(scores, dim=-1)  # -inf for a row with no key in this chunk
        probs = torch.exp(scores - part_lse[..., None]).nan_to_num_(0.0)
        part = torch.matmul(probs, v[:, :, a : a + step].float())
        total = torch.logaddexp(lse, part_lse)
        keep = torch.where(torch.isinf(total), 0.0, torch.exp(lse - total)).nan_to_num_(0.0)
        add = torch.where(torch.isinf(total), 0.0, torch.exp(part_lse - total)).nan_to_num_(0.0)
        out = out * keep[..., None] + part * add[..., None]
        lse = total
    return out.to(q.dtype), lse


# The fused kernel per device type; any other device runs the portable one.
KERNELS: dict[str, Callable[..., Pair]] = {"cpu": _attend_cpu, "cuda": _attend_cuda}
# How rows name the block partition's kernel (``block-<name>``).
KERNEL_NAMES: dict[Callable[..., Pair], str] = {_attend_cpu: "cpu-flash", _attend_cuda: "efficient", _attend_math: "math"}


def _merge(out: Tensor, lse: Tensor, part_out: Tensor, part_lse: Tensor) -> None:
    """Fold a softmax over more keys into ``out``/``lse`` (b, h, rows, d)/(b, h, rows), in place:
    out = (e^lse out + e^part_lse part_out) / (e^lse + e^part_lse)."""
    total = torch.logaddexp(lse, part_lse)
    out.mul_((lse - total).exp()[..., None]).add_(part_out.to(out.dtype) * (part_lse - total).exp()[..., None])
    lse.copy_(total)


def _query_blocks(branches: Sequence[Branch], bounds: Bounds, n_q: int) -> list[tuple[int, int]]:
    """Blocks of at most ``NEAR_BLOCK`` queries, also cut wherever the lower key bound of a branch that
    is not a band steps (0 throughout for a far branch: no cut; dca: at every chunk start), so that
    within a block such a branch's keys start at one key for every query."""
    cuts = {0, n_q}
    for branch, (lo, _) in zip(branches, bounds, strict=True):
        if not branch.band and n_q > 1:
            cuts.update((torch.nonzero(lo[1:] != lo[:-1]).flatten() + 1).tolist())
    edges = sorted(cuts)
    return [(a, min(e, a + NEAR_BLOCK)) for s, e in zip(edges, edges[1:], strict=False) for a in range(s, e, NEAR_BLOCK)]


def _segments(branch: Branch, lo: Tensor, hi: Tensor, n_k: int) -> list[tuple[int, int, bool]]:
    """``(start, stop, masked)`` key ranges of one branch for one block of queries with key bounds
    ``lo``/``hi``: a band in one masked range; any other branch (whose ``lo`` is one key for the whole
    block) as the keys every query of the block reaches, unmasked, then the rest, masked."""
    if branch.band:
        return [(max(0, int(lo.min())), min(n_k, int(hi.max())), True)]
    start, common, stop = max(0, int(lo[0])), min(n_k, int(hi.min())), min(n_k, int(hi.max()))
    return [(start, common, False), (max(start, common), stop, True)]


def _row_runs(has: torch.Tensor) -> list[tuple[int, int]]:
    """The runs ``[r0, r1)`` of consecutive True rows: the rows with a key in a range (one run for every
    branch ctxbench has; the kernel needs at least one key per row)."""
    rows = torch.nonzero(has).flatten().tolist()
    runs: list[tuple[int, int]] = []
    for r in rows:
        if runs and runs[-1][1] == r:
            runs[-1] = (runs[-1][0], r + 1)
        else:
            runs.append((r, r + 1))
    return runs


def _fused(branches: Sequence[Branch], bounds: Bounds, rotated: Rotated, v: Tensor, scaling: float, q_pos: Tensor) -> Tensor:
    """The branches through the device's fused attention kernel, merged by log-sum-exp.

    Query ``i`` sees each branch's keys ``lo(i) <= j < hi(i)``, disjoint sets, so softmax over their
    union is

        out_i = sum_b e^lse_b out_b / sum_b e^lse_b.

    Per block of at most ``NEAR_BLOCK`` queries (:func:`_query_blocks`), per branch, one kernel call
    per key range of :func:`_segments`, on the rows that have a key there: a band (a two-branch
    method's near keys ``i - w < j <= i``) as one masked call no wider than ``block + w``; a far or
    chunked branch as the keys every query of the block reaches, with no mask (a far branch's
    ``0 .. first - w``, dca's earlier and previous chunks), and the rest masked, no wider than the
    block. For a two-branch method this is three calls: near, far all of it, far the rest.

    The kernel never holds more of the score matrix than its own tiles, so a method with branches
    costs about what plain attention does, for a prefill and for a long suffix after a cache.
    """
    b, h, n_q, d = rotated[0][0].shape
    n_k = v.shape[2]
    rep = h // v.shape[1]  # grouped-query attention: the fused kernel wants one key head per query head
    ks = [r_k.repeat_interleave(rep, dim=1) if rep > 1 else r_k for _, r_k in rotated]
    v = v.repeat_interleave(rep, dim=1) if rep > 1 else v
    out = torch.empty(b, h, n_q, v.shape[-1], dtype=rotated[0][0].dtype, device=v.device)  # (b, h, n_q, d)
    acc_dtype = kernels.acc_dtype(out.dtype)  # float32; float64 for float64 inputs
    kernels.note("block-" + KERNEL_NAMES.get(KERNELS.get(v.device.type, _attend_math), "custom"))
    k_idx = torch.arange(n_k, device=v.device)
    for a, e in _query_blocks(branches, bounds, n_q):
        acc: Tensor | None = None
        lse: Tensor | None = None
        for branch, (lo, hi), (r_q, _), r_k in zip(branches, bounds, rotated, ks, strict=True):
            lo, hi = lo[a:e], hi[a:e]
            for start, stop, masked in _segments(branch, lo, hi, n_k):
                if stop <= start:
                    continue
                j = k_idx[None, start:stop]
                keep = (j >= lo[:, None]) & (j < hi[:, None]) if masked else None
                runs = _row_runs(keep.any(-1)) if keep is not None else [(0, e - a)]
                for r0, r1 in runs:
                    mask = keep[r0:r1] if keep is not None else None
                    part = _attend(r_q[:, :, a + r0 : a + r1], r_k[:, :, start:stop], v[:, :, start:stop], scaling, mask)
                    if acc is None and (r0, r1) == (0, e - a):  # the block's first part: every row has it
                        acc, lse = part[0].to(acc_dtype), part[1]
                        continue
                    if acc is None or lse is None:  # (both or neither)
                        acc = torch.zeros(b, h, e - a, v.shape[-1], dtype=acc_dtype, device=v.device)
                        lse = torch.full((b, h, e - a), float("-inf"), dtype=acc_dtype, device=v.device)
                    _merge(acc[:, :, r0:r1], lse[:, :, r0:r1], *part)
        assert acc is not None  # every query has keys in some branch
        out[:, :, a:e] = acc.to(out.dtype)
    return out


@dataclass(frozen=True)
class WholeCall:
    """One kernel call of :func:`_whole`: rows ``rows[0] <= r < rows[1]`` of the queries of branch ``branch``
    over its keys ``keys[0] <= j < keys[1]``, with the kernel interface's ``window_left`` and
    ``causal_offset`` in the coordinates of that slice (:mod:`ctxbench.methods.kernels`)."""

    branch: int
    rows: tuple[int, int]
    keys: tuple[int, int]
    window_left: int | None
    causal_offset: int | None


_JUMP = 4  # an edge between two queries where lo or hi steps by anything but 0 or 1


def _runs(lo: torch.Tensor, hi: torch.Tensor) -> list[tuple[int, int, int | None]]:
    """Maximal runs ``(r0, r1, code)`` of consecutive queries over which a branch's bounds each stay
    put or move with the query: ``code = 2 [lo moves] + [hi moves]``, None for a run of one query."""
    n = lo.shape[0]
    if n < 2:
        return [(0, n, None)]
    d_lo, d_hi = lo[1:] - lo[:-1], hi[1:] - hi[:-1]
    code = torch.where(((d_lo == 0) | (d_lo == 1)) & ((d_hi == 0) | (d_hi == 1)), 2 * d_lo + d_hi, _JUMP)
    starts = [0, *(torch.nonzero(code[1:] != code[:-1]).flatten() + 1).tolist()]
    values = code[starts].tolist()
    runs: list[tuple[int, int, int | None]] = []
    s, current = 0, None  # the open run starts at query s; its code (None: one query so far)
    for e0, e1, c in zip(starts, [*starts[1:], n - 1], values, strict=True):  # edges e0 .. e1-1, all c
        if c == _JUMP:  # every edge of the segment separates its queries
            runs.append((s, e0 + 1, current))
            runs.extend((r, r + 1, None) for r in range(e0 + 1, e1))
            s, current = e1, None
        elif current is None:  # the open run (query e0 alone) takes this segment's edges
            current = c
        else:  # another code: the open run ends at query e0, the next starts after it
            runs.append((s, e0 + 1, current))
            s, current = e0 + 1, (c if e0 + 1 < e1 else None)
    runs.append((s, n, current))
    return runs


def _whole_calls(bounds: Bounds, n_k: int) -> list[WholeCall] | None:
    """Each branch's key ranges ``lo(i) <= j < hi(i)`` as whole-sequence kernel calls: over every run of
    queries where ``lo`` and ``hi`` each stay put or move with the query (:func:`_runs`), the rows that
    have a key there, one call over the keys ``max(0, lo) .. hi`` of the run's last query: ``hi`` moving
    is the causal edge at the lower right of that slice, ``lo`` moving a window behind it. A two-branch
    method gives two calls, the near band (a window of ``w - 1`` behind the edge) and the far keys (the
    last ``n - w`` queries over the first ``n - w`` keys, causal); dca three per chunk (its own chunk,
    causal; the previous one and every earlier one, unmasked). None where a run has ``lo`` moving under
    a fixed ``hi``, or the calls would exceed :data:`MAX_CALLS`."""
    calls: list[WholeCall] = []
    for index, (lo, hi) in enumerate(bounds):
        lo, hi = lo.to("cpu", torch.int64), hi.to("cpu", torch.int64)
        for r0, r1, code in _runs(lo, hi):
            lo_moves, hi_moves = code in (2, 3), code in (1, 3)
            has = (hi[r0:r1] > lo[r0:r1].clamp(min=0)).nonzero().flatten()  # rows with a key here
            if has.numel() == 0:
                continue
            first = r0 + int(has[0])
            if has.numel() != r1 - first:  # rows without a key after rows with one: not a run of calls
                return None
            if lo_moves and not hi_moves:
                return None
            k0, k1 = max(0, int(lo[first])), min(n_k, int(hi[r1 - 1]))
            offset = int(hi[first]) - 1 - k0 if hi_moves else None
            window = int(hi[first]) - 1 - int(lo[first]) if lo_moves else None
            calls.append(WholeCall(index, (first, r1), (k0, k1), window, offset))
            if len(calls) > MAX_CALLS:
                return None
    return calls


def _whole(plan: AttentionPlan, bounds: Bounds, rotated: Rotated, v: Tensor, scaling: float) -> Tensor | None:
    """The branches as whole-sequence kernel calls (:func:`_whole_calls`, kept in the layer's plan per
    shape), each returning its output and log-sum-exp, merged in float32 (float64 for float64 inputs):
    ``out_i = sum_c e^lse_c out_c / sum_c e^lse_c`` over the calls that reach query ``i``, which is the
    softmax over the union of their disjoint key sets. None when a call has no kernel on this device (the
    block partition runs instead)."""
    b, h, n_q, _ = rotated[0][0].shape
    n_k = v.shape[2]
    shape = ("whole-calls", n_q, n_k)
    if shape not in plan.memo:
        plan.memo[shape] = _whole_calls(bounds, n_k)
    calls = plan.memo[shape]
    if calls is None:
        return None
    q0 = rotated[0][0]
    chosen = {w: kernels.choose(q0, windowed=w, length=n_q) for w in {c.window_left is not None for c in calls}}
    ready = {w: kernel for w, kernel in chosen.items() if kernel is not None}
    if len(ready) != len(chosen):
        return None
    rep = h // v.shape[1]  # the kernels want one key head per query head
    ks = [r_k.repeat_interleave(rep, dim=1) if rep > 1 else r_k for _, r_k in rotated]
    v = v.repeat_interleave(rep, dim=1) if rep > 1 else v
    acc_dtype = kernels.acc_dtype(q0.dtype)
    acc = torch.zeros(b, h, n_q, v.shape[-1], dtype=acc_dtype, device=v.device)
    lse = torch.full((b, h, n_q), float("-inf"), dtype=acc_dtype, device=v.device)
    used: dict[str, None] = {}
    for call in calls:
        kernel = ready[call.window_left is not None]
        (r0, r1), (k0, k1) = call.rows, call.keys
        part_out, part_lse = kernel(rotated[call.branch][0][:, :, r0:r1], ks[call.branch][:, :, k0:k1], v[:, :, k0:k1],
                                    window_left=call.window_left, causal_offset=call.causal_offset, scale=scaling)  # fmt: skip
        kernels.merge(acc[:, :, r0:r1], lse[:, :, r0:r1], part_out, part_lse)
        used[kernel.name] = None
    kernels.note("whole-" + "+".join(used))
    return acc.to(q0.dtype)


def _windowed(q: Tensor, k: Tensor, v: Tensor, scaling: float, window: int) -> Tensor:
    """Plain attention of a sliding-window layer kept as shipped: query ``i`` sees keys
    ``0 <= i - j < window``, positions aligned at the last key; one kernel call per block of
    ``NEAR_BLOCK`` queries over its band of keys, never wider than ``block + window``."""
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    rep = h // k.shape[1]
    k, v = (t.repeat_interleave(rep, dim=1) if rep > 1 else t for t in (k, v))
    out = torch.empty(b, h, n_q, v.shape[-1], dtype=q.dtype, device=q.device)
    k_idx = torch.arange(n_k, device=q.device)
    q_pos = k_idx[n_k - n_q :]
    kernels.note("block-" + KERNEL_NAMES.get(KERNELS.get(q.device.type, _attend_math), "custom"))
    for a in range(0, n_q, NEAR_BLOCK):
        e = min(n_q, a + NEAR_BLOCK)
        pos = q_pos[a:e]
        lo, last = max(0, int(pos[0]) - window + 1), int(pos[-1])
        rel = pos[:, None] - k_idx[None, lo : last + 1]
        part, _ = _attend(q[:, :, a:e], k[:, :, lo : last + 1], v[:, :, lo : last + 1], scaling, (rel >= 0) & (rel < window))
        out[:, :, a:e] = part.to(out.dtype)
    return out


def ctxbench_attention(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                       scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Tensor, None]:
    """transformers attention function: (b, h, q, d) inputs -> ((b, q, h, d) output, None)."""
    plan: AttentionPlan | None = getattr(module, "_ctxbench_plan", None)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    if plan is None:
        window = getattr(module, "_ctxbench_window", None)
        if window is None:
            raise RuntimeError("ctxbench attention called on a module without a plan; apply a method with patching.applied")
        return _windowed(query, key, value, scaling, window).transpose(1, 2).contiguous(), None
    n_q, n_k = query.shape[2], key.shape[2]
    k_pos = torch.arange(n_k, device=query.device)
    q_pos = k_pos[n_k - n_q :]
    if plan.branches:
        out = _branched_attention(plan, query, key, value, scaling, q_pos, k_pos)
    elif plan.head_ratios is not None:  # a per-head method
        out = _head_scaled_attention(plan, query, key, value, scaling, q_pos, k_pos)
    else:  # the log-n family, or plain RoPE on a layer a per-layer method leaves as it is
        out = _scaled_attention(plan, query, key, value, scaling, q_pos, k_pos)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, ctxbench_attention)
