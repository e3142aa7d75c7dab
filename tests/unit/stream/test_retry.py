"""``stream_release.stream.retry.until_done``: what is tried again, how often, and for how long."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
import redis
from aiokafka import errors as aiokafka_errors
from redis.exceptions import CrossSlotTransactionError, RedisClusterException, SlotNotCoveredError
from tenacity import stop_after_delay

from stream_release.errors import HistoryStoreError
from stream_release.stream.retry import DEPENDENCY_ERRORS, is_dependency_error, until_done


class Flaky:
    """Fails with each of ``failures`` in turn, then returns ``"done"``."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"


def test_failures_of_redis_and_the_broker_are_tried_again_and_logged() -> None:
    wrapped = HistoryStoreError("Redis: could not stage")
    wrapped.__cause__ = redis.ConnectionError("refused")
    attempt = Flaky(
        redis.ConnectionError("down"),
        redis.TimeoutError("slow"),
        aiokafka_errors.KafkaConnectionError("no broker"),
        TimeoutError("send"),
        wrapped,
    )
    logged: list[str] = []
    result = asyncio.run(
        until_done(
            attempt, longest_wait_s=0.001, on_retry=lambda e: logged.append(type(e).__name__)
        )
    )
    assert result == "done" and attempt.calls == 6
    assert logged == [
        "ConnectionError",
        "TimeoutError",
        "KafkaConnectionError",
        "TimeoutError",
        "HistoryStoreError",
    ]


def test_any_other_failure_is_raised_at_once() -> None:
    attempt = Flaky(KeyError("p-1"))
    logged: list[BaseException] = []
    with pytest.raises(KeyError):
        asyncio.run(until_done(attempt, longest_wait_s=0.001, on_retry=logged.append))
    assert attempt.calls == 1 and logged == []
    assert not is_dependency_error(ValueError()) and is_dependency_error(OSError())
    assert redis.RedisError in DEPENDENCY_ERRORS


def test_a_redis_cluster_without_a_slots_map_is_a_failure_of_redis() -> None:
    # redis-py's cluster errors are not RedisErrors: a slot no master serves (while a failover
    # promotes a replica) would otherwise be taken for a bug and stop the worker
    uncovered = RedisClusterException("All slots are not covered after query all startup_nodes")
    attempt = Flaky(SlotNotCoveredError('Slot "6341" is not covered'), uncovered)
    assert asyncio.run(until_done(attempt, longest_wait_s=0.001)) == "done"
    assert attempt.calls == 3


def test_a_transaction_over_several_slots_is_a_bug_raised_or_wrapped() -> None:
    misuse = CrossSlotTransactionError("Keys in request don't hash to the same slot")
    wrapped = HistoryStoreError("Redis commit of release 3 failed")
    wrapped.__cause__ = misuse
    assert not is_dependency_error(misuse) and not is_dependency_error(wrapped)
    attempt = Flaky(wrapped)
    with pytest.raises(HistoryStoreError):
        asyncio.run(until_done(attempt, longest_wait_s=0.001))
    assert attempt.calls == 1


def test_the_pauses_grow_but_never_beyond_the_longest() -> None:
    attempt = Flaky(*(redis.ConnectionError() for _ in range(6)))
    retried: list[float] = []  # when each failure was logged, just before its pause
    started = time.monotonic()
    asyncio.run(
        until_done(attempt, longest_wait_s=0.4, on_retry=lambda _: retried.append(time.monotonic()))
    )
    elapsed = time.monotonic() - started
    pauses = [b - a for a, b in itertools.pairwise(retried)]
    # 0.1 s doubling, plus a jitter of up to 0.1 s: [0.1, 0.2], [0.2, 0.3], then capped at 0.4
    assert len(retried) == 6 and pauses[0] >= 0.1 and pauses[1] >= 0.2
    assert all(pause >= 0.4 for pause in pauses[2:])
    # six pauses, none beyond 0.4 s: at most 0.2 + 0.3 + 4 * 0.4 (and the machine's slowness)
    assert elapsed < 0.2 + 0.3 + 4 * 0.4 + 1.0


def test_a_stop_condition_gives_up_with_the_last_failure() -> None:
    attempt = Flaky(*(redis.ConnectionError(str(i)) for i in range(1000)))
    with pytest.raises(redis.ConnectionError):
        asyncio.run(until_done(attempt, longest_wait_s=0.01, stop=stop_after_delay(0.1)))
    assert 2 <= attempt.calls < 1000
