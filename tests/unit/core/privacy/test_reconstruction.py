"""Reconstruction privacy for randomized sensitive attributes [WHF12].

[WHF12] Wang, Han, Fu. Randomization Resilient To Sensitive Reconstruction. arXiv:1202.3179.
Digest: /work/shared/research/seed-reconstruction-privacy.md (section numbers below are its).

Every stochastic test is seeded and compares against a tolerance derived from the variance
(about 4-5 standard errors), so it can fail when the code is wrong and essentially never by
chance.
"""

from __future__ import annotations

import doctest
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from stream_release.core.privacy import reconstruction as rc
from stream_release.core.privacy import reconstruction_check as rc_check
from stream_release.core.privacy import reconstruction_estimate as rc_estimate
from stream_release.core.privacy.reconstruction import (
    calc_rp_cap,
    epsilon_max,
    max_retention_probability,
    perturb,
    perturbation_matrix,
    rp_cap,
    rp_cap_theorem_5_11,
    rp_cap_theorem_5_13,
)
from stream_release.core.privacy.reconstruction_algorithm import rp_randomize
from stream_release.core.privacy.reconstruction_check import (
    is_reconstruction_private,
    micro_groups,
    tail_bounds,
)
from stream_release.core.privacy.reconstruction_estimate import (
    count_variance,
    estimate_count,
    reconstruct_count,
    reconstruct_frequency,
)
from stream_release.core.privacy.reconstruction_serial import (
    advance_trial_ledger,
    serial_rp_randomize,
    sticky_perturb,
    trial_budget,
)
from stream_release.errors import InvalidParameter

PROPERTY = settings(max_examples=150, deadline=None, database=None)
BASE = {"p": 0.5, "epsilon": 0.5, "delta": 0.3}


def test_doctests_pass() -> None:
    results = [doctest.testmod(module) for module in (rc, rc_check, rc_estimate)]
    assert sum(result.attempted for result in results) > 10
    assert sum(result.failed for result in results) == 0


# --- the cap: every recomputed value of the digest (§4) ------------------------------------------


def test_oracle_20_6395_is_theorem_5_13_and_17_1025_is_theorem_5_11() -> None:
    # m = 14, f = 1, p = eps = 0.5, delta = 0.3 (digest §2, "Relation between the two tests").
    assert rp_cap(0.5, 0.5, 0.3, 14, 1.0) == pytest.approx(20.6395, abs=5e-5)
    assert rp_cap_theorem_5_13(0.5, 0.5, 0.3, 14, 1.0) == pytest.approx(20.6395, abs=5e-5)
    assert rp_cap_theorem_5_11(0.5, 0.5, 0.3, 14, 1.0) == pytest.approx(17.1025, abs=5e-5)
    assert rp_cap(0.5, 0.5, 0.3, 14, 1.0, bound="theorem_5_11") == pytest.approx(17.1025, abs=5e-5)


P_SERIES = (0.1, 0.3, 0.5, 0.7, 0.9)
EPS_SERIES = (0.1, 0.3, 0.7, 0.9)
DELTA_SERIES = (0.14, 0.22, 0.38, 0.46)

# (m, f, varied parameter, values, Eq. 10 caps, Eq. 9 caps or None), digest §4.
DIGEST_CAPS = [
    (14, 1.0, "p", P_SERIES, (158.2364, 37.4569, 20.6395, 14.1809, 10.7869),
     (141.2270, 31.6196, 17.1025, 11.6419, 8.8062)),
    (14, 1.0, "epsilon", EPS_SERIES, (515.9883, 57.3320, 10.5304, 6.3702), None),
    (14, 1.0, "delta", DELTA_SERIES, (33.7048, 25.9565, 16.5872, 13.3119), None),
    (14, 0.5, "p", P_SERIES, (440.3101, 85.6158, 44.0310, 29.2042, 21.7437), None),
    (14, 0.2, "p", P_SERIES, (2029.5542, 294.3045, 130.7170, 79.3288, 55.6333), None),
    (50, 1.0, "p", P_SERIES, (113.6550, 33.6042, 19.6488, 13.8776, 10.7258), None),
    (50, 1.0, "epsilon", EPS_SERIES, (491.2209, 54.5801, 10.0249, 6.0645), None),
    (50, 1.0, "delta", DELTA_SERIES, (32.0870, 24.7106, 15.7910, 12.6729), None),
    (50, 0.5, "p", P_SERIES, (261.9845, 70.2050, 40.0682, 27.9911, 21.4991), None),
    (50, 0.2, "p", P_SERIES, (915.0193, 197.9866, 105.9496, 71.7470, 54.1045), None),
]  # fmt: skip


def _digest_cases() -> list[tuple[int, float, dict[str, float], float, float | None]]:
    cases = []
    for m, f, name, values, eq10, eq9 in DIGEST_CAPS:
        for i, value in enumerate(values):
            params = {**BASE, name: value}
            cases.append((m, f, params, eq10[i], None if eq9 is None else eq9[i]))
    return cases


@pytest.mark.parametrize(("m", "f", "params", "eq10", "eq9"), _digest_cases())
def test_digest_cap_tables(
    m: int, f: float, params: dict[str, float], eq10: float, eq9: float | None
) -> None:
    s13 = rp_cap_theorem_5_13(params["p"], params["epsilon"], params["delta"], m, f)
    assert s13 == pytest.approx(eq10, abs=5e-5)
    if eq9 is not None:
        s11 = rp_cap_theorem_5_11(params["p"], params["epsilon"], params["delta"], m, f)
        assert s11 == pytest.approx(eq9, abs=5e-5)


