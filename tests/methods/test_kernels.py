"""The attention kernel interface (``ctxbench.methods.kernels``): ``kernel(q, k, v, *, window_left,
causal_offset, scale) -> (out, lse)``.

* The reference kernel equals a dense softmax with an explicit mask, for every alignment the interface
  names (no edge, the lower-right edge of a cached suffix, a window behind it), in row blocks too.
* Merging the log-sum-exp parts of disjoint key sets equals one softmax over their union.
* An upper-left kernel (SDPA's ``is_causal``, cuDNN, memory-efficient) runs a lower-right edge as an
  unmasked call plus a square causal one: checked here with an upper-left reference.
* ``choose`` drops candidates that disagree with the reference or raise, keeps the fastest of the
  rest, once per class of call.
* On CUDA (skipped elsewhere): each CUDA kernel against the reference.
"""

from __future__ import annotations

import pytest
import torch

from ctxbench.methods import kernels

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny matmuls on one thread


def qkv(n_q, n_k, dtype=torch.float64, device="cpu", heads=3, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, heads, n, dim, generator=g, dtype=torch.float64).to(device, dtype) for n in (n_q, n_k, n_k)]


def dense(q, k, v, scale, keep):
    """float64 softmax over the keys ``keep`` (n_q, n_k) marks: (out, lse)."""
    s = (q.double() @ k.double().transpose(-1, -2) * scale).masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.exp(s - lse[..., None]) @ v.double(), lse


def mask(n_q, n_k, window_left, causal_offset):
    r, j = torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]
    keep = torch.ones(n_q, n_k, dtype=torch.bool)
    if causal_offset is not None:
        keep &= j <= r + causal_offset
        if window_left is not None:
            keep &= j >= r + causal_offset - window_left
    return keep


# (n_q, n_k, window_left, causal_offset): no edge; square causal (SDPA's is_causal); a suffix after a
# cached prefix (lower-right: n_k - n_q); keys past the last row's edge (cut off); a window behind a
# square and an offset edge; a window wider than the keys (no window)
ALIGNMENTS = [(20, 33, None, None), (40, 40, None, 0), (25, 70, None, 45), (25, 70, None, 30),
              (40, 40, 6, 0), (25, 70, 9, 45), (30, 30, 99, 0)]  # fmt: skip


@pytest.mark.parametrize("n_q,n_k,window_left,causal_offset", ALIGNMENTS)
@pytest.mark.parametrize("budget", [kernels.SCORE_BUDGET, 2 * 3 * 40])  # one block of rows; blocks of a few rows
def test_reference_kernel_is_a_dense_softmax_over_the_keys_the_interface_names(n_q, n_k, window_left, causal_offset, budget, monkeypatch):
    monkeypatch.setattr(kernels, "SCORE_BUDGET", budget)
    q, k, v = qkv(n_q, n_k)
    out, lse = kernels.MATH(q, k, v, window_left=window_left, causal_offset=causal_offset, scale=0.3)
    want_out, want_lse = dense(q, k, v, 0.3, mask(n_q, n_k, window_left, causal_offset))
    assert out.dtype == torch.float64 and lse.shape == (2, 3, n_q)
    assert (out - want_out).abs().max() < 1e-12 and (lse - want_lse).abs().max() < 1e-12


def test_reference_kernel_in_float32_and_bfloat16_keeps_the_input_dtype_and_a_float32_lse():
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        q, k, v = qkv(25, 70, dtype)
        out, lse = kernels.MATH(q, k, v, window_left=9, causal_offset=45, scale=0.3)
        want_out, want_lse = dense(q, k, v, 0.3, mask(25, 70, 9, 45))
        assert out.dtype == dtype and lse.dtype == torch.float32
        assert (out.double() - want_out).abs().max() < tol and (lse.double() - want_lse).abs().max() < 1e-5


def test_a_window_without_an_edge_and_an_edge_before_the_first_key_are_refused():
    q, k, v = qkv(4, 8)
    with pytest.raises(ValueError, match="needs a causal edge"):
        kernels.MATH(q, k, v, window_left=2, causal_offset=None, scale=1.0)
    with pytest.raises(ValueError, match="without a key"):
        kernels.MATH(q, k, v, causal_offset=-1, scale=1.0)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
