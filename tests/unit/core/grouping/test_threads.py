"""The parallel kernel's thread count: the free cores, the cap, and never slower than one."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from stream_release.core.grouping import threads
from stream_release.core.grouping.threads import (
    PROBE_EVERY,
    ThreadChoice,
    available_threads,
    set_thread_cap,
)


@pytest.fixture(autouse=True)
def _no_cap() -> Iterator[None]:
    yield
    set_thread_cap(0)


def test_the_threads_are_the_cores_the_process_may_run_on_at_most_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3})
    monkeypatch.setattr(threads.numba.config, "NUMBA_NUM_THREADS", 16)
    assert available_threads() == 2  # not the machine's 16
    set_thread_cap(1)
    assert available_threads() == 1
    set_thread_cap(8)
    assert available_threads() == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(12)))
    assert available_threads() == 8
    with pytest.raises(ValueError, match="threads = -1"):
        set_thread_cap(-1)


def test_each_call_runs_on_the_count_that_split_fastest_and_the_other_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(threads, "available_threads", lambda: 2)
    choice = ThreadChoice()
    seconds = {1: 0.148, 2: 0.357}  # another process holds the second core
    runs = []
    for _ in range(4 * PROBE_EVERY):
        count = choice.pick()
        runs.append(count)
        choice.record(count, 30_000, seconds[count])
    assert runs[:4] == [2, 2, 1, 1]  # each measured twice: a first call is not a measure
    later = runs[4:]
    assert later.count(2) <= len(later) // PROBE_EVERY + 1  # only the probes
    seconds = {1: 0.080, 2: 0.045}  # the core is free again: the probe finds it
    for _ in range(2 * PROBE_EVERY):
        count = choice.pick()
        choice.record(count, 30_000, seconds[count])
    assert choice.pick() == 2


def test_one_core_runs_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "available_threads", lambda: 1)
    assert ThreadChoice().pick() == 1