def test_digest_examples_edu_group_1_and_occ_group_2_violate_under_plain_perturbation() -> None:
    # m = 14, f = 0.87 -> 23.9599 [19.8993]: EDU group 1 (|g| = 89) violates.
    assert rp_cap_theorem_5_13(0.5, 0.5, 0.3, 14, 0.87) == pytest.approx(23.9599, abs=5e-5)
    assert rp_cap_theorem_5_11(0.5, 0.5, 0.3, 14, 0.87) == pytest.approx(19.8993, abs=5e-5)
    # m = 50, f = 0.47 -> 42.73: OCC group 2 (|g| = 213) violates.
    assert rp_cap_theorem_5_13(0.5, 0.5, 0.3, 50, 0.47) == pytest.approx(42.73, abs=5e-3)
    private = is_reconstruction_private([89, 213], [round(0.87 * 89), 100], **BASE, m=14)
    assert not private.any()


def test_smallest_table_3_cap_and_worst_case_against_balanced_group() -> None:
    # §3.5: the smallest s_g over Table 3 (p = eps = 0.9, delta = 0.46, f = 1).
    assert rp_cap(0.9, 0.9, 0.46, 14) == pytest.approx(2.147, abs=5e-4)
    assert rp_cap(0.9, 0.9, 0.46, 50) == pytest.approx(2.135, abs=5e-4)
    # §5 F1: s* = 20.64 against s(f = 0.2) = 130.72, m = 14, p = eps = 0.5, delta = 0.3.
    assert rp_cap(0.5, 0.5, 0.3, 14, 0.2) == pytest.approx(130.72, abs=5e-3)
    # §2: the simulation group f = 0.8 has s_g = 26.2294.
    assert rp_cap(0.5, 0.5, 0.3, 14, 0.8) == pytest.approx(26.2294, abs=5e-5)


@pytest.mark.parametrize(
    ("size", "f", "m", "expected"),
    [
        (100, 1.0, 14, 0.138951),
        (100, 0.87, 14, 0.158844),
        (89, 0.87, 14, 0.173160),
        (213, 0.47, 50, 0.124898),
        (1000, 0.5, 50, 0.038505),
        (30, 1.0, 14, 0.361555),
    ],
)
def test_digest_max_retention_probability(size: int, f: float, m: int, expected: float) -> None:
    p_max = float(max_retention_probability(size, f, 0.5, 0.3, m))
    assert p_max == pytest.approx(expected, abs=5e-7)
    # At p_max the group sits on the cap: a hair below passes, a hair above fails.
    assert rp_cap(p_max * (1 - 1e-9), 0.5, 0.3, m, f) >= size
    assert rp_cap(p_max * (1 + 1e-6), 0.5, 0.3, m, f) < size


def test_calc_rp_cap_is_a_plain_json_dict() -> None:
    out = calc_rp_cap(0.5, 0.5, 0.3, 14, 1.0)
    assert list(out) == [
        "p", "epsilon", "delta", "domain_size", "f", "w", "theta", "epsilon_max",
        "cap_theorem_5_13", "cap_theorem_5_11", "max_trials_theorem_5_13",
        "max_trials_theorem_5_11",
    ]  # fmt: skip
    assert json.loads(json.dumps(out)) == out
    assert all(type(v) in (int, float) for v in out.values())
    assert out["cap_theorem_5_13"] == pytest.approx(20.6395, abs=5e-5)
    assert out["cap_theorem_5_11"] == pytest.approx(17.1025, abs=5e-5)
    assert (out["max_trials_theorem_5_13"], out["max_trials_theorem_5_11"]) == (20, 17)
    assert out["w"] == pytest.approx(0.5 + 0.5 / 14)
    assert out["theta"] == pytest.approx(0.25 / (0.5 + 0.5 / 14))
    assert out["epsilon_max"] == pytest.approx(1 + 0.5 / 7)
    assert out["domain_size"] == 14 and type(out["domain_size"]) is int


def test_epsilon_max_is_theta_one() -> None:
    top = epsilon_max(0.5, 14, 0.5)
    assert top == pytest.approx(1 + 0.5 / (14 * 0.5 * 0.5))
    bounds = tail_bounds(10, 0.5, 0.5, top, 14)
    assert float(bounds.theta) == pytest.approx(1.0)
    # At theta = 1, 0^0 = 1 gives L1 = e^-mu (Theorem 4.8).
    assert float(bounds.l1) == pytest.approx(math.exp(-float(bounds.mu)))


# --- the bounds behind the cap (Corollaries 4.9, 4.10; Theorems 5.11, 5.13) ----------------


# §2.1 table: m, p, eps, delta, f, n, U1, L1, U2, L2, true Pr[> eps], true Pr[< -eps].
TAIL_TABLE = [
    (14, 0.5, 0.5, 0.3, 1.0, 20, 0.3612, 0.2446, 0.3883, 0.3114, 0.01378, 0.00917),
    (14, 0.5, 0.5, 0.3, 0.5, 44, 0.3471, 0.2390, 0.3726, 0.3003, 0.00841, 0.01958),
    (50, 0.5, 0.5, 0.3, 1.0, 19, 0.3641, 0.2413, 0.3926, 0.3122, 0.01206, 0.00760),
    (50, 0.5, 0.5, 0.3, 0.5, 40, 0.3515, 0.2320, 0.3795, 0.3006, 0.01165, 0.01438),
    (14, 0.5, 0.3, 0.3, 1.0, 57, 0.3333, 0.2651, 0.3499, 0.3021, 0.00790, 0.00817),
    (14, 0.9, 0.5, 0.3, 1.0, 10, 0.3802, 0.2548, 0.4089, 0.3275, 0.00000, 0.00010),
]


def _exact_tails(n: int, f: float, p: float, epsilon: float, m: int) -> tuple[float, float]:
    """Exact Pr[(F'-f)/f > eps], Pr[< -eps] from Bin(fn, q1) + Bin((1-f)n, q0)."""
    q1, q0 = p + (1 - p) / m, (1 - p) / m
    k = round(f * n)
    pmf = np.convolve(
        stats.binom.pmf(np.arange(k + 1), k, q1), stats.binom.pmf(np.arange(n - k + 1), n - k, q0)
    )
    rel = (reconstruct_frequency(np.arange(pmf.size), np.full(pmf.size, n), p, m) - f) / f
    return float(pmf[rel > epsilon].sum()), float(pmf[rel < -epsilon].sum())


