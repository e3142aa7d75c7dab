"""Decoys for the suppressed set: published rows that join it so that it keeps the bound
(:mod:`stream_release.core.grouping.suppressed_set` explains the set and when each kind is
tried).

Whole published groups (:func:`add_group_decoys`), single rows whose groups stay valid without
them (:func:`add_row_decoys`), and single rows whose groups' other rows go into other groups
(:func:`add_rehomed_decoys`); :func:`choose_decoys` ranks the candidates. Each adds rows to a
:class:`~stream_release.core.grouping.set_state.SetState` only while they lower its shortfall.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from stream_release.core.grouping.set_state import SetState

__all__ = [
    "REHOME_BATCH",
    "REHOME_TRIES",
    "GroupValid",
    "PlaceRows",
    "add_group_decoys",
    "add_rehomed_decoys",
    "add_row_decoys",
    "choose_decoys",
]


GroupValid = Callable[[NDArray[np.int64]], bool]
"""Whether rows form a valid group (:class:`~stream_release.core.grouping.merge.GroupValidity`)."""

PlaceRows = Callable[[NDArray[np.int64], NDArray[np.int64]], NDArray[np.int64]]
"""Puts ungrouped rows into groups that stay valid with them: ``(group, rows)`` -> the new
(n,) group per row (a row no group can take stays ``-1``)."""

REHOME_BATCH = 64
"""Smallest batch of :func:`add_rehomed_decoys` (the shortfall otherwise)."""

REHOME_TRIES = 4096
"""Candidates tried by :func:`add_rehomed_decoys`, the last resort before a refusal. In a
large release every group holds one of the most frequent values (the grouping must spread
them), so only this stage can add rows of the others: at 300,000 rows the fifth release of
the scale benchmark needed 282 (64 tries refused it)."""


def choose_decoys(
    state: SetState, grouped: NDArray[np.bool_], *, slack: float = 0.0, limit: bool = True
) -> NDArray[np.int64]:
    """Rows to add to the set: as many as it falls short (and ``slack`` times that more),
    none raising its target (``limit`` false: every candidate, in order).

    The target is ``T = ceil(max_s n(S,s) R(S,s))``; a value ``v`` may gain up to
    ``floor(T / R(S,v)) - n(S,v)`` rows (unprotected values: any number), and no row of a
    value some member is spent for. Candidates are ``grouped`` rows (not in the set) whose
    requirements do not raise the set's ratio of a value it holds or they bring: first those
    without any requirement above the base, then the rest, each in row order.
    """
    short = state.shortfall()
    if short <= 0:
        return np.zeros(0, dtype=np.int64)
    target = float(np.ceil(state.terms.max(initial=0.0)))
    v = state.counts.shape[0]
    room = np.full(v, np.iinfo(np.int64).max // 4, dtype=np.int64)
    ratio = np.where(state.ratio > 0, state.ratio, state.base)
    prot = np.flatnonzero(state.protected)
    room[prot] = np.floor(target / ratio[prot]).astype(np.int64) - state.counts[prot]
    room[state.blocked & (state.counts == 0)] = 0
    rows = np.flatnonzero(grouped & ~state.absent).astype(np.int64)  # never an absent row
    owner, value, r = state.entries(rows)
    # a requirement matters for a value the set holds or the row brings (gain() weighs the
    # rest when it is one: a value brought later meets the raised ratio)
    relevant = (
        (state.counts[value] > 0) | state.also_held[value] | (value == state.sensitive[owner])
    )
    bad = relevant & (np.isinf(r) | (r > ratio[value]))
    blocked = state.also_stranded.copy()
    blocked[owner[bad]] = True
    plain = np.zeros(state.sensitive.shape[0], dtype=np.bool_)
    plain[rows] = True
    plain[owner] = False
    rows = rows[~blocked[rows]]
    rows = rows[np.lexsort((rows, ~plain[rows]))]  # rows without requirements first
    values = state.sensitive[rows]
    # the k-th candidate of its value is taken iff k < room[value]
    order = np.argsort(values, kind="stable")
    first = np.searchsorted(values[order], values[order], side="left")
    rank = np.empty(rows.shape[0], dtype=np.int64)
    rank[order] = np.arange(rows.shape[0]) - first
    taken = rows[rank < room[values]]
    return taken[: short + int(np.ceil(slack * short))] if limit else taken


def add_row_decoys(state: SetState, group: NDArray[np.int64], group_valid: GroupValid) -> None:
    """Single rows whose groups stay valid without them, as long as the set falls short and
    each lowers the shortfall (:func:`choose_decoys`' candidates, in its order): nothing is
    grouped again, so nothing new is left over."""
    ptr, rows = _group_index(group)
    taken: dict[int, set[int]] = {}
    for r in choose_decoys(state, (group >= 0) & ~state.member, limit=False).tolist():
        if state.shortfall() <= 0:
            return
        g = int(group[r])
        gone = taken.setdefault(g, set())
        rest = np.array([x for x in rows[ptr[g] : ptr[g + 1]].tolist() if x != r and x not in gone])
        if rest.size == 0 or not group_valid(rest.astype(np.int64)):
            continue
        one = np.array([r], dtype=np.int64)
        if state.gain(one) <= 0:
            continue
        state.add(one)
        gone.add(r)


def add_rehomed_decoys(
    state: SetState, group: NDArray[np.int64], place_rows: PlaceRows
) -> NDArray[np.int64]:
    """Single rows whose groups do not stay valid without them, the rest of the group placed
    into other groups (``place_rows``, every row or none), as long as the set falls short and
    each lowers the shortfall (:func:`choose_decoys`' candidates, :data:`REHOME_TRIES` at
    most). Returns the new grouping; the set gains the rows taken.

    Candidates go in batches (:func:`_rehome_batch`: one call of ``place_rows`` for the rest
    of every candidate's group); a batch whose candidates stop helping one another, and the
    candidates a batch dropped, are tried one at a time."""
    candidates = choose_decoys(state, (group >= 0) & ~state.member, limit=False)
    candidates = candidates[:REHOME_TRIES]
    start = 0
    while start < candidates.size and state.shortfall() > 0:
        size = max(state.shortfall(), REHOME_BATCH)
        batch, start = _distinct_groups(candidates, group, state.member, start, size)
        done, dropped = _rehome_batch(state, group, batch, place_rows)
        if done is not None:
            group = done
        # one at a time: a batch whose candidates stopped helping one another, and those
        # whose rest found no group while the batch's other groups were cut
        again = batch if done is None else dropped
        for r in again.tolist() if batch.size > 1 else []:
            if state.shortfall() <= 0:
                break
            one, _ = _rehome_batch(state, group, np.array([r]), place_rows)
            group = group if one is None else one
    return group


def _distinct_groups(
    candidates: NDArray[np.int64],
    group: NDArray[np.int64],
    member: NDArray[np.bool_],
    start: int,
    size: int,
) -> tuple[NDArray[np.int64], int]:
    """Up to ``size`` candidates from ``start`` on that are not ``member``s, one per group;
    and where the next batch starts."""
    seen: set[int] = set()
    out: list[int] = []
    i = start
    while i < candidates.size and len(out) < size:
        r = int(candidates[i])
        i += 1
        g = int(group[r])
        if g >= 0 and not member[r] and g not in seen:
            seen.add(g)
            out.append(r)
    return np.array(out, dtype=np.int64), i


def _rehome_batch(
    state: SetState,
    group: NDArray[np.int64],
    batch: NDArray[np.int64],
    place_rows: PlaceRows,
) -> tuple[NDArray[np.int64] | None, NDArray[np.int64]]:
    """The grouping with the candidates of ``batch`` (one per group) taken into the set and
    the rest of their groups placed (``place_rows``; a candidate whose rest is not all placed
    is dropped: it keeps its group, and the others are placed again without it), and the
    dropped candidates; ``None``, the set unchanged, when a candidate no longer lowers the
    shortfall once the others joined. The absent rows of the candidates' groups
    (``state.absent``) are placed when a group takes them, else left out."""
    helps = np.array([state.gain(np.array([r])) > 0 for r in batch.tolist()], dtype=np.bool_)
    batch = batch[helps] if batch.size else batch
    kept, placed = batch, group
    while kept.size:
        gone = np.isin(group, group[kept]) & ~state.member
        gone[kept] = False
        rest = np.flatnonzero(gone).astype(np.int64)
        cut = group.copy()
        cut[state.member | gone] = -1  # the set's rows are in no group
        cut[kept] = -1
        placed = place_rows(cut, rest)
        real = rest[~state.absent[rest]]
        whole = np.array([np.all(placed[real[group[real] == group[r]]] >= 0) for r in kept])
        if whole.all():
            break
        kept = kept[whole]
    dropped = np.setdiff1d(batch, kept)
    if kept.size == 0:
        return group, dropped
    saved = state.save()
    for r in kept.tolist():
        one = np.array([r], dtype=np.int64)
        if state.gain(one) <= 0:
            state.restore(saved)
            return None, dropped
        state.add(one)
    final = placed.copy()
    final[state.member] = group[state.member]  # the set's rows keep their ids (decoys)
    return final, dropped


def _group_index(group: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Rows of every group as a CSR: ``(ptr (G+1,), rows)``, rows ascending per group."""
    grouped = np.flatnonzero(group >= 0)
    order = np.argsort(group[grouped], kind="stable")
    rows = grouped[order].astype(np.int64)
    n_groups = int(group.max()) + 1 if grouped.size else 0
    ptr = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(group[grouped], minlength=n_groups), out=ptr[1:])
    return ptr, rows


def add_group_decoys(state: SetState, group: NDArray[np.int64]) -> None:
    """Whole published groups, as long as the set falls short and each lowers the shortfall:
    groups without any requirement above the base first (they raise no ratio of the set),
    then those whose protected values press least on the set, smaller ones first."""
    ptr, rows = _group_index(group)
    sizes = np.diff(ptr)
    g_of = np.repeat(np.arange(sizes.shape[0]), sizes)
    values = state.sensitive[rows]
    pressure = np.where(state.protected[values], state.terms[values], 0.0)
    worst = np.zeros(sizes.shape[0])
    if rows.size:
        np.maximum.at(worst, g_of, pressure)
    # a group with a member at the bound for a value the set holds can never join it
    owner, value, ratio = state.entries(rows)
    blocked = np.zeros(sizes.shape[0], dtype=np.bool_)
    where = np.empty(state.sensitive.shape[0], dtype=np.int64)
    where[rows] = g_of
    hit = np.isinf(ratio) & ((state.counts[value] > 0) | state.also_held[value])
    blocked[where[owner[hit]]] = True
    demanding = np.zeros(sizes.shape[0], dtype=np.bool_)
    demanding[where[owner]] = True
    for g in np.lexsort((sizes, worst, demanding)).tolist():
        if blocked[g]:
            continue
        if state.shortfall() <= 0:
            return
        members = rows[ptr[g] : ptr[g + 1]]
        members = members[~state.absent[members]]
        if members.size == 0 or bool(state.member[members].any()):
            continue
        if state.gain(members) <= 0:
            continue
        state.add(members)
