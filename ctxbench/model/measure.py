"""Wall time and peak memory of a block of work.

On CUDA the peak is ``torch.cuda.max_memory_allocated`` above the level at entry. On a Linux CPU it
is the kernel's own high-water mark of the resident set (``VmHWM`` in ``/proc/self/status``), reset
to the current size at entry by writing ``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0,
``proc(5)``), above the level at entry: exact, and nothing runs beside the work. Elsewhere, the
largest resident-set size a sampling thread sees every 10 ms. Either way it counts every
allocation of the process, torch's included.

Why not always the thread: it woke 100 times a second for the whole forward, taking a core's time
slice from torch's threads each time on a 2-core machine, and it missed a peak shorter than 10 ms.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import torch
import torch.nn as nn

from ctxbench.model.decoding import cache_of, with_cache

STATUS, CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int:
    """``field`` (``VmRSS``, ``VmHWM``) of this process's ``/proc/self/status``, in KiB."""
    for line in STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"no {field} in {STATUS}")


def reset_peak() -> bool:
    """Reset the kernel's high-water mark of this process's resident set to its current size; False
    where the kernel has no such counter to reset (not Linux, or /proc not writable)."""
    try:
        CLEAR_REFS.write_text("5")
        _status_kib("VmHWM")
        return True
    except OSError:
        return False


class Measured:
    """``with Measured(device) as m: ...`` then ``m.seconds`` and ``m.peak_mb``."""

    def __init__(self, device: str | torch.device = "cpu", interval: float = 0.01) -> None:
        self.cuda = str(device).startswith("cuda")
        self.interval = interval
        self.seconds = 0.0
        self.peak_mb = 0.0
        self.kernel = False  # the peak is the kernel's high-water mark (else the sampling thread's)

    def __enter__(self) -> Measured:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
        elif reset_peak():
            self.kernel = True
            self._base = _status_kib("VmRSS") * 1024
        else:
            import psutil  # optional: psutil only where it is used

            self._proc = psutil.Process()
            self._base = self._proc.memory_info().rss
            self._peak = self._base
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        self._t0 = time.perf_counter()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, self._proc.memory_info().rss)
            self._stop.wait(self.interval)

    def __exit__(self, *exc) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        self.seconds = time.perf_counter() - self._t0
        if self.cuda:
            self.peak_mb = (torch.cuda.max_memory_allocated() - self._base) / 2**20
        elif self.kernel:
            self.peak_mb = max(0.0, (_status_kib("VmHWM") * 1024 - self._base) / 2**20)
        else:
            self._stop.set()
            self._thread.join()
            self._peak = max(self._peak, self._proc.memory_info().rss)
            self.peak_mb = (self._peak - self._base) / 2**20


def decoder_layers(model) -> list:
    """The model's stack of decoder layers (the ModuleList as long as ``num_hidden_layers``)."""
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == n:
            return list(module)
    return []


def time_forwards(model: torch.nn.Module, lengths: tuple[int, ...], steps: int) -> list[tuple[int, float, float]]:
    """Per length ``n``: ``(n, seconds of a forward of n tokens, seconds of steps decoding steps on its
    cache)``. An untimed forward of the longest shape goes first (the first call pays for page faults
    and kernel selection, and a smaller shape then reuses its memory), and one untimed step before
    each timed series. The calibration of the plan's rates (``runner.costmodel.measured_rate``)."""
    device = next(model.parameters()).device

    def timed(call) -> tuple[float, object]:
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = call()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0, out

    vocab = int(getattr(model.config, "vocab_size", 0) or 2)
    ids = torch.randint(0, min(vocab, 1000), (1, max(lengths)), device=device)  # (1, longest)
    out = []
    with torch.inference_mode():
        model(input_ids=ids, use_cache=False, logits_to_keep=1)  # warm-up, the longest shape
        for n in lengths:
            seconds, first = timed(lambda n=n: model(input_ids=ids[:, :n], use_cache=True, logits_to_keep=1))
            cache, token = cache_of(first), ids[:, n - 1 : n]

            def step(cache=cache, token=token):
                return model(input_ids=token, **with_cache(model, cache), use_cache=True, logits_to_keep=1)

            step()  # warm-up step
            out.append((n, seconds, timed(lambda step=step: [step() for _ in range(steps)])[0]))
    return out
