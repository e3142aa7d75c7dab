"""Every Redis key name of the history store (STYLE.md rule 4: nowhere else).

Key schema, for the namespace ``prefix`` (``history.prefix``, default ``sr``)::

    {prefix}:seq                     STRING  last committed release sequence (decimal);
                                             absent = 0, no release yet
    {prefix}:values                  LIST    the append-only value dictionary: element i is the
                                             UTF-8 sensitive value with global value id i
    {prefix}:release:{seq:08d}       STRING  the release record committed with ``seq``
    {prefix}:keycheck                STRING  keyed check value (16 bytes) of the
                                             pseudonymisation key the history was written
                                             under, set by the first commit that has none
    {prefix}:{ind:<hex pseudonym>}:h STRING  one individual's history: its entries as packed
                                             ``ENTRY_DTYPE`` (16 bytes each: u4 value id,
                                             f8 log_p, u4 links, little-endian), ascending by
                                             value id; absent = no history

The streaming service adds (``<hex label>`` = the UTF-8 release label in hex, so any label is
a safe key part)::

    {prefix}:labels                  HASH    release label -> sequence, set in the commit
                                             transaction: a label present here is cut
    {prefix}:published               STRING  last sequence whose groups and manifest were sent
    {prefix}:records:from            STRING  first sequence whose release record is kept: the
                                             records before it were sent (and, on shards,
                                             filed) and are deleted
    {prefix}:stage:<hex label>:rows  HASH    raw 16-byte pseudonym -> staged row (JSON array of
                                             the QID values then the sensitive value)
    {prefix}:stage:<hex label>:seal  STRING  the sealed number of distinct ids
    {prefix}:stage:open              SET     labels (UTF-8) with staged rows or a seal
    {prefix}:stage:<hex label>:rejected
                                     SET     ``topic:partition:offset`` of each record of the
                                             release that was rejected (a value outside its
                                             hierarchy, the release full): a seal these leave
                                             short can never complete
    {prefix}:status:outbox           LIST    status messages (JSON) still to send to
                                             ``topics.status``: a release refused at its cut
    {prefix}:status:refused          STRING  the status message of the last release refused
                                             at its cut, until a release after it is
                                             committed (``/health`` after a restart)

A release mechanism other than the global guarantee (``[mechanism] kind``,
:mod:`stream_release.mechanisms`) keeps its state across releases in::

    {prefix}:mech:<hex key>          STRING  one state entry of the series' mechanism: the
                                             value committed under the byte key ``key`` (a
                                             name of the mechanism's choosing: a pseudonym, a
                                             keyed hash of a group key, ``<kind>:series``),
                                             written in the commit transaction of a release

``<hex pseudonym>`` is the 32 lowercase hex digits of the 16-byte keyed hash of the id
(:mod:`stream_release.history.pseudonym`): no key contains an id. The braces are a Redis
Cluster hash tag (STYLE.md §2 naming): every key of one individual maps to the same slot, so a
future per-individual script can touch them together. The prefix itself may not contain braces
(they would move the hash tag into the prefix).

Sharded namespaces (``[kafka] partitions`` above 1, or ``[redis] cluster``): every key above
exists once per shard ``p`` (a partition of ``topics.records``) with the head ``{prefix:p}``
instead of ``prefix`` and the individual's key without braces of its own, so every key of one
shard is in one Redis Cluster slot and a shard's commit stays one transaction::

    {prefix:p}:seq  {prefix:p}:values  {prefix:p}:release:{seq:08d}  {prefix:p}:ind:<hex>:h ...

(a shard's ``release`` record is its part of that release: its group lines and the part's own
figures), and the release-level records that every worker reads have the head
``{prefix:release}``: the seals of whole releases (``stage:<hex label>:seal``, the JSON list of
each partition's ids), ``stage:open``, ``labels``, ``seq``, ``release:{seq:08d}`` (the merged
manifest), ``published``, ``records:from`` (for the merged manifests and every shard's parts),
``status:outbox``, ``status:refused``, and::

    {prefix:release}:partitions         STRING the series' partition count (its shards),
                                              set at its first start, checked at every one
    {prefix:release}:current            HASH  the release in flight: label, sequence, and once
                                              every shard voted outcome, offsets or refusal
    {prefix:release}:votes:<hex label>  HASH  shard -> vote (JSON: its part's group count, or
                                              why it cannot be made)
    {prefix:release}:confirms:<hex label>
                                        HASH  shard -> confirmation (JSON: its part holds the
                                              bound with the union of the suppressed rows)
    {prefix:release}:breach:<hex label> HASH  shard -> its published individuals' breach
                                              probabilities (float64; no individual named)
    {prefix:release}:parts:<hex label>  SET   shards whose part is committed (or refused)

The release-level names come from :meth:`RedisKeys.for_release`. The two tags never collide,
across prefixes either: a shard tag ends in ``:`` and decimal digits, the release tag in
``:release``, and the last ``:`` of a tag separates the prefix from what follows.

Nothing builds a key name elsewhere, in Python or server-side: every command receives its keys
from these methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
from numpy.typing import NDArray

from stream_release.errors import ConfigError
from stream_release.history.types import PSEUDONYM_DTYPE

__all__ = ["RedisKeys", "key_names"]

_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_GLOB_SPECIAL = frozenset("*?[]\\")


class RedisKeys:
    """Key names of one history namespace.

    Properties and methods (see the module docstring for types and contents):

    * :attr:`sequence` -- ``{prefix}:seq``
    * :attr:`values` -- ``{prefix}:values``
    * :meth:`record` -- ``{prefix}:release:{seq:08d}``
    * :attr:`key_check` -- ``{prefix}:keycheck``
    * :meth:`individual` / :meth:`individuals` -- ``{prefix}:{ind:<hex>}:h``
    * :attr:`labels`, :attr:`published`, :attr:`open_labels`, :meth:`stage_rows`,
      :meth:`stage_seal`, :meth:`stage_rejected`, :attr:`status_outbox` -- the streaming
      service's staging and publication state
    * :meth:`mechanism_state` / :meth:`mechanism_states` -- ``{prefix}:mech:<hex key>``
    * :attr:`match` -- a ``SCAN MATCH`` pattern for every key of the namespace
    * :attr:`matches` -- :attr:`match` and the pattern of the Redis Cluster keys whose hash
      tag opens with the prefix (``{prefix}:...``, ``{prefix:<shard>}:...``)

    Parameters
    ----------
    prefix : str
        Namespace, non-empty, without ``{`` or ``}``.

    Raises
    ------
    ConfigError
        ``prefix`` is empty or contains a brace.
    """

    __slots__ = ("_ind_head", "_ind_tail", "head", "prefix", "shard", "tagged")

    def __init__(self, prefix: str, *, _tag: str | None = None, _shard: int | None = None) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise ConfigError(
                f"history.prefix = {prefix!r}: the Redis key prefix must be a non-empty str"
            )
        if "{" in prefix or "}" in prefix:
            raise ConfigError(
                f"history.prefix = {prefix!r}: braces are not allowed (they would become the "
                "Redis Cluster hash tag of every key)"
            )
        self.prefix = prefix
        self.shard = _shard
        """The shard of a sharded namespace (:meth:`for_shard`); ``None`` otherwise."""
        self.tagged = _tag is not None
        """Whether every key carries the namespace's hash tag (:meth:`for_shard`,
        :meth:`for_release`)."""
        self.head = prefix if _tag is None else f"{{{prefix}:{_tag}}}"
        """What every key name starts with: ``prefix``, ``{prefix:p}`` or
        ``{prefix:release}``."""
        if self.tagged:
            self._ind_head = f"{self.head}:ind:".encode()
            self._ind_tail = b":h"
        else:
            self._ind_head = f"{prefix}:{{ind:".encode()
            self._ind_tail = b"}:h"

    @classmethod
    def for_shard(cls, prefix: str, shard: int) -> RedisKeys:
        """The keys of shard ``shard`` (partition of ``topics.records``): head ``{prefix:p}``,
        one hash tag for all of them."""
        if isinstance(shard, bool) or not isinstance(shard, int) or shard < 0:
            raise ValueError(f"a shard is a partition number >= 0, got {shard!r}")
        return cls(prefix, _tag=str(shard), _shard=shard)

    @classmethod
    def for_release(cls, prefix: str) -> RedisKeys:
        """The release-level keys of a sharded namespace: head ``{prefix:release}``."""
        return cls(prefix, _tag="release")

    def __repr__(self) -> str:
        if self.shard is not None:
            return f"RedisKeys.for_shard({self.prefix!r}, {self.shard})"
        if self.tagged:
            return f"RedisKeys.for_release({self.prefix!r})"
        return f"RedisKeys({self.prefix!r})"

    @property
    def where(self) -> str:
        """The namespace in messages: ``prefix 'sr'``, ``prefix 'sr' shard 3``, ``prefix 'sr'
        (release level)``."""
        if self.shard is not None:
            return f"prefix {self.prefix!r} shard {self.shard}"
        if self.tagged:
            return f"prefix {self.prefix!r} (release level)"
        return f"prefix {self.prefix!r}"

    @property
    def sequence(self) -> str:
        """``{prefix}:seq``: the last committed sequence number."""
        return f"{self.head}:seq"

    @property
    def values(self) -> str:
        """``{prefix}:values``: the value dictionary (a LIST, index = global value id)."""
        return f"{self.head}:values"

    @property
    def key_check(self) -> str:
        """``{prefix}:keycheck``: the check value of the pseudonymisation key."""
        return f"{self.head}:keycheck"

    def record(self, sequence: int) -> str:
        """``{prefix}:release:{sequence:08d}``: the record of release ``sequence``."""
        return f"{self.head}:release:{sequence:08d}"

    def individual(self, pseudonym: bytes) -> str:
        """``{prefix}:{ind:<hex>}:h``: the history of one individual.

        ``pseudonym`` is the 16-byte pseudonym. A shorter value is NUL-padded to 16 bytes,
        because numpy strips trailing NULs from an ``S16`` element (``arr[i]``).
        """
        if len(pseudonym) > PSEUDONYM_DTYPE.itemsize:
            raise ValueError(
                f"a pseudonym has {PSEUDONYM_DTYPE.itemsize} bytes, got {len(pseudonym)}"
            )
        full = bytes(pseudonym).ljust(PSEUDONYM_DTYPE.itemsize, b"\x00")
        return (self._ind_head + full.hex().encode() + self._ind_tail).decode()

    def individuals(self, pseudonyms: NDArray[np.bytes_]) -> list[bytes]:
        """:meth:`individual` of every element of an ``(n,) S16`` array, as bytes, vectorised."""
        return key_names(self.individual_codes(pseudonyms))

    def individual_codes(self, pseudonyms: NDArray[np.bytes_]) -> NDArray[np.uint8]:
        """:meth:`individuals` as one ``(n, width)`` array of their bytes (every key of a
        namespace has the same length), without a Python object per key."""
        arr = np.ascontiguousarray(pseudonyms, dtype=PSEUDONYM_DTYPE)
        n = arr.shape[0]
        raw = arr.view(np.uint8).reshape(n, PSEUDONYM_DTYPE.itemsize)
        head = np.frombuffer(self._ind_head, dtype=np.uint8)
        tail = np.frombuffer(self._ind_tail, dtype=np.uint8)
        hex_width = 2 * PSEUDONYM_DTYPE.itemsize
        width = head.size + hex_width + tail.size
        out = np.empty((n, width), dtype=np.uint8)
        out[:, : head.size] = head
        digits = out[:, head.size : head.size + hex_width]
        digits[:, 0::2] = _HEX_DIGITS[raw >> 4]
        digits[:, 1::2] = _HEX_DIGITS[raw & 0x0F]
        out[:, head.size + hex_width :] = tail
        return out

    @property
    def labels(self) -> str:
        """``{prefix}:labels``: release label -> committed sequence (a HASH)."""
        return f"{self.head}:labels"

    @property
    def published(self) -> str:
        """``{prefix}:published``: the last sequence sent to Kafka."""
        return f"{self.head}:published"

    @property
    def records_from(self) -> str:
        """``{prefix}:records:from``: the first sequence whose release record is kept (those
        before it were sent and filed, and deleted)."""
        return f"{self.head}:records:from"

    @property
    def open_labels(self) -> str:
        """``{prefix}:stage:open``: labels being staged (a SET)."""
        return f"{self.head}:stage:open"

    def stage_rows(self, label: str) -> str:
        """``{prefix}:stage:<hex label>:rows``: the staged rows of one release (a HASH)."""
        return f"{self.head}:stage:{label.encode().hex()}:rows"

    def stage_seal(self, label: str) -> str:
        """``{prefix}:stage:<hex label>:seal``: the sealed record count of one release."""
        return f"{self.head}:stage:{label.encode().hex()}:seal"

    def stage_rejected(self, label: str) -> str:
        """The coordinates of release ``label``'s rejected records (SET)."""
        return f"{self.head}:stage:{label.encode().hex()}:rejected"

    @property
    def current(self) -> str:
        """``{prefix:release}:current``: the release in flight on the shards (a HASH)."""
        return f"{self.head}:current"

    def votes(self, label: str) -> str:
        """``{prefix:release}:votes:<hex label>``: shard -> its vote on release ``label``."""
        return f"{self.head}:votes:{label.encode().hex()}"

    @property
    def partitions(self) -> str:
        """``{prefix:release}:partitions``: the series' partition count, set at its start."""
        return f"{self.head}:partitions"

    def confirms(self, label: str) -> str:
        """``{prefix:release}:confirms:<hex label>``: shard -> its confirmation of ``label``
        with its suppressed rows linked to the union of every shard's."""
        return f"{self.head}:confirms:{label.encode().hex()}"

    def breaches(self, label: str) -> str:
        """``{prefix:release}:breach:<hex label>``: shard -> its published individuals' breach
        probabilities (float64), for the release's exact quantiles."""
        return f"{self.head}:breach:{label.encode().hex()}"

    def parts(self, label: str) -> str:
        """``{prefix:release}:parts:<hex label>``: the shards whose part of ``label`` is done."""
        return f"{self.head}:parts:{label.encode().hex()}"

    @property
    def status_outbox(self) -> str:
        """Status messages still to send (LIST of JSON)."""
        return f"{self.head}:status:outbox"

    @property
    def last_refusal(self) -> str:
        """The last refused release's status message (STRING of JSON), until a later commit."""
        return f"{self.head}:status:refused"

    def mechanism_state(self, key: bytes) -> str:
        """``{prefix}:mech:<hex key>``: one committed state entry of the series' mechanism
        (``key``: non-empty bytes of the mechanism's choosing, hex-encoded in the name)."""
        if not isinstance(key, bytes | bytearray) or not key:
            raise ValueError(f"a mechanism state key must be non-empty bytes, got {key!r:.40}")
        return f"{self.head}:mech:{bytes(key).hex()}"

    def mechanism_states(self, keys: Sequence[bytes]) -> list[str]:
        """:meth:`mechanism_state` of every key, in order."""
        return [self.mechanism_state(key) for key in keys]

    @property
    def match(self) -> str:
        """``SCAN`` pattern matching every key of this namespace (tests, administration).

        Also matches keys of a namespace ``{prefix}:...`` nested under this one.
        """
        return f"{_glob(self.head)}:*"

    @property
    def matches(self) -> tuple[str, str]:
        """``SCAN`` patterns that together match every key of the series under ``prefix``,
        whatever its namespace: ``prefix:*`` (a plain namespace) and ``{prefix[:}]*`` (the
        keys whose Redis Cluster hash tag opens with the prefix: ``{prefix:<shard>}:...``,
        ``{prefix:release}:...``; a nested namespace's too). Neither matches a namespace that
        merely starts with the same characters (``prefix2``).
        """
        escaped = _glob(self.prefix)
        return f"{escaped}:*", f"{{{escaped}[:}}]*"


def key_names(codes: NDArray[np.uint8]) -> list[bytes]:
    """The keys of a ``(n, width)`` array of their bytes (:meth:`RedisKeys.individual_codes`),
    one ``bytes`` each (a key never ends in NUL, which numpy would drop)."""
    return cast("list[bytes]", codes.view(f"S{codes.shape[1]}").reshape(-1).tolist())


def _glob(text: str) -> str:
    """``text`` with the glob's special characters escaped."""
    return "".join(f"\\{c}" if c in _GLOB_SPECIAL else c for c in text)
