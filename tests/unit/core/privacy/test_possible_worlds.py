"""Lemma 4 of [WFLWX10] against a brute-force count of possible worlds (Definitions 1 and 2).

A published release is a list of anonymized groups; the adversary sees, per group, the set of
individuals G.I and the multiset of sensitive values G.S, not who holds which. Definition 1: a
possible world assigns, in every group of every release, the multiset G.S to G.I (each distinct
assignment once, all equally likely; releases independent, since values are transient).
Definition 2: p(o,s,k) is the fraction of possible worlds in which o holds s in at least one
release. Lemma 4 says this is 1 - prod_j (1 - n_{j,s}/n_j) over o's groups.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from stream_release.core.privacy import breach_probability

Row = tuple[str, str]  # (individual, sensitive value); the individual is hidden in T*
Release = list[list[Row]]  # anonymized groups
PublishedGroup = tuple[tuple[str, ...], tuple[str, ...]]  # (G.I, sorted multiset G.S)

MAX_WORLDS = 3000


def publish(series: list[Release]) -> list[list[PublishedGroup]]:
    """What the adversary sees: per group, its individuals and the multiset of values."""
    return [
        [(tuple(o for o, _ in group), tuple(sorted(v for _, v in group))) for group in release]
        for release in series
    ]


def assignments(group: PublishedGroup, *, distinct: bool) -> list[tuple[str, ...]]:
    """Every assignment of G.S to G.I: distinct ones (Definition 1) or all n! permutations."""
    _, values = group
    perms = list(itertools.permutations(values))
    return sorted(set(perms)) if distinct else perms


def brute_force(
    series: list[Release], *, distinct: bool = True
) -> tuple[dict[tuple[str, str], Fraction], int]:
    """p(o,s) for every individual o and value s of the series, by counting possible worlds."""
    published = publish(series)
    people = sorted({o for release in published for ids, _ in release for o in ids})
    values = sorted({v for release in published for _, vs in release for v in vs})
    bit = {pair: 1 << i for i, pair in enumerate(itertools.product(people, values))}
    # One entry per group of every release: the (o, s) linkages of each of its assignments.
    per_group = [
        [
            _or(tuple(bit[pair] for pair in zip(group[0], a, strict=True)))
            for a in assignments(group, distinct=distinct)
        ]
        for release in published
        for group in release
    ]
    # Every possible world: one assignment per group, all combinations (brute force).
    worlds = Counter(_or(masks) for masks in itertools.product(*per_group))
    total = sum(worlds.values())
    linked = {
        pair: Fraction(sum(c for m, c in worlds.items() if m & b), total) for pair, b in bit.items()
    }
    return linked, total


def _or(masks: tuple[int, ...]) -> int:
    out = 0
    for m in masks:
        out |= m
    return out


def lemma_4(series: list[Release], o: str, s: str) -> float:
    """Closed form from o's groups only: (n_j, n_{j,s}) of the group holding o in release j."""
    n, n_s = [], []
    for release in publish(series):
        for ids, vals in release:
            if o in ids:
                n.append(len(ids))
                n_s.append(vals.count(s))
    return breach_probability(n, n_s)


def world_count(series: list[Release]) -> int:
    """Lemma 3: prod over groups of n! / prod_i n_i!."""
    total = 1
    for release in publish(series):
        for _, vals in release:
            counts = Counter(vals).values()
            total *= math.factorial(len(vals)) // math.prod(math.factorial(c) for c in counts)
    return total


# --- the paper's figures ---------------------------------------------------------------------

# Figure 1 (T1, T2), anonymized by sex in Figure 2.
T1 = [("o1", "flu"), ("o2", "chlamydia"), ("o3", "flu"), ("o4", "fever")]
T2 = [("o1", "chlamydia"), ("o2", "flu"), ("o3", "fever"), ("o5", "flu")]
FIGURE_2 = [[T1[:2], T1[2:]], [T2[:2], T2[2:]]]
FIGURE_4 = [[T1], [T2]]


def test_figure_3_four_worlds_three_link_o2_to_chlamydia() -> None:
    # G1, G2: the male groups of T1* and T2*, as drawn in Figure 3.
    linked, total = brute_force([[T1[:2]], [T2[:2]]])
    assert total == 4
    assert linked["o2", "chlamydia"] == Fraction(3, 4)


