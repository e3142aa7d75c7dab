"""The budget ledger of mode ``dp-sanitised``: each person's charged records and their cost.

Digest F2 [X], :func:`~stream_release.core.privacy.dp_budget.ledger_charge_batch`. State entry
per person, key = the pseudonym (16 bytes), value = version byte ``0x01`` then one 24-byte entry
per charged record: its keyed 8-byte digest (:func:`record_digests`) and its cost
(epsilon, delta) as two little-endian float64. A new record costs the record's
(epsilon, delta); a record already charged costs nothing; a person whose next record would pass
the caps (``epsilon_budget``, ``delta_budget``) is not published in this release.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from stream_release.config.mechanisms.dp_sanitised import DPSanitisedSettings
from stream_release.core.privacy.dp_budget import ledger_charge_batch
from stream_release.errors import HistoryStoreError
from stream_release.mechanisms.base import ReleaseRandomness, StateLoader

__all__ = ["charge", "decode_ledger", "encode_ledger", "record_digests"]

_STATE_VERSION = b"\x01"
_ENTRY = struct.Struct("<8sdd")
_DIGEST = 8


def record_digests(randomness: ReleaseRandomness, keys: Sequence[bytes]) -> list[bytes]:
    """Keyed 8-byte digest of each record key: stable across releases, opaque without the
    secret (a small domain of values could otherwise be tested against the ledger)."""
    secret = randomness.secret
    return [
        hashlib.blake2b(b"record\x1f" + k, key=secret, digest_size=_DIGEST).digest() for k in keys
    ]


def charge(
    s: DPSanitisedSettings,
    persons: Sequence[bytes],
    digests: Sequence[bytes],
    load_state: StateLoader,
) -> tuple[NDArray[np.bool_], dict[bytes, bytes], int]:
    """Charge each row's record to its person (``ledger_charge_batch``'s rules).

    Returns ``granted`` (n,), the changed state entries and the number of people refused.
    Two cases are settled here without the general function, by its rules: a person's only
    row whose digest is already charged (cached: granted, free) and a person's only row with
    no ledger yet (charged (epsilon, delta), within any cap the settings accept). Everything
    else (a new record of a person with a ledger, several rows of one person) goes through
    :func:`~stream_release.core.privacy.dp_budget.ledger_charge_batch`.
    """
    n = len(persons)
    unique = list(dict.fromkeys(persons))
    stored = dict(zip(unique, load_state(unique), strict=True))
    rows_of: dict[bytes, int] = {}
    for p in persons:
        rows_of[p] = rows_of.get(p, 0) + 1
    granted = np.zeros(n, dtype=bool)
    state: dict[bytes, bytes] = {}
    first = _ENTRY.pack(b"\0" * _DIGEST, s.epsilon, s.delta)[_DIGEST:]  # one record's cost
    general: list[int] = []
    for i, (p, d) in enumerate(zip(persons, digests, strict=True)):
        value = stored[p]
        if value is not None:
            check_entry(value)
        if rows_of[p] > 1:
            general.append(i)
        elif value is None:
            granted[i] = True
            state[p] = _STATE_VERSION + d + first
        elif _has_digest(value, d):
            granted[i] = True
        else:
            general.append(i)
    if general:
        people = {
            persons[i].hex(): decode_ledger(value)
            for i in general
            if (value := stored[persons[i]]) is not None
        }
        ledger = {"epsilon_cap": s.epsilon_budget, "delta_cap": s.delta_budget, "people": people}
        batch = ledger_charge_batch(
            ledger,
            [persons[i].hex() for i in general],
            [digests[i].hex() for i in general],
            s.epsilon,
            s.delta,
        )
        granted[general] = batch.granted
        for i in np.asarray(general)[batch.granted & ~batch.cached].tolist():
            state[persons[i]] = encode_ledger(batch.state["people"][persons[i].hex()])
    refused = len({persons[i] for i in np.flatnonzero(~granted).tolist()})
    return granted, state, refused


def _has_digest(value: bytes, digest: bytes) -> bool:
    """Whether a ledger entry (:func:`encode_ledger`) holds ``digest``."""
    return any(value[k : k + _DIGEST] == digest for k in range(1, len(value), _ENTRY.size))


# --- ledger state encoding ---------------------------------------------------------------------


def decode_ledger(value: bytes) -> dict[str, list[float]]:
    """A person's state entry as ``{record digest (hex): [epsilon, delta]}``.

    Raises
    ------
    HistoryStoreError
        Not version ``0x01`` followed by whole 24-byte entries.
    """
    check_entry(value)
    return {digest.hex(): [eps, dlt] for digest, eps, dlt in _ENTRY.iter_unpack(value[1:])}


def check_entry(value: bytes) -> None:
    """Raise :class:`HistoryStoreError` unless ``value`` is version ``0x01`` followed by whole
    24-byte entries."""
    if value[:1] != _STATE_VERSION or (len(value) - 1) % _ENTRY.size:
        raise HistoryStoreError(
            f"dp-sanitised ledger entry of {len(value)} bytes is corrupt (version "
            f"{value[:1]!r}, need 0x01 then 24-byte entries); restore the state store"
        )


def encode_ledger(records: Mapping[str, Sequence[float]]) -> bytes:
    """The state entry of ``{record digest (hex): (epsilon, delta)}``: version ``0x01`` then
    one 24-byte entry per record, in the mapping's order."""
    return _STATE_VERSION + b"".join(
        _ENTRY.pack(bytes.fromhex(d), float(c[0]), float(c[1])) for d, c in records.items()
    )