def test_lse_merge_of_disjoint_key_sets_is_one_softmax_over_their_union(dtype, tol):
    """A two-branch method's split: the near band (a window of w - 1 behind the edge) and the far keys
    (the last n - w queries over the first n - w keys, causal), each its own call, merged."""
    n, w = 57, 12
    q, k, v = qkv(n, n, dtype)
    near_out, near_lse = kernels.MATH(q, k, v, window_left=w - 1, causal_offset=0, scale=0.3)
    far_out, far_lse = kernels.MATH(q[:, :, w:], k[:, :, : n - w], v[:, :, : n - w], causal_offset=0, scale=0.3)
    acc, lse = near_out.to(kernels.acc_dtype(dtype)), near_lse.clone()
    kernels.merge(acc[:, :, w:], lse[:, :, w:], far_out, far_lse)
    want_out, want_lse = dense(q, k, v, 0.3, mask(n, n, None, 0))  # the union: every key j <= i
    assert (acc.double() - want_out).abs().max() < tol and (lse.double() - want_lse).abs().max() < tol
    start = torch.zeros(2, 3, n, 16, dtype=acc.dtype), torch.full((2, 3, n), float("-inf"), dtype=lse.dtype)
    kernels.merge(*start, near_out, near_lse)  # merging into nothing (zeros, -inf) is the part itself
    assert torch.equal(start[0], near_out.to(acc.dtype)) and torch.equal(start[1], near_lse.to(lse.dtype))


def _upper_left_reference(q, k, v, is_causal, scale):
    """What SDPA's ``is_causal`` computes when the lengths differ: row r sees keys j <= r (upper-left)."""
    out, lse = dense(q, k, v, scale, mask(q.shape[2], k.shape[2], None, 0 if is_causal else None))
    return out.to(q.dtype), lse.float()


@pytest.mark.parametrize("n_q,n_k,causal_offset", [(40, 40, 0), (25, 70, 45), (25, 70, 30), (20, 33, None)])
def test_an_upper_left_kernel_runs_the_lower_right_edge_as_an_unmasked_and_a_square_call(n_q, n_k, causal_offset):
    kernel = kernels.Kernel("upper-left", kernels._upper_left(_upper_left_reference))
    q, k, v = qkv(n_q, n_k, torch.float32)
    out, lse = kernel(q, k, v, causal_offset=causal_offset, scale=0.3)
    want_out, want_lse = dense(q, k, v, 0.3, mask(n_q, n_k, None, causal_offset))
    assert (out.double() - want_out).abs().max() < 1e-5 and (lse.double() - want_lse).abs().max() < 1e-5
    # without the split, SDPA's own alignment would be wrong here
    if causal_offset:
        plain, _ = _upper_left_reference(q, k[:, :, : n_q + causal_offset], v[:, :, : n_q + causal_offset], True, 0.3)
        assert (plain.double() - want_out).abs().max() > 1e-2


def _counting(name, fn, calls):
    def run(q, k, v, window_left, causal, scale):
        calls.append(name)
        return fn(q, k, v, window_left, causal, scale)

    return run


def _log2(q, k, v, window_left, causal, scale):  # a kernel with another convention: log base 2
    out, lse = kernels._math(q, k, v, window_left, k.shape[2] - q.shape[2] if causal else None, scale)
    return out, lse / torch.log(torch.tensor(2.0))


def _refuses(q, k, v, window_left, causal, scale):
    raise RuntimeError("no kernel image for this device\nsecond line")


def _reference(q, k, v, window_left, causal, scale):
    return kernels._math(q, k, v, window_left, k.shape[2] - q.shape[2] if causal else None, scale)


def _slow(q, k, v, window_left, causal, scale):
    import time

    time.sleep(0.002)
    return _reference(q, k, v, window_left, causal, scale)


@pytest.fixture
def fresh_choices(monkeypatch):
    for name in ("_CHOSEN", "REJECTED", "TIMINGS"):
        monkeypatch.setattr(kernels, name, {})
    monkeypatch.setattr(kernels, "PROBE_LEN", 64)


