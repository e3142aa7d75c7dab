"""Differential privacy in metric spaces [HLM14]: Examples 5-7, Theorems 5-7, digest F1-F5.

[HLM14] Holohan, Leith, Mason. Differential Privacy in Metric Spaces: Numerical, Categorical and
Functional Data Under the One Roof. arXiv:1402.6124. Digest:
/work/shared/research/seed-dp-metric-spaces.md; its §5 holds every oracle number used here.

Tolerances. An oracle number is matched to half a unit in its last printed digit
(:func:`printed`): the digest rounds, it does not truncate. Stochastic checks are seeded and use
a bound of 5 standard errors (a correct implementation fails one with probability < 1e-6), or the
sampling-error tolerance of ``empirical_dp_check`` (failure probability ``alpha = 1e-6``).
"""

from __future__ import annotations

import copy
import doctest
import inspect
import itertools
import json
import math
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from stream_release.core.privacy import (
    dp_budget,
    dp_calculators,
    dp_selftest,
    metric_dp,
    metric_dp_laplace,
    metric_dp_lower_bounds,
    metric_dp_rr,
)
from stream_release.core.privacy.dp_budget import (
    BUDGET_RTOL,
    compose_budget,
    ledger_charge,
    ledger_charge_batch,
    ledger_spent,
    new_ledger,
    split_budget,
)
from stream_release.core.privacy.dp_calculators import (
    calc_laplace_scale,
    calc_lower_bound,
    calc_rr_keep,
)
from stream_release.core.privacy.dp_selftest import empirical_dp_check, hockey_stick_divergence
from stream_release.core.privacy.metric_dp_laplace import (
    laplace_exact_delta,
    laplace_expected_error,
    laplace_scale_paper,
    laplace_scale_tight,
    sanitise_numeric,
)
from stream_release.core.privacy.metric_dp_lower_bounds import (
    error_lower_bound_compact,
    error_lower_bound_finite,
)
from stream_release.core.privacy.metric_dp_rr import (
    rr_debiased_counts,
    rr_exact_delta,
    rr_expected_error,
    rr_keep,
    sanitise_categorical,
)
from stream_release.errors import InvalidParameter

MODULES = (
    metric_dp,
    metric_dp_laplace,
    metric_dp_rr,
    metric_dp_lower_bounds,
    dp_budget,
    dp_selftest,
    dp_calculators,
)

PROPERTY = settings(max_examples=100, deadline=None, database=None)
LN3 = math.log(3.0)


def printed(text: str) -> Any:
    """``text`` as pytest.approx with tolerance half a unit in its last printed digit."""
    exponent = Decimal(text).as_tuple().exponent
    assert isinstance(exponent, int)
    return pytest.approx(float(text), abs=0.5 * 10.0**exponent)


def rr_pmf(domain_size: int, p: float) -> np.ndarray:
    """Row d: the output pmf of randomised response on input d (Example 6)."""
    m = domain_size - 1
    return np.full((domain_size, domain_size), p) + np.eye(domain_size) * (1.0 - m * p - p)


def laplace_quadrature_delta(width: float, b: float, epsilon: float) -> float:
    """sup_A [P_0(A) - e^eps P_W(A)] = integral of max(0, f_0 - e^eps f_W), by quadrature."""

    def gap(x: float) -> float:
        f0 = stats.laplace.pdf(x, loc=0.0, scale=b)
        fw = stats.laplace.pdf(x, loc=width, scale=b)
        return max(0.0, f0 - math.exp(epsilon) * fw)

    t = (width - epsilon * b) / 2.0  # the positive part ends here (proof of laplace_scale_tight)
    if t <= 0.0:
        return 0.0
    # split at the kink x = 0; beyond -60 b the mass is below e^-60
    left, _ = integrate.quad(gap, -60.0 * b, 0.0, epsabs=1e-14, epsrel=1e-12)
    right, _ = integrate.quad(gap, 0.0, t, epsabs=1e-14, epsrel=1e-12)
    return left + right


# --- Example 5: Laplace scales (digest §5, Laplace table) ------------------------------------

LAPLACE_TABLE = [
    # W, epsilon, delta, b_paper, exact delta at b_paper, b_tight
    (1, 1.0, 0.0, "1", "0", "1"),
    (1, 1.0, 0.01, "0.9900496683", "0.005012563", "0.9802954039"),
    (1, 0.5, 1e-5, "1.999960001", "5.0000e-6", "1.999920003"),
    (10, 0.1, 0.0, "100", "0", "100"),
    (10, 0.1, 0.05, "66.09678268", "0.02532057", "49.36160908"),
    (100, 2.0, 0.1, "47.49780347", "0.05131670", "45.23411076"),
    (1, LN3, 0.0, "0.9102392266", "0", "0.9102392266"),
    (1, 1.0, 0.5, "0.5906161091", "0.2928932", "0.4190597842"),
]


@pytest.mark.parametrize(("w", "eps", "delta", "b_paper", "exact", "b_tight"), LAPLACE_TABLE)
def test_example_5_laplace_scales_and_exact_delta(
    w: float, eps: float, delta: float, b_paper: str, exact: str, b_tight: str
) -> None:
    bp = laplace_scale_paper(w, eps, delta)
    assert bp == printed(b_paper)
    assert laplace_scale_tight(w, eps, delta) == printed(b_tight)
    assert laplace_exact_delta(w, bp, eps) == printed(exact)
    # the paper's scale spends 1 - sqrt(1 - delta), about delta / 2
    assert laplace_exact_delta(w, bp, eps) == pytest.approx(1 - math.sqrt(1 - delta), abs=1e-15)


def test_brief_oracle_w1_eps1_delta001_four_decimals() -> None:
    assert round(laplace_scale_paper(1, 1, 0.01), 4) == 0.9900
    assert round(laplace_scale_tight(1, 1, 0.01), 4) == 0.9803


