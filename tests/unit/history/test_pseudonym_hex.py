"""Pseudonyms as text: every one 32 hex digits, trailing NUL bytes included."""

from __future__ import annotations

import numpy as np

from stream_release.history.types import PSEUDONYM_DTYPE, pseudonym_hex


def test_trailing_zero_bytes_are_kept() -> None:
    raw = [bytes(range(1, 15)) + b"\x00\x00", b"\xff" * 16, b"\x00" * 16]
    pseudonyms = np.frombuffer(b"".join(raw), dtype=PSEUDONYM_DTYPE)
    assert pseudonyms.tolist()[0] != raw[0]  # what numpy hands out loses them
    assert pseudonym_hex(pseudonyms) == [r.hex() for r in raw]
    assert all(len(h) == 32 for h in pseudonym_hex(pseudonyms))
