"""Attention kernels behind one interface, for the whole-sequence calls of the attention-level methods.

    kernel(q, k, v, *, window_left, causal_offset, scale) -> (out, lse)

``q`` (b, h, n_q, d); ``k`` and ``v`` (b, h, n_k, d), as many heads as ``q`` (callers copy grouped key
heads). Row ``r`` of ``q`` sees key ``j`` when

* ``causal_offset is None`` or ``j <= r + causal_offset`` (the causal edge), and
* ``window_left is None`` or ``j >= r + causal_offset - window_left`` (a sliding window behind the
  edge: ``window_left + 1`` keys at most; it needs the edge).

The alignment is explicit, never a kernel's default: ``causal_offset = n_k - n_q`` is the lower-right
alignment that a suffix after a cached prefix needs, which PyTorch's flash op uses when the lengths
differ; SDPA's ``is_causal`` (and the cuDNN and memory-efficient ops behind it) aligns upper-left,
``causal_offset = 0``, whatever the lengths. Each implementation maps this convention onto its own:
keys past the last row's edge are cut off first, so a CUDA kernel only ever sees no mask or the
lower-right edge; an upper-left kernel runs a lower-right edge as one unmasked call over the keys
every row sees and one square causal call over the rest, merged by log-sum-exp. Every row must see
at least one key (``causal_offset >= 0``).

Returns ``out`` (b, h, n_q, d) in ``q``'s dtype and ``lse`` (b, h, n_q), the natural log of
``sum_j exp(scale q . k_j)`` over the row's keys, in float32 (float64 for float64 inputs).

Implementations: :data:`MATH`, the reference (any device and dtype, an explicit mask over blocks of
rows, arithmetic in float32 or float64); on CUDA :data:`FLASH` (``aten._flash_attention_forward``,
lower-right, with window sizes), :data:`CUDNN` (``aten._scaled_dot_product_cudnn_attention`` with
``compute_log_sumexp``), :data:`EFFICIENT` (``aten._scaled_dot_product_efficient_attention``) and
:data:`EFFICIENT_WINDOW` (``aten._efficient_attention_forward``, lower-right causal with a window).
:func:`choose` picks one per device and class of call (dtype, heads, head dim, windowed or not) by
checking each candidate against :data:`MATH` on a small problem and timing the survivors once; the
choice is kept for the process.

:func:`note` / :func:`ran` / :func:`forget` keep the names of the attention paths that ran (``block-cpu-flash``,
``whole-flash+cudnn``, ...), which the runner writes into each row's ``extra``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

# A kernel's answer: (out (b, h, n_q, d), log-sum-exp (b, h, n_q) float32).
Pair = tuple[Tensor, Tensor]
# A class of calls a kernel is chosen for: (device, dtype, heads, head dim, windowed).
CallClass = tuple[str, torch.dtype, int, int, bool]

# Elements of one score block of the reference kernel (rows x keys x heads x batch).
SCORE_BUDGET = 2**25


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """What the merge and the reference arithmetic use: float32, or float64 for float64 inputs."""
    return torch.promote_types(dtype, torch.float32)


def merge(out: torch.Tensor, lse: torch.Tensor, part_out: torch.Tensor, part_lse: torch.Tensor) -> None:
    """Fold a softmax over more keys (disjoint from those already in) into ``out`` / ``lse``, in place:
    ``out = (e^lse out + e^part_lse part_out) / (e^lse + e^part_lse)``; ``out`` may start at zeros with
    ``lse`` at ``-inf``."""
    total = torch.logaddexp(lse, part_lse.to(lse.dtype))
    out.mul_((lse - total).exp()[..., None]).add_(part_out.to(out.dtype) * (part_lse.to(lse.dtype) - total).exp()[..., None])
    lse.copy_(total)


@dataclass(frozen=True)
class Kernel:
    """One implementation of the interface: ``fn(q, k, v, window_left, causal, scale)`` with the keys
    already cut to the last row's edge, so ``causal`` means the lower-right edge."""

    name: str
    fn: Callable[..., Pair]  # fn(q, k, v, window_left, causal, scale) -> (out, lse)
    dtypes: tuple[torch.dtype, ...] | None = None  # None: any
    windows: bool = False  # runs a sliding window

    def supports(self, dtype: torch.dtype, windowed: bool) -> bool:
        return (self.dtypes is None or dtype in self.dtypes) and (self.windows or not windowed)

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, *, window_left: int | None = None, causal_offset: int | None = None,
                 scale: float) -> Pair:
        n_q, n_k = q.shape[2], k.shape[2]
        if causal_offset is not None:
            if causal_offset < 0:
                raise ValueError(f"causal_offset {causal_offset} < 0 leaves row 0 without a key")
            if n_q + causal_offset < n_k:  # keys past the last row's edge: no row sees them
                k, v, n_k = k[:, :, : n_q + causal_offset], v[:, :, : n_q + causal_offset], n_q + causal_offset
            if window_left is not None and window_left >= n_k:
                window_left = None
            if n_q + causal_offset > n_k and self.fn is not _math:  # the edge runs past the keys
                return MATH(q, k, v, window_left=window_left, causal_offset=causal_offset, scale=scale)
        elif window_left is not None:
            raise ValueError("a window needs a causal edge (causal_offset)")
        if self.fn is _math:
            return _math(q, k, v, window_left, causal_offset, scale)
        return self.fn(q, k, v, window_left, causal_offset is not None, scale)


