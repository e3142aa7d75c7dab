"""Sealed releases that stay incomplete: a warning log line while they wait (docs/contract.md §5).

A release is cut only once its seal has arrived and every sealed id is staged. A seal whose
count never completes (the producer lost records, or some were rejected: a duplicate id, a
value outside its hierarchy) leaves its release waiting forever, and nothing else says so: the
worker exports the number of missing records as ``sr_seal_incomplete{release}`` (the alert rule
of ``deploy/prometheus/alerts.yml`` fires on it), and :class:`SealWatch`, run by a timer of the
worker's app, logs a warning for each release that has waited ``service.seal_alert_after_s``,
then again every as many seconds while it still waits::

    {"level": "WARNING", "event": "seal_incomplete", "release": "2026-10", "sealed": 5234,
     "staged": 5200, "missing": 34, "waited_s": 600.4, "message": "release '2026-10' ..."}

The line names the release by its label and counts only, never an id or a value.

Notes
-----
The wait is measured from the first check of this worker process that found the release
sealed and incomplete (checks run every ``min(service.retry_interval_s,
service.seal_alert_after_s)``): staging keeps no time of arrival, so after a restart the clock
starts again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from stream_release.stream.logs import unexpected
from stream_release.stream.staging import ReleaseStatus

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 2.0
"""Longest wait for Redis in one check; a slow or failed check is logged and skipped."""


class SealWatch:
    """Logs the sealed releases that stay incomplete ``after_s`` seconds or more.

    Parameters
    ----------
    after_s : seconds a sealed release may wait for its records before it is logged (and
        between two lines about it); ``service.seal_alert_after_s``; > 0
    """

    def __init__(self, after_s: float) -> None:
        if not after_s > 0:
            raise ValueError(f"after_s = {after_s!r}: expected seconds > 0")
        self.after_s = after_s
        self._since: dict[str, float] = {}
        """Release label -> when it was first seen waiting (``time.monotonic``)."""
        self._logged: dict[str, float] = {}
        """Release label -> when its last line was logged."""

    def check(
        self, waiting: Iterable[ReleaseStatus], now: float
    ) -> list[tuple[ReleaseStatus, float]]:
        """Note the releases ``waiting`` at time ``now`` (seconds, monotonic) and log those that
        have waited ``after_s`` since first noted and were not logged in the last ``after_s``;
        forget the releases no longer waiting. Returns the logged releases and their waits."""
        current = {status.label: status for status in waiting}
        for label in [label for label in self._since if label not in current]:
            del self._since[label]
            self._logged.pop(label, None)
        overdue = []
        for label, status in current.items():
            waited = now - self._since.setdefault(label, now)
            last = self._logged.get(label)
            if waited >= self.after_s and (last is None or now - last >= self.after_s):
                self._logged[label] = now
                _log_incomplete(status, waited)
                overdue.append((status, waited))
        return overdue

    async def run(self, waiting: Callable[[], list[ReleaseStatus]]) -> None:
        """One check: ``waiting()`` (a Redis read, e.g.
        :meth:`~stream_release.stream.service.ReleaseService.waiting`) in a thread, then
        :meth:`check`. A failure is logged and the check skipped; it never raises."""
        try:
            statuses = await asyncio.wait_for(asyncio.to_thread(waiting), CHECK_TIMEOUT_S)
        except Exception as exc:
            log.warning(
                "cannot check the sealed releases: %s",
                type(exc).__name__,
                exc_info=unexpected(exc),
                extra={"event": "seal_check_failed", "error": type(exc).__name__},
            )
            return
        self.check(statuses, time.monotonic())


def _log_incomplete(status: ReleaseStatus, waited: float) -> None:
    sealed = status.sealed or 0
    missing = max(sealed - status.staged, 0)
    log.warning(
        "release %r sealed with %d records still misses %d of them after %.0f s (%d staged): "
        "it is not cut until they are all staged; send the missing records (some may have "
        "been rejected: see the rejected topic) or publish the snapshot again",
        status.label,
        sealed,
        missing,
        waited,
        status.staged,
        extra={
            "event": "seal_incomplete",
            "release": status.label,
            "sealed": sealed,
            "staged": status.staged,
            "missing": missing,
            "waited_s": round(waited, 1),
        },
    )
