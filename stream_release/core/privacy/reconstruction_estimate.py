r"""Aggregate reconstruction for analysts, §3.1, Lemma 1 and Theorem 5.18 of [WHF12].

An analyst answers ``COUNT(*) WHERE φ`` with ``SA = x`` in ``φ`` from the published rows alone:
the MLE of Lemma 1 on the rows matching ``φ`` without the ``SA`` equality, unbiased on plain
perturbation (Lemma 1(iii)) and on Algorithm 1's output (Theorem 5.18), with a variance from
the Poisson-trial model (derived here, see :func:`count_variance`).

Contents
--------
:func:`reconstruct_frequency`, :func:`estimate_count`, :func:`count_variance`,
:func:`reconstruct_count` (returns a :class:`CountEstimate`).

Notation as in :mod:`stream_release.core.privacy.reconstruction` (``q1 = p + (1-p)/m``,
``q0 = (1-p)/m``), which also gives the full reference of [WHF12]: K. Wang, C. Han,
A. W.-C. Fu, Randomization Resilient To Sensitive Reconstruction, arXiv:1202.3179, 2012.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stream_release.core.privacy.validation import check_domain_size, check_open_probability
from stream_release.errors import InvalidParameter


def reconstruct_frequency(observed: ArrayLike, size: ArrayLike, p: float, m: int) -> Any:
    r"""MLE of a value's frequency, Lemma 1(ii) of [WHF12] (Theorem 1 without inversion).

    ``F' = (O*/|S| - (1-p)/m) / p``; unbiased, ``E[F'] = f`` (Lemma 1(iii)). Not clipped:
    it can be negative or above 1. Vectorised (float or float64 array).

    Parameters
    ----------
    observed : int array, ``O*``, published rows of ``S*`` with the value, ``0 <= O* <= |S|``
    size : int array, ``|S*| >= 1`` (on Algorithm 1's output: ``|S2*|``)
    p, m : the release's retention probability and full domain size

    Examples
    --------
    >>> round(float(reconstruct_frequency(40, 100, 0.5, 14)), 6)
    0.728571
    """
    p = check_open_probability(p, "p")
    m = check_domain_size(m)
    o, n = _check_observed(observed, size)
    return (o / n - (1.0 - p) / m) / p


def estimate_count(observed: ArrayLike, size: ArrayLike, p: float, m: int) -> Any:
    r"""Estimated true count ``est = |S| F' = (O* - |S| (1-p)/m) / p``, §3.1 and Lemma 1 of [WHF12].

    The paper's answer to ``COUNT(*) WHERE φ`` with ``SA = x`` in ``φ``: reconstruct on the
    rows ``S*`` matching ``φ`` without the ``SA`` equality. Unbiased, not clipped.

    Examples
    --------
    A group of |S| = 100 with p = 0.5, m = 14 and O* = 40:

    >>> round(float(estimate_count(40, 100, 0.5, 14)), 3)
    72.857
    """
    p = check_open_probability(p, "p")
    m = check_domain_size(m)
    o, n = _check_observed(observed, size)
    return (o - n * (1.0 - p) / m) / p


def count_variance(
    f: ArrayLike, size: ArrayLike, p: float, m: int, *, trials: ArrayLike | None = None
) -> float:
    r"""Variance of ``est`` over the micro groups of ``S`` (Lemma 1 of [WHF12]; formula derived).

    ``O*`` of a group is a sum of independent Poisson trials with success probability
    ``q1 = p + (1-p)/m`` (original value ``x``) or ``q0 = (1-p)/m`` (§1.3 of the digest), so
    per trial ``v(f) = f q1 (1-q1) + (1-f) q0 (1-q0)`` and ``Var(F') = v / (|S| p²)``. After
    Algorithm 1 a group of ``n_g`` trials scaled by ``b' = |g|/n_g`` has
    ``Var(O*_{g2}) ≈ b'² n_g v = |g| b' v`` (Theorem 5.18 keeps the mean, not the variance):

    .. math:: Var(est) = \sum_g |g| \, (|g| / n_g) \, v(f_g) / p^2

    Parameters
    ----------
    f : array, true frequency of the value in each group, ``0 <= f <= 1``
    size : array, ``|g| >= 1``; broadcast with ``f``
    p, m : the release's parameters
    trials : array, ``n_g`` per group, ``0 < n_g <= |g|`` (default ``|g|``: plain perturbation)

    Examples
    --------
    A group of |g| = 200 with f = 0.8, m = 14 and p = 0.5, as ``Var(F')``:

    >>> round(count_variance(0.8, 200, 0.5, 14) / 200**2, 6)
    0.004117
    """
    p = check_open_probability(p, "p")
    m = check_domain_size(m)
    f_arr = np.asarray(f, dtype=np.float64)
    if np.any(~((f_arr >= 0) & (f_arr <= 1))):
        raise InvalidParameter(f"f = {f!r}: frequencies must lie in [0, 1]")
    size_arr = np.asarray(size, dtype=np.float64)
    if np.any(~(size_arr >= 1)):
        raise InvalidParameter(f"size = {size!r}: group sizes must be >= 1")
    weight = _weight(size_arr, trials)
    return float(np.sum(size_arr * weight * _per_trial_variance(f_arr, p, m)) / (p * p))


@dataclass(frozen=True)
class CountEstimate:
    """Answer of :func:`reconstruct_count`."""

    estimate: float
    """``est = (O* - |S| (1-p)/m) / p``, unclipped."""
    frequency: float
    """``F' = est / |S|``."""
    observed: int
    """``O*``, published rows of ``S*`` holding the value."""
    size: int
    """``|S*|``."""
    variance: float
    """Estimated ``Var(est)`` (see :func:`reconstruct_count`)."""
    standard_error: float
    """``sqrt(variance)``."""


def reconstruct_count(
    observed: ArrayLike,
    size: ArrayLike,
    p: float,
    m: int,
    *,
    trials: ArrayLike | None = None,
) -> CountEstimate:
    r"""Aggregate reconstruction with a standard error, §3.1, Lemma 1 and Theorem 5.18 of [WHF12].

    ``S*`` is given per micro group: ``observed[g] = O*_g`` and ``size[g] = |g*|``. The
    estimate is Lemma 1(ii) on the totals (by Lemma 4.3 the grouping does not change it);
    the variance is :func:`count_variance` with every ``f_g`` replaced by the group's own
    unclipped ``F'_g``. Because ``v(f)`` is linear in ``f`` and ``E[F'_g] = f_g`` (Theorem
    5.18 for Algorithm 1's output), this plug-in is unbiased for the variance formula
    (rounded up to 0 if negative); on plain perturbation it is ``|S| v(F') / p²``.

    Parameters
    ----------
    observed : (k,) int, ``O*_g``, ``0 <= O*_g <= |g*|``
    size : (k,) int, ``|g*| >= 1``; total ``|S*| >= 1``
    p, m : the release's parameters
    trials : (k,) ``n_g`` per group, ``0 < n_g <= |g*|``; default ``|g*|`` (plain
        perturbation). Under :func:`rp_randomize` with the public ``worst_case`` cap and
        exact scaling, ``n_g = min(|g*|, floor(s*))`` is known to analysts.

    Examples
    --------
    >>> r = reconstruct_count([40], [100], 0.5, 14)
    >>> round(r.estimate, 3), round(r.frequency, 6)
    (72.857, 0.728571)

    Notes
    -----
    A standard error that plugs in the binomial ``O_g (1 - O_g/|g*|)``, which exceeds the
    Poisson-trial variance by about ``|g| f (1-f) p²``; the linear plug-in used here has no
    such bias. The number of trials of a serial release (:func:`serial_rp_randomize`) can be
    below ``min(|g|, floor(s*))`` after deletions; the standard error then understates.
    """
    p = check_open_probability(p, "p")
    m = check_domain_size(m)
    o, n = _check_observed(observed, size)
    o, n = np.atleast_1d(o), np.atleast_1d(n)
    total_o, total_n = float(o.sum()), float(n.sum())
    q0 = (1.0 - p) / m
    frequency = (total_o / total_n - q0) / p
    weight = _weight(n, trials)
    per_group = (o / n - q0) / p
    variance = max(0.0, float(np.sum(n * weight * _per_trial_variance(per_group, p, m))))
    variance /= p * p
    return CountEstimate(
        estimate=total_n * frequency,
        frequency=frequency,
        observed=round(total_o),
        size=round(total_n),
        variance=variance,
        standard_error=math.sqrt(variance),
    )


def _per_trial_variance(f: Any, p: float, m: int) -> Any:
    """``v(f) = f q1 (1 - q1) + (1 - f) q0 (1 - q0)``, linear in ``f``."""
    q1 = p + (1.0 - p) / m
    q0 = (1.0 - p) / m
    return f * q1 * (1.0 - q1) + (1.0 - f) * q0 * (1.0 - q0)


def _weight(size: NDArray[np.float64], trials: ArrayLike | None) -> NDArray[np.float64]:
    """``b' = |g| / n_g`` (1 when ``trials`` is None)."""
    if trials is None:
        return np.ones_like(size)
    t = np.asarray(trials, dtype=np.float64)
    try:
        t, s = np.broadcast_arrays(t, size)
    except ValueError:
        raise InvalidParameter(
            f"trials has shape {t.shape} but size has shape {size.shape}"
        ) from None
    if np.any(~((t > 0) & (t <= s))):
        raise InvalidParameter(f"trials = {trials!r}: need 0 < trials <= size for every group")
    return s / t


def _check_observed(
    observed: ArrayLike, size: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    o = np.asarray(observed, dtype=np.float64)
    n = np.asarray(size, dtype=np.float64)
    if o.shape != n.shape:
        raise InvalidParameter(f"observed has shape {o.shape} but size has shape {n.shape}")
    if np.any(~(n >= 1)):
        raise InvalidParameter(
            f"size = {size!r}: |S*| must be >= 1; with no matching rows the estimate is undefined"
        )
    if np.any(~((o >= 0) & (o <= n))):
        raise InvalidParameter(f"observed = {observed!r}: need 0 <= observed <= size")
    return o, n
