"""The placer keeps its state between calls and looks at nearby groups first: its answers must
be those of an exhaustive search over every group, call after call."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.typing import NDArray

from stream_release.core.grouping import placer as placer_module
from stream_release.core.grouping import placer_index
from stream_release.core.grouping.merge import GroupValidity
from stream_release.core.grouping.placer import (
    REGROUP_WORK,
    SEARCH_WORK,
    SWAP_WORK,
    Placer,
    WorkBudget,
    first_rows,
)
from stream_release.core.grouping.requirements import Requirements


class _Exhaustive:
    """The reference: every group checked for every row, from the grouping as it is."""

    def __init__(self, group, qid, norm, sensitive, protected, req, cap) -> None:  # type: ignore[no-untyped-def]
        self.group, self.qid, self.norm = group, qid, norm
        self.sensitive, self.protected, self.req, self.cap = sensitive, protected, req, cap

    def groups(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        n_groups = int(self.group.max()) + 1
        return first_rows(self.group, n_groups), np.bincount(
            self.group[self.group >= 0], minlength=n_groups
        )

    def ordered(self, groups: NDArray[np.int64], x: int, limit: int) -> NDArray[np.int64]:
        first, _ = self.groups()
        gap = [self.gap(int(first[g]), x) for g in groups.tolist()]
        order = sorted(range(groups.size), key=lambda i: (gap[i], groups[i]))
        return groups[order[:limit]]

    def gap(self, a: int, b: int) -> float:
        """Summed in attribute order (one formula: ties are broken the same way)."""
        total = 0.0
        for j in range(self.qid.shape[1]):
            total += abs(float(self.qid[a, j]) - float(self.qid[b, j])) * float(self.norm[j])
        return total

    def taking(self, x: int, limit: int) -> NDArray[np.int64]:
        _, sizes = self.groups()
        req, own = self.req, int(self.sensitive[x])
        mine = dict(
            zip(
                req.value[req.ptr[x] : req.ptr[x + 1]].tolist(),
                req.ratio[req.ptr[x] : req.ptr[x + 1]].tolist(),
                strict=True,
            )
        )
        values = set(mine) | ({own} if self.protected[own] else set())
        ok = []
        for g in np.flatnonzero(sizes > 0).tolist():
            members = np.flatnonzero(self.group == g)
            if members.size + 1 > self.cap:
                continue
            fits = True
            for s in values:
                count = int(np.count_nonzero(self.sensitive[members] == s)) + (s == own)
                ratio = max(req.base, mine.get(s, req.base))
                for r in members.tolist():
                    entries = req.value[req.ptr[r] : req.ptr[r + 1]] == s
                    ratio = max([ratio, *req.ratio[req.ptr[r] : req.ptr[r + 1]][entries]])
                if count and members.size + 1 < count * ratio:
                    fits = False
            if fits:
                ok.append(g)
        return self.ordered(np.array(ok, dtype=np.int64), x, limit)

    def place(
        self,
        rows: NDArray[np.int64],
        check: GroupValidity,
        swaps: int | None = None,
        searches: int | None = None,
    ) -> NDArray[np.int64]:
        """``swaps``: the members a swap may try in all (None: no bound), a group's members
        tried only when all of them may be; ``searches``: the searches for a swapped
        member's other group (an answer kept while no row moves costs none), none left ending
        the swaps. Returns the grouping; :attr:`left` holds what is left of both."""
        group = self.group
        known: dict[int, NDArray[np.int64]] = {}
        for x in rows.tolist():
            if group[x] >= 0:
                continue
            taking = self.taking(x, 1)
            if taking.size:
                group[x] = taking[0]
                known.clear()
                continue
            if swaps == 0:
                continue
            _, sizes = self.groups()
            for g in self.ordered(np.flatnonzero(sizes > 0), x, 64).tolist():
                members = np.flatnonzero(group == g)
                if swaps is not None:
                    if members.size > swaps:
                        swaps = 0
                        break
                    swaps -= members.size
                for y in members.tolist():
                    if not check.valid(np.append(members[members != y], x)):
                        continue
                    if y not in known:
                        if searches is not None:
                            if searches == 0:
                                swaps = 0
                                break
                            searches -= 1
                        group[x], group[y] = g, -1
                        known[y] = self.taking(y, 2)
                        group[y], group[x] = g, -1
                    elsewhere = known[y]
                    elsewhere = elsewhere[elsewhere != g]
                    if elsewhere.size:
                        group[x], group[y] = g, elsewhere[0]
                        known.clear()
                        break
                if group[x] >= 0 or swaps == 0:
                    break
        self.left = (swaps, searches)
        return group


def _release(seed: int, n: int = 1500, d: int = 4, values: int = 6) -> tuple:  # type: ignore[type-arg]
    rng = np.random.default_rng(seed)
    qid = rng.integers(0, 12, size=(n, d)).astype(np.int32)
    norm = 1.0 / np.full(d, 11.0)
    sensitive = rng.integers(0, values, n).astype(np.int32)
    protected = np.ones(values, dtype=np.bool_)
    protected[0] = False
    lengths = np.where(rng.random(n) < 0.3, rng.integers(1, 3, n), 0)
    ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    value = np.concatenate(
        [rng.choice(np.arange(1, values), size=k, replace=False) for k in lengths]
    ).astype(np.int32)
    ratio = rng.choice([3.5, 4.0, 6.0, 9.0, np.inf], size=value.size)
    req = Requirements(3.0, ptr, value, ratio)
    group = np.repeat(np.arange(n // 5), 5)[rng.permutation(n)].astype(np.int64)
    return rng, qid, norm, sensitive, protected, req, group


@pytest.mark.parametrize(
    ("seed", "stale", "slots", "remembered", "scan"),
    [(0, 16384, 16, 4096, 0), (1, 16384, 16, 4096, 0), (2, 4, 16, 4096, 0),
     (3, 16384, 1, 4096, 0), (4, 16384, 16, 8, 0), (5, 16384, 16, 4096, 8192)],
)  # fmt: skip
def test_the_answers_of_an_exhaustive_search_call_after_call(
    seed: int,
    stale: int,
    slots: int,
    remembered: int,
    scan: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 0: every search asks the tree first (the release's few hundred groups would be scanned)
    monkeypatch.setattr(placer_module, "SCAN_GROUPS", scan)
    monkeypatch.setattr(placer_index, "STALE_GROUPS", stale)  # 4: the tree built again often
    # 8: what searches of every group found is forgotten after a few changes
    monkeypatch.setattr(placer_index, "REMEMBERED_CHANGES", remembered)
    told = []  # the searches that an earlier one narrowed
    recall = placer_index.Refusals.candidates

    def candidates(self, key, mine):  # type: ignore[no-untyped-def]
        known = recall(self, key, mine)
        told.append(known is not None)
        return known

    monkeypatch.setattr(placer_index.Refusals, "candidates", candidates)
    # 1 slot: values given up and filled again, and rows that need more values than slots
    monkeypatch.setattr(placer_index, "VALUE_BYTES", 0)
    monkeypatch.setattr(placer_index, "MIN_VALUES", slots)
    rng, qid, norm, sensitive, protected, req, group = _release(seed)
    cap = 5  # groups of 5: only a group that lost a row takes one, the rest is swaps
    placer = Placer(qid, norm, sensitive, protected, req, cap=cap, min_group_size=2)
    check = GroupValidity(sensitive, protected, req, 2)
    placed_some = swapped = 0
    for round_ in range(6):
        rows = rng.choice(group.shape[0], size=40, replace=False).astype(np.int64)
        cut = group.copy()
        cut[rows] = -1
        if round_ == 3:  # new group ids past the ones the placer has seen
            extra = rng.choice(np.flatnonzero(cut >= 0), size=400, replace=False)
            cut[extra] = int(cut.max()) + 1 + np.arange(400) // 4
        before = cut.copy()
        got = placer.place(cut, rows)
        assert np.array_equal(cut, before)  # the caller's array is not changed
        want = _Exhaustive(cut.copy(), qid, norm, sensitive, protected, req, cap).place(rows, check)
        assert np.array_equal(got, want), f"round {round_}"
        reference = _Exhaustive(got.copy(), qid, norm, sensitive, protected, req, cap)
        for x in rows[:5].tolist():  # the groups a row left over is regrouped with
            near, members = placer.nearest(got, x, 16)
            alive = np.unique(got[got >= 0])
            assert np.array_equal(near, reference.ordered(alive, x, 16))
            assert np.array_equal(np.sort(members), np.flatnonzero(np.isin(got, near)))
        placed_some += int(np.count_nonzero(got[rows] >= 0))
        swapped += int(np.count_nonzero((got != cut) & (cut >= 0)))
        group = np.where(got >= 0, got, group)
    assert placed_some > 0 and swapped > 0  # both paths ran
    assert any(told) and not all(told)  # searches narrowed by earlier ones, and others


@pytest.mark.parametrize("seed", range(5))
def test_the_scan_of_every_group_is_the_scan_group_by_group(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_groups, d, n_values = 3000, 3, 5
    sizes = rng.integers(0, 7, n_groups).astype(np.int64)  # empty groups and full ones (cap 6)
    anchor = rng.integers(0, 4, size=(n_groups, d)).astype(np.int32)  # many ties
    counts = rng.integers(0, 3, size=(n_values, n_groups)).astype(np.int64)
    ratios = rng.choice([2.0, 3.0, np.inf], size=(n_values, n_groups))
    norm = np.full(d, 1 / 3)
    for _ in range(20):
        k = int(rng.integers(0, n_values + 1))
        slots = rng.choice(n_values, size=k, replace=False).astype(np.int64)
        plus = (rng.random(k) < 0.3).astype(np.int64)
        mine = rng.choice([1.5, 2.0, 2.5], size=k)
        point = rng.integers(0, 4, d).astype(np.int32)
        limit = int(rng.integers(1, 70))
        args = (anchor, sizes, point, norm, 6, slots, plus, mine, counts, ratios, limit)
        every, every_gap = placer_module._nearest_taking_every(*args)
        one_by_one, gap = placer_module._nearest_taking(np.arange(n_groups), *args)
        assert np.array_equal(every, one_by_one) and np.array_equal(every_gap, gap)


@pytest.mark.parametrize(("swaps", "searches"), [(0, 10), (60, 100), (400, 100), (400, 3)])
def test_swaps_stop_where_the_releases_budget_ends(swaps: int, searches: int) -> None:
    """A release's :class:`WorkBudget` bounds the members its swaps try, in all its calls: the
    rows after it is spent get only a group that takes them as they are (O(n) work whatever
    the history); the answers up to there are the exhaustive search's."""
    rng, qid, norm, sensitive, protected, req, group = _release(7)
    cap = 5
    placer = Placer(qid, norm, sensitive, protected, req, cap=cap, min_group_size=2)
    check = GroupValidity(sensitive, protected, req, 2)
    budget = WorkBudget(swaps=swaps, regroup=0, searches=searches)
    left = (swaps, searches)
    for _ in range(3):
        rows = rng.choice(group.shape[0], size=40, replace=False).astype(np.int64)
        cut = group.copy()
        cut[rows] = -1
        got = placer.place(cut, rows, budget)
        reference = _Exhaustive(cut.copy(), qid, norm, sensitive, protected, req, cap)
        want = reference.place(rows, check, swaps=left[0], searches=left[1])
        assert np.array_equal(got, want)
        assert (budget.swaps, budget.searches) == reference.left
        left = (budget.swaps, budget.searches)
        group = np.where(got >= 0, got, group)
    assert budget.swaps <= swaps
    if swaps == 0:
        assert budget.swaps == 0


def test_a_budget_spends_what_it_has_and_then_nothing() -> None:
    budget = WorkBudget.for_rows(100)
    assert (budget.swaps, budget.regroup) == (100 * SWAP_WORK, 100 * REGROUP_WORK)
    assert budget.searches == math.ceil(100 * SEARCH_WORK)
    while budget.searches:
        assert budget.spend_search()
    assert not budget.spend_search() and budget.swaps == 0
    assert budget.spend_regroup(30) and budget.regroup == 100 * REGROUP_WORK - 30
    assert not budget.spend_regroup(budget.regroup + 1) and budget.regroup == 0
    assert not budget.spend_regroup(1)
