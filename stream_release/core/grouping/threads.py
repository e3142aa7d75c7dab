"""How many threads the parallel kernel (pass 1, :func:`~stream_release.core.grouping.
mondrian.mondrian_leaves`) runs on.

Never more than the cores this process may run on (``os.sched_getaffinity``: a container's
or ``taskset``'s share, not the machine's count, which numba's pool is sized by), nor than
``[grouping] threads`` when set. And never slower than one thread: the leaves are the same on
any number of threads, so each call runs on the count that has split fastest per row so far,
the other count tried again every :data:`PROBE_EVERY` calls (on a loaded 2-core machine two
threads took 357 ms where one took 148: the other core was busy).
"""

from __future__ import annotations

import os
import threading

import numba

__all__ = ["PROBE_EVERY", "ThreadChoice", "available_threads", "set_thread_cap"]

PROBE_EVERY = 16
"""Calls between two tries of the count that is not the fastest so far."""
SMOOTHING = 0.75
"""Weight of the newest time per row in each count's running figure."""

_cap = 0
"""``[grouping] threads`` of the process (0: no cap but the cores)."""


def set_thread_cap(threads: int) -> None:
    """Cap the parallel kernel at ``threads`` (``[grouping] threads``; 0: the cores this
    process may run on)."""
    global _cap
    if threads < 0:
        raise ValueError(f"threads = {threads}: 0 (the free cores) or a positive count")
    _cap = threads


def available_threads() -> int:
    """The threads the parallel kernel may use: the cores this process may run on, at most
    numba's pool and the cap."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    pool = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    threads = min(cores or 1, pool)
    return max(1, min(threads, _cap) if _cap else threads)


class ThreadChoice:
    """One thread or :func:`available_threads`, whichever has split fastest per row."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cost: dict[int, float] = {}
        """Threads -> running seconds per row (from its second call: the first starts the
        threads, loads the kernel)."""
        self._seen: set[int] = set()
        self._calls = 0

    def pick(self) -> int:
        """The count of threads the next call runs on."""
        many = available_threads()
        if many == 1:
            return 1
        with self._lock:
            self._calls += 1
            for count in (many, 1):
                if count not in self._cost:
                    return count
            fast, slow = sorted((many, 1), key=lambda c: self._cost[c])
            return slow if self._calls % PROBE_EVERY == 0 else fast

    def record(self, threads: int, rows: int, seconds: float) -> None:
        """A call on ``threads`` split ``rows`` rows in ``seconds``."""
        per_row = seconds / max(rows, 1)
        with self._lock:
            if threads not in self._seen:  # a first call: not a measure of the count
                self._seen.add(threads)
                return
            old = self._cost.get(threads)
            self._cost[threads] = (
                per_row if old is None else SMOOTHING * per_row + (1 - SMOOTHING) * old
            )
