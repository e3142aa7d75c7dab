"""The commit's ``MSET`` written straight into RESP2: byte for byte what redis-py sends."""

from __future__ import annotations

import numpy as np
import pytest
from redis.connection import Connection

from stream_release.history.keys import RedisKeys
from stream_release.history.resp import mset_command
from stream_release.history.types import ENTRY_DTYPE


@pytest.mark.parametrize("seed", range(6))
def test_the_command_is_the_one_redis_py_packs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    keys = RedisKeys.for_shard("sr", 3) if seed % 2 else RedisKeys("sr")
    pseudonyms = rng.integers(0, 256, (n, 16), dtype=np.uint8).view("S16").reshape(n)
    # counts of 0 (not set), of one entry, and past redis-py's 6,000-byte cut-off (400 entries)
    counts = rng.choice([0, 1, 2, 9, 400, 1000], size=n)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    data = rng.integers(0, 256, int(indptr[-1]) * ENTRY_DTYPE.itemsize, dtype=np.uint8)
    rows = rng.permutation(np.flatnonzero(counts)).astype(np.int64)
    if rows.size == 0:
        rows = np.array([0], dtype=np.int64)
    got = mset_command(keys.individual_codes(pseudonyms), rows, indptr, data, 16).tobytes()
    names = keys.individuals(pseudonyms)
    args: list[bytes] = []
    for r in rows.tolist():
        args += [names[r], data[indptr[r] * 16 : indptr[r + 1] * 16].tobytes()]
    assert got == b"".join(Connection().pack_command("MSET", *args))  # type: ignore[no-untyped-call]


def test_arrays_that_do_not_fit_together_are_refused() -> None:
    codes = np.zeros((3, 40), dtype=np.uint8)
    indptr = np.array([0, 1, 1, 3], dtype=np.int64)
    data = np.zeros(48, dtype=np.uint8)
    with pytest.raises(ValueError, match="between 1 and all of the 3 keys"):
        mset_command(codes, np.array([3]), indptr, data, 16)
    with pytest.raises(ValueError, match="between 1 and all"):
        mset_command(codes, np.zeros(0, dtype=np.int64), indptr, data, 16)
    with pytest.raises(ValueError, match="do not fit"):
        mset_command(codes, np.array([0]), indptr[:-1], data, 16)
    with pytest.raises(ValueError, match="48 bytes for 3 entries"):
        mset_command(codes, np.array([0]), indptr, data, 8)