def _math(q: Tensor, k: Tensor, v: Tensor, window_left: int | None, causal_offset: int | None, scale: float) -> Pair:
    """The reference: blocks of rows, each with its explicit boolean mask over the keys it can reach,
    softmax in float32 (float64 for float64 inputs)."""
    acc = acc_dtype(q.dtype)
    b, h, n_q, _ = q.shape
    n_k = k.shape[2]
    out = torch.empty(b, h, n_q, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.empty(b, h, n_q, dtype=acc, device=q.device)
    rows = max(1, SCORE_BUDGET // max(1, b * h * n_k))
    for a in range(0, n_q, rows):
        e = min(n_q, a + rows)
        k0, k1 = 0, n_k
        if causal_offset is not None:
            k1 = min(n_k, e + causal_offset)
            if window_left is not None:
                k0 = max(0, a + causal_offset - window_left)
        r = torch.arange(a, e, device=q.device)[:, None]
        j = torch.arange(k0, k1, device=q.device)[None, :]
        keep = torch.ones(e - a, k1 - k0, dtype=torch.bool, device=q.device)
        if causal_offset is not None:
            keep &= j <= r + causal_offset
            if window_left is not None:
                keep &= j >= r + causal_offset - window_left
        scores = torch.matmul(q[:, :, a:e].to(acc), k[:, :, k0:k1].to(acc).transpose(-1, -2)) * scale
        scores = scores.masked_fill(~keep, float("-inf"))
        part = torch.logsumexp(scores, dim=-1)
        out[:, :, a:e] = torch.matmul(torch.exp(scores - part[..., None]), v[:, :, k0:k1].to(acc)).to(q.dtype)
        lse[:, :, a:e] = part
    return out, lse


def _rows(lse: torch.Tensor, b: int, h: int, n_q: int) -> torch.Tensor:
    """A kernel's log-sum-exp as (b, h, n_q) float32: some pad the rows (to 32), some add a last dim of 1."""
    return lse.reshape(b, h, -1)[:, :, :n_q].float()


def _flash(q: Tensor, k: Tensor, v: Tensor, window_left: int | None, causal: bool, scale: float) -> Pair:
    """``aten._flash_attention_forward``: (b, n, h, d) layout, lower-right edge, window sizes."""
    b, h, n_q, _ = q.shape
    n_k = k.shape[2]
    left = -1 if window_left is None else int(window_left)
    out, lse = torch.ops.aten._flash_attention_forward(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, None, n_q, n_k, 0.0, causal, False,
        scale=scale, window_size_left=left, window_size_right=0 if causal else -1,
    )[:2]  # fmt: skip
    return out.transpose(1, 2), _rows(lse, b, h, n_q)


def _upper_left(call: Callable[[Tensor, Tensor, Tensor, bool, float], Pair]) -> Callable[..., Pair]:
    """An upper-left kernel ``call(q, k, v, is_causal, scale) -> (out, lse)`` run at the lower-right edge:
    the keys every row sees (``0 .. n_k - n_q - 1``) unmasked, then the last ``n_q`` keys square-causal,
    merged by log-sum-exp."""

    def run(q: Tensor, k: Tensor, v: Tensor, window_left: int | None, causal: bool, scale: float) -> Pair:
        n_q, n_k = q.shape[2], k.shape[2]
        if not causal or n_k == n_q:
            return call(q, k, v, causal, scale)
        shared = n_k - n_q
        out, lse = call(q, k[:, :, :shared], v[:, :, :shared], False, scale)
        part_out, part_lse = call(q, k[:, :, shared:], v[:, :, shared:], True, scale)
        out = out.float()
        merge(out, lse, part_out, part_lse)
        return out.to(q.dtype), lse

    return run


def _cudnn_call(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: float) -> Pair:
    b, h, n_q, _ = q.shape
    out, lse = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, is_causal, False, scale=scale)[:2]
    return out, _rows(lse, b, h, n_q)


def _efficient_call(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: float) -> Pair:
    b, h, n_q, _ = q.shape
    out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, is_causal, scale=scale)[:2]
    return out, _rows(lse, b, h, n_q)


