"""Sampling + safe k-anonymization is (epsilon, delta)-DP: Li, Qardaji, Su.

[LQS12] On Sampling, Anonymization, and Differential Privacy (ASIACCS 2012; papers/000):
Theorem 1 (amplification), Theorem 3.9 (d(k, beta, epsilon)), Theorem 3.11 (epsilon_1-safe),
Tables 1 and 2. [LQS11] Provably Private Data Anonymization (papers/001): Theorem 6 (Chernoff).
Oracles: /work/shared/research/seed-sampling-kanon-dp.md, sections 6.1-6.3.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stream_release.core.privacy.sampling_dp import (
    delta_chernoff,
    delta_of,
    delta_of_eps_safe,
    epsilon_min,
    gamma,
    log_delta_chernoff,
    log_delta_of,
    worst_group_size,
)
from stream_release.core.privacy.sampling_dp_budget import amplify, compose_basic
from stream_release.core.privacy.sampling_dp_calculators import calc_amplify, calc_delta
from stream_release.core.privacy.sampling_dp_release import safe_k_anonymize_mask, sample_mask
from stream_release.core.privacy.validation import (
    check_beta,
    check_count,
    check_delta,
    check_epsilon,
    check_k,
)
from stream_release.errors import InvalidParameter

PROPERTY = settings(max_examples=60, deadline=None, database=None)


def paper_d(k: int, beta: float, epsilon: float, n_max: int) -> tuple[float, int]:
    """Theorem 3.9 transcribed literally, max over ceil(k/gamma - 1) <= n <= n_max.

    No scipy, no plateaus, no truncated tails: every term C(n, j) beta^j (1-beta)^(n-j) for
    gamma n < j <= n. Returns (d restricted to n <= n_max, argmax n).
    """
    g = (math.exp(epsilon) - 1 + beta) / math.exp(epsilon)
    best, best_n = 0.0, -1
    for n in range(math.ceil(k / g - 1), n_max + 1):
        j_lo = math.floor(g * n) + 1
        tail = math.fsum(
            math.comb(n, j) * beta**j * (1 - beta) ** (n - j) for j in range(j_lo, n + 1)
        )
        if tail > best:
            best, best_n = tail, n
    return best, best_n


# --- Table 2 of [LQS12] = Table 1 of [LQS11]: d(20, beta, epsilon) -------------------------------

EPSILONS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
# beta -> the six printed values (3 significant figures) and the maximizing n of each cell.
TABLE_2 = {
    0.05: (("6.83e-10", "2.50e-14", "3.19e-17", "1.76e-19", "3.97e-22", "2.00e-24"),
           (76, 47, 36, 30, 25, 22)),
    0.1: (("4.19e-06", "1.61e-09", "3.44e-12", "4.07e-14", "3.22e-16", "1.89e-18"),
          (66, 44, 34, 29, 25, 22)),
    0.2: (("2.16e-03", "8.02e-06", "1.89e-07", "6.03e-09", "4.79e-11", "1.59e-12"),
          (53, 38, 32, 28, 24, 22)),
}  # fmt: skip
TABLE_2_CELLS = [
    (beta, epsilon, printed, argmax)
    for beta, (row, argmaxes) in TABLE_2.items()
    for epsilon, printed, argmax in zip(EPSILONS, row, argmaxes, strict=True)
]


def half_unit_in_last_digit(printed: str) -> float:
    """Tolerance at the paper's printed precision: 3 s.f., so half a unit in the 3rd digit.

    E.g. "4.07e-14" -> 0.005e-14; relative to the printed value this is at most 0.5 %.
    """
    exponent = int(printed.split("e")[1])
    return 0.5 * 10.0 ** (exponent - 2)


@pytest.mark.parametrize(("beta", "epsilon", "printed", "argmax"), TABLE_2_CELLS)
def test_table_2_all_18_cells_at_the_papers_printed_precision(
    beta: float, epsilon: float, printed: str, argmax: int
) -> None:
    d = delta_of(20, beta, epsilon)
    # Rounded to the paper's 3 significant figures, d is the printed value.
    assert abs(d - float(printed)) <= half_unit_in_last_digit(printed)
    assert f"{d:.2e}" == printed
    # Recomputed maximizing n (the digest's table): here always the paper's n_m.
    assert worst_group_size(20, beta, epsilon) == argmax
    assert calc_delta(20, beta, epsilon)["n_m"] == argmax


@pytest.mark.parametrize(
    ("beta", "epsilon", "high_precision"),
    [(0.05, 2.0, 1.9981861e-24), (0.2, 0.25, 2.1582772e-3), (0.1, 1.0, 4.0725057e-14)],
)
def test_table_2_cells_match_40_digit_values(
    beta: float, epsilon: float, high_precision: float
) -> None:
    # mpmath at 40 digits (digest 6.2), given to 8 s.f.: tolerance 1e-7 relative.
    assert delta_of(20, beta, epsilon) == pytest.approx(high_precision, rel=1e-7)


def test_table_2_delta_grows_with_beta_and_shrinks_with_epsilon() -> None:
    # The paper's reading of the table: smaller beta or larger epsilon, smaller delta.
    for row_low, row_high in [(0.05, 0.1), (0.1, 0.2)]:
        for epsilon in EPSILONS:
            assert delta_of(20, row_low, epsilon) < delta_of(20, row_high, epsilon)
    for beta in TABLE_2:
        values = [delta_of(20, beta, epsilon) for epsilon in EPSILONS]
        assert values == sorted(values, reverse=True)


# --- digest 6.3: edge cases of d -----------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "beta", "epsilon", "n_m", "argmax", "expected"),
    [
        (20, 0.05, 3.0, 20, 22, 9.9897e-27),
        (20, 0.3, 1.0, 26, 28, 1.1761e-06),
        (5, 0.4, 0.75, 6, 8, 4.9807e-02),
        (10, 0.7, 1.5, 10, 15, 3.5268e-02),
    ],
)
def test_maximum_is_not_always_at_n_m(
    k: int, beta: float, epsilon: float, n_m: int, argmax: int, expected: float
) -> None:
    report = calc_delta(k, beta, epsilon)
    assert report["n_m"] == n_m
    assert report["argmax_n"] == argmax
    assert report["delta"] == pytest.approx(expected, rel=1e-4)  # digest gives 5 s.f.
    # Stopping at n_m (the "intuitive" maximum) would under-report delta.
    at_n_m, _ = paper_d(k, beta, epsilon, n_max=n_m)
    assert at_n_m < report["delta"] * (1 - 1e-6)


@pytest.mark.parametrize(
    ("k", "beta", "argmax", "expected"),
    [(20, 0.2, 55, 3.5723e-03), (20, 0.1, 105, 3.5861e-03), (20, 0.05, 205, 3.5350e-03),
     (50, 0.2, 138, 7.0849e-06)],
)  # fmt: skip
def test_at_epsilon_min(k: int, beta: float, argmax: int, expected: float) -> None:
    epsilon = epsilon_min(beta)
    assert delta_of(k, beta, epsilon) == pytest.approx(expected, rel=1e-4)
    assert worst_group_size(k, beta, epsilon) == argmax


@pytest.mark.parametrize(
    ("k", "beta", "epsilon", "expected"),
    [(5, 0.1, 1.0, 1.7650e-04), (10, 0.1, 1.0, 6.8404e-08), (50, 0.1, 1.0, 1.4751e-32),
     (100, 0.1, 0.5, 1.3604e-41), (1, 0.025, 0.1, 1.8335e-01)],
)  # fmt: skip
def test_extra_recomputed_values(k: int, beta: float, epsilon: float, expected: float) -> None:
    assert delta_of(k, beta, epsilon) == pytest.approx(expected, rel=1e-4)


def test_k_1_gives_at_least_beta_so_never_dps() -> None:
    # Digest 6.3/6.4 (Fig 5): k = 1 gives delta = beta exactly for large epsilon, more below.
    assert delta_of(1, 0.025, 2.0) == pytest.approx(0.025, rel=1e-12)
    assert delta_of(1, 0.025, 0.1) > 0.025
    assert not calc_delta(1, 0.025, 2.0)["dps"]
    assert not calc_delta(1, 0.025, 0.1)["dps"]
    assert calc_delta(2, 0.025, 2.0)["dps"]
    assert delta_of(2, 0.025, 2.0) == pytest.approx(6.25e-4, rel=1e-4)  # Fig 5, k = 2


@pytest.mark.parametrize(
    ("k", "beta", "epsilon"), [(5, 0.05, 200.0), (20, 0.2, 10.0), (20, 0.05, 800.0)]
)
def test_floor_beta_to_the_k_is_reached_for_large_epsilon(
    k: int, beta: float, epsilon: float
) -> None:
    # A cell of exactly k records, all sampled, is published whole: probability beta^k.
    # 800 > 709 overflows e^epsilon: the floor must survive it.
    assert delta_of(k, beta, epsilon) == pytest.approx(beta**k, rel=1e-12)
    assert worst_group_size(k, beta, epsilon) == k


def test_epsilon_below_minimum_is_refused_with_the_minimum_named() -> None:
    with pytest.raises(InvalidParameter, match=r"epsilon = 0\.2:.*-ln\(1 - beta\)") as info:
        delta_of(20, 0.2, 0.2)
    assert "0.223144" in str(info.value)
    # The minimum itself is allowed, the next float below it is not.
    emin = epsilon_min(0.2)
    assert delta_of(20, 0.2, emin) > 0
    with pytest.raises(InvalidParameter):
        delta_of(20, 0.2, math.nextafter(emin, 0.0))


@pytest.mark.parametrize(
    ("k", "beta", "epsilon", "name"),
    [
        (20, 0.0, 1.0, "beta"),
        (20, 1.0, 1.0, "beta"),
        (20, -0.1, 1.0, "beta"),
        (20, math.nan, 1.0, "beta"),
        (0, 0.1, 1.0, "k"),
        (-3, 0.1, 1.0, "k"),
        (20.0, 0.1, 1.0, "k"),
        (True, 0.1, 1.0, "k"),
        (20, 0.1, math.inf, "epsilon"),
        (20, 0.1, math.nan, "epsilon"),
        (20, 0.1, -1.0, "epsilon"),
    ],
)
def test_bad_parameters_are_refused_naming_the_parameter(
    k: int, beta: float, epsilon: float, name: str
) -> None:
    for function in (delta_of, log_delta_of, worst_group_size, delta_chernoff, calc_delta):
        with pytest.raises(InvalidParameter, match=rf"^{name} = "):
            function(k, beta, epsilon)


def test_a_beta_too_small_to_evaluate_accurately_is_refused() -> None:
    with pytest.raises(InvalidParameter, match=r"^beta = 1e-12: .*records"):
        delta_of(20, 1e-12, epsilon_min(1e-12))


# --- exactness of the maximisation over n -----------------------------------------------------


@pytest.mark.parametrize(
    ("k", "beta", "epsilon"),
    [(1, 0.3, 0.5), (3, 0.5, 1.0), (5, 0.4, 0.75), (7, 0.25, 1.3), (10, 0.7, 1.5),
     (12, 0.35, 2.2), (4, 0.6, 1.1)],
)  # fmt: skip
def test_equals_the_literal_formula_by_brute_force(k: int, beta: float, epsilon: float) -> None:
    expected, argmax = paper_d(k, beta, epsilon, n_max=250)
    assert delta_of(k, beta, epsilon) == pytest.approx(expected, rel=1e-9)
    assert worst_group_size(k, beta, epsilon) == argmax


@PROPERTY
@given(
    k=st.integers(1, 10),
    beta=st.floats(0.2, 0.7),
    extra=st.floats(0.15, 3.0),
)
def test_property_equals_brute_force_when_no_tie(k: int, beta: float, extra: float) -> None:
    epsilon = epsilon_min(beta) + extra
    g = (math.exp(epsilon) - 1 + beta) / math.exp(epsilon)
    n_max = 300
    # Exact ties j = gamma n are allowed by the theorem but counted as bad (conservatively).
    assume(all(abs(g * n - round(g * n)) > 1e-9 * n for n in range(1, n_max + 1)))
    expected, _ = paper_d(k, beta, epsilon, n_max)
    # Beyond n_max every tail is below the Chernoff bound e^{-c n_max} (Thm 6 of [LQS11]).
    c = g * math.log(g / beta) - (g - beta)
    assume(math.exp(-c * n_max) < 1e-12 * expected)
    assert delta_of(k, beta, epsilon) == pytest.approx(expected, rel=1e-9)


def test_ties_are_counted_as_bad_so_delta_is_not_under_reported() -> None:
    # beta = 0.5, epsilon = ln 2: gamma = 3/4, and j = 3 of n = 4 sits exactly on gamma n.
    # The float epsilon is below ln 2, so that output's ratio 2 exceeds e^epsilon: bad.
    assert delta_of(3, 0.5, math.log(2)) == pytest.approx(5 / 16, rel=1e-12)
    assert worst_group_size(3, 0.5, math.log(2)) == 4


# --- properties of d: monotone in epsilon and k, floor, large k ---------------------------------


@PROPERTY
@given(
    k=st.integers(1, 300),
    beta=st.floats(0.01, 0.95),
    extra=st.floats(0.0, 5.0),
    step=st.floats(0.01, 2.0),
)
def test_property_monotone_in_epsilon_and_k_and_above_the_floor(
    k: int, beta: float, extra: float, step: float
) -> None:
    epsilon = epsilon_min(beta) + extra
    log_d = log_delta_of(k, beta, epsilon)
    assert k * math.log(beta) - 1e-9 <= log_d <= 1e-12
    assert log_delta_of(k, beta, epsilon + step) <= log_d + 1e-9
    assert log_delta_of(k + 1, beta, epsilon) <= log_d + 1e-9


def test_large_k_is_finite_in_log_space_and_monotone() -> None:
    log_d = log_delta_of(5000, 0.3, 0.5)
    assert log_d == pytest.approx(-1416.532, abs=1e-3)  # digest 6.3
    assert worst_group_size(5000, 0.3, 0.5) == 8689
    assert delta_of(5000, 0.3, 0.5) == 0.0  # underflows float64; the log does not
    assert log_delta_of(5001, 0.3, 0.5) < log_d < log_delta_of(4999, 0.3, 0.5)
    assert log_delta_of(5000, 0.3, 0.6) < log_d < log_delta_of(5000, 0.3, 0.45)
    assert log_d >= 5000 * math.log(0.3)
    assert log_delta_chernoff(5000, 0.3, 0.5) >= log_d
    report = calc_delta(5000, 0.3, 0.5)
    assert math.isfinite(report["log_delta"]) and report["log_delta"] == log_d
    json.dumps(report, allow_nan=False)


# --- Chernoff closed form, Theorem 6 of [LQS11] ------------------------------------------------


@pytest.mark.parametrize(
    ("k", "beta", "epsilon", "bound", "exact"),
    [(20, 0.2, 1.0, 1.8728e-05, 6.033e-09), (20, 0.1, 0.25, 1.845e-04, 4.195e-06),
     (20, 0.05, 2.0, 2.303e-17, 1.998e-24)],
)  # fmt: skip
def test_chernoff_values_of_the_digest(
    k: int, beta: float, epsilon: float, bound: float, exact: float
) -> None:
    assert delta_chernoff(k, beta, epsilon) == pytest.approx(bound, rel=5e-4)
    assert delta_of(k, beta, epsilon) == pytest.approx(exact, rel=5e-4)


def test_chernoff_f_smooth_delta_0_of_the_digest() -> None:
    # digest 6.3: k = 20, beta = 0.2, epsilon_0 = 1: delta_0 = 1.873e-05, f(2) = 3.029e-02.
    delta_0 = delta_chernoff(20, 0.2, 1.0)
    assert delta_chernoff(20, 0.2, 2.0) / delta_0 == pytest.approx(3.029e-02, rel=5e-4)


@PROPERTY
@given(k=st.integers(1, 400), beta=st.floats(0.01, 0.95), extra=st.floats(0.0, 6.0))
def test_property_chernoff_bound_is_at_least_exact(k: int, beta: float, extra: float) -> None:
    epsilon = epsilon_min(beta) + extra
    assert log_delta_chernoff(k, beta, epsilon) >= log_delta_of(k, beta, epsilon) - 1e-9


# --- epsilon_1-safe, Theorem 3.11 of [LQS12] --------------------------------------------------


def test_eps_safe_shifts_epsilon_by_epsilon_1() -> None:
    assert delta_of_eps_safe(20, 0.1, 1.5, 0.5) == pytest.approx(delta_of(20, 0.1, 1.0))
    assert delta_of_eps_safe(20, 0.1, 1.0, 0.0) == pytest.approx(delta_of(20, 0.1, 1.0))
    # Paying epsilon_1 for choosing g costs privacy: larger delta at the same total epsilon.
    assert delta_of_eps_safe(20, 0.1, 1.0, 0.3) > delta_of(20, 0.1, 1.0)


def test_eps_safe_refuses_epsilon_minus_epsilon_1_below_minimum() -> None:
    with pytest.raises(InvalidParameter, match=r"^epsilon - epsilon_1 = "):
        delta_of_eps_safe(20, 0.2, 0.5, 0.3)  # 0.2 < 0.223
    with pytest.raises(InvalidParameter, match=r"^epsilon_1 = "):
        delta_of_eps_safe(20, 0.2, 0.5, -0.1)


# --- gamma and epsilon_min -------------------------------------------------------------------


def test_gamma_matches_the_papers_formula_and_sits_between_beta_and_1() -> None:
    for beta in (0.05, 0.1, 0.2, 0.7):
        for epsilon in (0.1, 1.0, 5.0):
            e = math.exp(epsilon)
            assert gamma(beta, epsilon) == pytest.approx((e - 1 + beta) / e, rel=1e-14)
            assert beta < gamma(beta, epsilon) < 1
    assert gamma(0.2, 0.0) == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("beta", "expected"),
    [(0.025, 0.025318), (0.05, 0.051293), (0.1, 0.105361), (0.2, 0.223144), (0.3, 0.356675),
     (0.4, 0.510826)],
)  # fmt: skip
def test_epsilon_min_table(beta: float, expected: float) -> None:
    assert epsilon_min(beta) == pytest.approx(expected, abs=5e-7)


# --- amplification, Theorem 1 and Table 1 of [LQS12] --------------------------------------------


@pytest.mark.parametrize(
    ("beta", "e_to_eps", "delta"), [(1.0, 11.0, 1e-5), (0.1, 2.0, 1e-6), (0.01, 1.1, 1e-7)]
)
def test_table_1_left_ln_11_and_1e_5(beta: float, e_to_eps: float, delta: float) -> None:
    eps_out, delta_out = amplify(math.log(11), 1e-5, beta)
    assert eps_out == pytest.approx(math.log(e_to_eps), rel=1e-12)
    assert delta_out == pytest.approx(delta, rel=1e-12)


@pytest.mark.parametrize(("beta", "printed"), [(1.0, "1"), (0.1, "0.159"), (0.01, "0.017")])
def test_table_1_right_epsilon_1(beta: float, printed: str) -> None:
    eps_out, delta_out = amplify(1.0, 0.0, beta)
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    assert round(eps_out, decimals) == float(printed)
    assert delta_out == 0.0


def test_amplification_text_examples() -> None:
    # (ln 2)-DP at beta = 0.1 gives ln 1.1 (both versions of the paper).
    assert amplify(math.log(2), 0.0, 0.1)[0] == pytest.approx(math.log(1.1), rel=1e-12)
    # Tighter than Smith's lemma: 0.159 < 2 beta = 0.2 at epsilon = 1, beta = 0.1.
    assert amplify(1.0, 0.0, 0.1)[0] < 0.2
    # digest 6.1, recomputed.
    eps_out, delta_out = amplify(1.0, 1e-6, 0.2)
    assert eps_out == pytest.approx(0.295395, abs=5e-7)
    assert delta_out == pytest.approx(2e-7, rel=1e-12)
    assert amplify(0.5, 0.0, 0.05)[0] == pytest.approx(0.031921, abs=5e-7)


def test_amplification_edges() -> None:
    assert amplify(0.7, 0.01, 1.0) == (0.7, 0.01)  # beta = 1 is the identity
    assert amplify(0.0, 0.0, 0.3) == (0.0, 0.0)  # epsilon = 0 stays 0
    eps_out, _ = amplify(800.0, 0.0, 0.1)  # e^800 overflows float64
    assert eps_out == pytest.approx(800.0 + math.log(0.1), rel=1e-15)
    with pytest.raises(InvalidParameter, match=r"^beta = "):
        amplify(1.0, 0.0, 0.0)
    with pytest.raises(InvalidParameter, match=r"^beta = "):
        amplify(1.0, 0.0, 1.5)
    with pytest.raises(InvalidParameter, match=r"^delta = "):
        amplify(1.0, 1.5, 0.1)
    with pytest.raises(InvalidParameter, match=r"^epsilon = "):
        amplify(-1.0, 0.0, 0.1)


@PROPERTY
@given(epsilon=st.floats(1e-6, 30.0), beta=st.floats(1e-4, 1.0), delta=st.floats(0.0, 1.0))
def test_property_amplification_identity_and_monotonicity(
    epsilon: float, beta: float, delta: float
) -> None:
    eps_out, delta_out = amplify(epsilon, delta, beta)
    # (e^eps' - 1) / (e^eps - 1) = beta, [LQS12] after Theorem 1.
    assert math.expm1(eps_out) / math.expm1(epsilon) == pytest.approx(beta, rel=1e-9)
    assert 0.0 <= eps_out <= epsilon and delta_out <= delta
    assert delta_out == pytest.approx(beta * delta, rel=1e-15)


# --- basic composition -----------------------------------------------------------------------


def test_compose_basic_fifty_fresh_samples() -> None:
    # [LQS12] 2.7: 50 releases of (0.02, 0) give (1, 0).
    eps_total, delta_total = compose_basic([(0.02, 0.0)] * 50)
    assert eps_total == pytest.approx(1.0, rel=1e-15)
    assert delta_total == 0.0


def test_compose_basic_sums_and_accepts_any_iterable() -> None:
    budgets = ((0.1 * i, 1e-7 * i) for i in range(1, 5))
    eps_total, delta_total = compose_basic(budgets)
    assert eps_total == pytest.approx(1.0)
    assert delta_total == pytest.approx(1e-6)
    assert compose_basic([]) == (0.0, 0.0)


def test_compose_basic_names_the_bad_entry() -> None:
    with pytest.raises(InvalidParameter, match=r"^budgets\[1\]\.delta = 2"):
        compose_basic([(0.1, 0.0), (0.1, 2.0)])
    with pytest.raises(InvalidParameter, match=r"^budgets\[0\]\.epsilon = "):
        compose_basic([(-0.1, 0.0)])
    with pytest.raises(InvalidParameter, match=r"^budgets\[0\] = "):
        compose_basic([(0.1,)])  # type: ignore[list-item]


# --- sample_mask --------------------------------------------------------------------------------


def test_sample_mask_keeps_about_beta() -> None:
    n, beta = 200_000, 0.1
    mask = sample_mask(n, beta, np.random.default_rng(20240601))
    assert mask.shape == (n,) and mask.dtype == np.bool_
    sigma = math.sqrt(beta * (1 - beta) / n)  # ~6.7e-4
    assert abs(mask.mean() - beta) < 5 * sigma
    # No drift along the array: both halves keep about beta as well.
    for half in (mask[: n // 2], mask[n // 2 :]):
        assert abs(half.mean() - beta) < 5 * sigma * math.sqrt(2)


def test_sample_mask_is_bernoulli_not_fixed_size() -> None:
    # Independent coins: the kept count varies with variance n beta (1 - beta) = 8.
    rng = np.random.default_rng(7)
    counts = np.array([sample_mask(50, 0.2, rng).sum() for _ in range(2000)])
    assert counts.mean() == pytest.approx(10.0, abs=0.3)
    assert counts.var() == pytest.approx(8.0, rel=0.15)


def test_sample_mask_is_fresh_per_call_and_reproducible_per_seed() -> None:
    rng = np.random.default_rng(1)
    first, second = sample_mask(1000, 0.5, rng), sample_mask(1000, 0.5, rng)
    assert not np.array_equal(first, second)
    again = sample_mask(1000, 0.5, np.random.default_rng(1))
    assert np.array_equal(first, again)


def test_sample_mask_edges_and_errors() -> None:
    rng = np.random.default_rng(0)
    assert sample_mask(0, 0.3, rng).shape == (0,)
    assert sample_mask(10, 1.0, rng).all()  # beta = 1: Lambda_1 is the identity
    with pytest.raises(TypeError, match=r"^rng = None"):
        sample_mask(10, 0.3, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match=r"^beta = "):
        sample_mask(10, 0.0, rng)
    with pytest.raises(InvalidParameter, match=r"^n = "):
        sample_mask(-1, 0.3, rng)


# --- safe_k_anonymize_mask ----------------------------------------------------------------------

CODES = np.array(
    [
        [0, 1],  # cell A
        [2, 3],  # cell B
        [0, 1],  # cell A
        [0, 2],  # alone (shares the first attribute with A only)
        [1, 0],  # alone ((0, 1) permuted is a different tuple)
        [2, 3],  # cell B
        [0, 1],  # cell A
    ],
    dtype=np.int64,
)


@pytest.mark.parametrize(
    ("k", "expected"),
    [
        (1, [True] * 7),
        (2, [True, True, True, False, False, True, True]),
        (3, [True, False, True, False, False, False, True]),
        (4, [False] * 7),
    ],
)
def test_safe_k_anonymize_mask_hand_example(k: int, expected: list[bool]) -> None:
    keep = safe_k_anonymize_mask(CODES, k)
    assert keep.dtype == np.bool_
    assert keep.tolist() == expected


def test_safe_k_anonymize_mask_edges_and_errors() -> None:
    assert safe_k_anonymize_mask(np.zeros((0, 3), dtype=np.int32), 5).shape == (0,)
    assert safe_k_anonymize_mask(np.zeros((4, 0), dtype=np.int32), 4).tolist() == [True] * 4
    assert safe_k_anonymize_mask(np.zeros((4, 0), dtype=np.int32), 5).tolist() == [False] * 4
    with pytest.raises(InvalidParameter, match="2-D"):
        safe_k_anonymize_mask(np.array([1, 1, 1]), 2)
    with pytest.raises(InvalidParameter, match="integer codes"):
        safe_k_anonymize_mask(np.array([[0.5], [0.5]]), 2)
    with pytest.raises(InvalidParameter, match=r"^k = 0"):
        safe_k_anonymize_mask(CODES, 0)


@PROPERTY
@given(
    rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=60),
    k=st.integers(1, 8),
)
def test_property_mask_keeps_exactly_the_tuples_with_k_copies(
    rows: list[tuple[int, int]], k: int
) -> None:
    counts = Counter(rows)
    keep = safe_k_anonymize_mask(np.array(rows, dtype=np.int64), k)
    assert keep.tolist() == [counts[row] >= k for row in rows]
    # The released multiset is k-anonymous.
    released = Counter(row for row, kept in zip(rows, keep, strict=True) if kept)
    assert all(count >= k for count in released.values())


# --- calculators --------------------------------------------------------------------------------


def test_calc_delta_reports_every_input_and_output() -> None:
    report = calc_delta(20, 0.1, 1.0)
    assert set(report) == {
        "k", "beta", "epsilon", "epsilon_min", "gamma", "delta", "log_delta", "log10_delta",
        "argmax_n", "n_m", "delta_chernoff", "log_delta_chernoff", "delta_floor",
        "log_delta_floor", "dps",
    }  # fmt: skip
    assert (report["k"], report["beta"], report["epsilon"]) == (20, 0.1, 1.0)
    assert report["delta"] == pytest.approx(4.0725057e-14, rel=1e-7)
    assert report["log_delta"] == pytest.approx(math.log(report["delta"]), rel=1e-12)
    assert report["log10_delta"] == pytest.approx(math.log10(report["delta"]), rel=1e-12)
    assert report["epsilon_min"] == pytest.approx(0.105361, abs=5e-7)
    assert report["gamma"] == pytest.approx(gamma(0.1, 1.0))
    assert report["argmax_n"] == report["n_m"] == 29
    assert report["delta_floor"] == pytest.approx(1e-20)
    assert report["delta_floor"] <= report["delta"] <= report["delta_chernoff"]
    assert report["delta_chernoff"] == pytest.approx(delta_chernoff(20, 0.1, 1.0))
    assert report["dps"] is True
    assert type(report["k"]) is int and type(report["argmax_n"]) is int
    json.dumps(report, allow_nan=False)


def test_calc_amplify_reports_every_input_and_output() -> None:
    report = calc_amplify(math.log(11), 1e-5, 0.1)
    assert set(report) == {"epsilon", "delta", "beta", "epsilon_amplified", "delta_amplified"}
    assert report["epsilon"] == math.log(11)
    assert report["epsilon_amplified"] == pytest.approx(math.log(2), rel=1e-12)
    assert report["delta_amplified"] == pytest.approx(1e-6, rel=1e-12)
    json.dumps(report, allow_nan=False)
    with pytest.raises(InvalidParameter, match=r"^delta = "):
        calc_amplify(1.0, -0.1, 0.1)


# --- the generic checks appended to validation.py ------------------------------------------------


def test_check_k() -> None:
    assert check_k(np.int64(5)) == 5 and type(check_k(np.int64(5))) is int
    for bad in (0, -1, 2.0, True, "3", None):
        with pytest.raises(InvalidParameter, match=r"^k = "):
            check_k(bad)  # type: ignore[arg-type]


def test_check_beta() -> None:
    assert check_beta(0.5) == 0.5
    assert check_beta(1, allow_one=True) == 1.0
    for bad in (0.0, 1.0, -0.5, 2.0, math.nan, math.inf):
        with pytest.raises(InvalidParameter, match=r"^beta = .*0 < beta < 1"):
            check_beta(bad)
    with pytest.raises(InvalidParameter, match=r"^beta = '0.1': must be a number"):
        check_beta("0.1")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match=r"0 < beta <= 1"):
        check_beta(0.0, allow_one=True)


def test_check_epsilon_delta_count() -> None:
    assert check_epsilon(0) == 0.0 and check_delta(1) == 1.0 and check_count(0) == 0
    for bad in (-1e-9, math.inf, math.nan, None):
        with pytest.raises(InvalidParameter, match=r"^eps_a = "):
            check_epsilon(bad, "eps_a")  # type: ignore[arg-type]
    for bad in (-1e-9, 1.0000001, math.nan):
        with pytest.raises(InvalidParameter, match=r"^delta = "):
            check_delta(bad)
    for bad in (-1, 1.0, False):
        with pytest.raises(InvalidParameter, match=r"^n = "):
            check_count(bad)  # type: ignore[arg-type]
