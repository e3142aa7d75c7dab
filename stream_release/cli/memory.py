"""Give freed memory back to the operating system (glibc's allocator), once per process.

glibc's ``malloc`` serves an allocation of at least ``M_MMAP_THRESHOLD`` bytes with its own
``mmap`` and unmaps it when freed; but after such a block is freed it raises the threshold to
the block's size (up to 32 MiB), so later arrays of that size come from the heap, whose freed
pages it keeps. A release allocates and frees many arrays of a few to tens of MiB. Setting the
threshold explicitly is what stops it moving (``mallopt(3)``); the value trades memory for
time, since every mapped array is faulted in afresh. Measured on the 1M-row churn series:

* the offline release (``benchmarks/memory.py``: one ``anonymize`` process per release,
  releases 1-5; and ``publish`` of releases 1-2 in one process, taking turns): glibc's moving
  threshold 1,045-1,053 MiB; 128 KiB 829-944 MiB, with release 2 in 12.0-13.7 s against
  7.9-10.9 s; 16 MiB 872-993 MiB, release 2 in 7.9-8.7 s. :data:`BATCH_THRESHOLD`.
* the worker (``benchmarks/load.py``, ten releases): peak RSS 1.17 GiB at 16 MiB with cuts of
  10.7-16.4 s, 0.97 GiB at 128 KiB with cuts of 16.2-21.7 s. A worker runs for months beside
  other services, so it keeps the smaller footprint: :data:`WORKER_THRESHOLD`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["BATCH_THRESHOLD", "WORKER_THRESHOLD", "return_freed_memory"]

_M_MMAP_THRESHOLD = -3
"""``M_MMAP_THRESHOLD`` from glibc's ``malloc.h``."""
BATCH_THRESHOLD = 16 << 20
"""For commands that run and exit: allocations from 16 MiB on are their own mappings."""
WORKER_THRESHOLD = 128 << 10
"""For the long-running worker: glibc's initial threshold, kept from moving."""


@functools.cache
def return_freed_memory(threshold: int = BATCH_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes; False where there is no glibc
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
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))