def _efficient_window(q: Tensor, k: Tensor, v: Tensor, window_left: int | None, causal: bool, scale: float) -> Pair:
    """``aten._efficient_attention_forward``: (b, n, h, d) layout, ``custom_mask_type`` 2 (causal from
    the bottom right), ``window_size`` the keys a row sees (``window_left + 1``)."""
    b, h, n_q, _ = q.shape
    n_k = k.shape[2]
    out, lse = torch.ops.aten._efficient_attention_forward(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, None, None, n_q, n_k, 0.0, 2 if causal else 0, True,
        scale=scale, window_size=None if window_left is None else int(window_left) + 1,
    )[:2]  # fmt: skip
    return out.transpose(1, 2), _rows(lse, b, h, n_q)


HALF = (torch.float16, torch.bfloat16)
MATH = Kernel("math", _math, windows=True)
FLASH = Kernel("flash", _flash, HALF, windows=True)
CUDNN = Kernel("cudnn", _upper_left(_cudnn_call), HALF)
EFFICIENT = Kernel("efficient", _upper_left(_efficient_call), (torch.float32, *HALF))
EFFICIENT_WINDOW = Kernel("efficient-window", _efficient_window, (torch.float32, *HALF), windows=True)

# The kernels :func:`choose` picks among, per device type; any other device type runs MATH.
CANDIDATES: dict[str, tuple[Kernel, ...]] = {"cuda": (FLASH, CUDNN, EFFICIENT, EFFICIENT_WINDOW)}
PROBE_LEN = 4096  # the square causal call each surviving candidate is timed on (shorter sequences: theirs)
_CHOSEN: dict[CallClass, Kernel | None] = {}
REJECTED: dict[CallClass, dict[str, str]] = {}  # per class of call: candidate -> why it was not taken
TIMINGS: dict[CallClass, dict[str, float]] = {}  # per class of call: candidate -> seconds of the timed probe


def _class_of(q: torch.Tensor, windowed: bool) -> CallClass:
    return (str(q.device), q.dtype, q.shape[1], q.shape[-1], windowed)


