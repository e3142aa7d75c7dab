"""The history in Redis: one string per individual, committed with WATCH + MULTI/EXEC.

Layout (key names: :mod:`stream_release.history.keys`): each individual's history is ONE
Redis string holding its entries as packed ``ENTRY_DTYPE`` (16 bytes per (value, log_p,
links)), so a release reads n individuals with n/20000 ``MGET`` calls in one pipeline and
decodes all of them with a single ``np.frombuffer``; the value dictionary is a LIST, the
release record and the sequence number are strings.

Why MULTI/EXEC with WATCH and not a Lua script
----------------------------------------------
STYLE.md rule 3 asks for one Lua script per read-modify-write. A commit is the exception, on
purpose:

* a release may carry a million individuals. ``EVAL`` would take two million arguments (keys
  and blobs) in one command, buffered whole by the server before the script starts, and the
  script would then run as one uninterruptible call, blocking every other client for longer
  than the equivalent ``MSET`` batches;
* the only read the commit depends on is small: the sequence number and the value dictionary.
  ``WATCH`` on those two keys, a check in Python, then ``MULTI ... EXEC`` makes the whole
  commit a check-and-set: ``EXEC`` applies every queued command, or none if either watched key
  changed since the check (then we re-read and check again, up to :data:`WATCH_ATTEMPTS`
  times; a rival commit of the same sequence thus ends as :class:`SequenceConflict`);
* every key is computed in Python by :class:`RedisKeys` and passed explicitly; nothing builds
  a key name server-side (the EVAL page on redis.io forbids that for Cluster, STYLE.md §1).

The transaction queues ``MSET`` of the new blobs in chunks of :data:`CHUNK` keys (each
written straight into the protocol by :mod:`~stream_release.history.resp` and sent before the
next is packed: no Python object per key or history, no second copy of the whole transaction
as redis-py's pipeline makes), ``DEL`` of individuals whose new history is empty, ``RPUSH``
of the new dictionary values, ``MSET`` of the mechanism state entries
(``{prefix}:mech:<hex key>``, :meth:`RedisHistoryStore.load_state`), ``SET`` of the release
record and last ``SET`` of the sequence.

Known sharp edges
-----------------
* Redis transactions do not roll back: a command that fails *inside* ``EXEC`` leaves the others
  applied. The commit reads both watched keys with their own types before ``MULTI`` (a wrong
  type fails the check, not the transaction), and ``MSET``/``DEL``/``SET`` cannot fail on type;
  an out-of-memory refusal happens while queueing and aborts the whole ``EXEC``.
* Redis Cluster: the individual keys of a plain namespace carry per-individual hash tags, so
  its commit spans slots and ``MULTI`` across slots is refused: it needs a standalone Redis (or
  a primary with replicas). A shard's namespace (:meth:`RedisKeys.for_shard`) has one hash tag
  for every key, so its commit is one transaction in one slot, which a cluster runs.
* The transaction runs on one connection taken from the client's pool (on a Redis Cluster, of
  the client of the slot's master, found through the cluster's client, which follows a
  failover). If the connection drops once the keys are watched, the round ends as a
  ``WatchError``, as in redis-py's pipeline; the retry then finds either the old sequence (the
  commit was lost, it is applied now) or the new one (it went through, the caller gets
  :class:`SequenceConflict` and can compare ``record(sequence)``). A slot that moved in a
  failover (``MOVED``) ends the round the same way.
* ``load`` is not isolated from a concurrent commit; the service runs one writer per
  namespace (per shard on shards: the owner the records consumer's group chose).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, Protocol, TypeVar, cast

import numpy as np
import redis
from numpy.typing import NDArray
from redis.exceptions import AskError, ExecAbortError, MovedError, WatchError

from stream_release.core.privacy.linkage import HistoryRows
from stream_release.errors import ConfigError, HistoryStoreError, KeyMismatch, SequenceConflict
from stream_release.faults import kill_point
from stream_release.history._validate import (
    check_commit,
    check_key_check,
    check_pseudonyms,
    check_sequence,
    check_state,
    check_state_keys,
    decode_entries,
    key_mismatch_message,
)
from stream_release.history.keys import RedisKeys, key_names
from stream_release.history.redis_client import (
    REDIS_ERRORS,
    RedisClient,
    connect,
    decodes_responses,
    describe,
)
from stream_release.history.resp import mset_command
from stream_release.history.types import ENTRY_DTYPE

__all__ = ["CHUNK", "WATCH_ATTEMPTS", "RedisHistoryStore"]

CHUNK = 20_000
"""Keys per MGET / MSET / DEL command."""

WATCH_ATTEMPTS = 5
"""Commit attempts when a watched key changes between the check and EXEC."""

_T = TypeVar("_T")


@dataclass(frozen=True)
class _Histories:
    """The histories a commit writes: the keys' bytes (one row each), which keys get an
    ``MSET`` (``filled``, in chunks of :data:`CHUNK`: :func:`~stream_release.history.resp.
    mset_command`) and which a ``DEL`` (no entries left)."""

    codes: NDArray[np.uint8]
    indptr: NDArray[np.int64]
    data: NDArray[np.uint8]
    filled: NDArray[np.int64]
    emptied: list[bytes]

    @classmethod
    def of(
        cls, codes: NDArray[np.uint8], indptr: NDArray[np.int64], entries: NDArray[np.void]
    ) -> _Histories:
        counts = np.diff(indptr)
        emptied = key_names(codes[counts == 0])
        data = np.ascontiguousarray(entries).view(np.uint8).reshape(-1)
        return cls(codes, indptr, data, np.flatnonzero(counts), emptied)

    def mset_commands(self) -> Iterator[NDArray[np.uint8]]:
        """Each ``MSET`` of :data:`CHUNK` keys, packed when asked for."""
        for start in range(0, self.filled.shape[0], CHUNK):
            rows = self.filled[start : start + CHUNK]
            yield mset_command(self.codes, rows, self.indptr, self.data, ENTRY_DTYPE.itemsize)


class RedisHistoryStore:
    """:class:`~stream_release.history.types.HistoryStore` backed by Redis.

    Parameters
    ----------
    client : redis.Redis or redis.RedisCluster
        A client with ``decode_responses=False`` (histories are binary). The store does not
        close an injected client; one made by :meth:`from_url` is closed by :meth:`close`.
        On a Redis Cluster the namespace must be a shard's (:meth:`RedisKeys.for_shard`): its
        commit is one transaction, which a cluster runs only within one slot.
    prefix : str or RedisKeys
        Namespace of every key (``history.prefix``), or the key names of a shard.

    Raises
    ------
    ConfigError
        The client decodes responses, ``prefix`` is empty or holds a brace, or the client is
        a cluster's and the namespace is not a shard's.
    """

    def __init__(self, client: RedisClient, prefix: str | RedisKeys) -> None:
        if decodes_responses(client):
            raise ConfigError(
                "RedisHistoryStore needs a redis.Redis client with decode_responses=False: "
                "histories are stored as binary strings"
            )
        keys = prefix if isinstance(prefix, RedisKeys) else RedisKeys(prefix)
        if isinstance(client, redis.RedisCluster) and keys.shard is None:
            raise ConfigError(
                f"the history of {keys.where} cannot live on a Redis Cluster: its keys span "
                "slots and a commit is one transaction; a cluster holds the histories of "
                "shards (RedisKeys.for_shard)"
            )
        self._client = client
        self._keys = keys
        self._where = describe(client)
        self._owns_client = False

    @classmethod
    def from_url(
        cls, url: str, prefix: str | RedisKeys, *, cluster: bool = False
    ) -> RedisHistoryStore:
        """A store on a new client for ``url`` (``redis://``, ``rediss://`` or ``unix://``;
        ``cluster``: any node of a Redis Cluster).

        Raises
        ------
        ConfigError
            ``url`` is not a Redis URL (the message hides any password).
        """
        client = connect(url, cluster=cluster)
        try:
            store = cls(client, prefix)
        except BaseException:
            client.close()
            raise
        store._owns_client = True
        return store

    def __repr__(self) -> str:
        shard = "" if self._keys.shard is None else f", shard={self._keys.shard}"
        return f"RedisHistoryStore({self._where!r}, prefix={self._keys.prefix!r}{shard})"

    @property
    def keys(self) -> RedisKeys:
        """The key names of this store's namespace."""
        return self._keys

    # -- reads -------------------------------------------------------------------------------

    def last_sequence(self) -> int:
        """Sequence number of the last committed release; 0 before the first."""
        raw = self._call("read the sequence", lambda: self._client.get(self._keys.sequence))
        return self._parse_sequence(raw)

    def values(self) -> tuple[str, ...]:
        """The value dictionary (``LRANGE {prefix}:values 0 -1``)."""
        raw = self._call(
            "read the value dictionary", lambda: self._client.lrange(self._keys.values, 0, -1)
        )
        return self._decode_values(raw)

    def record(self, sequence: int) -> bytes | None:
        """The release record committed with ``sequence``, or None."""
        seq = check_sequence(sequence)
        if seq < 1:
            return None
        raw = self._call(f"read record {seq}", lambda: self._client.get(self._keys.record(seq)))
        return None if raw is None else _as_bytes(raw)

    def load(self, pseudonyms: NDArray[np.bytes_]) -> HistoryRows:
        """History of ``pseudonyms`` (n,) S16, row i for ``pseudonyms[i]``.

        Unknown pseudonyms get empty rows; duplicates get one row each. One pipeline of
        ``MGET`` commands of :data:`CHUNK` keys; one ``np.frombuffer`` decodes everything.
        """
        ps = check_pseudonyms(pseudonyms)
        n = ps.shape[0]
        if n == 0:
            return HistoryRows.empty(0)
        keys = self._keys.individuals(ps)

        def fetch() -> list[list[bytes | None]]:
            with self._client.pipeline(transaction=False) as pipe:
                for start in range(0, n, CHUNK):
                    # by name: a cluster pipeline refuses its mget() method, not one slot's MGET
                    pipe.execute_command("MGET", *keys[start : start + CHUNK])
                return pipe.execute()

        replies = self._call(f"load the history of {n} individuals", fetch)
        blobs = [blob or b"" for blob in chain.from_iterable(replies)]
        lengths = np.fromiter(map(len, blobs), dtype=np.int64, count=n)
        if np.any(lengths % ENTRY_DTYPE.itemsize):
            bad = int(np.count_nonzero(lengths % ENTRY_DTYPE.itemsize))
            raise HistoryStoreError(
                f"{bad} history strings under {self._keys.where} on {self._where} are "
                f"not a whole number of {ENTRY_DTYPE.itemsize}-byte entries: the store is corrupt"
            )
        return decode_entries(b"".join(blobs), lengths // ENTRY_DTYPE.itemsize)

    def load_state(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The committed mechanism state entry of each key (``None``: never written): one
        pipeline of ``MGET`` commands of :data:`CHUNK` keys on ``{prefix}:mech:<hex key>``."""
        names = self._keys.mechanism_states(check_state_keys(keys))
        if not names:
            return []

        def fetch() -> list[list[bytes | None]]:
            with self._client.pipeline(transaction=False) as pipe:
                for start in range(0, len(names), CHUNK):
                    pipe.execute_command("MGET", *names[start : start + CHUNK])
                return pipe.execute()

        replies = self._call(f"load {len(names)} mechanism state entries", fetch)
        return [None if v is None else bytes(v) for v in chain.from_iterable(replies)]

    def key_check(self) -> bytes | None:
        """The check value of the key the history was written under (None: not recorded)."""
        raw = self._call("read the key check", lambda: self._client.get(self._keys.key_check))
        return None if raw is None else _as_bytes(raw)

    # -- the commit --------------------------------------------------------------------------

    def commit(
        self,
        sequence: int,
        pseudonyms: NDArray[np.bytes_],
        history: HistoryRows,
        values: tuple[str, ...],
        record: bytes,
        *,
        label: str | None = None,
        state: Mapping[bytes, bytes] | None = None,
        key_check: bytes | None = None,
    ) -> None:
        """Atomically store release ``sequence`` (see the module docstring for how).

        With ``label`` (the streaming service), the same transaction maps the release label to
        ``sequence`` and deletes its staged rows and seal, so a release is cut exactly once.
        ``state`` (mechanism state entries, byte key -> byte value) is set in the same
        transaction. ``key_check`` (the pseudonymisation key's check value) is recorded when
        the store has none yet.

        Raises
        ------
        SequenceConflict
            ``sequence`` is not ``last_sequence() + 1`` or the stored dictionary is not a
            prefix of ``values``; nothing is changed.
        KeyMismatch
            The store recorded another ``key_check``; nothing is changed.
        HistoryStoreError
            Redis failed, or the watched keys kept changing for :data:`WATCH_ATTEMPTS` tries;
            nothing is changed.
        TypeError, ValueError
            Malformed arguments (see :func:`~stream_release.history._validate.check_commit`).
        """
        c = check_commit(sequence, pseudonyms, history, values, record)
        entries = check_state(state)
        check = check_key_check(key_check)
        state_args: list[bytes | str] = []
        for key, value in entries.items():
            state_args += [self._keys.mechanism_state(key), value]
        histories = _Histories.of(self._keys.individual_codes(c.pseudonyms), c.indptr, c.entries)
        for attempt in range(1, WATCH_ATTEMPTS + 1):
            try:
                self._try_commit(
                    c.sequence, c.values, c.record, histories, label, state_args, check
                )
            except WatchError:
                continue
            except REDIS_ERRORS as exc:
                raise HistoryStoreError(
                    f"Redis commit of release {c.sequence} failed on {self._where} (attempt "
                    f"{attempt}): {exc}; nothing was committed"
                ) from exc
            return
        raise HistoryStoreError(
            f"Redis commit of release {c.sequence} on {self._where}: the sequence or value "
            f"dictionary under {self._keys.where} changed during each of "
            f"{WATCH_ATTEMPTS} attempts (another writer?); nothing was committed"
        )

    def _try_commit(
        self,
        sequence: int,
        values: tuple[str, ...],
        record: bytes,
        histories: _Histories,
        label: str | None = None,
        state_args: Sequence[bytes | str] = (),
        key_check: bytes | None = None,
    ) -> None:
        """One WATCH / check / MULTI / EXEC round on one connection to the server of this
        namespace (:meth:`_server`), the histories' ``MSET`` commands packed one at a time
        (:mod:`~stream_release.history.resp`); WatchError if a watched key changed, or the
        connection was lost once the keys were watched (as redis-py's pipeline does: the next
        round finds whether the commit went through)."""
        seq_key, values_key, check_key = (
            self._keys.sequence,
            self._keys.values,
            self._keys.key_check,
        )
        pool = self._server().connection_pool
        connection = pool.get_connection()
        conn = cast("_Connection", connection)
        watching = False
        try:
            # redis-py's health check (a PING when the connection was idle for
            # health_check_interval) once, here: sent after MULTI it would read a queued
            # command's reply as its PONG, drop the connection and, with retries, carry on
            # outside the transaction on a new one
            conn.check_health()
            conn.send_command("WATCH", seq_key, values_key, check_key, check_health=False)
            conn.read_response()
            watching = True
            conn.send_command("GET", check_key, check_health=False)
            recorded = conn.read_response()
            if key_check is not None and recorded is not None and _as_bytes(recorded) != key_check:
                raise KeyMismatch(key_mismatch_message(repr(self)))
            conn.send_command("GET", seq_key, check_health=False)
            current = self._parse_sequence(conn.read_response())
            if current != sequence - 1:
                raise SequenceConflict(
                    f"commit of release {sequence} refused: the last committed release under "
                    f"{self._keys.where} on {self._where} is {current}, so the next "
                    f"must be {current + 1}"
                )
            conn.send_command("LRANGE", values_key, 0, -1, check_health=False)
            stored = self._decode_values(conn.read_response())
            if values[: len(stored)] != stored:
                raise SequenceConflict(
                    f"commit of release {sequence} refused: the stored value dictionary "
                    f"({len(stored)} values) is not a prefix of the given one ({len(values)} "
                    "values); reload the dictionary and plan the release again"
                )
            conn.send_command("MULTI", check_health=False)
            conn.read_response()
            queued = 0
            for command in histories.mset_commands():
                conn.send_packed_command([command.data], check_health=False)
                queued += 1
            emptied, step = histories.emptied, 2 * CHUNK
            commands: list[tuple[Any, ...]] = [
                ("DEL", *emptied[start : start + CHUNK]) for start in range(0, len(emptied), CHUNK)
            ]
            if len(values) > len(stored):
                commands.append(("RPUSH", values_key, *values[len(stored) :]))
            commands += [
                ("MSET", *state_args[start : start + step])
                for start in range(0, len(state_args), step)
            ]
            commands.append(("SET", self._keys.record(sequence), record))
            if key_check is not None and recorded is None:
                commands.append(("SET", check_key, key_check))
            commands.append(("SET", seq_key, sequence))
            if label is not None:
                commands.append(("HSET", self._keys.labels, label, sequence))
                commands.append(
                    (
                        "UNLINK",
                        self._keys.stage_rows(label),
                        self._keys.stage_seal(label),
                        self._keys.stage_rejected(label),
                    )
                )
                commands.append(("SREM", self._keys.open_labels, label))
            for command_args in commands:
                conn.send_command(*command_args, check_health=False)
            queued += len(commands)
            kill_point("commit_queued")
            conn.send_command("EXEC", check_health=False)
            _exec_replies(conn, queued)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            conn.disconnect()
            if watching:
                raise WatchError(f"the connection was lost while watching: {exc}") from exc
            raise
        except (MovedError, AskError) as exc:  # a Redis Cluster failover moved the slot
            conn.disconnect()
            raise WatchError(f"the namespace's slot moved: {exc}") from exc
        except BaseException:
            conn.disconnect()  # watching, or with replies unread: not for another caller
            raise
        finally:
            pool.release(connection)

    def _server(self) -> redis.Redis:
        """The client of the server that holds this namespace: the store's, or on a Redis
        Cluster the one of the master of the namespace's slot, asked through the cluster's
        client first (which follows a failover and reads the slots map again)."""
        client = self._client
        if not isinstance(client, redis.RedisCluster):
            return client
        client.exists(self._keys.sequence)
        node = client.get_node_from_key(self._keys.sequence)  # type: ignore[no-untyped-call]
        return client.get_redis_connection(node)

    # -- plumbing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the client if this store created it (:meth:`from_url`)."""
        if self._owns_client:
            self._client.close()

    def _call(self, operation: str, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except REDIS_ERRORS as exc:
            raise HistoryStoreError(
                f"Redis: could not {operation} ({self._keys.where}) on {self._where}: {exc}"
            ) from exc

    def _parse_sequence(self, raw: Any) -> int:
        if raw is None:
            return 0
        try:
            return int(raw)
        except ValueError:
            raise HistoryStoreError(
                f"Redis key {self._keys.sequence!r} on {self._where} does not hold a sequence "
                "number: the store is corrupt"
            ) from None

    def _decode_values(self, raw: Iterable[bytes | str]) -> tuple[str, ...]:
        try:
            return tuple(_as_bytes(v).decode("utf-8") for v in raw)
        except UnicodeDecodeError:
            raise HistoryStoreError(
                f"Redis list {self._keys.values!r} on {self._where} holds a value that is not "
                "UTF-8: the store is corrupt"
            ) from None


class _Connection(Protocol):
    """What the commit uses of a redis-py connection (its methods carry no annotations)."""

    def check_health(self) -> None: ...
    def send_command(self, *args: Any, check_health: bool = True) -> None: ...
    def send_packed_command(
        self, command: Sequence[bytes | memoryview], check_health: bool = True
    ) -> None: ...
    def read_response(self) -> Any: ...
    def disconnect(self) -> None: ...


def _exec_replies(conn: _Connection, queued: int) -> None:
    """Read the replies of ``queued`` commands queued after ``MULTI``, then ``EXEC``'s.

    Raises
    ------
    WatchError
        ``EXEC`` applied nothing: a watched key changed.
    redis.ResponseError
        A command was refused while queued (``EXEC`` then aborts the whole transaction) or
        failed inside it (the first such error).
    """
    refused: redis.ResponseError | None = None
    for _ in range(queued):
        try:
            conn.read_response()
        except redis.ResponseError as exc:
            refused = refused or exc
    try:
        replies = conn.read_response()
    except ExecAbortError:
        if refused is not None:
            raise refused from None
        raise
    if replies is None:
        raise WatchError("a watched key changed")
    if len(replies) != queued:
        raise redis.ResponseError(
            f"EXEC answered {len(replies)} replies for {queued} queued commands"
        )
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply


def _as_bytes(reply: bytes | str) -> bytes:
    """A Redis reply as bytes (the clients here never decode replies; redis-py's types allow
    either)."""
    return reply if isinstance(reply, bytes) else reply.encode("utf-8")