@pytest.mark.parametrize(("w", "eps", "delta"), [(r[0], r[1], r[2]) for r in LAPLACE_TABLE])
def test_exact_delta_closed_form_matches_quadrature(w: float, eps: float, delta: float) -> None:
    # The closed form 1 - e^{(eps - W/b)/2} [X] against numerical integration over R.
    bp = laplace_scale_paper(w, eps, delta)
    assert laplace_quadrature_delta(w, bp, eps) == pytest.approx(
        laplace_exact_delta(w, bp, eps), abs=1e-9
    )
    # At the tight scale the mechanism spends exactly the delta asked for, no more.
    bt = laplace_scale_tight(w, eps, delta)
    assert laplace_quadrature_delta(w, bt, eps) == pytest.approx(delta, abs=1e-9)
    # ... and any smaller scale spends more: b_tight is the smallest valid scale.
    assert laplace_exact_delta(w, bt * 0.99, eps) > delta


def test_zero_width_is_a_constant_and_zero_budget_is_unpublishable() -> None:
    assert laplace_scale_paper(0, 0, 0) == 0.0
    assert laplace_scale_tight(0, 1, 0.5) == 0.0
    with pytest.raises(InvalidParameter, match="epsilon = 0, delta = 0"):
        laplace_scale_tight(1, 0, 0)
    # any delta > 0 alone buys a finite scale
    assert laplace_scale_paper(1, 0, 0.5) == pytest.approx(1 / math.log(2))


# --- sanitise_numeric: clipping, clamping, error ----------------------------------------------


