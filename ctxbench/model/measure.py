"""Wall time and peak memory of a block of work.

On CUDA the peak is ``torch.cuda.max_memory_allocated`` above the level at entry; on CPU it is the
largest resident-set size seen by a sampling thread (every 10 ms) above the level at entry, so it
counts every allocation of the process, torch's included.
"""

from __future__ import annotations

import threading
import time

import torch


class Measured:
    """``with Measured(device) as m: ...`` then ``m.seconds`` and ``m.peak_mb``."""

    def __init__(self, device: str | torch.device = "cpu", interval: float = 0.01) -> None:
        self.cuda = str(device).startswith("cuda")
        self.interval = interval
        self.seconds = 0.0
        self.peak_mb = 0.0

    def __enter__(self) -> Measured:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
        else:
            import psutil

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
        else:
            self._stop.set()
            self._thread.join()
            self._peak = max(self._peak, self._proc.memory_info().rss)
            self.peak_mb = (self._peak - self._base) / 2**20
