"""Give freed memory back to the operating system (glibc's allocator), once per process.

glibc's ``malloc`` serves an allocation of at least ``M_MMAP_THRESHOLD`` bytes (128 KiB) with
its own ``mmap`` and unmaps it when freed; but after such a block is freed it raises the
threshold to the block's size (up to 32 MiB), so the next arrays of that size come from the
heap, whose freed pages it keeps. A release allocates and frees many arrays of a few to tens
of MiB; with the moving threshold, a one-million-row ``anonymize`` peaked at 1,085 MiB, with
the threshold fixed at 128 KiB at 972 MiB, in the same time (``benchmarks/memory.py``).
Setting the threshold explicitly is what stops it moving (``mallopt(3)``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["return_freed_memory"]

_M_MMAP_THRESHOLD = -3
"""``M_MMAP_THRESHOLD`` from glibc's ``malloc.h``."""
MMAP_THRESHOLD = 128 * 1024
"""glibc's default: every allocation from this size on is its own mapping."""


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
