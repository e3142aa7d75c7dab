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

__all__ = ["RedisKeys"]

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

    __slots__ = ("_ind_head", "_ind_tail", "prefix")

    def __init__(self, prefix: str) -> None:
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
        self._ind_head = f"{prefix}:{{ind:".encode()
        self._ind_tail = b"}:h"

    def __repr__(self) -> str:
        return f"RedisKeys({self.prefix!r})"

    @property
    def sequence(self) -> str:
        """``{prefix}:seq``: the last committed sequence number."""
        return f"{self.prefix}:seq"

    @property
    def values(self) -> str:
        """``{prefix}:values``: the value dictionary (a LIST, index = global value id)."""
        return f"{self.prefix}:values"

    @property
    def key_check(self) -> str:
        """``{prefix}:keycheck``: the check value of the pseudonymisation key."""
        return f"{self.prefix}:keycheck"

    def record(self, sequence: int) -> str:
        """``{prefix}:release:{sequence:08d}``: the record of release ``sequence``."""
        return f"{self.prefix}:release:{sequence:08d}"

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
        return f"{self.prefix}:{{ind:{full.hex()}}}:h"

    def individuals(self, pseudonyms: NDArray[np.bytes_]) -> list[bytes]:
        """:meth:`individual` of every element of an ``(n,) S16`` array, as bytes, vectorised."""
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
        return cast("list[bytes]", out.view(f"S{width}").reshape(n).tolist())

    @property
    def labels(self) -> str:
        """``{prefix}:labels``: release label -> committed sequence (a HASH)."""
        return f"{self.prefix}:labels"

    @property
    def published(self) -> str:
        """``{prefix}:published``: the last sequence sent to Kafka."""
        return f"{self.prefix}:published"

    @property
    def open_labels(self) -> str:
        """``{prefix}:stage:open``: labels being staged (a SET)."""
        return f"{self.prefix}:stage:open"

    def stage_rows(self, label: str) -> str:
        """``{prefix}:stage:<hex label>:rows``: the staged rows of one release (a HASH)."""
        return f"{self.prefix}:stage:{label.encode().hex()}:rows"

    def stage_seal(self, label: str) -> str:
        """``{prefix}:stage:<hex label>:seal``: the sealed record count of one release."""
        return f"{self.prefix}:stage:{label.encode().hex()}:seal"

    def stage_rejected(self, label: str) -> str:
        """The coordinates of release ``label``'s rejected records (SET)."""
        return f"{self.prefix}:stage:{label.encode().hex()}:rejected"

    @property
    def status_outbox(self) -> str:
        """Status messages still to send (LIST of JSON)."""
        return f"{self.prefix}:status:outbox"

    def mechanism_state(self, key: bytes) -> str:
        """``{prefix}:mech:<hex key>``: one committed state entry of the series' mechanism
        (``key``: non-empty bytes of the mechanism's choosing, hex-encoded in the name)."""
        if not isinstance(key, bytes | bytearray) or not key:
            raise ValueError(f"a mechanism state key must be non-empty bytes, got {key!r:.40}")
        return f"{self.prefix}:mech:{bytes(key).hex()}"

    def mechanism_states(self, keys: Sequence[bytes]) -> list[str]:
        """:meth:`mechanism_state` of every key, in order."""
        return [self.mechanism_state(key) for key in keys]

    @property
    def match(self) -> str:
        """``SCAN`` pattern matching every key of this namespace (tests, administration).

        Also matches keys of a namespace ``{prefix}:...`` nested under this one.
        """
        return f"{self._glob_prefix}:*"

    @property
    def matches(self) -> tuple[str, str]:
        """``SCAN`` patterns that together match every key of this namespace: :attr:`match`,
        and ``{prefix[:}]*`` for the keys whose Redis Cluster hash tag opens with the prefix
        (``{prefix}:...``, ``{prefix:<shard>}:...``; a nested namespace's too). Neither
        matches a namespace that merely starts with the same characters (``prefix2``).
        """
        return self.match, f"{{{self._glob_prefix}[:}}]*"

    @property
    def _glob_prefix(self) -> str:
        """The prefix with the glob's special characters escaped."""
        return "".join(f"\\{c}" if c in _GLOB_SPECIAL else c for c in self.prefix)
