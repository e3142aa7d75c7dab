"""Named kill points on the release path, for the crash-consistency tests (issue 4).

Each :func:`kill_point` marks a step of the worker's release path at which a crash must leave
nothing half done: after a restart every release is published exactly once by ``sequence``,
with the same content, and every linkage is counted exactly once. The tests prove it by
starting the worker with ``STREAM_RELEASE_KILL_AT=<point>[:<n>]``, which makes the process
kill itself with SIGKILL the ``n``-th time (default: the first) it reaches ``<point>``, then
starting it again without the variable.

Without the variable (production) a kill point is a no-op. The variable is read once, when
this module is imported; an unknown point name is refused then, so a typo cannot silently
test nothing.
"""

from __future__ import annotations

import os
import signal

ENV = "STREAM_RELEASE_KILL_AT"
"""``<point>`` or ``<point>:<n>``: SIGKILL this process the ``n``-th time it reaches ``<point>``."""

POINTS: dict[str, str] = {
    "stage_partial": "some rows of a batch staged in Redis, not all (between two staging calls:"
    " two releases of one batch, or two chunks of one release)",
    "staged_uncommitted": "a batch of records staged, its offsets not committed",
    "sealed": "a seal staged, its offset not committed, the release not cut",
    "cut_loaded": "a ready release's rows read from staging, grouping not started",
    "planned": "grouping and the breach check done, nothing written",
    "files_staged": "the archive files written as temporaries, Redis not touched",
    "commit_queued": "the Redis transaction built under WATCH, not executed",
    "committed": "history, release record, label and sequence committed; files not final",
    "ledgered": "the release recorded in the series ledger; files not final",
    "finalizing": "some archive files renamed into place, not the manifest",
    "finalized": "the archive files final, nothing sent",
    "groups_partial": "half of the release's group messages acknowledged by the broker",
    "groups_sent": "every group message acknowledged, the manifest not sent",
    "manifest_sent": "the manifest acknowledged, the release not marked published",
    "marked": "the release marked published",
}
"""Every kill point, in the order a release reaches them, and the state it leaves."""


def _target(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    name, _, count = spec.partition(":")
    if name not in POINTS:
        raise ValueError(
            f"{ENV} = {spec!r}: unknown kill point {name!r}; known: {', '.join(POINTS)}"
        )
    try:
        n = int(count) if count else 1
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{ENV} = {spec!r}: the count after ':' must be an integer >= 1")
    return name, n


_TARGET = _target(os.environ.get(ENV))
_reached: dict[str, int] = {}


def kill_point(name: str) -> None:
    """Mark kill point ``name`` (one of :data:`POINTS`): SIGKILL here if the environment
    asks for it (see the module docstring); otherwise do nothing."""
    if _TARGET is None or _TARGET[0] != name:
        return
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] == _TARGET[1]:
        os.kill(os.getpid(), signal.SIGKILL)
