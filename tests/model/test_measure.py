"""Peak memory of a block of work on the CPU: the kernel's high-water mark, reset at entry."""

from __future__ import annotations

import numpy as np
import pytest

from ctxbench.model.measure import Measured, reset_peak

MB = 2**20
pytestmark = pytest.mark.skipif(not reset_peak(), reason="no resettable high-water mark (not Linux)")


def _touch(mb: int) -> None:
    """Allocate ``mb`` MB, write every page (so it is resident), and free it at once."""
    block = np.ones(mb * MB, dtype=np.uint8)
    del block


def test_a_short_lived_allocation_is_in_the_peak():
    with Measured("cpu") as m:
        _touch(300)  # resident for a few ms: a 10 ms sampler can miss it, the high-water mark cannot
    assert m.kernel
    assert m.peak_mb >= 295


def test_each_measurement_starts_from_the_size_at_its_entry():
    with Measured("cpu"):
        _touch(300)
    with Measured("cpu") as quiet:
        _touch(10)
    assert quiet.peak_mb < 100  # the earlier 300 MB peak is not carried over


def test_the_peak_is_above_the_size_at_entry_not_the_process_total():
    keep = np.ones(200 * MB, dtype=np.uint8)  # resident before entry: not part of the block's peak
    with Measured("cpu") as m:
        _touch(50)
    del keep
    assert 45 <= m.peak_mb < 150
