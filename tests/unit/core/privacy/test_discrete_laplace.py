"""The grid Laplace: exact law, epsilon from its own table, no input in the low bits."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from stream_release.core.privacy.discrete_laplace import MAX_STEPS, default_steps, grid_laplace
from stream_release.core.privacy.metric_dp_laplace import laplace_expected_error
from stream_release.errors import InvalidParameter


def _exact_noise_law(q: float, steps: int) -> list[Fraction]:
    """P(clamp(K, -s, s) = k), K two-sided geometric of ratio q, in exact rationals."""
    qf = Fraction(q)
    norm = (1 - qf) / (1 + qf)
    tail = qf**steps / (1 + qf)
    return [tail] + [norm * qf ** abs(k) for k in range(-steps + 1, steps)] + [tail]


@pytest.mark.parametrize(("lo", "hi", "epsilon"), [(17, 90, 0.5), (0, 10, 2.0), (0, 1, 1.0)])
def test_the_table_is_the_exact_law_to_2_to_the_minus_64(lo: int, hi: int, epsilon: float) -> None:
    table = grid_laplace(lo, hi, epsilon, resolution=1.0 if hi - lo > 1 else 0.25)
    exact = _exact_noise_law(table.q, table.steps)
    cells = table.cells()
    assert sum(cells) == 2**64 and len(cells) == 2 * table.steps + 1
    for cell, p in zip(cells, exact, strict=True):
        assert abs(Fraction(int(cell), 2**64) - p) <= Fraction(1, 2**64)


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 3.0])
def test_every_output_ratio_is_within_e_to_the_epsilon(epsilon: float) -> None:
    table = grid_laplace(0.0, 40.0, epsilon)
    law = table.output_law()  # P(y | j) from the table's integers
    ratios = law.max(axis=0) / law.min(axis=0)
    assert table.epsilon_realized <= epsilon
    assert np.log(ratios).max() <= epsilon
    assert np.log(ratios).max() >= epsilon * (1 - 1e-6)  # and no needless noise


def test_the_output_is_a_grid_point_chosen_by_the_word_and_the_grid_point_alone() -> None:
    """Mironov's attack reads the input from the low bits of a float output; here two inputs
    rounding to the same grid point give the same output for every word."""
    table = grid_laplace(0.0, 100.0, 1.0, resolution=0.5)
    words = np.random.default_rng(1).integers(0, 2**64, size=50_000, dtype=np.uint64)
    a = table.sample(np.full(words.shape, 40.1), words)
    b = table.sample(np.full(words.shape, 39.9), words)
    assert np.array_equal(a, b)
    grid = table.value(np.arange(table.steps + 1))
    assert np.isin(a, grid).all() and a.min() >= 0.0 and a.max() <= 100.0


def test_samples_follow_the_law() -> None:
    table = grid_laplace(0.0, 20.0, 1.0)
    words = np.random.default_rng(7).integers(0, 2**64, size=400_000, dtype=np.uint64)
    out = table.sample(np.full(words.shape, 5.0), words)
    seen = np.bincount(table.grid_index(out), minlength=table.steps + 1) / words.size
    np.testing.assert_allclose(seen, table.output_law()[5], atol=3e-3)


def test_a_fine_grid_has_the_papers_expected_error() -> None:
    """Example 5 of Holohan et al. at delta = 0 (b = W / epsilon), clamped: the worst
    expected error b (1 - e^{-W/(2b)}); a grid of 1000 steps is within half a percent."""
    table = grid_laplace(0.0, 1.0, 1.0, resolution=0.001)
    expected = laplace_expected_error(1.0, 1.0, 0.0, clamped=True)
    assert expected == pytest.approx(1.0 - math.exp(-0.5))
    assert table.expected_error() == pytest.approx(expected, rel=5e-3)
    assert table.scale == pytest.approx(1.0, rel=1e-6)


def test_grid_defaults_and_limits() -> None:
    assert default_steps(17, 90) == 73 and default_steps(0, 1) == 256
    assert default_steps(0.5, 90.5) == 256
    point = grid_laplace(5.0, 5.0, 1.0)
    assert point.steps == 0 and point.sample(np.array([9.0]), np.zeros(1, np.uint64))[0] == 5.0
    with pytest.raises(InvalidParameter, match=f"at most {MAX_STEPS}"):
        grid_laplace(0.0, 1.0, 1.0, resolution=1e-6)
    with pytest.raises(InvalidParameter, match="epsilon = 0"):
        grid_laplace(0.0, 1.0, 0)
    with pytest.raises(InvalidParameter, match="lo <= hi"):
        grid_laplace(2.0, 1.0, 1.0)


@pytest.mark.parametrize(("lo", "hi", "epsilon"), [(17, 90, 45), (0, 1000, 60)])
def test_a_large_epsilon_gets_a_table_within_it(lo: float, hi: float, epsilon: float) -> None:
    # the outer cells round to few words of 2^64: q must move far towards 1 (it once raised)
    table = grid_laplace(lo, hi, epsilon)
    assert 0 < table.epsilon_realized <= epsilon