@pytest.mark.parametrize("row", TAIL_TABLE)
def test_digest_tail_table_bounds_and_exact_tails(row: tuple[float, ...]) -> None:
    m, p, eps, delta, f, n, u1, l1, u2, l2, upper, lower = row
    m, n = int(m), int(n)
    assert n <= rp_cap(p, eps, delta, m, f) < n + 1 / f + 1e-9  # largest n with f n integral
    b = tail_bounds(n, f, p, eps, m)
    got = [float(x) for x in (b.u1, b.l1, b.u2, b.l2)]
    assert got == pytest.approx([u1, l1, u2, l2], abs=6e-5)
    # n is within the Eq. 10 cap, so delta <= min(U2, L2) (Eq. 8) ...
    assert delta <= min(float(b.u2), float(b.l2))
    # ... and the true tails are far below the bounds (digest §2.1 caveat).
    true_upper, true_lower = _exact_tails(n, f, p, eps, m)
    assert true_upper == pytest.approx(upper, abs=6e-6)
    assert true_lower == pytest.approx(lower, abs=6e-6)
    assert true_upper < float(b.u1) and true_lower < float(b.l1)


@pytest.mark.parametrize("m", [14, 50])
@pytest.mark.parametrize("f", [0.2, 0.5, 0.87, 1.0])
def test_at_the_cap_the_binding_bound_equals_delta(m: int, f: float) -> None:
    # Theorem 5.13: |g| = s_g makes L2 = delta; Theorem 5.11: |g| = s makes L1 = delta.
    s13 = rp_cap_theorem_5_13(0.5, 0.5, 0.3, m, f)
    s11 = rp_cap_theorem_5_11(0.5, 0.5, 0.3, m, f)
    assert float(tail_bounds(s13, f, 0.5, 0.5, m).l2) == pytest.approx(0.3, rel=1e-12)
    assert float(tail_bounds(s11, f, 0.5, 0.5, m).l1) == pytest.approx(0.3, rel=1e-12)


probability = st.floats(0.01, 0.99)
frequency = st.floats(0.01, 1.0)
domain = st.integers(2, 200)


@PROPERTY
@given(p=probability, eps=st.floats(0.01, 1.0), delta=probability, m=domain, f=frequency)
def test_theorem_5_11_cap_is_stricter_than_theorem_5_13(
    p: float, eps: float, delta: float, m: int, f: float
) -> None:
    # L1 <= L2 on (0, 1] (digest §2).
    s11 = rp_cap_theorem_5_11(p, eps, delta, m, f)
    s13 = rp_cap_theorem_5_13(p, eps, delta, m, f)
    assert 0 < s11 <= s13 * (1 + 1e-12)


@PROPERTY
@given(
    p=st.floats(0.01, 0.98),
    eps=st.floats(0.01, 0.98),
    delta=st.floats(0.01, 0.98),
    m=st.integers(2, 199),
    f=st.floats(0.01, 0.98),
    step=st.floats(1.001, 1.02),
    bound=st.sampled_from(["theorem_5_13", "theorem_5_11"]),
)
def test_cap_strictly_decreases_in_f_p_epsilon_delta_and_m(
    p: float, eps: float, delta: float, m: int, f: float, step: float, bound: str
) -> None:
    # Theorem 5.13's closed form (and 5.11's proof): larger f, p, eps, delta or m, smaller cap.
    base = rp_cap(p, eps, delta, m, f, bound=bound)  # type: ignore[arg-type]
    for args in (
        (p, eps, delta, m, min(1.0, f * step)),
        (min(0.99, p * step), eps, delta, m, f),
        (p, min(1.0, eps * step), delta, m, f),
        (p, eps, min(0.99, delta * step), m, f),
        (p, eps, delta, m + 1, f),
    ):
        assert rp_cap(*args, bound=bound) < base  # type: ignore[arg-type]


@PROPERTY
@given(theta_eps=st.floats(0.001, 1.0), size=st.floats(0.5, 5000), f=frequency, m=domain)
def test_chernoff_bound_orderings(theta_eps: float, size: float, f: float, m: int) -> None:
    # Claim 1 (L1 <= U1), L1 <= L2 <= U2, and all bounds in (0, 1].
    b = tail_bounds(size, f, 0.5, theta_eps, m)
    l1, u1, l2, u2 = (float(x) for x in (b.l1, b.u1, b.l2, b.u2))
    assert 0 <= l1 <= u1 * (1 + 1e-12) and l1 <= l2 * (1 + 1e-12) <= u2 * (1 + 1e-12)
    assert max(l1, u1, l2, u2) <= 1


@PROPERTY
@given(
    size=st.integers(1, 3000),
    share=st.floats(0.0, 1.0),
    p=probability,
    eps=st.floats(0.05, 1.0),
    delta=probability,
    m=domain,
    bound=st.sampled_from(["theorem_5_13", "theorem_5_11"]),
)
def test_privacy_test_is_corollary_4_10_on_the_maximum_frequency(
    size: int, share: float, p: float, eps: float, delta: float, m: int, bound: str
) -> None:
    # Eq. 8 directly: private iff delta <= min(U_i, L_i) at f_max (Theorem 5.11/5.13 proofs).
    max_count = max(1, round(share * size))
    f = max_count / size
    b = tail_bounds(size, f, p, eps, m)
    floor = (
        min(float(b.u2), float(b.l2)) if bound == "theorem_5_13" else min(float(b.u1), float(b.l1))
    )
    if abs(floor - delta) < 1e-9:
        return  # on the boundary, floating point decides
    got = is_reconstruction_private([size], [max_count], p, eps, delta, m, bound=bound)  # type: ignore[arg-type]
    assert bool(got[0]) == (delta <= floor)


