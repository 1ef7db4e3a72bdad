"""Attention-level methods' positions: where each branch (near, far; DCA's intra-, successive- and
inter-chunk keys) puts queries and keys, and Ms-PoE's per-head ratios.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ctxbench.errors import UserError
from ctxbench.methods.params import Array, Namespace, Params
from ctxbench.model.geometry import RopeGeometry


@dataclass(frozen=True)
class Branch:
    """One part of an attention-level method's partition of each query's keys: query ``i`` scores key
    ``j`` here when ``lo(i) <= j < hi(i)``, with the query and the key rotated where ``positions`` puts them.

    * ``keys(q_pos) -> (lo, hi)``: integer arrays, one bound each per 0-based query position; ``lo`` may
      be below 0 (the attention clips it to the keys there are); neither may decrease with ``i``.
    * ``positions(q_pos, k_pos, inv_freq) -> (query positions, key positions, inverse frequencies)``.
    * ``band``: ``lo`` moves with every query (a near branch's window): a block of queries takes its
      keys in one masked kernel call. Otherwise ``lo`` steps (0 throughout, or at chunk starts): the
      attention cuts its query blocks where it steps, and the keys every query of a block reaches run
      through the kernel without a mask, so a branch reaching back over the whole sequence costs no
      ``block x n`` mask.

    The branches of a method are disjoint and, together with causality, cover every key ``j <= i``; the
    attention merges their softmax parts by log-sum-exp.
    """

    keys: Callable[[Array], tuple[Array, Array]]
    positions: Callable[[Array, Array, Array], tuple[Array, Array, Array]]
    band: bool = False


def plain_positions(q_pos: Array, k_pos: Array, inv_freq: Array) -> tuple[Array, Array, Array]:
    """Plain RoPE: the query at ``i``, the key at ``j``."""
    return q_pos, k_pos, inv_freq


def near_keys(q_pos: Array, *, window: int) -> tuple[Array, Array]:
    """A two-branch method's near keys: ``i - w < j <= i``."""
    return q_pos - window + 1, q_pos + 1


def far_keys(q_pos: Array, *, xp: Namespace, window: int) -> tuple[Array, Array]:
    """A two-branch method's far keys: ``0 <= j <= i - w``."""
    return xp.zeros_like(q_pos), q_pos - window + 1


# Two-branch methods (``rerope``, ``leaky-rerope``, ``self-extend``, ``string``): query ``i`` sees key
# ``j`` at its exact relative position ``i - j`` while ``i - j < w`` (the near branch) and at the
# method's own beyond it (the far branch). :mod:`ctxbench.methods.attention` runs the two branches; an entry gives what
# differs: its parameters after the defaults derived from ``L`` and ``s`` (``derive``), and the
# positions and frequencies the far branch rotates queries and keys by (``far``), a pure function of
# integer position arrays of the namespace ``xp``.


def _window(method: str, params: Params, trained_len: int) -> int:
    """The window ``w``, ``L/4`` by default: the neighbours keep exact positions over a quarter of the
    trained context, leaving three quarters of the trained position range for the compressed far part."""
    window = params.get("window")
    window = int(max(1, trained_len // 4) if window is None else window)
    if window <= 0:
        raise UserError(f"{method} window {window} must be >= 1", f"pass --param window=N with 1 <= N < {trained_len}")
    return window


def _compression(window: int, trained_len: int, factor: float) -> float:
    """The least compression of the far part that keeps the largest position the model sees at
    ``s*L`` tokens within ``L``: ``max(1, (s*L - w) / (L - w))`` (the default ``k`` and ``G``)."""
    return max(1.0, (factor * trained_len - window) / max(1, trained_len - window))


def rerope_params(params: Params, geom: RopeGeometry, factor: float) -> Params:
    """ReRoPE's window after its default (``L/4``)."""
    return {**params, "window": _window("rerope", params, geom.trained_len)}


def rerope_far(q_pos: Array, k_pos: Array, inv_freq: Array, *, xp: Namespace, window: int) -> tuple[Array, Array, Array]:
    """ReRoPE (Su 2023): every far pair at relative position ``w`` (the query at ``w``, the key at 0)."""
    return xp.full_like(q_pos, window), xp.zeros_like(k_pos), inv_freq


def leaky_rerope_params(params: Params, geom: RopeGeometry, factor: float) -> Params:
    """Leaky ReRoPE's window (``L/4``) and ``k`` (the least that keeps ``s*L`` within ``L``)."""
    window = _window("leaky-rerope", params, geom.trained_len)
    k = _compression(window, geom.trained_len, factor) if params.get("k") is None else params["k"]
    if not float(k) >= 1:
        raise UserError(f"leaky-rerope k={k} must be >= 1", "pass --param k=2 (slope 1/k beyond the window)")
    return {**params, "window": window, "k": float(k)}


def leaky_rerope_far(q_pos: Array, k_pos: Array, inv_freq: Array, *, xp: Namespace, window: int, k: float) -> tuple[Array, Array, Array]:
    """Leaky ReRoPE (Su 2023): relative position ``w + (i - j - w)/k``, as the angle
    ``theta/k * ((i + w*(k-1)) - j)``: the query at ``i + w(k-1)`` (float64), the key at ``j``, ``theta/k``."""
    return xp.astype(q_pos, xp.float64) + window * (k - 1), k_pos, inv_freq / k


def self_extend_params(params: Params, geom: RopeGeometry, factor: float) -> Params:
    """Self-Extend's window (``L/4``) and group ``G`` (the least whole one that keeps ``s*L`` within ``L``)."""
    window = _window("self-extend", params, geom.trained_len)
    group = params.get("group")
    group = int(math.ceil(_compression(window, geom.trained_len, factor))) if group is None else group
    if int(group) != group or int(group) < 1:
        raise UserError(f"self-extend group {group} must be a whole number >= 1", "pass --param group=4")
    return {**params, "window": window, "group": int(group)}


def self_extend_far(q_pos: Array, k_pos: Array, inv_freq: Array, *, xp: Namespace, window: int, group: int) -> tuple[Array, Array, Array]:
    """Self-Extend (Jin et al., arXiv 2401.01325) with LongLM's corrected floor division: the query at
    ``i // G + w - w // G`` (shifted so both parts meet at ``w``), the key at ``j // G``."""
    return q_pos // group + window - window // group, k_pos // group, inv_freq


# STRING's defaults, from the authors' code (HKUNLP/STRING at commit
# 216cc2f04cee147e8c3cfaa15723b182ecbe321e): README.md and every evaluation script call
# ``replace_with_string(..., shifted_offset=int(0.33 * L), small_local_value=128)``
# (``--shifted_ratio 0.33 --local_value 128``).
STRING_SHIFT_RATIO = 0.33
STRING_LOCAL_VALUE = 128


def string_params(params: Params, geom: RopeGeometry, factor: float) -> Params:
    """STRING's ``S`` (``window``, the authors' ``shifted_offset``: ``int(0.33 * L)``) and ``W``
    (``local_value``: the authors' 128, at most ``S // 2`` so that a short trained length still
    shifts far pairs down); ``W > S`` would move far pairs farther than they are."""
    window = params.get("window")
    window = int(max(1, int(STRING_SHIFT_RATIO * geom.trained_len)) if window is None else window)
    local = params.get("local_value")
    local = int(min(STRING_LOCAL_VALUE, window // 2) if local is None else local)
    if local > window:
        raise UserError(
            f"string local_value {local} must be <= window {window}: far pairs (i - j >= S) sit at "
            "i - j - S + W, beyond their true distance when W > S",
            f"pass --param local_value=N with 0 <= N <= {window} (the authors: 128 for S = 0.33*L), or a larger window",
        )
    return {**params, "window": window, "local_value": local}


def string_far(
    q_pos: Array, k_pos: Array, inv_freq: Array, *, xp: Namespace, window: int, local_value: int
) -> tuple[Array, Array, Array]:
    """STRING (An et al., arXiv 2410.18745; HKUNLP/STRING ``string_for_llama.py`` at commit 216cc2f):
    a far pair (``i - j >= S``) at relative position ``i - j - S + W``, as the authors rotate it: the
    query at ``i - S + W`` (their ``position_ids - diag_size + local_window``), the key at ``j``."""
    return q_pos - window + local_value, k_pos, inv_freq


# Dual Chunk Attention (An et al., "Training-Free Long-Context Scaling of Large Language Models",
# ICML 2024, arXiv 2402.17463), as the authors' code computes it: HKUNLP/ChunkLlama
# ``chunkllama_attn_replace.py`` at commit 2add4d7c99d24dcc1ab03414cc602abb2e28cf2c (the file as of its
# last change, 847ae71). ``replace_with_chunkllama(pretraining_length=L, local_window_size=None)`` sets
# ``chunk_size = L * 3 // 4`` and ``local_window = local_window_size or L // 8``; chunks hold
# ``c = chunk_size - local_window`` tokens (their ``chunk_len``). vLLM's dual-chunk rotary embedding
# (``dual_chunk_rope.py``) computes the same positions from ``chunk_size`` and ``local_size``.
DCA_CHUNK_RATIO = (3, 4)  # chunk_size = L * 3 // 4
DCA_LOCAL_DIVISOR = 8  # local_window = L // 8


def dca_params(params: Params, geom: RopeGeometry, factor: float) -> Params:
    """DCA's ``chunk_size`` (the authors' ``L * 3 // 4``) and ``local_window`` (their ``L // 8``, at most
    ``chunk_size // 2`` so that a chunk size given alone still leaves chunks); chunks hold
    ``chunk_size - local_window`` tokens, so ``local_window`` must stay below ``chunk_size``."""
    L = geom.trained_len
    chunk = params.get("chunk_size")
    chunk = int(max(1, L * DCA_CHUNK_RATIO[0] // DCA_CHUNK_RATIO[1]) if chunk is None else chunk)
    local = params.get("local_window")
    local = int(min(L // DCA_LOCAL_DIVISOR, chunk // 2) if local is None else local)
    if local >= chunk:
        raise UserError(
            f"dca local_window {local} must be < chunk_size {chunk}: each chunk holds chunk_size - local_window tokens",
            f"pass --param local_window=N with 0 <= N < {chunk} (the authors: L/8 with chunk_size 3L/4), or a larger chunk_size",
        )
    return {**params, "chunk_size": chunk, "local_window": local}


def _dca_intra_keys(q_pos: Array, *, chunk: int) -> tuple[Array, Array]:
    """Intra-chunk: the keys of the query's own chunk up to it, ``(i // c) c <= j <= i``."""
    return (q_pos // chunk) * chunk, q_pos + 1


def _dca_successive_keys(q_pos: Array, *, chunk: int) -> tuple[Array, Array]:
    """Successive-chunk: the whole previous chunk, ``(i // c - 1) c <= j < (i // c) c``."""
    start = (q_pos // chunk) * chunk
    return start - chunk, start


def _dca_inter_keys(q_pos: Array, *, xp: Namespace, chunk: int) -> tuple[Array, Array]:
    """Inter-chunk: every earlier chunk, ``0 <= j < (i // c - 1) c``."""
    return xp.zeros_like(q_pos), (q_pos // chunk - 1) * chunk


def _dca_intra_positions(q_pos: Array, k_pos: Array, inv_freq: Array, *, chunk: int) -> tuple[Array, Array, Array]:
    """The query at ``i mod c`` (the authors' ``q_t``), the key at ``j mod c`` (``k_t``)."""
    return q_pos % chunk, k_pos % chunk, inv_freq


def _dca_successive_positions(q_pos: Array, k_pos: Array, inv_freq: Array, *, xp: Namespace, chunk: int, chunk_size: int) -> tuple[Array, Array, Array]:
    """The query at ``min(i mod c + c, chunk_size)`` (the authors' ``qc_t``), the key at ``j mod c``: the
    first ``local_window + 1`` queries of a chunk keep their true distance to the previous chunk's last keys."""
    return xp.clip(q_pos % chunk + chunk, max=chunk_size), k_pos % chunk, inv_freq


def _dca_inter_positions(q_pos: Array, k_pos: Array, inv_freq: Array, *, xp: Namespace, chunk: int, chunk_size: int) -> tuple[Array, Array, Array]:
    """Every query at ``min(2c - 1, chunk_size)`` (the authors' ``qc_t[chunk_len - 1]``: ``chunk_size`` unless
    ``local_window >= c``), the key at ``j mod c``."""
    return xp.full_like(q_pos, min(2 * chunk - 1, chunk_size)), k_pos % chunk, inv_freq


def dca_branches(*, xp: Namespace, chunk_size: int, local_window: int) -> tuple[Branch, Branch, Branch]:
    """Dual Chunk Attention (arXiv 2402.17463; HKUNLP/ChunkLlama ``chunkllama_attn_replace.py``): keys sit at
    ``j mod c`` (``c = chunk_size - local_window``), and query ``i`` scores the keys of

    * its own chunk (``j // c == i // c``) from ``i mod c``: relative position ``i - j``, exact;
    * the previous chunk (``j // c == i // c - 1``) from ``min(i mod c + c, chunk_size)``;
    * every earlier chunk (``j // c <= i // c - 2``) from ``min(2c - 1, chunk_size)``,

    so no relative position exceeds ``chunk_size`` (``3L/4`` by default) however long the sequence; the
    three softmax parts are merged by log-sum-exp, as the authors' ``merge_attn_outputs``."""
    chunk = chunk_size - local_window
    return (
        Branch(partial(_dca_intra_keys, chunk=chunk), partial(_dca_intra_positions, chunk=chunk)),
        Branch(partial(_dca_successive_keys, chunk=chunk),
               partial(_dca_successive_positions, xp=xp, chunk=chunk, chunk_size=chunk_size)),
        Branch(partial(_dca_inter_keys, xp=xp, chunk=chunk),
               partial(_dca_inter_positions, xp=xp, chunk=chunk, chunk_size=chunk_size)),
    )  # fmt: skip


# Ms-PoE (Zhang et al., "Found in the Middle: How Language Models Use Long Contexts Better via
# Plug-and-Play Positional Encoding", NeurIPS 2024, arXiv 2403.04797), from the authors' code:
# VITA-Group/Ms-PoE at commit a46c3d18a6c7d9fb941b72c17dccffe7863adddc, ``utils/modify_arch/llama.py``
# (``MsPoELlamaRotaryEmbedding``, ``MsPoELlamaAttention``) with the defaults of ``src/ms_poe.sh`` and
# ``inference.py``: ``--compress_ratio_min 1.2 --compress_ratio_max 1.8`` and ``--apply_layers
# 2,3,...,31`` on 32-layer models (every layer but the first two). A per-head method: head ``h``
# reads every position divided by its own ratio; which ratio depends on the input (the order of
# the heads' "outlier" scores at the input's last query), so :mod:`ctxbench.methods.attention` computes
# that order once per input and keeps it for the decoding steps, as the authors' module does.
MSPOE_RATIO_MIN, MSPOE_RATIO_MAX, MSPOE_FIRST_LAYER = 1.2, 1.8, 2


def mspoe_ratios(num_heads: int, *, xp: Namespace, ratio_min: float, ratio_max: float, **_: Any) -> Array:
    """The authors' ``compress_ratio``: ``r_k = min + (max - min) * k / H`` for ``k = 0..H-1``, in
    float32 as their rotary module computes it (``k / H``, so ``r`` never reaches ``max``)."""
    k = xp.astype(xp.arange(num_heads, dtype=xp.int64), xp.float32)
    return ratio_min + (ratio_max - ratio_min) * (k / num_heads)


def mspoe_order(probs: Array, *, xp: Namespace, head_order: str, **_: Any) -> Array:
    """Which ratio each head takes, ``(b, h)`` integer indices into :func:`mspoe_ratios`, from
    ``probs`` (b, h, n): each head's attention of the input's last query over all its keys,
    without positions (the softmax of the unrotated ``q k^T``).

    ``outlier`` (the authors' default, ``head_type`` unset; their ``_calculate_outlier``): the score
    of a head is ``-mean_j [p_j > 3 * mean(p)]``, minus the share of keys drawing more than three
    times the average weight, and head ``h`` takes the ratio of index ``argsort(score)[h]`` (their
    ``cos[self.head_order]``), ties kept in head order. ``reversed`` (their ``--head_type normal``):
    head ``h`` takes index ``H - 1 - h`` whatever the input."""
    b, h = probs.shape[0], probs.shape[1]
    if head_order == "reversed":
        fixed = (h - 1) - xp.arange(h, dtype=xp.int64, device=probs.device)
        return xp.broadcast_to(fixed[None, :], (b, h))
    average = xp.mean(probs, axis=-1, keepdims=True)
    outlier = -xp.mean(xp.astype(probs > 3 * average, xp.float32), axis=-1)  # (b, h)
    return xp.argsort(outlier, axis=-1, stable=True)


def mspoe_key_ratios(ratios: Array, kv_heads: int, *, xp: Namespace, keys: str, **_: Any) -> Array:
    """The ratios keys are rotated with, from the (b, h) ratios of the query heads. ``per-head``:
    each query head reads its own copy of its group's key head rotated at its own ratio, (b, h), so
    its scores depend on ``(i - j) / r`` as the paper's formula has it, whatever the grouping.
    ``group-first`` (the authors' code, ``cos[::num_key_value_groups]``): a key head takes the ratio
    of its group's first query head, (b, kv_heads); on a grouped-query model the group's other heads
    then score queries at one ratio against keys at another, and their scores stop depending on
    ``i - j`` alone. With one key head per query head the two are the same."""
    if keys == "group-first":
        return ratios[:, :: ratios.shape[1] // kv_heads]
    return ratios


def mspoe_layers(num_layers: int, *, first_layer: int, **_: Any) -> range:
    """The layers Ms-PoE runs on, ``first_layer .. num_layers - 1`` (the authors' ``apply_layers``);
    the earlier ones keep plain RoPE."""
    if first_layer >= num_layers:
        raise UserError(
            f"ms-poe first_layer={first_layer} leaves no layer of this {num_layers}-layer model to apply to",
            f"pass --param first_layer=N with 0 <= N < {num_layers} (the authors: 2, every layer but the first two)",
        )
    return range(first_layer, num_layers)


