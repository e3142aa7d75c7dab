"""Staging of snapshot rows in Redis until their release can be cut (docs/contract.md §5).

Rows arrive one by one (``sr.records``) and seals separately (``sr.control``). Both are
staged by Lua scripts (``history/lua/stage_rows.lua``, ``stage_seal.lua``; rejected records are
counted by ``note_rejected.lua``), idempotently: a
re-delivered row or seal changes nothing, a second row for the same id with other content is a
duplicate id, a row or seal for a release already cut is late. A release is *ready* when its
seal has arrived and exactly the sealed number of distinct ids is staged; from then on no new
id can be staged for it (code 4), so the rows the cut reads are the rows the commit deletes
(the commit transaction maps the label to its sequence and clears the staging,
:meth:`RedisHistoryStore.commit` with ``label``).

A release holds at most ``max_rows`` ids (``service.max_release_rows``): a seal announcing more
is refused without touching Redis, and so is every new id beyond it (code 5), so neither Redis
nor the cut, which loads a release's rows into memory, grows without bound; both are logged
(``event`` ``release_too_large``).

The cut reads a release's rows from the process's own copy when it can: :class:`StagedCopy`
keeps every row this process staged (outcome ``STAGED``), already numbered by distinct row, and
the cut takes it only when it holds as many ids as Redis does (``HLEN``). Redis rows are only
ever added by staging, each id once, so a copy of the same size holds exactly Redis's rows;
after a restart, a retried call or a second worker it is short, and the cut reads Redis.

Individuals are staged under their pseudonym (the keyed hash of the id): no raw id reaches
Redis. A row is stored as the JSON array of its QID values (schema order, as strings) and its
sensitive value, so the same record always stages the same bytes.
"""

from __future__ import annotations

import enum
import logging
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from importlib import resources
from typing import NamedTuple, TypeVar, cast

import numpy as np
import orjson
from numpy.typing import NDArray

from stream_release.config import SchemaSettings
from stream_release.errors import HistoryStoreError
from stream_release.faults import kill_point
from stream_release.history.keys import RedisKeys
from stream_release.history.redis_client import REDIS_ERRORS, RedisClient
from stream_release.history.types import PSEUDONYM_DTYPE, pseudonym_hex
from stream_release.io.snapshot import RawSnapshot, snapshot_from_distinct_rows

_T = TypeVar("_T")
log = logging.getLogger(__name__)

RECORDS_PER_CALL = 1000
"""Release records deleted by one ``DEL`` (:meth:`RedisStaging.drop_records`)."""
BATCH = 2000
"""Rows per script call."""


REFUSED = 0
"""The "sequence" of a release label that was cut but refused (:meth:`RedisStaging.refuse`):
real sequences start at 1."""


class StageOutcome(enum.IntEnum):
    """What staging did with one row (the codes of ``stage_rows.lua``)."""

    STAGED = 0
    REDELIVERED = 1
    DUPLICATE_ID = 2
    LATE = 3
    OVER_SEAL = 4
    TOO_LARGE = 5


_STAGE_OUTCOMES = tuple(StageOutcome)
"""The outcomes by code (a tuple index is cheaper than an enum lookup for every row)."""


class SealOutcome(enum.IntEnum):
    """What staging did with one seal (the codes of ``stage_seal.lua``)."""

    SEALED = 0
    REDELIVERED = 1
    CONFLICT = 2
    ALREADY_CUT = 3
    TOO_LARGE = 4
    """The seal announces more ids than ``max_rows``: refused, nothing recorded."""


class Staged(NamedTuple):
    """What :meth:`RedisStaging.stage` did with a batch of one release's rows."""

    outcomes: list[StageOutcome]
    """One per row, in order."""
    complete: bool
    """The release is sealed and holds every sealed id: it can be cut."""