def test_micro_groups_and_violation_share() -> None:
    group = np.array([5, 5, 5, 5, 9, 9, 2])
    codes = np.array([0, 0, 0, 1, 3, 3, 7])
    mg = micro_groups(group, codes)
    assert mg.group_ids.tolist() == [2, 5, 9]
    assert mg.size.tolist() == [1, 4, 2]
    assert mg.max_count.tolist() == [1, 3, 2]
    # Caps at tiny parameters: p = eps = 0.9, delta = 0.46, m = 14 gives s(1) = 2.147.
    private = is_reconstruction_private(mg.size, mg.max_count, 0.9, 0.9, 0.46, 14)
    assert private.tolist() == [True, False, True]
    assert 1 - private.mean() == pytest.approx(1 / 3)  # "% of violating micro groups"


# --- perturbation (Eq. 1) -----------------------------------------------------------------------


def test_perturbation_matrix_and_example_1_equivalence() -> None:
    matrix = perturbation_matrix(0.3, 5)
    assert matrix.sum(axis=0) == pytest.approx(np.ones(5))
    assert np.diag(matrix) == pytest.approx(np.full(5, 0.3 + 0.7 / 5))
    # §1.2: Example 1's "keep 50 %, else one of the 9 others" is p = 4/9 over m = 10, and its
    # amplification 1 + p m / (1 - p) is gamma = 9 (rho1 = 0.1, rho2 = 0.5).
    ex1 = perturbation_matrix(4 / 9, 10)
    assert ex1[0, 0] == pytest.approx(0.5)
    assert ex1[1, 0] == pytest.approx(0.5 / 9)
    assert ex1[0, 0] / ex1[1, 0] == pytest.approx(9.0)


def test_perturb_keeps_a_value_with_probability_p_plus_share_of_redraws() -> None:
    rng = np.random.default_rng(20240501)
    p, m, n = 0.3, 5, 400_000
    codes = rng.integers(0, m, n)
    out = perturb(codes, p, m, rng)
    assert out.dtype == np.int64 and out.min() >= 0 and out.max() < m
    keep = p + (1 - p) / m
    se = math.sqrt(keep * (1 - keep) / n)
    assert abs(np.mean(out == codes) - keep) < 5 * se
    # Whole transition matrix against Eq. 1, column by column.
    expected = perturbation_matrix(p, m)
    for i in range(m):
        column = out[codes == i]
        freq = np.bincount(column, minlength=m) / column.size
        se_col = np.sqrt(expected[:, i] * (1 - expected[:, i]) / column.size)
        assert np.all(np.abs(freq - expected[:, i]) < 5 * se_col)


def test_perturb_is_reproducible_with_the_same_seed() -> None:
    codes = np.arange(1000) % 7
    a = perturb(codes, 0.5, 7, np.random.default_rng(3))
    b = perturb(codes, 0.5, 7, np.random.default_rng(3))
    assert np.array_equal(a, b)


# --- the estimator (Lemma 1) ----------------------------------------------------------------------


def test_estimator_worked_example_72_857() -> None:
    # |S| = 100, p = 0.5, m = 14, O* = 40 (digest §1.4).
    assert float(estimate_count(40, 100, 0.5, 14)) == pytest.approx(72.857, abs=5e-4)
    assert float(reconstruct_frequency(40, 100, 0.5, 14)) == pytest.approx(0.728571, abs=5e-7)
    r = reconstruct_count([40], [100], 0.5, 14)
    assert r.estimate == pytest.approx(72.857, abs=5e-4)
    assert (r.observed, r.size) == (40, 100)
    # Plain perturbation: Var = |S| v(F') / p^2, v linear in f.
    q1, q0 = 0.5 + 0.5 / 14, 0.5 / 14
    v = r.frequency * q1 * (1 - q1) + (1 - r.frequency) * q0 * (1 - q0)
    assert r.variance == pytest.approx(100 * v / 0.25)
    assert r.standard_error == pytest.approx(math.sqrt(r.variance))


def test_estimator_is_not_clipped() -> None:
    # O* = 0 gives F' = -(1-p)/(m p) (digest §1.4).
    assert float(reconstruct_frequency(0, 100, 0.5, 14)) == pytest.approx(-0.5 / 7)
    assert float(reconstruct_frequency(100, 100, 0.5, 14)) > 1


def test_estimate_over_groups_equals_estimate_over_their_union() -> None:
    # Lemma 4.3: the estimator is linear in counts.
    split = reconstruct_count([10, 30, 0], [20, 70, 10], 0.5, 14)
    whole = reconstruct_count([40], [100], 0.5, 14)
    assert split.estimate == pytest.approx(whole.estimate)


def test_digest_variance_values() -> None:
    # |g| = 200, f = 0.8, m = 14, p = 0.5: Var(F') = 0.004117 under plain perturbation and
    # v / (s_g p^2) = 0.03139 with n_g = s_g = 26.2294 trials (digest §2).
    assert count_variance(0.8, 200, 0.5, 14) / 200**2 == pytest.approx(0.004117, abs=5e-7)
    s_g = rp_cap(0.5, 0.5, 0.3, 14, 0.8)
    assert count_variance(0.8, 200, 0.5, 14, trials=s_g) / 200**2 == pytest.approx(
        0.03139, abs=5e-6
    )


def test_estimator_is_unbiased_and_its_variance_is_right_by_simulation() -> None:
    # |S| = 100 with 70 rows of value 0; 4000 independent perturbations.
    rng = np.random.default_rng(7)
    p, m, runs, n, true_count = 0.5, 14, 4000, 100, 70
    codes = np.where(np.arange(n) < true_count, 0, 1 + np.arange(n) % (m - 1))
    out = perturb(np.tile(codes, runs), p, m, rng).reshape(runs, n)
    observed = (out == 0).sum(axis=1)
    est = estimate_count(observed, np.full(runs, n), p, m)
    theory = count_variance(true_count / n, n, p, m)
    # Unbiased: the mean is within 4.5 standard errors of the truth.
    assert abs(est.mean() - true_count) < 4.5 * math.sqrt(theory / runs)
    # The variance formula: sample variance within 4.5 of its standard errors (~2.2 % each).
    assert est.var(ddof=1) / theory == pytest.approx(1.0, abs=4.5 * math.sqrt(2 / (runs - 1)))
    # The reported variance is unbiased for it.
    reported = np.array([reconstruct_count([o], [n], p, m).variance for o in observed[:1000]])
    assert abs(reported.mean() - theory) < 4.5 * reported.std(ddof=1) / math.sqrt(1000) + 1e-9


