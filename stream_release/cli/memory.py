"""Give freed memory back to the operating system (glibc's allocator), once per process.

glibc's ``malloc`` serves an allocation of at least ``M_MMAP_THRESHOLD`` bytes with its own
``mmap`` and unmaps it when freed; but after such a block is freed it raises the threshold to
the block's size (up to 32 MiB), so later arrays of that size come from the heap, whose freed
pages it keeps. A release allocates and frees many arrays of a few to tens of MiB. Setting the
threshold explicitly is what stops it moving (``mallopt(3)``); the value trades memory for
time, since every mapped array is faulted in afresh. Measured on the 1M-row churn series
(``benchmarks/memory.py``, one ``anonymize`` process per release, peak RSS of releases
1-5, and the same two releases in one process, taking turns):

* moving threshold (glibc's default): 1,045-1,053 MiB for ``publish``;
* 128 KiB: 829-944 MiB, but ``publish`` of release 2 took 12.0-13.7 s against 7.9-10.9 s;
* 16 MiB (:data:`MMAP_THRESHOLD`): 872-993 MiB, release 2 in 7.9-8.7 s.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["return_freed_memory"]

_M_MMAP_THRESHOLD = -3
"""``M_MMAP_THRESHOLD`` from glibc's ``malloc.h``."""
MMAP_THRESHOLD = 16 << 20
"""Every allocation from this size on is its own mapping, unmapped when freed."""


@functools.cache
def return_freed_memory() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD`; False where there is no glibc
    (musl, macOS: their allocators return large blocks anyway)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