def choose(q: torch.Tensor, *, windowed: bool, length: int = PROBE_LEN) -> Kernel | None:
    """The kernel for calls like ``q`` (its device, dtype, heads and head dim; with a sliding window or
    not), chosen once per process: every candidate of the device type that takes such a call is run
    on a small problem with an offset edge (and a window) against :data:`MATH`, and the ones that
    agree are timed on one square call of ``min(length, PROBE_LEN)`` rows; the fastest wins. None: no
    candidate works (the caller keeps its block partition)."""
    key = _class_of(q, windowed)
    if key not in _CHOSEN:
        found = [c for c in CANDIDATES.get(q.device.type, (MATH,)) if c.supports(q.dtype, windowed)]
        _CHOSEN[key] = found[0] if len(found) == 1 else _measure(found, q, windowed, min(length, PROBE_LEN), key)
    return _CHOSEN[key]


def chosen() -> dict[CallClass, str | None]:
    """What :func:`choose` has picked in this process: class of call -> kernel name (None: none works)."""
    return {k: (v.name if v is not None else None) for k, v in _CHOSEN.items()}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _agrees(kernel: Kernel, q: torch.Tensor, windowed: bool) -> str:
    """'' when ``kernel`` equals :data:`MATH` on a small problem of ``q``'s class, else why not."""
    g = torch.Generator(device="cpu").manual_seed(0)
    h, d = q.shape[1], q.shape[-1]
    tol = 1e-4 if q.dtype in (torch.float32, torch.float64) else 3e-2
    for n_q, n_k in ((96, 96), (72, 200)):
        x = [torch.randn(1, h, n, d, generator=g).to(q.device, q.dtype) for n in (n_q, n_k, n_k)]
        args = dict(window_left=37 if windowed else None, causal_offset=n_k - n_q, scale=d**-0.5)
        want_out, want_lse = MATH(*x, **args)
        got_out, got_lse = kernel(*x, **args)
        out_err = (got_out.float() - want_out.float()).abs().max().item()
        lse_err = (got_lse.float() - want_lse.float()).abs().max().item()
        if got_out.shape != want_out.shape or got_lse.shape != want_lse.shape or not out_err <= tol or not lse_err <= tol:
            return f"differs from the reference at {n_q}x{n_k}: out {out_err:.3g}, lse {lse_err:.3g}"
    return ""


def _measure(found: list[Kernel], q: torch.Tensor, windowed: bool, length: int, key: CallClass) -> Kernel | None:
    rejected, times = REJECTED.setdefault(key, {}), TIMINGS.setdefault(key, {})
    h, d = q.shape[1], q.shape[-1]
    for kernel in found:
        try:
            why = _agrees(kernel, q, windowed)
        except Exception as exc:  # an op this build lacks, a shape it refuses
            why = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"
        if why:
            rejected[kernel.name] = why
            continue
        x = [torch.randn(1, h, length, d, device=q.device, dtype=q.dtype) for _ in range(3)]
        args = dict(window_left=length // 4 if windowed else None, causal_offset=0, scale=d**-0.5)
        try:
            kernel(*x, **args)  # warm-up
            _sync(q.device)
            t0 = time.perf_counter()
            for _ in range(3):
                kernel(*x, **args)
            _sync(q.device)
            times[kernel.name] = (time.perf_counter() - t0) / 3
        except Exception as exc:
            rejected[kernel.name] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"
    if not times:
        return None
    best = min(times, key=times.__getitem__)
    return next(k for k in found if k.name == best)


# --- which attention paths ran --------------------------------------------------------------------

_RAN: dict[str, None] = {}


def note(name: str) -> None:
    """Record that the attention path ``name`` ran (kept in order of first use)."""
    if name not in _RAN:
        _RAN[name] = None


def ran() -> str:
    """The attention paths noted since :func:`forget`, comma-separated in order of first use ('' if none)."""
    return ",".join(_RAN)


def forget() -> None:
    _RAN.clear()