# --- Algorithm 1 -----------------------------------------------------------------------------


def _delta_for_worst_case_cap(target: float, p: float, eps: float, m: int) -> float:
    """delta with s(f = 1) = target (Theorem 5.13 solved for delta)."""
    w = p + (1 - p) / m
    return math.exp(-target * (eps * p) ** 2 / (2 * w))


def test_example_5_15_sampling_and_scaling() -> None:
    # g: 5 x1 and 15 x2, s_g = 15 (here 15.5 -> 15 trials). b = 0.75: x1 gets 3 plus one
    # with probability 75 %, x2 gets 11 plus one with probability 25 %; b' = 20/15.
    delta = _delta_for_worst_case_cap(15.5, 0.5, 0.5, 14)
    assert 15 < rp_cap(0.5, 0.5, delta, 14) < 16
    rng = np.random.default_rng(515)
    reps = 4000
    group = np.repeat(np.arange(reps), 20)
    codes = np.tile(np.r_[np.zeros(5, int), np.ones(15, int)], reps)
    rel = rp_randomize(group, codes, p=0.5, epsilon=0.5, delta=delta, m=14, rng=rng)
    assert rel.trials.tolist() == [15] * reps
    assert rel.weight == pytest.approx(np.full(reps, 20 / 15))
    x1 = np.bincount(np.searchsorted(rel.group_ids, rel.trial_group), weights=rel.original == 0)
    assert set(np.unique(x1).tolist()) <= {3, 4}
    share4 = np.mean(x1 == 4)
    assert abs(share4 - 0.75) < 4.5 * math.sqrt(0.75 * 0.25 / reps)
    # Exact scaling: every trial 1 copy, exactly 20 - 15 = 5 trials a second one.
    assert set(rel.copies.tolist()) == {1, 2}
    assert rel.published_size.tolist() == [20] * reps
    # Paper's scaling: one more copy with probability 1/3 each, |g2*| = 20 in expectation.
    paper = rp_randomize(
        group, codes, p=0.5, epsilon=0.5, delta=delta, m=14, rng=rng, scaling="randomized"
    )
    assert set(paper.copies.tolist()) <= {1, 2}
    extra = np.mean(paper.copies == 2)
    assert abs(extra - 1 / 3) < 4.5 * math.sqrt((2 / 9) / paper.copies.size)
    assert abs(paper.published_size.mean() - 20) < 4.5 * math.sqrt(15 * 2 / 9 / reps)


def test_group_max_strict_size_for_the_digest_simulation_group() -> None:
    # |g| = 200: 160 x0, 40 x1, s_g = 26.23. 26 trials could round to 21/26 = 0.808 > 0.8,
    # whose cap 25.96 < 26; the strict size is 25 (20 + 5), so Theorem 5.16 holds exactly.
    codes = np.r_[np.zeros(160, int), np.ones(40, int)]
    rel = rp_randomize(
        np.zeros(200, int), codes, **BASE, m=14, rng=np.random.default_rng(1),
        cap_policy="group_max",
    )  # fmt: skip
    assert rel.cap[0] == pytest.approx(26.2294, abs=5e-5)
    assert rel.trials.tolist() == [25]
    assert np.bincount(rel.original).tolist() == [20, 5]
    assert rel.copies.tolist() == [8] * 25


def test_theorem_5_18_rp_keeps_the_expected_estimate_by_simulation() -> None:
    # The digest's simulation group, replicated 3000 times in one call.
    rng = np.random.default_rng(518)
    reps, p, m = 3000, 0.5, 14
    group = np.repeat(np.arange(reps), 200)
    codes = np.tile(np.r_[np.zeros(160, int), np.ones(40, int)], reps)
    rel = rp_randomize(group, codes, **BASE, m=m, rng=rng, cap_policy="group_max")
    index = np.searchsorted(rel.group_ids, rel.trial_group)
    observed = np.bincount(index, weights=rel.copies * (rel.randomized == 0), minlength=reps)
    f2 = reconstruct_frequency(observed, rel.published_size, p, m)
    theory = count_variance(0.8, 200, p, m, trials=25) / 200**2
    assert abs(f2.mean() - 0.8) < 4.5 * math.sqrt(theory / reps)
    assert f2.var(ddof=1) / theory == pytest.approx(1.0, abs=4.5 * math.sqrt(2 / reps))
    # Fewer trials, larger variance than plain perturbation's 0.004117.
    assert f2.var() > 5 * count_variance(0.8, 200, p, m) / 200**2


def test_aggregate_estimate_and_standard_error_on_rp_output() -> None:
    # Theorem 5.18 on an aggregate of many groups, some capped; analysts know n_g from the
    # public worst-case cap.
    rng = np.random.default_rng(99)
    n = 30_000
    group = np.where(rng.random(n) < 0.3, rng.integers(0, 10, n), rng.integers(10, 6000, n))
    codes = rng.integers(0, 14, n)
    truth = int((codes == 3).sum())
    cap = math.floor(rp_cap(0.5, 0.5, 0.3, 14))
    est, se = [], []
    for _ in range(200):
        rel = rp_randomize(group, codes, **BASE, m=14, rng=rng)
        index = np.searchsorted(rel.group_ids, rel.trial_group)
        observed = np.bincount(index, weights=rel.copies * (rel.randomized == 3))
        size = rel.published_size
        answer = reconstruct_count(
            observed.astype(np.int64), size, 0.5, 14, trials=np.minimum(size, cap)
        )
        est.append(answer.estimate)
        se.append(answer.standard_error)
    est_arr = np.array(est)
    assert abs(est_arr.mean() - truth) < 4.5 * est_arr.std(ddof=1) / math.sqrt(200)
    assert np.mean(se) == pytest.approx(est_arr.std(ddof=1), rel=0.2)


