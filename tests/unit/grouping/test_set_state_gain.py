"""``SetState.gain`` (a numba kernel) against the numpy formula it replaced, on random sets
with histories: spent pairs, blocked values, values the other parts hold."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support.tables import random_ratios

from stream_release.core.grouping.requirements import Requirements
from stream_release.core.grouping.set_state import SetState


def numpy_gain(state: SetState, rows: np.ndarray) -> int:
    """The formula as it was written with numpy (the reference)."""
    counts = np.bincount(state.sensitive[rows], minlength=state.counts.shape[0])
    after = state.counts + counts
    _, value, ratio = state.entries(rows)
    if np.any(np.isinf(ratio) & ((after[value] > 0) | state.also_held[value])):
        return -1
    if np.any(state.blocked & (counts > 0) & (state.counts == 0)):
        return -1
    ratio_after = state.ratio.copy()
    np.maximum.at(ratio_after, value, ratio)
    live = state.protected & (after > 0)
    with np.errstate(invalid="ignore"):  # 0 * inf where a value is absent: not live
        terms = np.where(live, after * ratio_after, 0.0)
    need_before = float(state.terms.max(initial=0.0))
    need_after = float(terms.max(initial=0.0))
    return (int(np.ceil(need_before)) - state.size) - (
        int(np.ceil(need_after)) - (state.size + int(rows.shape[0]))
    )


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.integers(0, 2**32 - 1), st.integers(8, 60), st.integers(2, 6))
def test_the_kernel_gives_the_numpy_gain(seed: int, n: int, n_values: int) -> None:
    rng = np.random.default_rng(seed)
    sensitive = rng.integers(0, n_values, size=n).astype(np.int32)
    protected = rng.random(n_values) < 0.8
    # a history for some rows: Theorem 1's ratio of some of their values, some spent
    ptr, values, least = random_ratios(
        rng, n, n_values, with_history=0.5, spent=0.15, span=(2.0, 8.0)
    )
    requirements = Requirements(
        2.0, np.zeros(n + 1, np.int64), np.zeros(0, np.int32), np.zeros(0), ptr, values, least
    )
    member = rng.random(n) < 0.3
    forced = member & (rng.random(n) < 0.3)
    also_held = rng.random(n_values) < 0.2
    state = SetState(
        sensitive, protected, requirements, member, forced, cap=20, floor=2.0, also_held=also_held
    )
    outsiders = np.flatnonzero(~state.member)
    for _ in range(10):
        if outsiders.size == 0:
            break
        rows = rng.choice(
            outsiders, size=int(rng.integers(1, min(6, outsiders.size) + 1)), replace=False
        )
        rows = rows.astype(np.int64)
        expected = numpy_gain(state, rows)
        assert state.gain(rows) == expected
        if expected > 0:
            state.add(rows)
            outsiders = np.flatnonzero(~state.member)
