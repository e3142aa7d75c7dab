r"""Self-test of a 1-row mechanism against (14) of [HLM14] (Theorems 3 and 5).

By Theorem 5 a product sanitisation is (epsilon, delta)-DP iff its 1-row mechanism meets
``P(X_d in A) <= e^epsilon P(X_{d'} in A) + delta`` for all pairs of values and all sets ``A``;
by Theorem 3 an algebra of sets suffices. :func:`hockey_stick_divergence` is the least such
delta between two finite output distributions [X]; :func:`empirical_dp_check` estimates it
from samples of a mechanism, with a tolerance, for one pair ``d, d'``.

[HLM14]: N. Holohan, D. J. Leith, O. Mason, Differential Privacy in Metric Spaces,
arXiv:1402.6124 (2014); full reference and digest in :mod:`stream_release.core.privacy.metric_dp`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stream_release.core.privacy.metric_dp import _epsilon_delta, _exp_neg, _real, _rng
from stream_release.core.privacy.validation import check_epsilon
from stream_release.errors import InvalidParameter

__all__ = [
    "EmpiricalDPResult",
    "empirical_dp_check",
    "hockey_stick_divergence",
]

# --- self-test helpers (Theorems 3 and 5) -----------------------------------------------------


def hockey_stick_divergence(p: ArrayLike, q: ArrayLike, epsilon: float) -> float:
    r"""``sup_A [P(A) - e^epsilon Q(A)] = sum_x max(0, p_x - e^epsilon q_x)`` for finite pmfs.

    The least delta for which (5) of [HLM14] holds between two output distributions on a
    finite (or binned) output space; the worst set is ``{x : p_x > e^epsilon q_x}`` [X].

    Parameters
    ----------
    p, q : (K,) array_like of float, probabilities (or frequencies) on the same K cells
    epsilon : float, finite, >= 0

    Examples
    --------
    >>> round(hockey_stick_divergence([0.7, 0.3], [0.3, 0.7], 0.0), 10)
    0.4
    """
    eps = check_epsilon(epsilon)
    p_a = np.asarray(p, dtype=np.float64)
    q_a = np.asarray(q, dtype=np.float64)
    if p_a.shape != q_a.shape:
        raise InvalidParameter(f"p has shape {p_a.shape} but q has shape {q_a.shape}")
    scaled = q_a / _exp_neg(eps) if eps < 700.0 else np.where(q_a > 0, np.inf, 0.0)
    return float(np.maximum(0.0, p_a - scaled).sum())


@dataclass(frozen=True)
class EmpiricalDPResult:
    """Outcome of :func:`empirical_dp_check`.

    ``delta_hat``: estimated ``sup_A [P_d(A) - e^epsilon P_d'(A)]`` over unions of cells, worse
    of both orders. ``tolerance``: its sampling error bound at confidence ``1 - alpha``.
    ``passed``: ``delta_hat <= delta + tolerance``. ``worst_ratio``: largest estimated
    ``P_d(cell) / P_d'(cell)`` either way over cells seen in both samples (for display; with
    delta = 0 it should be near ``e^epsilon`` or below). ``n_cells``, ``n_samples``.
    """

    delta_hat: float
    tolerance: float
    passed: bool
    worst_ratio: float
    n_cells: int
    n_samples: int


def empirical_dp_check(
    mechanism: Callable[[NDArray[Any], np.random.Generator], ArrayLike],
    d: float,
    d_prime: float,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
    *,
    bins: ArrayLike | None = None,
    n_samples: int = 200_000,
    alpha: float = 1e-6,
) -> EmpiricalDPResult:
    r"""Estimate whether a 1-row mechanism meets (14) of [HLM14] for one pair ``d, d'``.

    By Theorem 5 a product sanitisation is (epsilon, delta)-DP iff its 1-row mechanism meets
    ``P(X_d in A) <= e^epsilon P(X_d' in A) + delta`` for all pairs of values and all A; by
    Theorem 3 it suffices to test A on an algebra. Here the algebra is all unions of the cells
    of a partition of the output space, on which the worst A gives the hockey-stick divergence
    (:func:`hockey_stick_divergence`) of the binned frequencies. Testing only single cells
    would be too weak when delta > 0 (delta is not additive over cells).

    Parameters
    ----------
    mechanism : callable ``(inputs, rng) -> outputs``, vectorised over an ``(n,)`` array of
        copies of one input value, e.g.
        ``lambda x, g: sanitise_numeric(x, 0, 1, 1.0, 0.0, g)``
    d, d_prime : the two input values (for the guarantee, every pair of D; the extremes of an
        interval are the worst pair for Laplace)
    epsilon : float, finite, >= 0 (large epsilon makes the tolerance useless)
    delta : float, ``0 <= delta < 1``
    rng : numpy.random.Generator, passed to ``mechanism``
    bins : (B,) increasing finite edges, optional: cells ``(-inf, e_0), [e_0, e_1), ...,
        [e_{B-1}, inf)``. ``None``: every distinct output value is a cell (discrete outputs).
    n_samples : int, draws per input value, >= 100
    alpha : float in (0, 1), the probability that a correct mechanism fails the check

    Returns
    -------
    EmpiricalDPResult

    Notes
    -----
    Tolerance [X]: with K cells and L1 estimation errors ``e1, e2`` of the two binned
    distributions, ``|delta_hat - delta_binned| <= e1 + e^epsilon e2``. Each ``e_i`` is below
    ``sqrt(K/n)`` in expectation (Cauchy-Schwarz) and exceeds it by more than
    ``sqrt(2 ln(2/alpha) / n)`` with probability at most ``alpha/2`` (McDiarmid, bounded
    differences ``2/n``). Binning is post-processing, so ``delta_binned <= delta`` for a
    correct mechanism; hence the check fails a correct mechanism with probability <= alpha.
    """
    eps, dlt = _epsilon_delta(epsilon, delta)
    gen = _rng(rng)
    if isinstance(n_samples, bool) or not isinstance(n_samples, numbers.Integral):
        raise InvalidParameter(f"n_samples = {n_samples!r}: must be an integer >= 100")
    n = int(n_samples)
    if n < 100:
        raise InvalidParameter(f"n_samples = {n}: must be >= 100 (e.g. 200000)")
    a = _real("alpha", alpha)
    if not 0.0 < a < 1.0:
        raise InvalidParameter(f"alpha = {alpha!r}: must satisfy 0 < alpha < 1 (e.g. 1e-6)")
    out = np.asarray(mechanism(np.full(n, d), gen)).ravel()
    out_p = np.asarray(mechanism(np.full(n, d_prime), gen)).ravel()
    if out.size != n or out_p.size != n:
        raise InvalidParameter(
            f"mechanism: returned {out.size} and {out_p.size} outputs for {n} inputs each"
        )
    if bins is None:
        _, inverse = np.unique(np.concatenate([out, out_p]), return_inverse=True)
        idx, idx_p = inverse[:n], inverse[n:]
        k = int(inverse.max()) + 1
        if k > n // 100:
            raise InvalidParameter(
                f"bins = None: the mechanism gave {k} distinct outputs for {n} draws; that is "
                "not a discrete output space and the check would be vacuous: pass bin edges"
            )
    else:
        edges = np.asarray(bins, dtype=np.float64)
        if edges.ndim != 1 or edges.size == 0 or not np.isfinite(edges).all():
            raise InvalidParameter("bins: must be a non-empty 1-D array of finite edges")
        if np.any(np.diff(edges) <= 0):
            raise InvalidParameter("bins: edges must be strictly increasing")
        idx = np.searchsorted(edges, out, side="right")
        idx_p = np.searchsorted(edges, out_p, side="right")
        k = edges.size + 1
    freq = np.bincount(idx, minlength=k) / n
    freq_p = np.bincount(idx_p, minlength=k) / n
    delta_hat = max(
        hockey_stick_divergence(freq, freq_p, eps), hockey_stick_divergence(freq_p, freq, eps)
    )
    spread = math.sqrt(k / n) + math.sqrt(2.0 * math.log(2.0 / a) / n)
    tolerance = (1.0 + math.exp(min(eps, 700.0))) * spread
    both = (freq > 0) & (freq_p > 0)
    worst = (
        float(max((freq[both] / freq_p[both]).max(), (freq_p[both] / freq[both]).max()))
        if both.any()
        else math.inf
    )
    return EmpiricalDPResult(
        delta_hat=delta_hat,
        tolerance=tolerance,
        passed=bool(delta_hat <= dlt + tolerance),
        worst_ratio=worst,
        n_cells=k,
        n_samples=n,
    )
