"""Trying a call again when Redis, the broker or the network failed: tenacity, with backoff.

:func:`until_done` awaits a call until it succeeds. A failure of a dependency
(:data:`DEPENDENCY_ERRORS`: the connection dropped or was refused, a timeout, an error Redis or
the broker answered, or one of ours that wraps them) is tried again after a pause that grows
from :data:`FIRST_WAIT_S` by doubling, plus a random jitter of up to :data:`FIRST_WAIT_S`, and
never beyond the caller's longest pause (the worker's ``service.retry_interval_s``), so workers
that lost Redis together do not come back in step. Any other exception is a failure of this
program and is raised at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception
from tenacity.stop import StopBaseT, stop_never
from tenacity.wait import wait_exponential_jitter

from stream_release.errors import HistoryStoreError, KafkaError
from stream_release.history.redis_client import REDIS_ERRORS, REDIS_MISUSE
from stream_release.stream.kafka import CLIENT_ERRORS

T = TypeVar("T")

DEPENDENCY_ERRORS: tuple[type[BaseException], ...] = (
    *CLIENT_ERRORS,
    *REDIS_ERRORS,
    HistoryStoreError,
    KafkaError,
)
"""What Redis, the broker or the network raise when they fail (aiokafka's and redis-py's
errors, ``OSError`` with ``TimeoutError`` and ``ConnectionError``), and our errors that wrap
them: a failure that may pass."""

FIRST_WAIT_S = 0.1
"""The first pause (seconds) before a failed call is tried again; also the largest jitter."""


def is_dependency_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of Redis, the broker or the network
    (:data:`DEPENDENCY_ERRORS`), not a misuse of Redis (a transaction over several slots of
    a Redis Cluster), raised or wrapped."""
    if isinstance(exc, REDIS_MISUSE) or isinstance(exc.__cause__, REDIS_MISUSE):
        return False
    return isinstance(exc, DEPENDENCY_ERRORS)


async def until_done(
    attempt: Callable[[], Awaitable[T]],
    *,
    longest_wait_s: float,
    on_retry: Callable[[BaseException], None] | None = None,
    retry_if: Callable[[BaseException], bool] = is_dependency_error,
    stop: StopBaseT = stop_never,
) -> T:
    """``await attempt()``, again after each failure for which ``retry_if`` is true.

    Parameters
    ----------
    attempt : the call
    longest_wait_s : the longest pause between two attempts (> 0); the pauses are
        ``min(FIRST_WAIT_S * 2 ** (k - 1) + U(0, FIRST_WAIT_S), longest_wait_s)`` after the
        ``k``-th failure
    on_retry : called with each failure that will be tried again (before the pause): log it
    retry_if : whether a failure means "try again" (by default: a dependency's failure)
    stop : when to give up (tenacity's stop condition; never by default), raising the last
        failure

    Returns
    -------
    What ``attempt()`` returned the first time it did not raise.

    Raises
    ------
    Exception
        The first failure for which ``retry_if`` is false, or the last one when ``stop`` says
        to give up.
    """
    first = min(FIRST_WAIT_S, longest_wait_s)

    def before_sleep(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome is not None else None
        if on_retry is not None and failure is not None:
            on_retry(failure)

    async def call() -> T:  # tenacity awaits only what a coroutine function returns
        return await attempt()

    retrying = AsyncRetrying(
        retry=retry_if_exception(retry_if),
        wait=wait_exponential_jitter(multiplier=first, max=longest_wait_s, jitter=first),
        stop=stop,
        before_sleep=before_sleep,
        reraise=True,
    )
    return await retrying(call)