@dataclass(frozen=True)
class ReleaseStatus:
    """Where one release label stands."""

    label: str
    staged: int
    sealed: int | None
    committed: int | None
    rejected: int = 0
    """Records of this release rejected so far (their values, or the release full)."""
    part_blocked: bool | None = None
    """A release on shards: whether one shard's part is blocked (its counts added up here
    could hide it or feign it); ``None`` for one namespace."""

    @property
    def ready(self) -> bool:
        """Sealed, every sealed id staged, not yet cut."""
        return self.committed is None and self.sealed is not None and self.staged == self.sealed

    @property
    def missing(self) -> int:
        """Sealed ids not yet staged (0 when not sealed)."""
        return max((self.sealed or 0) - self.staged, 0)

    @property
    def blocked(self) -> bool:
        """Sealed, short, and at least as many of its records rejected as it misses: the
        records received cannot complete it (only records sent again can)."""
        if self.part_blocked is not None:
            return self.part_blocked
        return self.committed is None and 0 < self.missing <= self.rejected


def staged_row(values: list[str], sensitive: str) -> bytes:
    """The canonical staged form of a row: JSON ``[qid values..., sensitive]``, the QID values
    as strings in schema order (so ``34`` and ``"34"`` stage the same bytes)."""
    return orjson.dumps([*values, sensitive])


@dataclass
class CopiedRows:
    """The rows of one release that this process staged, in arrival order."""

    pseudonyms: bytearray
    """16 bytes per row."""
    codes: array  # type: ignore[type-arg]
    """``array('i')``: each row's number in ``distinct``."""
    distinct: dict[bytes, int]
    """Each distinct staged row and its number, in order of first appearance."""

    @property
    def count(self) -> int:
        return len(self.codes)


class StagedCopy:
    """The rows this process staged, by release: the cut's source when complete (module
    docstring), so it need not read them back from Redis."""

    def __init__(self) -> None:
        self._releases: dict[str, CopiedRows] = {}

    def add(
        self, label: str, pseudonyms: list[bytes], rows: list[bytes], outcomes: list[StageOutcome]
    ) -> None:
        """Keep the rows whose outcome is ``STAGED`` (new in Redis)."""
        copy = self._releases.get(label)
        if copy is None:
            copy = self._releases[label] = CopiedRows(bytearray(), array("i"), {})
        if len(outcomes) != len(rows) or len(pseudonyms) != len(rows):
            raise ValueError(
                f"{len(outcomes)} outcomes and {len(pseudonyms)} pseudonyms for {len(rows)} rows"
            )
        distinct = copy.distinct
        staged = StageOutcome.STAGED
        if outcomes.count(staged) == len(outcomes):  # the common case: every row is new
            kept_pseudonyms, kept_rows = pseudonyms, rows
        else:
            kept = [i for i, outcome in enumerate(outcomes) if outcome is staged]
            kept_pseudonyms = [pseudonyms[i] for i in kept]
            kept_rows = [rows[i] for i in kept]
        copy.pseudonyms += b"".join(kept_pseudonyms)
        copy.codes.extend([distinct.setdefault(row, len(distinct)) for row in kept_rows])

    def take(self, label: str, staged: int) -> CopiedRows | None:
        """Remove the copy of ``label``; it is returned if it holds ``staged`` rows."""
        copy = self._releases.pop(label, None)
        return copy if copy is not None and copy.count == staged else None

    def drop(self, label: str) -> None:
        self._releases.pop(label, None)


