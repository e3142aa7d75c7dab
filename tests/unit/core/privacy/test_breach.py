"""Breach probability, Lemma 4 of [WFLWX10]: p(o,s,k) = 1 - prod_j (1 - n_{j,s}/n_j).

[WFLWX10] Wong, Fu, Liu, Wang, Xu. Preserving Individual Privacy in Serial Data Publishing.
ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_release.core.privacy import (
    BREACH_ATOL,
    RATIO_RTOL,
    bound_limit,
    breach_from_log_product,
    breach_probability,
    breach_probability_exact,
    breach_upper_bound,
    constant_ratio_target,
    exceeds_bound,
    log_survival_factor,
    make_strategy,
    minimum_ratio_from_log_product,
    possibly_exceeds,
)
from stream_release.core.privacy.breach import breach_lower_bound

PROPERTY = settings(max_examples=200, deadline=None, database=None)


def exact_breach(n: list[int], n_s: list[int]) -> Fraction:
    """Lemma 4 in exact integers: (prod n_j - prod (n_j - n_{j,s})) / prod n_j."""
    total = math.prod(n)
    unlinked = math.prod(a - b for a, b in zip(n, n_s, strict=True))
    return Fraction(total - unlinked, total)


# A history: (group size, rows holding s) per release, 0 <= n_s <= n.
history = st.lists(
    st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))),
    min_size=0,
    max_size=8,
)


# --- the paper's worked examples -----------------------------------------------------------


def test_example_2_figure_2_two_groups_of_two_give_three_quarters() -> None:
    # o2 is in a 2-group with one chlamydia in T1* and in T2*: (2*2 - 1*1) / (2*2).
    assert breach_probability([2, 2], [1, 1]) == pytest.approx(3 / 4, abs=1e-12)


def test_example_2_breaches_the_global_bound_though_each_release_meets_it() -> None:
    # Each release alone links o2 to chlamydia with probability exactly 1/2 (localized, l = 2) ...
    assert breach_probability([2], [1]) == pytest.approx(1 / 2, abs=1e-12)
    assert not exceeds_bound(breach_probability([2], [1]), 2)
    # ... but the two together breach 1/2 (Corollary 1: global is strictly stronger).
    assert exceeds_bound(breach_probability([2, 2], [1, 1]), 2)


def test_figure_4_two_groups_of_four_give_seven_sixteenths() -> None:
    # (16 - 9) / 16 = 7/16 <= 1/2.
    p = breach_probability([4, 4], [1, 1])
    assert p == pytest.approx(7 / 16, abs=1e-12)
    assert not exceeds_bound(p, 2)


# --- Lemma 5 and the boundaries --------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "n_s", "without_zero_n", "without_zero_n_s"),
    [
        ([2, 5, 2], [1, 0, 1], [2, 2], [1, 1]),
        ([7, 3], [0, 1], [3], [1]),
        ([4, 9, 9, 4], [0, 2, 0, 1], [9, 4], [2, 1]),
    ],
)
def test_lemma_5_release_without_s_contributes_factor_one(
    n: list[int], n_s: list[int], without_zero_n: list[int], without_zero_n_s: list[int]
) -> None:
    assert breach_probability(n, n_s) == pytest.approx(
        breach_probability(without_zero_n, without_zero_n_s), abs=1e-15
    )


def test_lemma_5_factor_is_exactly_one() -> None:
    assert log_survival_factor([5, 1, 100], [0, 0, 0]).tolist() == [0.0, 0.0, 0.0]
    assert breach_probability([5, 1, 100], [0, 0, 0]) == 0.0


def test_no_history_gives_zero() -> None:
    assert breach_probability([], []) == 0.0


@pytest.mark.parametrize(
    ("n", "n_s"),
    [([3], [3]), ([1], [1]), ([4, 2], [1, 2]), ([10**6] * 50 + [7], [1] * 50 + [7])],
)
def test_group_made_only_of_s_gives_exactly_one(n: list[int], n_s: list[int]) -> None:
    assert breach_probability(n, n_s) == 1.0


@given(history)
@PROPERTY
def test_lemma_4_matches_exact_integer_form(pairs: list[tuple[int, int]]) -> None:
    n = [a for a, _ in pairs]
    n_s = [b for _, b in pairs]
    assert breach_probability(n, n_s) == pytest.approx(float(exact_breach(n, n_s)), abs=1e-13)


# --- bad inputs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "n_s", "match"),
    [
        ([4, 4], [1], "shape"),
        ([4], [1, 1], "shape"),
        ([4, 4], [1, 5], "n_s <= n"),
        ([0, 4], [0, 1], "n >= 1"),
        ([-3], [0], "n >= 1"),
        ([4], [-1], "0 <= n_s"),
    ],
)
def test_malformed_history_raises(n: list[int], n_s: list[int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        breach_probability(n, n_s)


# --- log space (STYLE rule 9) ----------------------------------------------------------------


def test_five_thousand_releases_of_a_million_rows() -> None:
    k, n = 5000, 10**6
    expected = -math.expm1(math.fsum([math.log1p(-1.0 / n)] * k))
    exact = float(1 - Fraction(n - 1, n) ** k)
    p = breach_probability([n] * k, [1] * k)
    assert p == pytest.approx(expected, rel=1e-12, abs=0)
    assert p == pytest.approx(exact, rel=1e-12, abs=0)
    assert 0.0 < p < 1.0


def test_long_random_history_matches_exact_rationals() -> None:
    # 3000 releases with group sizes up to 10^9: prod n_j has ~27,000 digits, far past float range.
    rng = np.random.default_rng(20100301)
    n = rng.integers(10**6, 10**9, size=3000)
    n_s = rng.integers(0, 4, size=3000)
    exact = float(exact_breach(n.tolist(), n_s.tolist()))
    assert breach_probability(n, n_s) == pytest.approx(exact, rel=1e-12, abs=0)


def test_tiny_probability_keeps_relative_precision() -> None:
    # 1 - (1 - 1e-12) in floats is off by ~1e-4 relative; -expm1(log1p(.)) is not.
    assert breach_probability([10**12], [1]) == pytest.approx(1e-12, rel=1e-14, abs=0)


def test_breach_from_log_product_endpoints() -> None:
    assert breach_from_log_product(0.0) == 0.0
    assert breach_from_log_product(-np.inf) == 1.0
    assert breach_from_log_product(math.log(0.25)) == pytest.approx(0.75, abs=1e-15)


def test_breach_from_log_product_is_vectorised() -> None:
    log_p = np.log(np.array([[1.0, 0.5], [0.25, 0.125]]))
    out = breach_from_log_product(log_p)
    assert out.shape == (2, 2)
    np.testing.assert_allclose(out, [[0.0, 0.5], [0.75, 0.875]], atol=1e-15)


def test_log_survival_factor_of_full_group_is_minus_inf() -> None:
    # filterwarnings=error: a divide-by-zero RuntimeWarning here would fail the test.
    out = log_survival_factor([3, 4], [3, 1])
    assert out[0] == -np.inf
    assert out[1] == pytest.approx(math.log(0.75), abs=1e-15)


# --- the bound itself ------------------------------------------------------------------------


def test_exceeds_bound_compares_exactly_without_slack() -> None:
    # Corollary 2: p = 1/l exactly is allowed; anything above it, by however little, is not
    p = np.array([0.5, np.nextafter(0.5, 1.0), 0.5 + BREACH_ATOL / 2, 0.75, 0.0])
    assert exceeds_bound(p, 2).tolist() == [False, True, True, True, False]
    # l = 3: 1/3 is no float; the largest float <= 1/3 passes, the next one does not
    limit = bound_limit(3)
    assert Fraction(limit) <= Fraction(1, 3) < Fraction(np.nextafter(limit, 1.0))
    assert exceeds_bound([limit, np.nextafter(limit, 1.0)], 3).tolist() == [False, True]


def test_two_ratios_just_below_the_target_are_caught() -> None:
    """Two linkages each 9e-11 below constant-ratio's k' = 2 target: 1/2 + 3.8e-11 exactly,
    which a 1e-9 slack let through the planner, the check before release and the audit."""
    n_c = constant_ratio_target(2, 2)  # 3.4142...: 1 - (1 - 1/n_c)^2 = 1/2
    r = Fraction(n_c) * (1 - Fraction(9, 10**11))
    exact = 1 - (1 - 1 / r) ** 2
    assert Fraction(1, 2) < exact < Fraction(1, 2) + Fraction(4, 10**11)
    log_p = 2 * math.log1p(-1 / float(r))
    assert possibly_exceeds(log_p, 2, 2)
    assert breach_upper_bound(log_p, 2) >= float(exact)
    # the planner asks for Theorem 1's ratio plus its margin, never less
    strategy = make_strategy("constant-ratio", ell=2, k_prime=2)
    after_one = math.log1p(-1 / float(r))
    assert float(strategy.required_ratio(after_one, 1)) >= float(
        minimum_ratio_from_log_product(2, after_one)
    ) * (1 + RATIO_RTOL)


@given(history, st.floats(1.01, 20))
@PROPERTY
def test_the_upper_and_lower_bounds_enclose_the_exact_breach(
    pairs: list[tuple[int, int]], ell: float
) -> None:
    live = [(n, c) for n, c in pairs if c < n]
    if not live:
        return
    n, n_s = zip(*live, strict=True)
    exact = breach_probability_exact(list(n), list(n_s))
    log_p = float(log_survival_factor(np.array(n), np.array(n_s)).sum())
    assert breach_lower_bound(log_p, len(live)) <= exact <= breach_upper_bound(log_p, len(live))
    # the check before release never lets an exact breach through
    if exact > 1 / Fraction(ell):
        assert possibly_exceeds(log_p, len(live), ell)


def test_the_audit_keeps_the_planners_margins() -> None:
    """The audit imports nothing from the planning code: its copies of the margins and the
    configuration defaults must stay equal to the planner's."""
    from stream_release.audit.ledger import AT_BOUND_ATOL, PLAN_MARGIN
    from stream_release.audit.settings import ConfiguredPrivacy
    from stream_release.config import GroupingSettings, PrivacySettings
    from stream_release.core.privacy.breach import BREACH_ATOL, RATIO_RTOL
    from stream_release.core.privacy.strategy import MINIMAL_MARGIN

    assert float(AT_BOUND_ATOL) == BREACH_ATOL
    assert PLAN_MARGIN == {
        "constant-ratio": RATIO_RTOL,
        "geometric": RATIO_RTOL,
        "minimal": MINIMAL_MARGIN,
    }
    privacy, grouping, audit = PrivacySettings(), GroupingSettings(), ConfiguredPrivacy()
    assert (audit.ell, audit.strategy, audit.k_prime, audit.alpha) == (
        privacy.l, privacy.strategy, privacy.k_prime, privacy.alpha,
    )  # fmt: skip
    assert audit.protected == privacy.protected
    assert audit.min_group_size == privacy.min_group_size
    assert audit.max_group_factor == grouping.max_group_factor


def test_the_bounds_broadcast_their_arguments_as_numpy_does() -> None:
    assert breach_upper_bound(-0.5, [1, 2, 3]).shape == (3,)
    assert breach_lower_bound([[-0.1], [-0.2]], [1, 2]).shape == (2, 2)
    scalar = breach_upper_bound(-0.5, 2)
    assert np.shape(scalar) == ()
    assert breach_lower_bound(-0.5, 2) < -math.expm1(-0.5) < scalar