@PROPERTY
@given(
    lo=st.floats(-1e6, 1e6),
    width=st.floats(0, 1e6),
    values=st.lists(
        st.floats(min_value=-1e12, max_value=1e12) | st.sampled_from([math.inf, -math.inf]),
        min_size=0,
        max_size=50,
    ),
    eps=st.floats(0.01, 10),
    delta=st.sampled_from([0.0, 1e-6, 0.1]),
    rule=st.sampled_from(["tight", "paper"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_clamped_output_always_inside_lo_hi_and_nothing_dropped(
    lo: float,
    width: float,
    values: list[float],
    eps: float,
    delta: float,
    rule: str,
    seed: int,
) -> None:
    hi = lo + width
    out = sanitise_numeric(
        values,
        lo,
        hi,
        eps,
        delta,
        np.random.default_rng(seed),
        scale=rule,  # type: ignore[arg-type]
    )
    assert out.shape == (len(values),)
    assert out.dtype == np.float64
    assert np.all((out >= lo) & (out <= hi))


def test_out_of_range_inputs_are_clipped_before_noise() -> None:
    # epsilon huge: noise scale 1e-4, so the output shows where the input was clipped to.
    out = sanitise_numeric([-50.0, 250.0, 40.0], 0.0, 100.0, 1e6, 0.0, np.random.default_rng(3))
    assert out == pytest.approx([0.0, 100.0, 40.0], abs=0.01)


def test_unclamped_output_is_the_papers_real_valued_mechanism_and_unbiased() -> None:
    rng = np.random.default_rng(11)
    n = 200_000
    x = np.full(n, 0.5)
    raw = sanitise_numeric(x, 0.0, 1.0, 1.0, 0.0, rng, clamp=False)
    assert (raw < 0).any() and (raw > 1).any()  # d + L leaves D: U = R, not D
    # E[L] = 0, Var L = 2 b^2 with b = 1: the mean is within 5 standard errors of 0.5
    assert abs(raw.mean() - 0.5) < 5 * math.sqrt(2.0 / n)
    assert raw.var() == pytest.approx(2.0, rel=0.03)


def test_same_seed_same_draw_and_clamp_is_post_processing_of_it() -> None:
    values = np.linspace(-1, 2, 101)
    a = sanitise_numeric(values, 0, 1, 0.7, 0.0, np.random.default_rng(5))
    b = sanitise_numeric(values, 0, 1, 0.7, 0.0, np.random.default_rng(5))
    raw = sanitise_numeric(values, 0, 1, 0.7, 0.0, np.random.default_rng(5), clamp=False)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, np.clip(raw, 0, 1))


def test_constant_attribute_needs_no_noise() -> None:
    out = sanitise_numeric([1.0, 7.0, -3.0], 5.0, 5.0, 0.0, 0.0, np.random.default_rng(0))
    np.testing.assert_array_equal(out, [5.0, 5.0, 5.0])


def test_values_keep_their_shape() -> None:
    out = sanitise_numeric(np.zeros((3, 4)), 0, 1, 1.0, 0.0, np.random.default_rng(0))
    assert out.shape == (3, 4)


@pytest.mark.parametrize(("d", "expected"), [(0.5, "mid"), (0.0, "end"), (1.0, "end")])
def test_clamped_expected_error_by_monte_carlo(d: float, expected: str) -> None:
    # Maximal expected error b(1 - e^{-W/(2b)}) at the midpoint, (b/2)(1 - e^{-W/b}) at an end.
    b = laplace_scale_tight(1.0, 1.0, 0.0)
    n = 400_000
    out = sanitise_numeric(np.full(n, d), 0.0, 1.0, 1.0, 0.0, np.random.default_rng(21))
    err = np.abs(out - d)
    target = (
        laplace_expected_error(1.0, 1.0, 0.0)
        if expected == "mid"
        else b / 2 * (1 - math.exp(-1 / b))
    )
    assert abs(err.mean() - target) < 5 * err.std() / math.sqrt(n)


def test_unclamped_expected_error_is_the_scale() -> None:
    assert laplace_expected_error(10, 0.1, 0.05, clamped=False) == printed("49.36160908")
    assert laplace_expected_error(10, 0.1, 0.05, scale="paper", clamped=False) == printed(
        "66.09678268"
    )
    assert laplace_expected_error(0, 1, 0) == 0.0


# --- Examples 6 and 7: randomised response (digest §5, RR table) -----------------------------

RR_TABLE = [
    # m, epsilon, delta, p_min, keep, error = Theorem 7 bound
    (1, 1.0, 0.0, "0.2689414214", "0.7310585786", "0.2689414214"),
    (1, LN3, 0.0, "0.25", "0.75", "0.25"),
    (3, 0.5, 0.0, "0.2151129185", "0.3546612444", "0.6453387556"),
    (7, 1.0, 0.0, "0.1028988475", "0.2797080674", "0.7202919326"),
    (7, 1.0, 0.01, "0.101869859", "0.2869109867", "0.7130890133"),
    (9, 2.0, 0.05, "0.05796551029", "0.4783104074", "0.5216895926"),
    (255, 1.0, 0.0, "0.003880205909", "0.01054749321", "0.9894525068"),
]


@pytest.mark.parametrize(("m", "eps", "delta", "p_min", "keep", "err"), RR_TABLE)
def test_examples_6_7_rr_probabilities_error_and_theorem_7(
    m: int, eps: float, delta: float, p_min: str, keep: str, err: str
) -> None:
    got = rr_keep(m + 1, eps, delta)
    assert got.p == printed(p_min)
    assert got.keep == printed(keep)
    assert got.keep + m * got.p == pytest.approx(1.0, abs=1e-15)
    assert rr_expected_error(m + 1, eps, delta) == printed(err)
    # Example 7: Theorem 7 is attained under the discrete metric
    assert error_lower_bound_finite(m + 1, eps, delta) == printed(err)
    # condition (12) holds with equality at p_min: the exact delta is the delta asked for
    assert rr_exact_delta(m + 1, got.p, eps) == pytest.approx(delta, abs=1e-12)


def test_brief_oracle_eight_categories_five_decimals() -> None:
    assert round(rr_keep(8, 1.0, 0.0).p, 5) == 0.10290
    assert round(rr_expected_error(8, 1.0, 0.0), 5) == 0.72029
    assert round(error_lower_bound_finite(8, 1.0, 0.0), 5) == 0.72029


def test_rr_exact_delta_oracle_and_brute_force_over_all_subsets() -> None:
    # digest §5: m = 3, p = 0.1, epsilon = 1 -> 1 - 0.3 - 0.1 e
    assert rr_exact_delta(4, 0.1, 1.0) == printed("0.4281718172")
    assert brute_force_delta(rr_pmf(4, 0.1), 1.0) == printed("0.4281718172")


def brute_force_delta(pmf: np.ndarray, epsilon: float) -> float:
    """max over ordered pairs (d, d') and ALL subsets A of P_d(A) - e^eps P_d'(A)."""
    k = pmf.shape[1]
    worst = 0.0
    for r in range(1, k + 1):
        for subset in itertools.combinations(range(k), r):
            cols = list(subset)
            mass = pmf[:, cols].sum(axis=1)
            worst = max(worst, float((mass[:, None] - math.exp(epsilon) * mass[None, :]).max()))
    return worst


@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("eps", [0.0, 0.3, 1.0, 2.0])
@pytest.mark.parametrize("frac", [0.0, 0.3, 0.8, 1.0])
def test_rr_exact_delta_equals_brute_force(m: int, eps: float, frac: float) -> None:
    # digest §3.2: "DP <=> (12)" -- the singleton {d} is the worst set.
    p = frac / (m + 1)
    pmf = rr_pmf(m + 1, p)
    assert rr_exact_delta(m + 1, p, eps) == pytest.approx(brute_force_delta(pmf, eps), abs=1e-12)
    assert hockey_stick_divergence(pmf[0], pmf[1], eps) == pytest.approx(
        brute_force_delta(pmf, eps), abs=1e-12
    )


HOBBIES = [
    # h, p, error under symmetric difference, Theorem 6 (diam = h), Theorem 7 (kappa = 1)
    (2, "0.174878", "0.699511", "0.268941", "0.524633"),
    (3, "0.102899", "1.23479", "0.403412", "0.720292"),
    (4, "0.0564389", "1.80604", "0.537883", "0.846583"),
]


@pytest.mark.parametrize(("h", "p", "err", "thm6", "thm7"), HOBBIES)
def test_example_1_hobbies_symmetric_difference_metric(
    h: int, p: str, err: str, thm6: str, thm7: str
) -> None:
    k = 2**h  # D = 2^H, subsets as bitmasks
    sym_diff = np.array(
        [[bin(a ^ b).count("1") for b in range(k)] for a in range(k)], dtype=np.float64
    )
    assert rr_keep(k, 1.0, 0.0).p == printed(p)
    assert rr_expected_error(k, 1.0, 0.0, distances=sym_diff) == printed(err)
    assert error_lower_bound_compact(h, 1.0, 0.0) == printed(thm6)
    assert error_lower_bound_finite(k, 1.0, 0.0, kappa=1.0) == printed(thm7)
    r = calc_lower_bound(1.0, 0.0, domain_size=k, kappa=1.0, diameter=float(h))
    assert r["lower_bound"] == printed(thm7)  # the larger of the two bounds
    assert r["expected_error"] is None  # needs the full metric


# --- sanitise_categorical ---------------------------------------------------------------------


def test_rr_empirical_keep_rate_and_uniform_others() -> None:
    k, eps = 8, 1.0
    keep, p = rr_keep(k, eps, 0.0)
    n = 400_000
    codes = np.full(n, 3)
    out = sanitise_categorical(codes, k, eps, 0.0, np.random.default_rng(17))
    assert out.dtype == np.int64 and out.shape == (n,)
    freq = np.bincount(out, minlength=k) / n
    assert abs(freq[3] - keep) < 5 * math.sqrt(keep * (1 - keep) / n)
    others = np.delete(freq, 3)
    assert np.all(np.abs(others - p) < 5 * math.sqrt(p * (1 - p) / n))


def test_rr_zero_budget_is_uniform_and_single_category_is_identity() -> None:
    assert rr_keep(5, 0.0, 0.0) == pytest.approx((0.2, 0.2))
    assert rr_keep(1, 3.0, 0.1) == (1.0, 0.0)
    out = sanitise_categorical([0, 0, 0], 1, 1.0, 0.0, np.random.default_rng(0))
    assert out.tolist() == [0, 0, 0]
    assert sanitise_categorical([], 4, 1.0, 0.0, np.random.default_rng(0)).shape == (0,)


def test_rr_same_seed_same_draw_and_shape_kept() -> None:
    codes = np.arange(12).reshape(3, 4) % 5
    a = sanitise_categorical(codes, 5, 0.5, 0.0, np.random.default_rng(9))
    b = sanitise_categorical(codes, 5, 0.5, 0.0, np.random.default_rng(9))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (3, 4) and a.min() >= 0 and a.max() < 5


def test_rr_large_epsilon_does_not_overflow() -> None:
    keep, p = rr_keep(10, 1000.0, 0.0)
    assert keep == 1.0 and p == 0.0
    assert rr_exact_delta(10, 1e-300, 1000.0) == 0.0
    assert error_lower_bound_compact(1.0, 1000.0, 0.0) == 0.0


# --- Theorem 5: product sanitisation, brute force (digest §5) ---------------------------------


def product_exact_delta(domain_size: int, n: int, p: float, epsilon: float) -> tuple[float, int]:
    """Max over neighbouring databases of sup_A [P(A) - e^eps P'(A)], A over ALL of D^n."""
    pmf = rr_pmf(domain_size, p)
    databases = list(itertools.product(range(domain_size), repeat=n))

    def joint(db: tuple[int, ...]) -> np.ndarray:
        out = np.ones(1)
        for d in db:
            out = np.outer(out, pmf[d]).ravel()
        return out

    worst, pairs = 0.0, 0
    for a, b in itertools.combinations(databases, 2):
        if sum(x != y for x, y in zip(a, b, strict=True)) != 1:
            continue
        pairs += 1
        ja, jb = joint(a), joint(b)
        worst = max(
            worst,
            hockey_stick_divergence(ja, jb, epsilon),
            hockey_stick_divergence(jb, ja, epsilon),
        )
    return worst, pairs


@pytest.mark.parametrize(
    ("size", "n", "eps", "delta", "at_pmin", "at_09"),
    [
        (3, 2, 1.0, 0.0, "0", "0.1"),
        (3, 2, 0.5, 0.1, "0.1", "0.19"),
        (2, 3, 0.7, 0.05, "0.05", "0.145"),
    ],
)
def test_theorem_5_product_release_spends_the_one_row_delta(
    size: int, n: int, eps: float, delta: float, at_pmin: str, at_09: str
) -> None:
    p_min = rr_keep(size, eps, delta).p
    got, _ = product_exact_delta(size, n, p_min, eps)
    assert got == printed(at_pmin)
    got_09, _ = product_exact_delta(size, n, 0.9 * p_min, eps)
    assert got_09 == printed(at_09)
    # Lemma 3 / Theorem 5: the n-row value is the 1-row exact delta
    assert got_09 == pytest.approx(rr_exact_delta(size, 0.9 * p_min, eps), abs=1e-12)


def test_theorem_5_hockey_stick_is_the_sup_over_all_512_subsets() -> None:
    # |D| = 3, n = 2: every subset of the 9 outcomes, for one neighbouring pair
    pmf = rr_pmf(3, 0.9 * rr_keep(3, 1.0, 0.0).p)
    ja, jb = np.outer(pmf[0], pmf[1]).ravel(), np.outer(pmf[2], pmf[1]).ravel()
    best = max(
        ja[list(s)].sum() - math.e * jb[list(s)].sum()
        for r in range(10)
        for s in itertools.combinations(range(9), r)
    )
    assert hockey_stick_divergence(ja, jb, 1.0) == pytest.approx(best, abs=1e-12)


def test_testing_cost_remark_neighbour_pair_counts() -> None:
    # n C(|D|, 2) |D|^{n-1} neighbouring pairs (Section 5 remark)
    _, pairs = product_exact_delta(3, 2, 0.1, 1.0)
    assert pairs == 18
    dbs = list(itertools.product(range(8), repeat=3))
    assert (
        sum(
            1
            for a, b in itertools.combinations(dbs, 2)
            if sum(x != y for x, y in zip(a, b, strict=True)) == 1
        )
        == 3 * math.comb(8, 2) * 8**2
        == 5376
    )


# --- Theorems 6 and 7: lower bounds (digest §5) -----------------------------------------------


@pytest.mark.parametrize(
    ("eps", "value"),
    [
        (0.0, "0.25"),
        (0.1, "0.2375104063"),
        (0.5, "0.1887703344"),
        (1.0, "0.1344707107"),
        (2.0, "0.05960146101"),
        (5.0, "0.003346425462"),
    ],
)
def test_theorem_6_unit_interval(eps: float, value: str) -> None:
    assert error_lower_bound_compact(1.0, eps, 0.0) == printed(value)


@pytest.mark.parametrize(
    ("w", "eps", "delta", "value"),
    [
        (1, 1.0, 0.01, "0.1331260036"),
        (10, 0.1, 0.05, "2.256348859"),
        (100, 2.0, 0.1, "5.364131491"),
    ],
)
def test_theorem_6_with_delta(w: float, eps: float, delta: float, value: str) -> None:
    assert error_lower_bound_compact(w, eps, delta) == printed(value)


def test_theorem_7_oracles() -> None:
    assert error_lower_bound_finite(2, 0.0, 0.0) == printed("0.5")
    assert error_lower_bound_finite(5, 1.0, 0.0, kappa=2.0) == printed("1.19078065")


def test_theorem_7_needs_outputs_in_the_domain() -> None:
    # Digest §4 caveat: D = unit equilateral triangle, kappa = 1, m = 2. "Output the centroid"
    # is (0, 0)-DP (its output never depends on d) with error 1/sqrt(3) < Theorem 7's 2/3.
    centroid_error = 1 / math.sqrt(3)
    assert centroid_error == printed("0.5774")
    thm7 = error_lower_bound_finite(3, 0.0, 0.0)
    assert thm7 == pytest.approx(2 / 3) and centroid_error < thm7
    # The radius-kappa/2 bound for outputs outside D holds.
    assert error_lower_bound_finite(3, 0.0, 0.0, outputs_in_domain=False) <= centroid_error
    # Theorem 6 holds for any output space: diam = 1
    assert error_lower_bound_compact(1.0, 0.0, 0.0) <= centroid_error


@PROPERTY
@given(
    w=st.floats(1e-3, 1e3),
    eps=st.floats(0.01, 20),
    delta=st.sampled_from([0.0, 1e-9, 1e-3, 0.3]),
    rule=st.sampled_from(["tight", "paper"]),
)
def test_laplace_never_beats_theorem_6(w: float, eps: float, delta: float, rule: str) -> None:
    lb = error_lower_bound_compact(w, eps, delta)
    for clamped in (True, False):
        err = laplace_expected_error(w, eps, delta, scale=rule, clamped=clamped)  # type: ignore[arg-type]
        assert err >= lb * (1 - 1e-12)


@PROPERTY
@given(k=st.integers(2, 300), eps=st.floats(0, 30), delta=st.floats(0, 0.99))
def test_rr_attains_theorem_7_exactly(k: int, eps: float, delta: float) -> None:
    assert rr_expected_error(k, eps, delta) == pytest.approx(
        error_lower_bound_finite(k, eps, delta), rel=1e-12, abs=1e-300
    )


OPTIMALITY = [
    # epsilon, unclamped ratio, clamped ratio (W = 1, delta = 0)
    (0.1, "42.10", "2.053"),
    (0.5, "10.59", "2.344"),
    (1.0, "7.437", "2.926"),
    (2.0, "8.389", "5.303"),
    (5.0, "59.77", "54.86"),
]


@pytest.mark.parametrize(("eps", "unclamped", "clamped"), OPTIMALITY)
def test_optimality_ratio_laplace_vs_theorem_6(eps: float, unclamped: str, clamped: str) -> None:
    lb = error_lower_bound_compact(1.0, eps, 0.0)
    assert laplace_expected_error(1.0, eps, 0.0, clamped=False) / lb == printed(unclamped)
    assert laplace_expected_error(1.0, eps, 0.0) / lb == printed(clamped)


def test_clamped_error_oracle_and_small_epsilon_limit() -> None:
    assert laplace_expected_error(1.0, 1.0, 0.0) == printed("0.3934693403")
    lb = error_lower_bound_compact(1.0, 1e-6, 0.0)
    assert laplace_expected_error(1.0, 1e-6, 0.0) / lb == pytest.approx(2.0, rel=1e-5)


# --- F5: the empirical DP self-test -----------------------------------------------------------

EDGES = np.linspace(0.025, 0.975, 39)


@pytest.mark.parametrize(
    ("eps", "delta", "rule"),
    [(1.0, 0.0, "tight"), (0.5, 0.0, "paper"), (1.0, 0.05, "tight"), (2.0, 0.01, "paper")],
)
def test_laplace_sanitiser_passes_empirical_check_on_the_worst_pair(
    eps: float, delta: float, rule: str
) -> None:
    def mech(x: np.ndarray, g: np.random.Generator) -> np.ndarray:
        return sanitise_numeric(x, 0.0, 1.0, eps, delta, g, scale=rule)  # type: ignore[arg-type]

    res = empirical_dp_check(mech, 0.0, 1.0, eps, delta, np.random.default_rng(31), bins=EDGES)
    assert res.passed, res
    assert res.n_cells == 40 and res.n_samples == 200_000


def test_laplace_with_too_little_noise_fails_the_check() -> None:
    # Negative control: b = W / (1.5 epsilon), two thirds of the noise needed. True delta at
    # epsilon = 1 is 1 - e^{-1/4} = 0.22; the check must see it.
    def mech(x: np.ndarray, g: np.random.Generator) -> np.ndarray:
        return np.clip(np.clip(x, 0, 1) + g.laplace(0.0, 1 / 1.5, size=x.shape), 0, 1)

    res = empirical_dp_check(mech, 0.0, 1.0, 1.0, 0.0, np.random.default_rng(31), bins=EDGES)
    assert not res.passed, res
    assert res.delta_hat > res.tolerance
    assert res.worst_ratio > math.e


@pytest.mark.parametrize(("d", "d_prime"), [(0, 5), (7, 2)])
@pytest.mark.parametrize(("eps", "delta"), [(1.0, 0.0), (0.5, 0.1)])
def test_rr_sanitiser_passes_empirical_check(
    d: int, d_prime: int, eps: float, delta: float
) -> None:
    def mech(x: np.ndarray, g: np.random.Generator) -> np.ndarray:
        return sanitise_categorical(x, 8, eps, delta, g)

    res = empirical_dp_check(mech, d, d_prime, eps, delta, np.random.default_rng(41))
    assert res.passed, res
    assert res.n_cells == 8


def test_rr_with_too_little_noise_fails_the_check() -> None:
    # Negative control: p = 0.7 p_min, exact delta 1 - 0.7 = 0.3 at epsilon = 1.
    p = 0.7 * rr_keep(8, 1.0, 0.0).p

    def mech(x: np.ndarray, g: np.random.Generator) -> np.ndarray:
        kept = g.random(x.shape) < 1 - 7 * p
        return np.where(kept, x, (x + g.integers(1, 8, size=x.shape)) % 8)

    assert rr_exact_delta(8, p, 1.0) == pytest.approx(0.3)
    res = empirical_dp_check(mech, 0, 5, 1.0, 0.0, np.random.default_rng(41))
    assert not res.passed, res


def test_empirical_tolerance_is_the_documented_bound() -> None:
    res = empirical_dp_check(
        lambda x, g: sanitise_categorical(x, 4, 1.0, 0.0, g),
        0,
        1,
        1.0,
        0.0,
        np.random.default_rng(0),
        n_samples=10_000,
        alpha=0.01,
    )
    k, n = 4, 10_000
    assert res.tolerance == pytest.approx(
        (1 + math.e) * (math.sqrt(k / n) + math.sqrt(2 * math.log(200) / n))
    )


# --- F3: de-biased counts ---------------------------------------------------------------------


def test_debiased_counts_digest_constants_m4_eps1() -> None:
    # digest F3 [R]: p = 0.1488475812, q = 0.4046096752, q - p = 0.2557620940
    q, p = rr_keep(5, 1.0, 0.0)
    assert p == printed("0.1488475812") and q == printed("0.4046096752")
    assert q - p == printed("0.2557620940")
    codes = np.repeat(np.arange(5), [400, 300, 150, 100, 50])  # n = 1000 sanitised codes
    res = rr_debiased_counts(codes, 5, 1.0, 0.0)
    expected = (np.array([400, 300, 150, 100, 50]) - 1000 * 0.1488475812) / 0.2557620940
    # the printed constants carry 5e-11 each; times n / (q - p) that is < 1e-6 per count
    np.testing.assert_allclose(res.estimate, expected, rtol=0, atol=1e-6)
    assert res.n == 1000
    assert res.estimate.sum() == pytest.approx(1000)  # counts add up to n


def test_debiased_counts_unbiased_with_the_stated_variance() -> None:
    k, eps, delta, n, runs = 5, 1.0, 0.01, 1000, 4000
    truth = np.repeat(np.arange(k), [500, 250, 150, 100, 0])
    rng = np.random.default_rng(2024)
    sanitised = sanitise_categorical(np.tile(truth, (runs, 1)), k, eps, delta, rng)
    est = np.array([rr_debiased_counts(row, k, eps, delta).estimate for row in sanitised])
    true_counts = np.bincount(truth, minlength=k).astype(float)
    q, p = rr_keep(k, eps, delta)
    var = (true_counts * q * (1 - q) + (n - true_counts) * p * (1 - p)) / (q - p) ** 2
    # unbiased: each mean within 5 standard errors
    assert np.all(np.abs(est.mean(axis=0) - true_counts) < 5 * np.sqrt(var / runs))
    # variance formula: the sample variance's relative SE is sqrt(2/runs) = 2.2 %
    np.testing.assert_allclose(est.var(axis=0, ddof=1), var, rtol=5 * math.sqrt(2 / runs))
    # the plug-in variance of one run is close to the true one
    plug_in = rr_debiased_counts(sanitised[0], k, eps, delta).variance
    np.testing.assert_allclose(plug_in, var, rtol=0.1)


# --- budget: split and composition ------------------------------------------------------------


def test_split_budget_is_proportional_and_composes_back() -> None:
    s = split_budget(1.2, 1e-6, [1, 2, 3])
    np.testing.assert_allclose(s.epsilon, [0.2, 0.4, 0.6])
    np.testing.assert_allclose(s.delta, [1e-6 / 6, 2e-6 / 6, 3e-6 / 6])
    assert compose_budget(s.epsilon, s.delta) == pytest.approx((1.2, 1e-6), rel=1e-15)
    zero = split_budget(1.0, 0.0, [0, 1])
    assert zero.epsilon.tolist() == [0.0, 1.0]


def test_split_attributes_of_one_record_meet_the_record_budget_exactly() -> None:
    # Two categorical attributes of one person, |D1| = 3, |D2| = 4, budget (1, 0.1) split evenly.
    # Changing the person's record changes both; the joint exact delta at the total epsilon is
    # at most the total delta (basic composition).
    s = split_budget(1.0, 0.1, [1, 1])
    pmf1 = rr_pmf(3, rr_keep(3, s.epsilon[0], s.delta[0]).p)
    pmf2 = rr_pmf(4, rr_keep(4, s.epsilon[1], s.delta[1]).p)
    worst = 0.0
    for a1, b1 in itertools.permutations(range(3), 2):
        for a2, b2 in itertools.permutations(range(4), 2):
            ja = np.outer(pmf1[a1], pmf2[a2]).ravel()
            jb = np.outer(pmf1[b1], pmf2[b2]).ravel()
            worst = max(worst, hockey_stick_divergence(ja, jb, 1.0))
    assert worst <= 0.1 + 1e-12
    # without splitting (each attribute at the full budget) the record would overspend
    full1, full2 = rr_pmf(3, rr_keep(3, 1.0, 0.1).p), rr_pmf(4, rr_keep(4, 1.0, 0.1).p)
    over = hockey_stick_divergence(
        np.outer(full1[0], full2[0]).ravel(), np.outer(full1[1], full2[1]).ravel(), 1.0
    )
    assert over > 0.1


# --- F2: per-person ledger --------------------------------------------------------------------


def test_ledger_grants_until_the_cap_then_refuses() -> None:
    state = new_ledger(1.0, 0.0)
    before = copy.deepcopy(state)
    c1 = ledger_charge(state, "alice", "r1", 0.6, 0.0)
    assert state == before  # pure: the input is never modified
    assert c1.granted and not c1.cached and c1.epsilon_spent == pytest.approx(0.6)
    c2 = ledger_charge(c1.state, "alice", "r2", 0.6, 0.0)
    assert not c2.granted
    assert "alice" in c2.reason and "cap" in c2.reason
    assert c2.state == c1.state  # a refusal charges nothing
    assert ledger_spent(c2.state, "alice") == pytest.approx((0.6, 0.0))
    # another person has their own budget
    c3 = ledger_charge(c2.state, "bob", "r1", 1.0, 0.0)
    assert c3.granted and ledger_spent(c3.state, "bob") == (1.0, 0.0)


def test_ledger_re_serving_a_stored_record_is_free() -> None:
    c = ledger_charge(new_ledger(1.0, 0.0), "alice", "v1", 1.0, 0.0)
    again = ledger_charge(c.state, "alice", "v1", 1.0, 0.0)
    assert again.granted and again.cached
    assert again.epsilon_spent == 1.0
    assert not ledger_charge(c.state, "alice", "v2", 1e-3, 0.0).granted


def test_ledger_delta_cap_and_shares_that_sum_to_the_cap() -> None:
    assert not ledger_charge(new_ledger(5.0, 0.0), "a", "r", 0.1, 1e-9).granted
    # seven charges of 0.1 against a cap of 0.7: their exact float sum is 0.7000000000000001
    state = new_ledger(0.7, 0.0)
    for i in range(7):
        c = ledger_charge(state, "a", f"r{i}", 0.1, 0.0)
        assert c.granted, (i, c.reason)
        state = c.state
    assert math.fsum([0.1] * 7) > 0.7 and BUDGET_RTOL > 0
    assert not ledger_charge(state, "a", "r7", 0.1, 0.0).granted


def test_ledger_state_is_plain_json_and_round_trips() -> None:
    c = ledger_charge(new_ledger(2.0, 1e-6), "alice", "r1", 0.5, 1e-7)
    restored = json.loads(json.dumps(c.state))
    assert restored == c.state
    c2 = ledger_charge(restored, "alice", "r2", 1.5, 9e-7)
    assert c2.granted
    assert ledger_spent(c2.state, "alice") == pytest.approx((2.0, 1e-6))


def test_ledger_batch_charges_each_record_in_order() -> None:
    state = new_ledger(1.0, 0.0)
    batch = ledger_charge_batch(
        state, ["a", "a", "b", "a", "a"], ["r1", "r2", "r1", "r1", "r3"], 0.5, 0.0
    )
    # a: r1 granted, r2 granted (1.0 = cap), b: r1 granted, a: r1 cached, a: r3 refused
    assert batch.granted.tolist() == [True, True, True, True, False]
    assert batch.cached.tolist() == [False, False, False, True, False]
    assert ledger_spent(batch.state, "a") == (1.0, 0.0)
    assert state == new_ledger(1.0, 0.0)


# --- calculators ------------------------------------------------------------------------------


def test_calculators_return_plain_dicts_with_the_oracles() -> None:
    lap = calc_laplace_scale(1.0, 1.0, 0.01)
    rr = calc_rr_keep(8, 1.0, 0.0)
    lb = calc_lower_bound(1.0, 0.0, diameter=1.0)
    for result in (lap, rr, lb):
        assert json.loads(json.dumps(result)) == result
    assert lap["scale_paper"] == printed("0.9900496683")
    assert lap["scale_tight"] == printed("0.9802954039")
    assert lap["exact_delta_paper"] == printed("0.005012563")
    assert lap["lower_bound"] == printed("0.1331260036")
    assert rr["p_other"] == printed("0.1028988475") and rr["m"] == 7
    assert rr["expected_error"] == printed("0.7202919326")
    assert rr["ratio"] == pytest.approx(1.0, abs=1e-12)
    assert rr["exact_delta"] == pytest.approx(0.0, abs=1e-12)
    assert lb["mechanism"] == "laplace" and lb["theorem_7"] is None
    assert lb["theorem_6"] == printed("0.1344707107")
    assert lb["expected_error"] == printed("0.3934693403")
    assert lb["ratio"] == printed("2.926")


def test_calc_lower_bound_finite_domain_forms() -> None:
    disc = calc_lower_bound(1.0, 0.0, domain_size=8)
    assert (disc["kappa"], disc["diameter"]) == (1.0, 1.0)
    assert disc["lower_bound"] == printed("0.7202919326") == disc["theorem_7"]
    assert disc["ratio"] == pytest.approx(1.0)
    scaled = calc_lower_bound(1.0, 0.0, domain_size=5, kappa=2.0, diameter=2.0)
    assert scaled["theorem_7"] == printed("1.19078065")
    assert scaled["expected_error"] == pytest.approx(scaled["theorem_7"])
    outside = calc_lower_bound(0.0, 0.0, domain_size=3, outputs_in_domain=False)
    assert outside["theorem_7"] == pytest.approx(1 / 3)
    single = calc_lower_bound(1.0, 0.0, domain_size=1)
    assert single["lower_bound"] == 0.0 and single["ratio"] is None
    blocked = calc_lower_bound(0.0, 0.0, diameter=1.0)
    assert blocked["expected_error"] is None and blocked["theorem_6"] == printed("0.25")


# --- bad parameters ---------------------------------------------------------------------------

RNG = np.random.default_rng(0)
LEDGER = new_ledger(1.0, 0.0)


@pytest.mark.parametrize(
    ("call", "names"),
    [
        (lambda: laplace_scale_paper(-1, 1, 0), "diameter = -1"),
        (lambda: laplace_scale_paper(math.inf, 1, 0), "diameter = inf"),
        (lambda: laplace_scale_paper("1", 1, 0), "diameter = '1'"),
        (lambda: laplace_scale_paper(1, -1, 0), "epsilon = -1"),
        (lambda: laplace_scale_paper(1, math.nan, 0), "epsilon = nan"),
        (lambda: laplace_scale_tight(1, math.inf, 0), "epsilon = inf"),
        (lambda: laplace_scale_tight(1, 1, 1.0), "delta = 1.0"),
        (lambda: laplace_scale_tight(1, 1, -0.1), "delta = -0.1"),
        (lambda: laplace_exact_delta(1, 0.0, 1), "scale = 0.0"),
        (lambda: rr_keep(0, 1, 0), "domain_size = 0"),
        (lambda: rr_keep(2.5, 1, 0), "domain_size = 2.5"),
        (lambda: rr_keep(True, 1, 0), "domain_size = True"),
        (lambda: rr_exact_delta(4, 0.3, 1), "p = 0.3"),
        (lambda: sanitise_numeric([1.0], 5, 1, 1, 0, RNG), "lo = 5, hi = 1"),
        (lambda: sanitise_numeric([1.0], -math.inf, 1, 1, 0, RNG), "lo = -inf"),
        (lambda: sanitise_numeric([math.nan], 0, 1, 1, 0, RNG), "NaN"),
        (lambda: sanitise_numeric([1.0], 0, 1, 1, 0, RNG, scale="wide"), "scale = 'wide'"),
        (lambda: sanitise_numeric([1.0], 0, 1, 1, 0, 42), "rng = 42"),
        (lambda: sanitise_categorical([0, 8], 8, 1, 0, RNG), "codes"),
        (lambda: sanitise_categorical([0.0, 1.0], 8, 1, 0, RNG), "codes"),
        (lambda: sanitise_categorical([0], 8, 1, 0, None), "rng = None"),
        (lambda: error_lower_bound_finite(3, 1, 0, kappa=0), "kappa = 0"),
        (lambda: error_lower_bound_compact(1, 1, 1), "delta = 1"),
        (lambda: rr_expected_error(3, 1, 0, distances=np.zeros((2, 2))), "distances"),
        (lambda: rr_expected_error(2, 1, 0, distances=[[0, 1], [2, 0]]), "distances"),
        (lambda: rr_debiased_counts([0, 1], 3, 0, 0), "epsilon = 0, delta = 0"),
        (lambda: rr_debiased_counts([0, 3], 3, 1, 0), "sanitised_codes"),
        (lambda: split_budget(1, 0, [-1, 1]), "weights"),
        (lambda: split_budget(1, 0, []), "weights"),
        (lambda: split_budget(1, 0, [0, 0]), "weights"),
        (lambda: compose_budget([1, 2], [0]), "epsilons"),
        (lambda: new_ledger(-1, 0), "epsilon_cap = -1"),
        (lambda: new_ledger(1, 1), "delta_cap = 1"),
        (lambda: ledger_charge({"people": {}}, "a", "r", 1, 0), "state"),
        (lambda: ledger_charge(LEDGER, 5, "r", 1, 0), "persons[0] = 5"),
        (lambda: ledger_charge(LEDGER, "a", "r", -1, 0), "epsilon = -1"),
        (lambda: ledger_charge_batch(LEDGER, ["a"], [], 1, 0), "persons"),
        (lambda: calc_lower_bound(1, 0), "diameter = None, domain_size = None"),
        (lambda: calc_lower_bound(1, 0, diameter=1, kappa=0.5), "kappa = 0.5"),
        (lambda: calc_lower_bound(1, 0, domain_size=4, kappa=2, diameter=1), "diameter = 1"),
        (lambda: calc_laplace_scale(1, 0, 0), "epsilon = 0, delta = 0"),
        (lambda: calc_rr_keep(0, 1, 0), "domain_size = 0"),
        (lambda: hockey_stick_divergence([1], [0.5, 0.5], 1), "shape"),
        (lambda: empirical_dp_check(lambda x, g: x, 0, 1, 1, 0, RNG, n_samples=10), "n_samples"),
        (lambda: empirical_dp_check(lambda x, g: x, 0, 1, 1, 0, RNG, alpha=0), "alpha = 0"),
        (lambda: empirical_dp_check(lambda x, g: x, 0, 1, 1, 0, RNG, bins=[1, 0]), "bins"),
        (lambda: empirical_dp_check(lambda x, g: x[:5], 0, 1, 1, 0, RNG), "mechanism"),
        (
            lambda: empirical_dp_check(lambda x, g: x + g.random(x.shape), 0, 1, 1, 0, RNG),
            "bins = None",
        ),
    ],
)
def test_bad_parameters_raise_invalid_parameter_naming_them(call: Any, names: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        call()
    assert names in str(info.value)
    assert isinstance(info.value, ValueError)


# --- house style ------------------------------------------------------------------------------


def test_docstring_examples_run() -> None:
    results = [doctest.testmod(module, optionflags=doctest.ELLIPSIS) for module in MODULES]
    tried = sum(result.attempted for result in results)
    failures = sum(result.failed for result in results)
    assert tried > 15 and failures == 0


@pytest.mark.parametrize("module", MODULES, ids=lambda module: module.__name__)
def test_every_public_function_cites_the_paper_and_all_is_sorted(module: Any) -> None:
    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isfunction(obj):
            assert obj.__doc__ and "[HLM14]" in obj.__doc__, name
