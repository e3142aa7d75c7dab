"""A stop that never outlasts its deadline: SIGTERM or Ctrl-C ends the worker within
``service.stop_timeout_s`` seconds, whatever Redis and the broker are doing.

Faust stops its services one after another, and a service may wait on a dependency that is
away: a batch whose staging is retried until Redis answers, offsets and messages that wait
for the broker's request timeouts. Measured before this module: 62 s with the broker down,
over 110 s with Redis down (the worker stopped 7 s after Redis came back). Container runtimes
kill a process after their grace period (compose: 10 s) anyway.

:class:`BoundedStopWorker` starts the clean stop as Faust does and arms a timer thread (it
fires even when the event loop is blocked); when the deadline passes first, the process logs
one line and exits at once. Nothing is lost by that: a batch's offsets are committed only
after its rows are staged, and a release's history, record and sequence are committed in one
Redis transaction before anything is sent, so an exit at any point is a crash the worker's
next start recovers from (``tests/integration/test_crash_consistency.py`` kills it at every
step), and what the clean stop did commit stays committed.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Any, NoReturn

import faust

log = logging.getLogger(__name__)

FORCED_EXIT_CODE = 0
"""The exit code of a stop the deadline ended: the stop was asked for and nothing is lost."""


class BoundedStopWorker(faust.Worker):
    """``faust.Worker`` whose stop on a signal ends within ``stop_timeout_s`` seconds."""

    def __init__(self, *args: Any, stop_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stop_timeout_s = stop_timeout_s
        self._deadline: threading.Timer | None = None

    def _schedule_shutdown(self, signal: signal.Signals) -> None:  # mode.Worker's hook
        if self._deadline is None:
            self._deadline = threading.Timer(self.stop_timeout_s, _exit_now, (signal,))
            self._deadline.daemon = True
            self._deadline.start()
        super()._schedule_shutdown(signal)


def _exit_now(received: signal.Signals) -> None:
    log.warning(
        "%s: the clean stop did not end within service.stop_timeout_s; exiting now (what is "
        "not committed is consumed again at the next start)",
        received.name,
        extra={"event": "stop_forced", "signal": received.name},
    )
    _exit(FORCED_EXIT_CODE)


BUG_EXIT_CODE = 70
"""The exit code after a failure of the worker's own code (``EX_SOFTWARE``)."""


def exit_on_bug(action: str, exc: BaseException) -> NoReturn:
    """Log that ``action`` failed with ``exc``, a failure of this program (a failure of Redis
    or the broker is tried again instead), and end the process at once.

    At once, not through the clean stop: Faust acknowledges a batch of seals whose handler
    raised, and the clean stop would commit its offsets. Exiting now commits nothing of the
    batch, which the next start consumes again, as after any crash. The log line names the
    exception's type only: its message could hold a value of the batch; its traceback follows,
    each message withheld (:mod:`~stream_release.stream.logs`).
    """
    log.critical(
        "cannot %s: %s, a failure of the worker itself; exiting now (the batch is consumed "
        "again at the next start)",
        action,
        type(exc).__name__,
        exc_info=exc,
        extra={"event": "crashed", "action": action, "error": type(exc).__name__},
    )
    _exit(BUG_EXIT_CODE)


def _exit(code: int) -> NoReturn:
    """Flush the logs and end the process with ``code`` at once."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