def test_choose_keeps_the_fastest_candidate_that_agrees_with_the_reference_once_per_class(fresh_choices, monkeypatch):
    calls = []
    candidates = (kernels.Kernel("log2", _counting("log2", _log2, calls), windows=True),
                  kernels.Kernel("refuses", _counting("refuses", _refuses, calls), windows=True),
                  kernels.Kernel("slow", _counting("slow", _slow, calls), windows=True),
                  kernels.Kernel("fast", _counting("fast", _reference, calls), windows=True),
                  kernels.Kernel("half-only", _reference, kernels.HALF, windows=True),
                  kernels.Kernel("no-window", _reference))  # fmt: skip
    monkeypatch.setitem(kernels.CANDIDATES, "cpu", candidates)
    q = torch.randn(1, 4, 100, 16)
    assert kernels.choose(q, windowed=True).name == "fast"
    key = kernels._class_of(q, True)
    assert set(kernels.TIMINGS[key]) == {"slow", "fast"}  # timed: the two that agree and take the call
    assert "differs from the reference" in kernels.REJECTED[key]["log2"]
    assert kernels.REJECTED[key]["refuses"] == "RuntimeError: no kernel image for this device"
    before = len(calls)
    assert kernels.choose(torch.randn(1, 4, 7, 16), windowed=True).name == "fast"  # same class: no new probe
    assert len(calls) == before
    assert kernels.choose(q, windowed=False).name in ("slow", "fast", "no-window")  # another class: measured
    assert kernels.chosen()[key] == "fast"


def test_choose_gives_none_where_no_candidate_takes_the_call(fresh_choices, monkeypatch):
    monkeypatch.setitem(kernels.CANDIDATES, "cpu", (kernels.Kernel("no-window", _reference),))
    assert kernels.choose(torch.randn(1, 2, 8, 16), windowed=True) is None
    monkeypatch.setitem(kernels.CANDIDATES, "cpu", (kernels.Kernel("log2", _log2), kernels.Kernel("x", _refuses)))
    assert kernels.choose(torch.randn(1, 2, 8, 16), windowed=False) is None


def test_on_cpu_the_reference_kernel_is_the_only_candidate():
    assert kernels.choose(torch.randn(1, 2, 8, 16, dtype=torch.float64), windowed=True) is kernels.MATH


def test_noted_attention_paths_are_kept_in_order_until_forgotten():
    kernels.forget()
    for name in ("whole-flash+cudnn", "blocked", "whole-flash+cudnn"):
        kernels.note(name)
    assert kernels.ran() == "whole-flash+cudnn,blocked"
    kernels.forget()
    assert kernels.ran() == ""


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@CUDA
@pytest.mark.parametrize("name", ["flash", "cudnn", "efficient", "efficient-window"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("n_q,n_k,window_left,causal_offset", ALIGNMENTS + [(300, 1000, 127, 700), (1000, 1000, 255, 0)])
def test_each_cuda_kernel_equals_the_reference_on_cuda(name, dtype, n_q, n_k, window_left, causal_offset):
    kernel = next(k for k in kernels.CANDIDATES["cuda"] if k.name == name)
    windowed = window_left is not None and window_left < n_k
    if not kernel.supports(dtype, windowed):
        pytest.skip(f"{name} does not take {dtype} {'windowed ' if windowed else ''}calls")
    q, k, v = qkv(n_q, n_k, dtype, "cuda", heads=4, dim=64)
    out, lse = kernel(q, k, v, window_left=window_left, causal_offset=causal_offset, scale=0.125)
    want_out, want_lse = dense(q.cpu(), k.cpu(), v.cpu(), 0.125, mask(n_q, n_k, window_left, causal_offset))
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    assert out.dtype == dtype and lse.shape == (2, 4, n_q)
    assert (out.double().cpu() - want_out).abs().max() < tol
    assert (lse.double().cpu() - want_lse).abs().max() < tol


@CUDA
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_on_cuda_choose_picks_a_kernel_that_agrees_and_says_why_it_dropped_others(dtype):
    q = torch.randn(1, 8, 2048, 64, device="cuda", dtype=dtype)
    for windowed in (False, True):
        kernel = kernels.choose(q, windowed=windowed, length=2048)
        key = kernels._class_of(q, windowed)
        print(dtype, "windowed" if windowed else "plain", "->", kernel and kernel.name, kernels.TIMINGS.get(key), kernels.REJECTED.get(key))
        if dtype == torch.bfloat16:
            assert kernel is not None  # flash takes both on any GPU it supports