def test_figure_2_example_2() -> None:
    linked, total = brute_force(FIGURE_2)
    assert total == 16 == world_count(FIGURE_2)
    assert linked["o2", "chlamydia"] == Fraction(3, 4)
    assert lemma_4(FIGURE_2, "o2", "chlamydia") == pytest.approx(0.75, abs=1e-12)
    for (o, s), p in linked.items():
        assert lemma_4(FIGURE_2, o, s) == pytest.approx(float(p), abs=1e-12), (o, s)


def test_figure_4_seven_sixteenths() -> None:
    linked, total = brute_force(FIGURE_4)
    assert total == 12 * 12 == world_count(FIGURE_4)  # 4! / 2! distinct per group
    assert linked["o2", "chlamydia"] == Fraction(7, 16)
    # Figure 4 protects chlamydia only: flu is twice in each 4-group (digest note [D]).
    assert linked["o1", "flu"] == Fraction(3, 4)
    assert linked["o4", "fever"] == Fraction(1, 4)  # o4 absent from T2: one release counts
    assert linked["o5", "chlamydia"] == Fraction(1, 4)
    for (o, s), p in linked.items():
        assert lemma_4(FIGURE_4, o, s) == pytest.approx(float(p), abs=1e-12), (o, s)


def test_permutation_count_gives_the_same_fractions() -> None:
    # The paper counts 4! x 4! worlds for Figure 4; every distinct assignment is the image of
    # the same number of permutations, so the fractions agree.
    by_perm, total = brute_force(FIGURE_4, distinct=False)
    assert total == math.factorial(4) ** 2
    assert by_perm == brute_force(FIGURE_4)[0]


# --- random tiny series ----------------------------------------------------------------------


def random_series(rng: np.random.Generator) -> list[Release]:
    """2-3 releases of 1-2 groups (<= 5 rows); 2-4 shared individuals, some one-off ones."""
    alphabet = ["a", "b", "c", "d"][: int(rng.integers(2, 5))]
    shared = [f"o{i}" for i in range(int(rng.integers(2, 5)))]
    series: list[Release] = []
    for j in range(int(rng.integers(2, 4))):
        present = [o for o in shared if rng.random() < 0.75]
        present += [f"new{j}_{i}" for i in range(int(rng.integers(0, 3)))]
        if not present:
            present = [shared[0]]
        present = [present[i] for i in rng.permutation(len(present))]
        n_groups = 1 if len(present) < 2 else int(rng.integers(1, 3))
        if len(present) > 5:
            n_groups = 2
        cut = len(present) if n_groups == 1 else int(rng.integers(len(present) - 5, 6))
        cut = min(max(cut, 1), len(present) - (n_groups - 1))
        parts = [present[:cut], present[cut:]] if n_groups == 2 else [present]
        series.append([[(o, str(rng.choice(alphabet))) for o in part] for part in parts if part])
    return series


def random_series_batch(seed: int, count: int) -> list[list[Release]]:
    rng = np.random.default_rng(seed)
    batch: list[list[Release]] = []
    while len(batch) < count:
        series = random_series(rng)
        if world_count(series) <= MAX_WORLDS:
            batch.append(series)
    return batch


@pytest.mark.parametrize("seed", range(10))
def test_lemma_4_equals_possible_world_count(seed: int) -> None:
    for series in random_series_batch(seed, 25):
        assert all(len(group) <= 5 for release in series for group in release)
        linked, total = brute_force(series)
        assert total == world_count(series)  # Lemma 3
        for (o, s), p in linked.items():
            assert lemma_4(series, o, s) == pytest.approx(float(p), abs=1e-12), (o, s, series)


def test_random_series_cover_the_interesting_cases() -> None:
    # Guard the generator: absences, several groups, repeated values and multi-release links.
    batch = [s for seed in range(10) for s in random_series_batch(seed, 25)]
    published = [publish(s) for s in batch]
    assert len(batch) == 250
    assert any(len(release) == 2 for p in published for release in p)
    assert any(len(set(vals)) < len(vals) for p in published for r in p for _, vals in r)
    assert any(
        len({o for r in p for ids, _ in r for o in ids})
        > min(len({o for ids, _ in r for o in ids}) for r in p)
        for p in published
    )
    assert any(0.5 < float(p) < 1 for s in batch[:40] for p in brute_force(s)[0].values())
