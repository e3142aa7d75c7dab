"""Minimum ratios of [WFLWX10]: Theorem 1, Corollary 2, Theorems 2 and 3, Table 1 (§6.1).

With P = prod_{j<k} (1 - n_{j,s}/n_j), Theorem 1's minimum ratio for o's next linkage to s is
n~(k) = 1 / (1 - (1 - 1/l)/P); the constant-ratio target is n_c = 1 / (1 - (1 - 1/l)^{1/k'}).
Digest: /work/shared/research/seed-global-guarantee.md, sections 3 and 4.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stream_release.core.privacy import (
    BREACH_ATOL,
    RATIO_RTOL,
    breach_from_log_product,
    breach_probability,
    constant_ratio_target,
    exceeds_bound,
    geometric_ratio,
    log_survival_factor,
    minimum_ratio,
    minimum_ratio_from_log_product,
)
from stream_release.errors import InvalidParameter

PROPERTY = settings(max_examples=200, deadline=None, database=None)

ells = st.one_of(
    st.sampled_from([2, 3, 4, 5, 10, 2.5]),
    st.floats(1.05, 20.0, allow_nan=False, allow_infinity=False),
)
# Earlier groups of o that held s, never made only of s: (size, s-count), 1 <= n_s < n.
proper_history = st.lists(
    st.integers(2, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n - 1))),
    min_size=0,
    max_size=4,
)
# Earlier groups with few rows holding s, so that P often stays above 1 - 1/l (o not dead yet).
live_history = st.lists(
    st.integers(2, 80).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, max(1, n // 8)))),
    min_size=0,
    max_size=3,
)
# Any earlier groups, including ones without s (Lemma 5) and ones made only of s.
any_history = st.lists(
    st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))),
    min_size=0,
    max_size=5,
)


def split(pairs: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    return [a for a, _ in pairs], [b for _, b in pairs]


def log_product(pairs: list[tuple[int, int]]) -> float:
    n, n_s = split(pairs)
    return float(log_survival_factor(n, n_s).sum()) if pairs else 0.0


# --- Theorem 1 -------------------------------------------------------------------------------


def test_example_3_two_groups_of_four_need_ratio_nine() -> None:
    # l = 2, P = (3/4)(3/4) = 9/16: n~(3) = (9/16) / (9/16 - 1/2) = 9.
    assert minimum_ratio(2, [4, 4], [1, 1]) == pytest.approx(9.0, abs=1e-9)


@pytest.mark.parametrize("ell", [2, 2.5, 3, 7, 10, 49, 100, 1.1])
def test_first_linkage_needs_ratio_l(ell: float) -> None:
    # n~(1) = l: exactly, so a history-free pair needs exactly what the localized guarantee needs.
    assert minimum_ratio(ell) == ell
    assert float(minimum_ratio_from_log_product(ell, 0.0)) == ell


def test_theorem_1_integer_form_on_example() -> None:
    # l prod(n_j - n_{j,s}) / (l prod(n_j - n_{j,s}) - (l - 1) prod n_j), l = 3, [10, 12]/[1, 1]:
    # 3 * 99 / (3 * 99 - 2 * 120) = 297 / 57.
    ell, n, n_s = 3, [10, 12], [1, 1]
    keep, total = math.prod(a - b for a, b in zip(n, n_s, strict=True)), math.prod(n)
    expected = Fraction(ell * keep, ell * keep - (ell - 1) * total)
    assert expected == Fraction(297, 57)
    assert minimum_ratio(ell, n, n_s) == pytest.approx(float(expected), rel=1e-12, abs=0)


@given(ells, proper_history)
@PROPERTY
def test_minimum_ratio_never_below_l(ell: float, pairs: list[tuple[int, int]]) -> None:
    # P <= 1 makes n~ >= l: history can only raise the requirement.
    assert minimum_ratio(ell, *split(pairs)) >= ell


def test_history_with_a_full_group_is_a_dead_end() -> None:
    assert minimum_ratio(2, [3, 5], [3, 1]) == math.inf


@pytest.mark.parametrize(
    ("n", "n_s", "match"),
    [([4, 4], [1], "shape"), ([4], [5], "n_s <= n"), ([0], [0], "n >= 1")],
)
def test_minimum_ratio_rejects_malformed_history(n: list[int], n_s: list[int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        minimum_ratio(2, n, n_s)


@pytest.mark.parametrize("ell", [1, 0.5, math.inf, math.nan])
def test_minimum_ratio_rejects_bad_ell(ell: float) -> None:
    with pytest.raises(InvalidParameter, match=r"l = "):
        minimum_ratio_from_log_product(ell, 0.0)


@pytest.mark.parametrize("ell", [1.5, 2, 3, 10, 2.5])
def test_dead_end_threshold_log_one_minus_one_over_l_gives_inf(ell: float) -> None:
    assert minimum_ratio_from_log_product(ell, math.log(1 - 1 / ell)) == math.inf
    assert minimum_ratio_from_log_product(ell, math.log1p(-1 / ell)) == math.inf
    assert minimum_ratio_from_log_product(ell, math.log1p(-1 / ell) - 1.0) == math.inf
    assert minimum_ratio_from_log_product(ell, -math.inf) == math.inf
    # Just outside the margin the ratio is finite, and huge: P / (P - (1 - 1/l)).
    p_keep = 1 - 1 / ell + 1e-6
    assert minimum_ratio_from_log_product(ell, math.log(p_keep)) == pytest.approx(
        p_keep / 1e-6, rel=1e-6, abs=0
    )


def test_minimum_ratio_from_log_product_is_vectorised() -> None:
    log_p = np.log(np.array([[1.0, 9 / 16], [0.5, 0.75]]))
    out = minimum_ratio_from_log_product(2, log_p)
    assert out.shape == (2, 2)
    np.testing.assert_allclose(out, [[2.0, 9.0], [np.inf, 3.0]], rtol=1e-12)


# --- Corollary 2: equality at the minimum ratio ---------------------------------------------


@pytest.mark.parametrize(
    ("ell", "n", "n_s", "n_k", "n_k_s"),
    [
        (2, [4, 4], [1, 1], 9, 1),  # Example 3: P = 9/16, n~ = 9
        (2, [4, 4], [1, 1], 18, 2),  # same ratio, larger group
        (2, [], [], 2, 1),  # n~(1) = l
        (2, [4], [1], 3, 1),  # P = 3/4, n~ = 3
        (3, [6], [1], 5, 1),  # P = 5/6, n~ = 3 (5/6) / (3 (5/6) - 2) = 5
        (3, [6], [1], 10, 2),
        (4, [], [], 8, 2),
    ],
)
def test_corollary_2_ratio_at_minimum_gives_exactly_one_over_l(
    ell: float, n: list[int], n_s: list[int], n_k: int, n_k_s: int
) -> None:
    assert minimum_ratio(ell, n, n_s) == pytest.approx(n_k / n_k_s, rel=1e-12, abs=0)
    p = breach_probability([*n, n_k], [*n_s, n_k_s])
    assert p == pytest.approx(1 / ell, abs=1e-12)
    assert not exceeds_bound(p, ell)


@given(ells, st.one_of(live_history, proper_history))
@PROPERTY
def test_corollary_2_real_valued(ell: float, pairs: list[tuple[int, int]]) -> None:
    log_p = log_product(pairs)
    ratio = float(minimum_ratio_from_log_product(ell, log_p))
    assume(math.isfinite(ratio))
    after = log_p + math.log1p(-1 / ratio)
    assert float(breach_from_log_product(after)) == pytest.approx(1 / ell, abs=1e-12)


# --- Theorem 2: the dead end -----------------------------------------------------------------


def test_theorem_2_example_after_example_3() -> None:
    # Linked at exactly n~ = 9 in release 3: no group of any size may hold s with o again.
    assert minimum_ratio(2, [4, 4, 9], [1, 1, 1]) == math.inf
    assert exceeds_bound(breach_probability([4, 4, 9, 10**6], [1, 1, 1, 1]), 2)


@given(ells, st.one_of(live_history, proper_history), st.floats(1.0, 1e6, allow_nan=False))
@PROPERTY
def test_theorem_2_any_linkage_after_the_minimum_breaches(
    ell: float, pairs: list[tuple[int, int]], r2: float
) -> None:
    log_p = log_product(pairs)
    ratio = float(minimum_ratio_from_log_product(ell, log_p))
    assume(math.isfinite(ratio))
    after = log_p + math.log1p(-1 / ratio)  # linked at exactly the minimum
    assert minimum_ratio_from_log_product(ell, after) == math.inf
    factor = -math.inf if r2 == 1 else math.log1p(-1 / r2)  # r2 = 1: a group made only of s
    p = float(breach_from_log_product(after + factor))
    # p(o,s,k) = 1/l + (n_{k,s}/n_k)(1 - 1/l) > 1/l
    assert p == pytest.approx(1 / ell + (1 / r2) * (1 - 1 / ell), abs=1e-12)
    assert p > 1 / ell
    assert exceeds_bound(p, ell)


# --- Theorem 3: monotonicity -----------------------------------------------------------------


@given(proper_history, st.integers(1, 20), st.integers(0, 200), st.integers(1, 100))
@PROPERTY
def test_theorem_3_larger_group_same_count_strictly_smaller_breach(
    pairs: list[tuple[int, int]], n_k_s: int, extra: int, grow: int
) -> None:
    n, n_s = split(pairs)
    n_k = n_k_s + extra
    p_small = breach_probability([*n, n_k], [*n_s, n_k_s])
    p_large = breach_probability([*n, n_k + grow], [*n_s, n_k_s])
    assert p_large < p_small


@given(
    proper_history,
    st.integers(1, 200).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))),
    st.integers(1, 200).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))),
)
@PROPERTY
def test_theorem_3_breach_strictly_decreases_in_the_ratio(
    pairs: list[tuple[int, int]], group_a: tuple[int, int], group_b: tuple[int, int]
) -> None:
    (a, a_s), (b, b_s) = group_a, group_b
    assume(a * b_s != b * a_s)
    if a * b_s > b * a_s:  # make a / a_s the smaller ratio
        (a, a_s), (b, b_s) = (b, b_s), (a, a_s)
    n, n_s = split(pairs)
    assert breach_probability([*n, a], [*n_s, a_s]) > breach_probability([*n, b], [*n_s, b_s])


# --- Theorem 1 as an equivalence -------------------------------------------------------------


@given(
    ells,
    any_history,
    st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))),
)
@settings(max_examples=400, deadline=None, database=None)
def test_theorem_1_bound_holds_iff_ratio_meets_minimum(
    ell: float, pairs: list[tuple[int, int]], group: tuple[int, int]
) -> None:
    n, n_s = split(pairs)
    n_k, n_k_s = group
    bound = 1 / Fraction(ell)
    p_exact = 1 - math.prod((Fraction(a - b, a) for a, b in [*pairs, group]), start=Fraction(1))
    # Exclude only the documented tolerance band (BREACH_ATOL / RATIO_RTOL); exact equality
    # (Corollary 2) stays in and must count as safe on both sides.
    assume(not (0 < abs(p_exact - bound) <= 10 * BREACH_ATOL))
    safe = p_exact <= bound

    p = breach_probability([*n, n_k], [*n_s, n_k_s])
    required = minimum_ratio(ell, n, n_s)
    assert (p <= 1 / ell + BREACH_ATOL) == safe
    assert (n_k / n_k_s >= required * (1 - RATIO_RTOL)) == safe


# --- Table 1: the constant-ratio target ------------------------------------------------------

# (l, k', the digest's recomputed Table 1 entry, its number of decimals)
TABLE_1 = [
    (2, 2, 3.414, 3),
    (2, 5, 7.725, 3),
    (2, 20, 29.36, 2),
    (5, 20, 90.13, 2),
    (10, 20, 190.32, 2),
    (2, 10, 14.93, 2),
    (5, 10, 45.32, 2),
    (10, 10, 95.41, 2),
]


@pytest.mark.parametrize(("ell", "k_prime", "closed", "digits"), TABLE_1)
def test_table_1_closed_form(ell: float, k_prime: int, closed: float, digits: int) -> None:
    assert round(constant_ratio_target(ell, k_prime), digits) == closed


@pytest.mark.parametrize(
    ("ell", "k_prime", "printed"), [(2, 2, 3.44), (2, 5, 7.75), (2, 20, 29.41), (2, 10, 15.10)]
)
def test_table_1_paper_prints_l2_values_up_to_1_2_percent_high(
    ell: float, k_prime: int, printed: float
) -> None:
    # Documented discrepancy: the paper's l = 2 entries are above the closed form by < 1.2 %.
    n_c = constant_ratio_target(ell, k_prime)
    assert n_c < printed
    assert (printed - n_c) / n_c < 0.012


@pytest.mark.parametrize(
    ("ell", "k_prime", "printed"),
    [(5, 20, 90.13), (10, 20, 190.33), (5, 10, 45.35), (10, 10, 95.42)],
)
def test_table_1_paper_prints_other_values_within_0_1_percent(
    ell: float, k_prime: int, printed: float
) -> None:
    # 45.35 vs 45.316 is the largest: the other entries also differ in the last printed digit.
    assert constant_ratio_target(ell, k_prime) == pytest.approx(printed, rel=1e-3, abs=0)


@given(ells, st.integers(1, 5000))
@PROPERTY
def test_constant_ratio_target_defining_property(ell: float, k_prime: int) -> None:
    # k' linkages at n_c reach exactly 1/l: 1 - (1 - 1/n_c)^{k'} = 1/l.
    n_c = constant_ratio_target(ell, k_prime)
    assert (1 - 1 / n_c) ** k_prime == pytest.approx(1 - 1 / ell, abs=1e-12)


@pytest.mark.parametrize("ell", [2, 2.5, 10])
def test_constant_ratio_target_with_one_linkage_is_l(ell: float) -> None:
    assert constant_ratio_target(ell, 1) == pytest.approx(ell, rel=1e-14, abs=0)


@pytest.mark.parametrize("k_prime", [5000, 10**6])
def test_constant_ratio_target_for_thousands_of_linkages(k_prime: int) -> None:
    # Asymptotically n_c = k' / log(l / (l - 1)) + 1/2 + O(1/k').
    n_c = constant_ratio_target(2, k_prime)
    assert math.isfinite(n_c)
    assert n_c == pytest.approx(k_prime / math.log(2) + 0.5, abs=1e-3)


def test_constant_ratio_target_grows_with_l_and_k_prime() -> None:
    values = [[constant_ratio_target(ell, k) for k in (1, 2, 5, 20, 100)] for ell in (2, 5, 10)]
    for row in values:
        assert row == sorted(row) and len(set(row)) == len(row)
    for col in zip(*values, strict=True):
        assert list(col) == sorted(col) and len(set(col)) == len(col)


@pytest.mark.parametrize("k_prime", [0, -1, 2.0, True, None])
def test_constant_ratio_target_rejects_bad_k_prime(k_prime: object) -> None:
    with pytest.raises(InvalidParameter, match="k_prime"):
        constant_ratio_target(2, k_prime)  # type: ignore[arg-type]


# --- geometric_ratio -------------------------------------------------------------------------


def test_geometric_ratio_is_alpha_times_minimum() -> None:
    log_p = np.log(np.array([1.0, 9 / 16, 0.5]))
    out = geometric_ratio(2, 3, log_p)
    np.testing.assert_allclose(out, [6.0, 27.0, np.inf], rtol=1e-12)


@pytest.mark.parametrize("alpha", [1, 1.0, 0.5])
def test_geometric_ratio_rejects_alpha_at_most_one(alpha: float) -> None:
    with pytest.raises(InvalidParameter, match="alpha"):
        geometric_ratio(2, alpha, 0.0)