class RedisStaging:
    """Staging and publication state of the streaming service, in Redis.

    Parameters
    ----------
    client : a ``redis.Redis`` with ``decode_responses=False``
    keys : the namespace's key names (shared with the history store)
    schema : the snapshot schema (QID order of the staged rows)
    max_rows : the most ids one release may hold (``service.max_release_rows``; None: no limit)
    """

    def __init__(
        self,
        client: RedisClient,
        keys: RedisKeys,
        schema: SchemaSettings,
        *,
        max_rows: int | None = None,
    ) -> None:
        self._client = client
        self._keys = keys
        self._schema = schema
        self._max_rows = max_rows
        self._copy = StagedCopy()
        lua = resources.files("stream_release.history").joinpath("lua")
        self._stage_rows = client.register_script(lua.joinpath("stage_rows.lua").read_text())
        self._stage_seal = client.register_script(lua.joinpath("stage_seal.lua").read_text())
        self._mark = client.register_script(lua.joinpath("mark_published.lua").read_text())
        self._note_rejected = client.register_script(lua.joinpath("note_rejected.lua").read_text())

    def stage(self, label: str, pseudonyms: list[bytes], rows: list[bytes]) -> Staged:
        """Stage rows of release ``label``: one outcome per row, in order, and whether the
        release is complete (sealed and every sealed id staged) afterwards."""
        if len(pseudonyms) != len(rows):
            raise ValueError(f"{len(pseudonyms)} pseudonyms but {len(rows)} rows")
        keys = [
            self._keys.labels,
            self._keys.stage_rows(label),
            self._keys.open_labels,
            self._keys.stage_seal(label),
        ]
        out: list[StageOutcome] = []
        complete = False
        for start in range(0, len(rows), BATCH):
            batch = rows[start : start + BATCH]
            args: list[bytes | str] = [label, str(self._max_rows or 0), *batch, *batch]
            args[2::2] = pseudonyms[start : start + BATCH]
            args[3::2] = batch
            codes = self._call("stage rows", partial(self._stage_rows, keys=keys, args=args))
            if start + BATCH < len(rows):
                kill_point("stage_partial")
            outcomes = [_STAGE_OUTCOMES[c] for c in codes[:-1]]
            self._copy.add(
                label, pseudonyms[start : start + BATCH], rows[start : start + BATCH], outcomes
            )
            out.extend(outcomes)
            complete = bool(codes[-1])
        refused = out.count(StageOutcome.TOO_LARGE)
        if refused:
            log.warning(
                "release %r refused %d new ids: it already holds service.max_release_rows = %d",
                label,
                refused,
                self._max_rows,
                extra={"event": "release_too_large", "release": label, "refused": refused},
            )
        return Staged(out, complete)

    def seal(self, label: str, records: int) -> SealOutcome:
        """Record the seal of release ``label`` (``records`` distinct ids)."""
        if self._max_rows is not None and records > self._max_rows:
            log.warning(
                "seal of release %r refused: %d ids, more than service.max_release_rows = %d",
                label,
                records,
                self._max_rows,
                extra={"event": "release_too_large", "release": label, "sealed": records},
            )
            return SealOutcome.TOO_LARGE
        keys = [self._keys.labels, self._keys.stage_seal(label), self._keys.open_labels]
        code = self._call(
            "stage a seal", lambda: self._stage_seal(keys=keys, args=[label, records])
        )
        return SealOutcome(int(code))

    def seal_value(self, label: str, value: str) -> SealOutcome:
        """Record ``value`` as the seal of ``label`` (a sharded release's list of each
        partition's ids, JSON), idempotently: the same value again is a duplicate, another one
        a conflict."""
        keys = [self._keys.labels, self._keys.stage_seal(label), self._keys.open_labels]
        code = self._call("stage a seal", lambda: self._stage_seal(keys=keys, args=[label, value]))
        return SealOutcome(int(code))

    def sealed_value(self, label: str) -> bytes | None:
        """The seal of ``label`` as recorded (``None``: not sealed)."""
        key = self._keys.stage_seal(label)
        raw = self._call("read a seal", lambda: self._client.get(key))
        return None if raw is None else bytes(cast("bytes", raw))

    def status(self, label: str) -> ReleaseStatus:
        """Staged and sealed counts and the committed sequence of ``label``."""
        with self._client.pipeline(transaction=False) as pipe:
            pipe.hlen(self._keys.stage_rows(label))
            pipe.get(self._keys.stage_seal(label))
            pipe.hget(self._keys.labels, label)
            pipe.scard(self._keys.stage_rejected(label))
            staged, sealed, committed, rejected = self._call("read a release status", pipe.execute)
        return ReleaseStatus(
            label,
            int(staged),
            None if sealed is None else int(sealed),
            None if committed is None else int(committed),
            int(rejected),
        )

    def note_rejected(self, label: str, coordinates: list[str]) -> None:
        """Count records of release ``label`` as rejected, by their ``topic:partition:offset``
        (a record consumed again after a restart is counted once). Only for an open release
        (rows staged or a seal, not cut): its count is deleted with its staging; a label nobody
        staged for, or already cut, keeps no count."""
        if not coordinates:
            return
        key = self._keys.stage_rejected(label)
        script_keys = [self._keys.open_labels, key]
        self._call(
            "count rejected records",
            lambda: self._note_rejected(keys=script_keys, args=[label, *coordinates]),
        )

    def status_outbox(self) -> list[bytes]:
        """The status messages not yet sent, oldest first."""
        key = self._keys.status_outbox
        sent = self._call("read the status outbox", lambda: self._client.lrange(key, 0, -1))
        return cast("list[bytes]", list(sent))

    def status_sent(self, count: int) -> None:
        """Drop the ``count`` oldest status messages (sent)."""
        key = self._keys.status_outbox
        self._call("trim the status outbox", lambda: self._client.ltrim(key, count, -1))

    def open_labels(self) -> list[str]:
        """Labels with staged rows or a seal and not yet cut, sorted."""
        raw = self._call(
            "list open releases", lambda: self._client.smembers(self._keys.open_labels)
        )
        return sorted(x.decode("utf-8") for x in cast("set[bytes]", raw))

    def ready(self) -> list[ReleaseStatus]:
        """The releases that can be cut now."""
        return [s for s in (self.status(label) for label in self.open_labels()) if s.ready]

    def load(self, label: str) -> tuple[NDArray[np.bytes_], RawSnapshot]:
        """The staged rows of ``label``: pseudonyms (n,) S16 and a snapshot whose ids are the
        pseudonyms in hex (sorted, so the cut does not depend on arrival order). From this
        process's copy when it holds every staged row (module docstring), else from Redis."""
        key = self._keys.stage_rows(label)
        staged = self._call("count staged rows", lambda: self._client.hlen(key))
        copy = self._copy.take(label, staged)
        if copy is not None:
            unsorted = np.frombuffer(bytes(copy.pseudonyms), dtype=PSEUDONYM_DTYPE)
            codes = np.frombuffer(copy.codes, dtype=np.int32)
            distinct = list(copy.distinct)
        else:
            raw = cast(
                "dict[bytes, bytes]",
                self._call("read staged rows", lambda: self._client.hgetall(key)),
            )
            unsorted = np.array(list(raw), dtype=PSEUDONYM_DTYPE)
            numbers: dict[bytes, int] = {}
            codes = np.fromiter(
                (numbers.setdefault(row, len(numbers)) for row in raw.values()),
                dtype=np.int32,
                count=len(raw),
            )
            del raw  # the dict's table is large: drop it before the snapshot is built
            distinct = list(numbers)
        return self._snapshot(label, unsorted, codes, distinct)

    def _snapshot(
        self,
        label: str,
        unsorted: NDArray[np.bytes_],
        codes: NDArray[np.int32],
        distinct: list[bytes],
    ) -> tuple[NDArray[np.bytes_], RawSnapshot]:
        """Sort the rows by pseudonym and renumber their distinct rows in order of first
        appearance (what :func:`snapshot_from_distinct_rows` takes)."""
        order = np.argsort(unsorted, kind="stable")
        pseudonyms = unsorted[order]
        sorted_codes = codes[order]
        _, first = np.unique(sorted_codes, return_index=True)
        appearance = np.argsort(first)  # old numbers in order of first appearance
        renumber = np.empty(len(distinct), dtype=np.int32)
        renumber[appearance] = np.arange(len(distinct), dtype=np.int32)
        snapshot = snapshot_from_distinct_rows(
            pseudonym_hex(pseudonyms),
            renumber[sorted_codes],
            [orjson.loads(distinct[i]) for i in appearance.tolist()],
            self._schema.qid,
            source=f"release {label!r} (staged)",
        )
        return pseudonyms, snapshot

    def committed(self, label: str) -> int | None:
        """The sequence release ``label`` was committed as, if it was."""
        raw = self._call("read a label", lambda: self._client.hget(self._keys.labels, label))
        return None if raw is None else int(raw)

    def published(self) -> int:
        """The last sequence whose groups and manifest were sent (0 if none)."""
        raw = self._call(
            "read the published sequence", lambda: self._client.get(self._keys.published)
        )
        return 0 if raw is None else int(raw)

    def drop_records(self, below: int, namespaces: Sequence[RedisKeys]) -> int:
        """Delete the release records of ``namespaces`` (each a namespace of one hash tag:
        this one, and on shards every shard's, whose records are its parts) for the sequences
        below ``below``, from the first one still kept (:attr:`RedisKeys.records_from`), which
        never moves back. Idempotent: a call cut short deletes the rest at the next. Returns
        the first sequence kept."""
        first = self._call(
            "read the first kept release record", lambda: self._client.get(self._keys.records_from)
        )
        for start in range(1 if first is None else int(first), below, RECORDS_PER_CALL):
            sequences = range(start, min(below, start + RECORDS_PER_CALL))
            for namespace in namespaces:
                names = [namespace.record(s) for s in sequences]
                self._call("delete release records", partial(self._client.delete, *names))
        floor = [self._keys.records_from]
        return int(
            self._call(
                "mark the first kept release record",
                lambda: self._mark(keys=floor, args=[max(below, 1)]),
            )
        )

    def refuse(self, label: str, status: bytes | None) -> None:
        """Close release ``label`` without publishing it (its guarantee cannot be met): its
        label maps to :data:`REFUSED`, so its records and seal are late from now on, its
        staged rows, seal and rejected records are deleted, and ``status`` (the message that
        tells the producer why; ``None`` for a shard's part, whose release says it) joins the
        status outbox, in one transaction."""
        self._copy.drop(label)
        with self._client.pipeline(transaction=True) as pipe:
            pipe.hset(self._keys.labels, label, REFUSED)
            pipe.unlink(
                self._keys.stage_rows(label),
                self._keys.stage_seal(label),
                self._keys.stage_rejected(label),
            )
            pipe.srem(self._keys.open_labels, label)
            if status is not None:
                pipe.rpush(self._keys.status_outbox, status)
            self._call("refuse a release", pipe.execute)

    def note_refusal(self, status: bytes) -> None:
        """Keep ``status``, the message of a release refused at its cut, for
        :meth:`last_refusal` (``/health`` after a restart)."""
        key = self._keys.last_refusal
        self._call("keep the last refusal", lambda: self._client.set(key, status))

    def last_refusal(self) -> bytes | None:
        """The status message of the last release refused at its cut, ``None`` when none was
        or a release after it was committed since (:meth:`refusal_passed`)."""
        key = self._keys.last_refusal
        raw = self._call("read the last refusal", lambda: self._client.get(key))
        return None if raw is None else bytes(cast("bytes", raw))

    def refusal_passed(self) -> None:
        """A release after the last refused one was committed: forget the refusal."""
        key = self._keys.last_refusal
        self._call("forget the last refusal", lambda: self._client.delete(key))

    def mark_published(self, sequence: int) -> int:
        """Record that release ``sequence`` was sent; never moves backwards. Returns the
        published sequence after the call."""
        keys = [self._keys.published]
        return int(
            self._call("mark a release published", lambda: self._mark(keys=keys, args=[sequence]))
        )

    def _call(self, operation: str, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except REDIS_ERRORS as exc:
            raise HistoryStoreError(
                f"Redis: could not {operation} (prefix {self._keys.prefix!r}): {exc}"
            ) from exc