rows = st.integers(1, 120).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 4), min_size=n, max_size=n),
        st.lists(st.integers(0, 3), min_size=n, max_size=n),
    )
)
# (p, epsilon, delta): caps s(1) of 2.2, 7.8 and 24.1 at m = 4.
PARAMS = st.sampled_from([(0.9, 0.9, 0.46), (0.7, 0.7, 0.3), (0.5, 0.5, 0.3)])


@PROPERTY
@given(
    data=rows,
    params=PARAMS,
    policy=st.sampled_from(["worst_case", "group_max"]),
    scaling=st.sampled_from(["exact", "randomized"]),
    bound=st.sampled_from(["theorem_5_13", "theorem_5_11"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_algorithm_1_invariants(
    data: tuple[list[int], list[int]],
    params: tuple[float, float, float],
    policy: str,
    scaling: str,
    bound: str,
    seed: int,
) -> None:
    group, codes = np.array(data[0]), np.array(data[1])
    p, eps, delta = params
    rel = rp_randomize(
        group, codes, p=p, epsilon=eps, delta=delta, m=4, rng=np.random.default_rng(seed),
        bound=bound, cap_policy=policy, scaling=scaling,  # type: ignore[arg-type]
    )  # fmt: skip
    mg = micro_groups(group, codes)
    assert np.array_equal(rel.group_ids, mg.group_ids)
    assert np.array_equal(rel.size, mg.size) and np.array_equal(rel.max_count, mg.max_count)
    # Trials: distinct rows of the right group and code; all rows iff |g| <= s_g; never > s_g.
    assert np.unique(rel.trial_row).size == rel.trial_row.size
    assert np.array_equal(group[rel.trial_row], rel.trial_group)
    assert np.array_equal(codes[rel.trial_row], rel.original)
    index = np.searchsorted(rel.group_ids, rel.trial_group)
    assert np.array_equal(np.bincount(index, minlength=rel.size.size), rel.trials)
    assert np.array_equal(rel.trials == rel.size, rel.size <= rel.cap)
    assert np.all(rel.trials <= rel.cap) and np.all(rel.trials >= 1)
    # Theorem 5.16's premise holds exactly: |g1| <= s(f_max(g1)).
    for gi in range(rel.size.size):
        sample = rel.original[index == gi]
        f1 = np.bincount(sample).max() / sample.size
        assert sample.size <= rp_cap(p, eps, delta, 4, f1, bound=bound) * (1 + 1e-12)  # type: ignore[arg-type]
        # Stratified: each value within one of its share |g_x| n_g / |g|.
        share = np.bincount(codes[group == rel.group_ids[gi]], minlength=4) * sample.size
        got = np.bincount(sample, minlength=4)
        assert np.all(np.abs(got - share / rel.size[gi]) < 1)
    # Scaling: floor(b') or floor(b') + 1 copies; exact keeps |g2*| = |g|.
    base = rel.size // rel.trials
    assert np.all((rel.copies == base[index]) | (rel.copies == base[index] + 1))
    if scaling == "exact":
        assert np.array_equal(rel.published_size, rel.size)
    groups_out, codes_out = rel.published(np.random.default_rng(seed))
    assert groups_out.size == rel.copies.sum()
    assert sorted(zip(groups_out.tolist(), codes_out.tolist(), strict=True)) == sorted(
        zip(
            np.repeat(rel.trial_group, rel.copies).tolist(),
            np.repeat(rel.randomized, rel.copies).tolist(),
            strict=True,
        )
    )


def test_algorithm_1_on_empty_input() -> None:
    rel = rp_randomize([], [], **BASE, m=14, rng=np.random.default_rng(0))
    assert rel.group_ids.size == 0 and rel.copies.size == 0


# --- serial rules ----------------------------------------------------------------------------


@PROPERTY
@given(
    known=st.dictionaries(st.integers(0, 50), st.integers(0, 5), max_size=30),
    keys=st.lists(st.integers(0, 80), max_size=60),
    seed=st.integers(0, 2**32 - 1),
)
def test_sticky_perturb_reuses_known_values_and_draws_new_ones_once(
    known: dict[int, int], keys: list[int], seed: int
) -> None:
    keys_arr = np.array(keys, dtype=np.int64)
    codes = keys_arr % 6  # one code per key: a key is one record version
    draw = sticky_perturb(
        keys_arr, codes, 0.5, 6, np.random.default_rng(seed),
        known_keys=np.array(list(known), dtype=np.int64),
        known_values=np.array(list(known.values()), dtype=np.int64),
    )  # fmt: skip
    for key, value in zip(keys, draw.randomized.tolist(), strict=True):
        if key in known:
            assert value == known[key]
    assert set(draw.new_keys.tolist()) == set(keys) - set(known)
    assert draw.new_keys.tolist() == sorted(draw.new_keys.tolist())
    fresh = dict(zip(draw.new_keys.tolist(), draw.new_values.tolist(), strict=True))
    for key, value in zip(keys, draw.randomized.tolist(), strict=True):
        if key not in known:
            assert value == fresh[key]  # rows sharing a key share one draw
    # Persisting the new entries and drawing again changes nothing.
    state = {**known, **fresh}
    again = sticky_perturb(
        keys_arr, codes, 0.5, 6, np.random.default_rng(seed + 1),
        known_keys=np.array(list(state), dtype=np.int64),
        known_values=np.array(list(state.values()), dtype=np.int64),
    )  # fmt: skip
    assert np.array_equal(again.randomized, draw.randomized)
    assert again.new_keys.size == 0


def test_sticky_perturb_with_s16_pseudonyms() -> None:
    keys = np.array([b"a" * 16, b"b" * 16, b"c" * 16], dtype="S16")
    first = sticky_perturb(keys[:2], [0, 1], 0.5, 3, np.random.default_rng(0))
    second = sticky_perturb(
        keys, [0, 1, 2], 0.5, 3, np.random.default_rng(1),
        known_keys=first.new_keys, known_values=first.new_values,
    )  # fmt: skip
    assert second.randomized[:2].tolist() == first.randomized.tolist()
    assert second.new_keys.tolist() == [b"c" * 16]


def test_sticky_perturb_refuses_one_key_with_two_codes() -> None:
    with pytest.raises(InvalidParameter, match=r"^keys: rows sharing a key"):
        sticky_perturb([1, 1], [0, 2], 0.5, 3, np.random.default_rng(0))


@PROPERTY
@given(
    steps=st.lists(
        st.lists(st.tuples(st.integers(0, 6), st.integers(0, 5)), max_size=12), max_size=6
    ),
    cap=st.floats(0, 40),
)
def test_trial_ledger_never_decreases_and_budget_is_cap_minus_count(
    steps: list[list[tuple[int, int]]], cap: float
) -> None:
    ledger = advance_trial_ledger([], [])
    history: dict[int, int] = {}
    for step in steps:
        keys = np.array([k for k, _ in step], dtype=np.int64)
        add = np.array([a for _, a in step], dtype=np.int64)
        before = dict(zip(ledger.keys.tolist(), ledger.counts.tolist(), strict=True))
        ledger = advance_trial_ledger(
            keys, add, ledger_keys=ledger.keys, ledger_counts=ledger.counts
        )
        after = dict(zip(ledger.keys.tolist(), ledger.counts.tolist(), strict=True))
        for k, a in step:
            history[k] = history.get(k, 0) + a
        assert after == history
        assert all(after[k] >= v for k, v in before.items())
        probe = np.arange(8, dtype=np.int64)
        budget = trial_budget(probe, cap, ledger_keys=ledger.keys, ledger_counts=ledger.counts)
        assert budget.tolist() == [max(0, math.floor(cap) - after.get(k, 0)) for k in range(8)]


def test_trial_ledger_refuses_a_decrease() -> None:
    with pytest.raises(InvalidParameter, match=r"^new_trials: must be >= 0"):
        advance_trial_ledger([1], [-1], ledger_keys=[1], ledger_counts=[5])


# A universe of record versions (key = index): group 0..2, code 0..3, fixed per key.
UNIVERSE = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=45)


@PROPERTY
@given(
    universe=UNIVERSE,
    memberships=st.lists(st.lists(st.booleans(), min_size=45, max_size=45), max_size=6),
    params=PARAMS,
    seed=st.integers(0, 2**32 - 1),
)
def test_serial_rules_hold_across_snapshots(
    universe: list[tuple[int, int]],
    memberships: list[list[bool]],
    params: tuple[float, float, float],
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    p, eps, delta = params
    cap = math.floor(rp_cap(p, eps, delta, 4))
    all_group = np.array([g for g, _ in universe])
    all_code = np.array([c for _, c in universe])
    sticky: dict[int, int] = {}
    trial_group: dict[int, int] = {}  # group of every key ever made a trial
    ledger = advance_trial_ledger([], [])
    for step, member in enumerate(memberships):
        keys = np.flatnonzero(np.array(member[: len(universe)]))
        group, codes = all_group[keys], all_code[keys]
        before = dict(zip(ledger.keys.tolist(), ledger.counts.tolist(), strict=True))
        out = serial_rp_randomize(
            group, codes, keys, p=p, epsilon=eps, delta=delta, m=4, rng=rng,
            known_keys=np.array(list(sticky), dtype=np.int64),
            known_values=np.array(list(sticky.values()), dtype=np.int64),
            ledger_keys=ledger.keys, ledger_counts=ledger.counts,
        )  # fmt: skip
        assert out.cap == cap
        # Rule 1: every earlier trial present is a trial again, with its old value.
        for i, key in enumerate(keys.tolist()):
            if key in sticky:
                assert out.trial[i] and out.published[i] == sticky[key]
        new = dict(zip(out.new_keys.tolist(), out.new_values.tolist(), strict=True))
        assert not set(new) & set(sticky)
        assert set(new) == {k for k, t in zip(keys.tolist(), out.trial, strict=True) if t} - set(
            sticky
        )
        sticky.update(new)
        trial_group.update({k: int(all_group[k]) for k in new})
        # Rule 2: counts never decrease, equal the distinct trials ever drawn, stay <= cap.
        after = dict(zip(out.ledger.keys.tolist(), out.ledger.counts.tolist(), strict=True))
        assert all(after.get(g, 0) >= c for g, c in before.items())
        ever = np.bincount(list(trial_group.values()), minlength=3) if trial_group else [0] * 3
        assert all(after.get(g, 0) == ever[g] for g in range(3))
        assert all(c <= cap for c in after.values())
        ledger = out.ledger
        # Trials present in a group never exceed the cap; the first release takes min(|g|, c).
        assert np.all(out.trials <= cap)
        if step == 0:
            assert np.array_equal(out.trials, np.minimum(out.size, cap))
        # Scaling: copies of a trial of the same group and code; noise only when none exists.
        present = {(int(group[i]), int(codes[i])) for i in np.flatnonzero(out.trial)}
        for i in np.flatnonzero(~out.trial):
            s = out.source[i]
            if s == -1:
                assert (int(group[i]), int(codes[i])) not in present
            else:
                src = int(s)
                assert out.trial[src] and group[src] == group[i] and codes[src] == codes[i]
                assert out.published[i] == out.published[src]
        assert np.all(out.source[out.trial] == np.flatnonzero(out.trial))


def _two_releases(seed: int, second_codes: list[int]) -> tuple[object, np.ndarray]:
    """Cap 7 (p = eps = 0.7, delta = 0.3, m = 4). Release 1: rows 0-3 of value 0 in group 0
    (4 trials). Release 2: rows 0-3 again plus new rows with ``second_codes``."""
    rng = np.random.default_rng(seed)
    params = {"p": 0.7, "epsilon": 0.7, "delta": 0.3, "m": 4, "rng": rng}
    first = serial_rp_randomize(np.zeros(4, int), np.zeros(4, int), np.arange(4), **params)
    codes = np.r_[np.zeros(4, int), second_codes]
    keys = np.arange(codes.size)
    second = serial_rp_randomize(
        np.zeros(codes.size, int), codes, keys, **params,
        known_keys=first.new_keys, known_values=first.new_values,
        ledger_keys=first.ledger.keys, ledger_counts=first.ledger.counts,
    )  # fmt: skip
    return second, codes


def test_serial_copies_spread_evenly_over_reused_and_fresh_trials() -> None:
    # Release 2: 10 rows of value 0, 4 reused + 3 fresh trials (budget 7 - 4), 3 copies.
    # Each trial should carry a copy with probability 3/7, reused or fresh alike.
    runs, fresh_sources = 300, 0
    for seed in range(runs):
        out, _ = _two_releases(seed, [0] * 6)
        assert out.trials.tolist() == [7] and out.fresh.tolist() == [3]  # type: ignore[attr-defined]
        copies = out.source[~out.trial]  # type: ignore[attr-defined]
        assert copies.size == 3
        fresh_sources += int(np.sum(copies >= 4))
    share = fresh_sources / (3 * runs)
    assert abs(share - 3 / 7) < 4.5 * math.sqrt((3 / 7) * (4 / 7) / (3 * runs))


def test_serial_gives_a_value_without_trials_a_slot_before_noise() -> None:
    # Release 2: 20 new rows of value 0 and one of value 1; value 1's stratified share of
    # 7 slots is 7/25 (usually 0), but with budget left it must get a trial, not noise.
    for seed in range(50):
        out, codes = _two_releases(seed, [0] * 20 + [1])
        lone = int(np.flatnonzero(codes == 1)[0])
        assert out.trial[lone]  # type: ignore[attr-defined]
        assert np.all(out.source >= 0)  # type: ignore[attr-defined]


def test_serial_refuses_sticky_state_that_outgrows_the_ledger() -> None:
    with pytest.raises(InvalidParameter, match=r"^known_keys, ledger_counts: group 0"):
        serial_rp_randomize(
            [0, 0], [1, 2], [10, 11], **BASE, m=4, rng=np.random.default_rng(0),
            known_keys=[10, 11], known_values=[0, 0],
        )  # fmt: skip


# --- bad parameters name themselves ------------------------------------------------------------


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


BAD = [
    ("p", lambda: rp_cap(0.0, 0.5, 0.3, 14)),
    ("p", lambda: rp_cap(1.0, 0.5, 0.3, 14)),
    ("p", lambda: rp_cap("0.5", 0.5, 0.3, 14)),  # type: ignore[arg-type]
    ("p", lambda: perturb([0, 1], 1.5, 3, _rng())),
    ("epsilon", lambda: rp_cap(0.5, 0.0, 0.3, 14)),
    ("epsilon", lambda: rp_cap(0.5, -1.0, 0.3, 14)),
    ("epsilon", lambda: rp_cap(0.5, math.inf, 0.3, 14)),
    ("epsilon", lambda: rp_cap(0.5, 1.2, 0.3, 14)),  # beyond Corollary 4.10's 1.0714
    ("epsilon", lambda: max_retention_probability(10, 1.0, 1.05, 0.3, 14)),
    ("delta", lambda: rp_cap(0.5, 0.5, 0.0, 14)),
    ("delta", lambda: rp_cap(0.5, 0.5, 1.0, 14)),
    ("delta", lambda: rp_cap(0.5, 0.5, 1.3, 14)),
    ("m", lambda: rp_cap(0.5, 0.5, 0.3, 1)),
    ("m", lambda: rp_cap(0.5, 0.5, 0.3, 2.5)),  # type: ignore[arg-type]
    ("m", lambda: perturbation_matrix(0.5, True)),  # type: ignore[arg-type]
    ("domain_size", lambda: calc_rp_cap(0.5, 0.5, 0.3, 1)),
    ("f", lambda: rp_cap(0.5, 0.5, 0.3, 14, 0.0)),
    ("f", lambda: rp_cap(0.5, 0.5, 0.3, 14, 1.5)),
    ("bound", lambda: rp_cap(0.5, 0.5, 0.3, 14, bound="eq10")),  # type: ignore[arg-type]
    ("rng", lambda: perturb([0], 0.5, 3, np.random.RandomState(0))),  # type: ignore[arg-type]
    ("codes", lambda: perturb([0, 3], 0.5, 3, _rng())),
    ("codes", lambda: perturb([0.0, 1.0], 0.5, 3, _rng())),
    ("cap_policy", lambda: rp_randomize([0], [0], **BASE, m=3, rng=_rng(), cap_policy="x")),  # type: ignore[arg-type]
    ("scaling", lambda: rp_randomize([0], [0], **BASE, m=3, rng=_rng(), scaling="x")),  # type: ignore[arg-type]
    ("group", lambda: rp_randomize([0, 1], [0], **BASE, m=3, rng=_rng())),
    ("p", lambda: rp_randomize([0], [0], p=0.9, epsilon=0.9, delta=0.9, m=14, rng=_rng())),
    ("keys", lambda: serial_rp_randomize([0, 0], [0, 1], [5, 5], **BASE, m=3, rng=_rng())),
    ("size", lambda: estimate_count(0, 0, 0.5, 14)),
    ("observed", lambda: estimate_count(101, 100, 0.5, 14)),
    ("observed", lambda: reconstruct_count([1, 2], [10], 0.5, 14)),
    ("trials", lambda: reconstruct_count([1], [10], 0.5, 14, trials=[11])),
    ("f", lambda: count_variance(1.5, 10, 0.5, 14)),
    ("cap", lambda: trial_budget([0], -1.0)),
    (
        "known_keys",
        lambda: sticky_perturb([1], [0], 0.5, 3, _rng(), known_keys=[1, 1], known_values=[0, 0]),
    ),
    ("ledger_counts", lambda: trial_budget([0], 3.0, ledger_keys=[0], ledger_counts=[-2])),
]


@pytest.mark.parametrize(("name", "call"), BAD, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BAD)])
def test_bad_parameters_raise_invalid_parameter_naming_them(name: str, call: object) -> None:
    with pytest.raises(InvalidParameter) as info:
        call()  # type: ignore[operator]
    assert str(info.value).startswith(name), str(info.value)
    assert isinstance(info.value, ValueError)
