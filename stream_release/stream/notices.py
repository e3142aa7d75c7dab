"""What the release service reports about the releases it does not publish.

The status messages (``sr.status``) of a release refused by its data (:func:`refusal_notice`)
or blocked by its rejected records (:func:`blocked_notice`), and the problems ``/health``
reports while a cut is held by the configuration (:class:`ConfigProblem`) or by a history
store that went backwards (:class:`StoreProblem`), each with the fix the operator is told
(:meth:`~stream_release.stream.service.ReleaseService.cut_ready`).
"""

from __future__ import annotations

from typing import NamedTuple

from stream_release.errors import NEW_SERIES_CAVEAT, GuaranteeUnsatisfiable, SchemaError
from stream_release.stream.messages import ReleaseNotice
from stream_release.stream.staging import ReleaseStatus


class ConfigProblem(NamedTuple):
    """A release the configuration cannot make (:meth:`ReleaseService.cut_ready`)."""

    release: str
    """The label of the release left staged."""
    error: str
    """The :class:`~stream_release.errors.ConfigError`'s message: the key, value and fix."""


class StoreProblem(NamedTuple):
    """A release held because the history store went backwards (:meth:`ReleaseService.
    cut_ready`)."""

    release: str
    """The label of the release left staged."""
    error: str
    """What is wrong and how to fix it (no id, no value)."""


STORE_FIX = (
    "restore the history store (Redis) from a backup of the last release published or later; "
    "nothing is cut until then. Continuing in a new archive and history instead is a new "
    f"series: {NEW_SERIES_CAVEAT}"
)
"""What the operator does about a :class:`StoreProblem` (logged with it)."""


def published_ahead_message(topic: str, published: int, committed: int) -> str:
    """Why the cut is held when ``topic`` (``topics.manifests``) holds the manifest of release
    ``published`` and the history store is at release ``committed`` (below it)."""
    return (
        f"the topic {topic!r} already holds the manifest of release {published}, but the "
        f"history store is at release {committed}: the store lost commits (Redis restarted "
        "without persistence, or restored from an older backup together with the archives, or "
        f"another series' store), and cutting now would publish sequence {committed + 1} again "
        f"and forget the linkages of releases {committed + 1}..{published}, which are public. "
        "Nothing is cut until it is restored from its backup"
    )


def held_notice(problem: StoreProblem) -> ReleaseNotice:
    """The status message of a release whose cut is held by the history store: it stays
    staged and is cut once the store is restored."""
    return ReleaseNotice(
        release=problem.release,
        status="held",
        error="StoreRegressed",
        reason=problem.error,
        fix=STORE_FIX,
    )


CONFIG_FIX = (
    "fix the configuration the message names and restart the worker; the release stays "
    "staged (nothing is refused) and is cut then, followed by the releases after it"
)
"""What the operator does about a :class:`ConfigProblem` (logged with it)."""


REFUSAL_FIX = (
    "its label is closed: publish the snapshot again under a new label once the data or the "
    "settings allow it (`stream-release anonymize` on the snapshot shows the same reason)"
)
UNSATISFIABLE_REASON = (
    "the guarantee cannot be met on this release (the worker's message names a row or a group "
    "of the snapshot, so it is not repeated here)"
)
SCHEMA_REASON = (
    "a staged record does not encode under the configuration (a value outside a hierarchy "
    "or a mechanism's configured domain, or a QID kind that contradicts schema.numeric)"
)
BLOCKED_FIX = (
    "send the rejected records again, corrected, under the same label, or publish the "
    "corrected snapshot under a new label (sr.rejected names each record's error)"
)


def refusal_notice(label: str, exc: GuaranteeUnsatisfiable | SchemaError) -> ReleaseNotice:
    """The status message of release ``label`` refused by ``exc``.

    An unsatisfiable guarantee whose message is ``public`` (counts of the release, the settings
    and the largest feasible setting) is explained by it. Any other message may name a row, a
    group's QID values or an offending value (a quasi-identifier), so it is replaced by what
    kind of failure it is; ``stream-release anonymize`` on the snapshot gives the rest.
    """
    if isinstance(exc, GuaranteeUnsatisfiable):
        reason = str(exc) if exc.public else UNSATISFIABLE_REASON
    else:
        reason = SCHEMA_REASON
    return ReleaseNotice(
        release=label, status="refused", error=type(exc).__name__, reason=reason, fix=REFUSAL_FIX
    )


SHARD_REASON = (
    "the guarantee cannot be met on the part of this release held by one shard (too few rows "
    "for the required group sizes, or a protected value too frequent among them, or among "
    "the rows suppressed across the shards, or a protected value no row of the part holds "
    "while an unprotected value close to it does: a misspelled privacy.protected); the "
    "part's counts and values are not repeated here: a shard's individuals are known to "
    "anyone who knows their ids"
)
SHARD_FIX = (
    "its label is closed: publish the snapshot again under a new label once the data or the "
    "settings allow it; fewer partitions give each shard more rows, but they make a new "
    f"series: {NEW_SERIES_CAVEAT}"
)


def shard_refusal_notice(label: str, exc: GuaranteeUnsatisfiable | SchemaError) -> ReleaseNotice:
    """The status message of release ``label``, refused because one shard's part cannot be
    made: the kind of failure only. A shard is ``murmur2(id) mod P``, which anyone who knows
    the ids can compute, so the part's own counts (:func:`refusal_notice`'s public message)
    would describe a small set of known individuals."""
    reason = SHARD_REASON if isinstance(exc, GuaranteeUnsatisfiable) else SCHEMA_REASON
    return ReleaseNotice(
        release=label, status="refused", error=type(exc).__name__, reason=reason, fix=SHARD_FIX
    )


def blocked_notice(status: ReleaseStatus) -> ReleaseNotice:
    """The status message of a sealed release its rejected records keep short."""
    return ReleaseNotice(
        release=status.label,
        status="blocked",
        error="records_rejected",
        reason=(
            f"sealed with {status.sealed} ids, {status.staged} staged and {status.rejected} "
            f"of its records rejected: the {status.missing} missing ids cannot arrive from "
            "the records received"
        ),
        fix=BLOCKED_FIX,
        sealed=status.sealed,
        staged=status.staged,
        rejected=status.rejected,
    )
