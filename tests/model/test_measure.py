"""Peak memory of a block of work on the CPU: the kernel's high-water mark, reset at entry. Each case
runs in a fresh interpreter: in a long-lived one (the test session) a block's allocation can be
served from memory freed earlier, or garbage collected inside the block can shrink the resident set
below its size at entry, and neither says anything about the measurement."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ctxbench.model.measure import reset_peak

pytestmark = pytest.mark.skipif(not reset_peak(), reason="no resettable high-water mark (not Linux)")

BLOCKS = """
import json, sys
import numpy as np
from ctxbench.model.measure import Measured

MB = 2**20

def touch(mb):  # allocate mb MB, write every page (resident), free it at once
    block = np.ones(mb * MB, dtype=np.uint8)
    del block

out = []
for keep_mb, block_mb in json.loads(sys.argv[1]):
    keep = np.ones(keep_mb * MB, dtype=np.uint8) if keep_mb else None  # resident before entry
    with Measured("cpu") as m:
        touch(block_mb)
    out.append([m.kernel, m.peak_mb])
    del keep
print(json.dumps(out))
"""


def _peaks(*blocks: tuple[int, int]) -> list[tuple[bool, float]]:
    """(kernel's mark used, peak MB) of each ``(MB resident before entry, MB touched inside)``, in order, in one fresh process."""
    done = subprocess.run([sys.executable, "-c", BLOCKS, json.dumps(blocks)], capture_output=True, text=True, check=True)
    return [tuple(x) for x in json.loads(done.stdout)]


def test_a_short_lived_allocation_is_in_the_peak():
    [(kernel, peak)] = _peaks((0, 300))  # resident for a few ms: a 10 ms sampler can miss it, the mark cannot
    assert kernel
    assert peak >= 295


def test_each_measurement_starts_from_the_size_at_its_entry():
    (_, first), (_, quiet) = _peaks((0, 300), (0, 10))
    assert first >= 295
    assert quiet < 100  # the earlier 300 MB peak is not carried over


def test_the_peak_is_above_the_size_at_entry_not_the_process_total():
    [(_, peak)] = _peaks((200, 50))  # 200 MB resident before entry: not part of the block's peak
    assert 45 <= peak < 150
