"""The compiled keyed BLAKE2b (the pseudonyms' hash) against :func:`hashlib.blake2b`."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_release.history._blake2b import BLOCK, keyed_digests


def _packed(messages: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(messages) + 1, dtype=np.int64)
    np.cumsum([len(m) for m in messages], out=offsets[1:])
    return np.frombuffer(b"".join(messages), dtype=np.uint8), offsets


@settings(max_examples=200, deadline=None)
@given(
    key=st.binary(min_size=1, max_size=64),
    digest_size=st.integers(1, 64),
    messages=st.lists(st.binary(max_size=3 * BLOCK + 1), max_size=8),
)
def test_each_digest_is_hashlibs(key: bytes, digest_size: int, messages: list[bytes]) -> None:
    data, offsets = _packed(messages)
    out = keyed_digests(key, digest_size, data, offsets)
    assert out.shape == (len(messages), digest_size)
    assert [row.tobytes() for row in out] == [
        hashlib.blake2b(m, key=key, digest_size=digest_size).digest() for m in messages
    ]


@pytest.mark.parametrize("size", [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK, 2 * BLOCK + 1])
def test_block_boundaries(size: int) -> None:
    message = bytes(range(256)) * 2
    data, offsets = _packed([message[:size], b"x"])
    out = keyed_digests(b"k" * 32, 16, data, offsets)
    assert (
        out[0].tobytes() == hashlib.blake2b(message[:size], key=b"k" * 32, digest_size=16).digest()
    )


def test_out_of_range_arguments_are_refused() -> None:
    data, offsets = _packed([b"a"])
    with pytest.raises(ValueError, match="1 to 64"):
        keyed_digests(b"", 16, data, offsets)
    with pytest.raises(ValueError, match="1 to 64"):
        keyed_digests(b"k", 65, data, offsets)
    with pytest.raises(ValueError, match="within data"):
        keyed_digests(b"k", 16, data, np.array([0, 2], dtype=np.int64))
