"""Ratio strategies of [WFLWX10] §6: constant-ratio, geometric, minimal and localized.

Digest: /work/shared/research/seed-global-guarantee.md, section 4.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_release.core.privacy import (
    MINIMAL_MARGIN,
    Strategy,
    breach_from_log_product,
    constant_ratio_target,
    make_strategy,
    minimum_ratio_from_log_product,
)
from stream_release.core.privacy.breach import RATIO_RTOL
from stream_release.errors import InvalidParameter, StreamReleaseError

PROPERTY = settings(max_examples=200, deadline=None, database=None)
NAMES = ("constant-ratio", "geometric", "minimal", "localized")
HISTORY_AWARE = ("constant-ratio", "geometric", "minimal")


# --- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"name": "minimal", "ell": 1}, ["l = 1"]),
        ({"name": "minimal", "ell": 0.5}, ["l = 0.5"]),
        ({"name": "minimal", "ell": -2}, ["l = -2"]),
        ({"name": "localized", "ell": math.inf}, ["l = inf"]),
        ({"name": "localized", "ell": math.nan}, ["l = nan"]),
        ({"name": "localized", "ell": "2"}, ["l = '2'"]),
        ({"name": "geometric", "ell": 2, "alpha": 0.5}, ["alpha = 0.5"]),
        ({"name": "geometric", "ell": 2, "alpha": -3}, ["alpha = -3"]),
        ({"name": "geometric", "ell": 2, "alpha": math.inf}, ["alpha = inf"]),
        ({"name": "geometric", "ell": 2, "alpha": 1}, ["alpha = 1", "Theorem 2"]),
        ({"name": "geometric", "ell": 2, "alpha": 1.0}, ["alpha = 1.0", "Theorem 2"]),
        ({"name": "constant-ratio", "ell": 2, "k_prime": 0}, ["k_prime = 0"]),
        ({"name": "constant-ratio", "ell": 2, "k_prime": -5}, ["k_prime = -5"]),
        ({"name": "constant-ratio", "ell": 2, "k_prime": 2.5}, ["k_prime = 2.5"]),
        ({"name": "constant-ratio", "ell": 2, "k_prime": 20.0}, ["k_prime = 20.0"]),
        ({"name": "constant-ratio", "ell": 2, "k_prime": "20"}, ["k_prime = '20'"]),
        ({"name": "constant-ratio", "ell": 2, "k_prime": True}, ["k_prime = True"]),
        ({"name": "l-diversity", "ell": 2}, ["strategy = 'l-diversity'", "geometric"]),
        ({"name": "Geometric", "ell": 2}, ["strategy = 'Geometric'"]),
    ],
)
def test_make_strategy_rejects_bad_parameters(kwargs: dict[str, object], names: list[str]) -> None:
    name = kwargs.pop("name")
    with pytest.raises(InvalidParameter) as info:
        make_strategy(name, **kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, StreamReleaseError)
    for fragment in names:
        assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("args", "kwargs", "fragment"),
    [
        (("geometric", 2.0), {}, "alpha = None"),
        (("geometric", 2.0), {"alpha": 0.5}, "alpha = 0.5"),
        (("constant-ratio", 2.0), {}, "k_prime"),
        (("localized", 0.5), {}, "l = 0.5"),
        (("minimal", math.inf), {}, "l = inf"),
        (("no-such-strategy", 2.0), {}, "strategy = 'no-such-strategy'"),
    ],
)
def test_strategy_constructor_validates_too(
    args: tuple[str, float], kwargs: dict[str, float], fragment: str
) -> None:
    # Strategy is public; unchecked, a geometric strategy without alpha required ratio 0.
    with pytest.raises(InvalidParameter, match=fragment):
        Strategy(*args, **kwargs)  # type: ignore[arg-type]


def test_make_strategy_defaults_follow_the_paper_experiments() -> None:
    # §8: k' = 20 and alpha = 2 by default.
    assert make_strategy("constant-ratio", ell=2).k_prime == 20
    assert make_strategy("geometric", ell=2).alpha == 2.0


# --- schedules -------------------------------------------------------------------------------


@pytest.mark.parametrize("ell", [2, 5, 10])
@pytest.mark.parametrize("k_prime", [1, 2, 5, 20])
def test_constant_ratio_schedule_is_n_c_then_inf(ell: float, k_prime: int) -> None:
    strategy = make_strategy("constant-ratio", ell=ell, k_prime=k_prime)
    n_c = constant_ratio_target(ell, k_prime)
    schedule = strategy.schedule(k_prime + 3)
    # the k'-th linkage at n_c meets Theorem 1's bound exactly: it is planned RATIO_RTOL above
    np.testing.assert_allclose(schedule[:k_prime], n_c, rtol=1.5 * RATIO_RTOL)
    assert np.all(schedule[:k_prime] >= n_c)
    assert np.all(np.isinf(schedule[k_prime:]))


def test_geometric_schedule_l2_alpha2() -> None:
    # l = 2, alpha = 2. With P_j the product before the j-th linkage (P_1 = 1):
    #   n~(j) = P_j / (P_j - 1/2), ratio_j = 2 n~(j), P_{j+1} = P_j (1 - 1/ratio_j).
    #   P_1 = 1      n~ = 2   ratio 4    P_2 = 3/4
    #   P_2 = 3/4    n~ = 3   ratio 6    P_3 = 3/4 * 5/6   = 5/8
    #   P_3 = 5/8    n~ = 5   ratio 10   P_4 = 5/8 * 9/10  = 9/16
    #   P_4 = 9/16   n~ = 9   ratio 18   P_5 = 9/16 * 17/18 = 17/32
    #   P_5 = 17/32  n~ = 17  ratio 34   P_6 = 17/32 * 33/34 = 33/64
    #   P_6 = 33/64  n~ = 33  ratio 66
    # i.e. P_j = (2^(j-1) + 1) / 2^j and ratio_j = 2^j + 2.
    schedule = make_strategy("geometric", ell=2, alpha=2).schedule(6)
    np.testing.assert_allclose(schedule, [4, 6, 10, 18, 34, 66], rtol=1e-12)
    assert np.all(np.diff(schedule) > 0)


def test_geometric_schedule_l2_alpha2_closed_form_further_out() -> None:
    schedule = make_strategy("geometric", ell=2, alpha=2).schedule(20)
    np.testing.assert_allclose(schedule, [2.0**j + 2 for j in range(1, 21)], rtol=1e-9)


def test_geometric_larger_alpha_starts_higher_but_grows_slower() -> None:
    # Figure 5(a) of the paper (l = 2).
    schedules = {
        alpha: make_strategy("geometric", ell=2, alpha=alpha).schedule(10) for alpha in (2, 3, 5)
    }
    assert schedules[2][0] < schedules[3][0] < schedules[5][0]  # 4 < 6 < 10
    growth = {alpha: s[1:] / s[:-1] for alpha, s in schedules.items()}
    assert np.all(growth[5] < growth[3])
    assert np.all(growth[3] < growth[2])
    assert np.all(growth[5] > 1)
    # ... so the larger alpha is eventually the smaller ratio (alpha = 5 below alpha = 3).
    assert schedules[5][-1] < schedules[3][-1] < schedules[2][-1]


@pytest.mark.parametrize("name", ["geometric", "minimal"])
def test_schedule_keeps_the_global_guarantee(name: str) -> None:
    # Linking at every planned ratio never pushes the breach probability above 1/l.
    ell = 3.0
    schedule = make_strategy(name, ell=ell).schedule(15)
    finite = schedule[np.isfinite(schedule)]
    log_p = np.cumsum(np.log1p(-1 / finite))
    assert np.all(breach_from_log_product(log_p) <= 1 / ell + 1e-12)


def test_minimal_schedule_dead_ends_after_one_linkage() -> None:
    # Theorem 2: planning at (almost) the minimum leaves no room for a second linkage,
    # whose required group would exceed any realistic size.
    schedule = make_strategy("minimal", ell=2).schedule(3)
    assert schedule[0] == pytest.approx(2, rel=2 * MINIMAL_MARGIN, abs=0)
    assert schedule[1] > 1e5


# --- required_ratio --------------------------------------------------------------------------


@given(
    st.sampled_from([2, 3, 2.5, 10, 49]),
    st.lists(st.floats(-3.0, 0.0, allow_nan=False), min_size=1, max_size=20),
)
@PROPERTY
def test_minimal_is_theorem_1_times_margin(ell: float, log_p: list[float]) -> None:
    required = make_strategy("minimal", ell=ell).required_ratio(log_p, np.zeros(len(log_p)))
    expected = minimum_ratio_from_log_product(ell, log_p) * (1 + MINIMAL_MARGIN)
    np.testing.assert_array_equal(required, expected)


@given(
    st.sampled_from([2, 3, 2.5, 10]),
    st.lists(st.floats(-5.0, 0.0, allow_nan=False), min_size=1, max_size=20),
)
@PROPERTY
def test_constant_ratio_and_geometric_formulas(ell: float, log_p: list[float]) -> None:
    links = np.arange(len(log_p))
    minimum = minimum_ratio_from_log_product(ell, log_p)
    constant = make_strategy("constant-ratio", ell=ell, k_prime=7)
    safe = minimum * (1 + RATIO_RTOL)  # Theorem 1's own bound, with the margin on the safe side
    np.testing.assert_array_equal(
        constant.required_ratio(log_p, links), np.maximum(constant_ratio_target(ell, 7), safe)
    )
    geometric = make_strategy("geometric", ell=ell, alpha=3)
    np.testing.assert_array_equal(geometric.required_ratio(log_p, links), 3 * minimum)


@pytest.mark.parametrize("ell", [2, 3, 10])
def test_localized_ignores_history(ell: float) -> None:
    log_p = np.array([0.0, -0.1, math.log(1 - 1 / ell), -5.0, -np.inf])
    out = make_strategy("localized", ell=ell).required_ratio(log_p, np.arange(5))
    np.testing.assert_array_equal(out, np.full(5, float(ell)))
    assert not make_strategy("localized", ell=ell).uses_history
    assert all(make_strategy(name, ell=ell).uses_history for name in HISTORY_AWARE)


@pytest.mark.parametrize("name", NAMES)
def test_required_ratio_is_vectorised(name: str) -> None:
    strategy = make_strategy(name, ell=2)
    log_p = np.log(np.array([[1.0, 0.9, 0.75], [9 / 16, 0.5, 0.6]]))
    links = np.array([[0, 1, 1], [2, 3, 2]])
    out = strategy.required_ratio(log_p, links)
    assert out.shape == (2, 3)
    assert out.dtype == np.float64
    for i, j in np.ndindex(out.shape):
        assert out[i, j] == float(strategy.required_ratio(log_p[i, j], links[i, j]))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("ell", [2, 3, 2.5, 7, 49, 100])
def test_history_free_pairs_need_exactly_the_base_ratio(name: str, ell: float) -> None:
    strategy = make_strategy(name, ell=ell)
    out = strategy.required_ratio(np.zeros(4), np.zeros(4, dtype=np.int64))
    assert out.shape == (4,)
    assert np.all(out >= strategy.base_ratio)
    np.testing.assert_array_equal(out, strategy.base_ratio)


def test_base_ratios() -> None:
    assert make_strategy("localized", ell=2).base_ratio == 2
    assert make_strategy("minimal", ell=2).base_ratio == 2 * (1 + MINIMAL_MARGIN)
    assert make_strategy("geometric", ell=2, alpha=5).base_ratio == 10
    assert make_strategy("constant-ratio", ell=2, k_prime=20).base_ratio == pytest.approx(
        29.3568, abs=1e-4
    )


@pytest.mark.parametrize("name", HISTORY_AWARE)
@pytest.mark.parametrize("ell", [1.5, 2, 3, 10])
def test_every_history_aware_strategy_is_inf_at_the_dead_end(name: str, ell: float) -> None:
    dead = np.array([math.log(1 - 1 / ell), math.log1p(-1 / ell) - 0.5, -np.inf])
    out = make_strategy(name, ell=ell).required_ratio(dead, np.ones(3, dtype=np.int64))
    assert np.all(np.isposinf(out))


@pytest.mark.parametrize("ell", [1.5, 2, 3, 10])
def test_localized_is_finite_at_the_dead_end(ell: float) -> None:
    dead = np.array([math.log(1 - 1 / ell), -np.inf])
    out = make_strategy("localized", ell=ell).required_ratio(dead, np.ones(2, dtype=np.int64))
    np.testing.assert_array_equal(out, [ell, ell])


@pytest.mark.parametrize("k_prime", [1, 2, 3, 5, 12, 20])
def test_constant_ratio_lasts_k_prime_linkages(k_prime: int) -> None:
    # §6.1: k' is the number of linkages still to come: k' at n_c reach P = 1 - 1/l exactly,
    # the next one finds the pair at the bound; any cap at or above n_c (the smallest cap)
    strategy = make_strategy("constant-ratio", ell=2, k_prime=k_prime)
    for cap in (math.ceil(strategy.base_ratio), 10_000):
        assert strategy.lasts(cap) == k_prime


def test_geometric_lasts_until_its_ratio_passes_the_cap() -> None:
    # §6.2 with l = 2, alpha = 2: ratios 4, 6, 10, 18, 34 (the README's schedule)
    strategy = make_strategy("geometric", ell=2, alpha=2)
    assert [strategy.lasts(cap) for cap in (4, 8, 18, 33, 34)] == [1, 2, 4, 4, 5]
    # a larger alpha starts higher but grows slower (Figure 5): at a cap of 40, alpha = 5
    # lasts longer than alpha = 2
    assert make_strategy("geometric", ell=2, alpha=5).lasts(40) > strategy.lasts(40)


def test_minimal_lasts_one_linkage_and_localized_has_no_horizon() -> None:
    assert make_strategy("minimal", ell=2).lasts(10_000) == 1  # Theorem 2's dead end
    assert make_strategy("localized", ell=2).lasts(10_000) is None


def test_what_a_setting_lasts_keeps_the_bound_in_its_worst_case() -> None:
    """Linked ``lasts`` times, each at exactly its plan (the worst case), a pair's breach is
    at most 1/l (Lemma 4), and one more linkage at the plan would need more than the cap."""
    for strategy, cap in (
        (make_strategy("constant-ratio", ell=2, k_prime=8), 25),
        (make_strategy("geometric", ell=3, alpha=3), 60),
    ):
        n = strategy.lasts(cap)
        assert n is not None and n >= 1
        ratios = strategy.schedule(n + 1)
        assert np.all(ratios[:n] <= cap) and not ratios[n] <= cap
        keep = np.prod(1.0 - 1.0 / ratios[:n])
        assert 1.0 - keep <= 1.0 / strategy.ell + 1e-12
