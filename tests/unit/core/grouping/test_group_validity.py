"""``GroupValidity.valid`` (a numba kernel) against the numpy formula it replaced: ``|G| >= k``
and ``|G| >= n(G,s) R(G,s)`` for every protected value present, ``R`` the base or a member's
larger requirement (``inf``: the member may not share a group with the value)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support.tables import random_ratios

from stream_release.core.grouping.merge import GroupValidity
from stream_release.core.grouping.requirements import Requirements


def numpy_valid(check: GroupValidity, rows: np.ndarray) -> bool:
    """The formula as it was written with numpy (the reference)."""
    size = rows.shape[0]
    if size < check.min_size:
        return False
    counts = np.bincount(check.sensitive[rows], minlength=check.protected.shape[0])
    ratio = np.where(check.protected, check.req.base, 0.0)
    ptr = check.req.ptr
    for r in rows.tolist():
        for k in range(int(ptr[r]), int(ptr[r + 1])):
            ratio[check.req.value[k]] = max(ratio[check.req.value[k]], check.req.ratio[k])
    live = check.protected & (counts > 0)
    return bool(np.all(size >= counts[live] * ratio[live]))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.integers(0, 2**32 - 1), st.integers(4, 40), st.integers(1, 6), st.integers(1, 6))
def test_the_kernel_gives_the_numpy_verdict(seed: int, n: int, n_values: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    sensitive = rng.integers(0, n_values, size=n).astype(np.int32)
    protected = rng.random(n_values) < 0.8
    ptr, value, ratio = random_ratios(
        rng, n, n_values, with_history=0.4, spent=0.1, span=(2.0, 10.0)
    )
    check = GroupValidity(sensitive, protected, Requirements(2.0, ptr, value, ratio), k)
    for _ in range(10):
        rows = rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False).astype(np.int64)
        assert check.valid(rows) == numpy_valid(check, rows)
