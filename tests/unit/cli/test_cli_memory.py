"""The CLI fixes glibc's mmap threshold, so that freed arrays go back to the system."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stream_release.cli.memory import BATCH_THRESHOLD, WORKER_THRESHOLD

SCRIPT = """
import sys
import numpy as np
from stream_release.cli.memory import return_freed_memory

if sys.argv[1] != "default":
    assert return_freed_memory(int(sys.argv[1]))
first = np.ones(24 << 20, np.uint8)  # freed: glibc raises its threshold to 24 MiB
del first
arrays = [np.ones(16 << 20, np.uint8) for _ in range(8)]
del arrays[::2]  # every other one: holes in the heap that trimming its top cannot return
with open("/proc/self/status") as status:
    print(next(int(l.split()[1]) for l in status if l.startswith("VmRSS")))
"""


def rss_kib(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], check=True, capture_output=True, text=True
    )
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
@pytest.mark.parametrize("threshold", [BATCH_THRESHOLD, WORKER_THRESHOLD])
def test_freed_arrays_are_returned_with_the_threshold_fixed(threshold: int) -> None:
    moving, fixed = rss_kib("default"), rss_kib(str(threshold))
    assert fixed < moving - 48 * 1024, (moving, fixed)  # four 16 MiB holes kept by default
