r"""k-ary randomised response on a finite domain, Examples 6 and 7 of [HLM14].

With ``|D| = m + 1``: the probabilities (:func:`rr_keep`), the exact delta of a given ``p``
(:func:`rr_exact_delta`), the sanitiser from a generator (:func:`sanitise_categorical`) or from
one uniform per record (:func:`rr_from_uniform`, what ``dp-sanitised`` publishes), its maximal
expected error (13) (:func:`rr_expected_error`) and de-biased counts of the sanitised codes [X]
(:func:`rr_debiased_counts`). Overview, neighbours and seeding:
:mod:`stream_release.core.privacy.metric_dp`.

[HLM14]: N. Holohan, D. J. Leith, O. Mason, Differential Privacy in Metric Spaces,
arXiv:1402.6124 (2014); full reference and digest in :mod:`stream_release.core.privacy.metric_dp`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stream_release.core.privacy.metric_dp import (
    _domain_size,
    _epsilon_delta,
    _exp_neg,
    _real,
    _rng,
)
from stream_release.core.privacy.validation import check_epsilon
from stream_release.errors import InvalidParameter

__all__ = [
    "DebiasedCounts",
    "RRKeep",
    "rr_debiased_counts",
    "rr_exact_delta",
    "rr_expected_error",
    "rr_from_uniform",
    "rr_keep",
    "sanitise_categorical",
]


# --- k-ary randomised response (Examples 6 and 7) ---------------------------------------------


class RRKeep(NamedTuple):
    """Randomised-response probabilities: ``keep = P(X_d = d)``, ``p = P(X_d = d')`` per d' != d."""

    keep: float
    p: float


def rr_keep(domain_size: int, epsilon: float, delta: float) -> RRKeep:
    r"""Keep probability and the smallest per-category probability ``p`` of Example 6 of [HLM14].

    With ``|D| = m + 1``, the mechanism ``P(X_d = d) = 1 - m p``, ``P(X_d = d') = p`` is
    (epsilon, delta)-DP iff ``1 - p m <= e^epsilon p + delta`` (12), i.e.
    ``p >= p_min = (1 - delta) / (m + e^epsilon)``. Returns ``(keep, p) = (1 - m p_min, p_min)``,
    the least noisy choice, which attains Theorem 7's error bound (Example 7).

    Parameters
    ----------
    domain_size : int, ``|D| = m + 1 >= 1`` (1: a constant, ``keep = 1``, ``p = 0``)
    epsilon : float, finite, >= 0
    delta : float, ``0 <= delta < 1``

    Examples
    --------
    8 categories (m = 7), epsilon = 1:

    >>> keep, p = rr_keep(8, 1.0, 0.0)
    >>> round(p, 5), round(keep, 5)
    (0.1029, 0.27971)

    Notes
    -----
    Evaluated as ``p = (1 - delta) e^{-epsilon} / (m e^{-epsilon} + 1)`` and
    ``keep = (1 + m delta e^{-epsilon}) / (m e^{-epsilon} + 1)`` (no overflow, no cancellation).
    ``p_min <= 1/(m+1)`` always, so the paper's assumption ``1 - p m > p`` holds except at
    ``epsilon = delta = 0``, where the output is uniform (``keep = p``).
    """
    m = _domain_size(domain_size) - 1
    eps, dlt = _epsilon_delta(epsilon, delta)
    if m == 0:
        return RRKeep(1.0, 0.0)
    t = _exp_neg(eps)
    den = m * t + 1.0
    return RRKeep((1.0 + m * dlt * t) / den, (1.0 - dlt) * t / den)


def rr_exact_delta(domain_size: int, p: float, epsilon: float) -> float:
    r"""Exact delta of randomised response with per-category probability ``p`` (Example 6, [HLM14]).

    ``max(0, 1 - p (m + e^epsilon))``: the worst case of (11) is the singleton ``A = {d}``,
    as the paper's necessity argument shows [X: the closed form].

    Parameters
    ----------
    domain_size : int, ``|D| = m + 1 >= 1``
    p : float, ``0 <= p <= 1/(m + 1)`` (the paper's assumption ``1 - p m >= p``)
    epsilon : float, finite, >= 0

    Examples
    --------
    >>> round(rr_exact_delta(4, 0.1, 1.0), 10)
    0.4281718172
    """
    m = _domain_size(domain_size) - 1
    p_f = _real("p", p)
    eps = check_epsilon(epsilon)
    if m == 0:
        return 0.0
    if not 0.0 <= p_f <= 1.0 / (m + 1):
        raise InvalidParameter(
            f"p = {p!r}: must satisfy 0 <= p <= 1/(m + 1) = {1.0 / (m + 1):.6g} "
            "(keep probability 1 - m p at least p)"
        )
    if p_f == 0.0:
        return 1.0
    # 1 - p m - p e^eps, in the scaled form that cannot overflow
    return max(0.0, 1.0 - p_f * m - p_f / _exp_neg(eps)) if eps < 700.0 else 0.0


def sanitise_categorical(
    codes: ArrayLike,
    domain_size: int,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    r"""Sanitise each category code once by k-ary randomised response (Example 6 of [HLM14]).

    Keep the true code with probability ``keep``, otherwise output one of the other ``m``
    codes uniformly (each with probability ``p``); ``(keep, p) = rr_keep(domain_size, ...)``.
    (epsilon, delta)-DP per record, hence for the whole array (Theorem 5). Outputs stay in D.

    Parameters
    ----------
    codes : array_like of int, any shape, every code in ``[0, domain_size)``; map unknown or
        missing values to a declared member of D first
    domain_size : int, ``|D| = m + 1 >= 1``
    epsilon : float, finite, >= 0
    delta : float, ``0 <= delta < 1``
    rng : numpy.random.Generator, the only source of randomness

    Returns
    -------
    int64 array of the shape of ``codes``.

    Examples
    --------
    >>> sanitise_categorical([0, 1, 2], 3, 50.0, 0.0, np.random.default_rng(1)).tolist()
    [0, 1, 2]
    """
    k = _domain_size(domain_size)
    keep, _ = rr_keep(k, epsilon, delta)
    gen = _rng(rng)
    c = np.asarray(codes)
    if c.size and not np.issubdtype(c.dtype, np.integer):
        raise InvalidParameter(f"codes: dtype {c.dtype} must be integer category codes")
    c = c.astype(np.int64)
    if c.size and (c.min() < 0 or c.max() >= k):
        raise InvalidParameter(
            f"codes: values in [{c.min()}, {c.max()}] outside [0, {k}); map unknown values to "
            "a declared 'other' category of the domain before sanitising"
        )
    if k == 1:
        return c.copy()
    kept = gen.random(c.shape) < keep
    shift = gen.integers(1, k, size=c.shape)  # uniform over the m other codes
    return _respond(c, kept, shift, k)


def rr_from_uniform(
    codes: NDArray[np.int64], u: NDArray[np.float64], domain_size: int, keep: float
) -> NDArray[np.int64]:
    r"""k-ary randomised response (Example 6 of [HLM14]) from one uniform per code.

    ``u < keep``: the code itself; otherwise ``(code + 1 + j) mod K`` with
    ``j = floor((u - keep) / (1 - keep) m)``, uniform over the ``m = K - 1`` other codes.

    Parameters
    ----------
    codes : int array, any shape, every code in ``[0, domain_size)``
    u : float64 array of the shape of ``codes``, uniforms in ``[0, 1)`` (e.g. the top 53 bits
        of a keyed 64-bit word, as ``dp-sanitised`` draws them)
    domain_size : int, ``K = |D| = m + 1 >= 1``
    keep : float, ``P(X_d = d)``, the ``keep`` of :func:`rr_keep` for the record's budget

    Returns
    -------
    int64 array of the shape of ``codes``.

    Notes
    -----
    Trusts its inputs (the caller checked the codes and computed ``keep`` by :func:`rr_keep`):
    the same law as :func:`sanitise_categorical`, drawn from the caller's uniforms instead of
    a generator.
    """
    c = codes.astype(np.int64)
    if domain_size == 1:
        return c.copy()
    m = domain_size - 1
    kept = u < keep
    j = np.minimum(np.floor(np.maximum(u - keep, 0.0) / (1.0 - keep) * m), m - 1).astype(np.int64)
    return _respond(c, kept, 1 + j, domain_size)


def _respond(
    codes: NDArray[np.int64], kept: NDArray[np.bool_], shift: NDArray[np.int64], k: int
) -> NDArray[np.int64]:
    """Each code where ``kept``, else the code moved by ``shift`` (1..k-1) modulo ``k``."""
    return np.where(kept, codes, (codes + shift) % k)


def rr_expected_error(
    domain_size: int,
    epsilon: float,
    delta: float,
    *,
    distances: ArrayLike | None = None,
) -> float:
    r"""Maximal expected error (13) of :func:`sanitise_categorical` (Example 7 of [HLM14]).

    Discrete metric (default): ``E = m p = (1 - delta) m / (m + e^epsilon)``, equal to
    Theorem 7's bound, so randomised response is error-optimal there. Any metric:
    ``E = p max_d sum_{d'} rho(d, d')`` [X].

    Parameters
    ----------
    domain_size : int, ``|D| = m + 1 >= 1``
    epsilon, delta : the budget
    distances : (m+1, m+1) float array, optional, the metric ``rho`` between codes: finite,
        >= 0, symmetric, zero diagonal (e.g. symmetric difference of hobby sets)

    Examples
    --------
    >>> round(rr_expected_error(8, 1.0, 0.0), 5)
    0.72029
    """
    k = _domain_size(domain_size)
    _, p = rr_keep(k, epsilon, delta)
    if distances is None:
        return (k - 1) * p
    rho = np.asarray(distances, dtype=np.float64)
    if rho.shape != (k, k):
        raise InvalidParameter(f"distances: shape {rho.shape}, need ({k}, {k}) for domain_size")
    if not (np.isfinite(rho).all() and (rho >= 0).all() and np.allclose(rho, rho.T)):
        raise InvalidParameter("distances: must be finite, >= 0 and symmetric (a metric)")
    if np.any(np.diag(rho) != 0.0):
        raise InvalidParameter("distances: the diagonal rho(d, d) must be 0")
    return float(p * rho.sum(axis=1).max())


class DebiasedCounts(NamedTuple):
    """Unbiased category counts from sanitised codes, ``(K,)`` float64 each, and the row count."""

    estimate: NDArray[np.float64]
    variance: NDArray[np.float64]
    n: int


def rr_debiased_counts(
    sanitised_codes: ArrayLike, domain_size: int, epsilon: float, delta: float
) -> DebiasedCounts:
    r"""Unbiased true-category counts from stored randomised-response output, with variances.

    Post-processing of the sanitised column (Theorem 4 of [HLM14]): costs no budget, and can be
    recomputed for every dashboard tick. With ``C_c`` the sanitised count of code c, n rows,
    ``(q, p) = rr_keep(...)`` [X, digest F3]:

    .. math:: \hat n_c = (C_c - n p) / (q - p), \quad
              Var(\hat n_c) = [n_c q(1-q) + (n - n_c) p(1-p)] / (q - p)^2

    Parameters
    ----------
    sanitised_codes : (n,) int array, output of :func:`sanitise_categorical` with the **same**
        ``domain_size``, ``epsilon`` and ``delta``
    domain_size : int, ``|D| = m + 1 >= 2``
    epsilon, delta : the budget the codes were sanitised with; not both 0 (pure noise)

    Returns
    -------
    DebiasedCounts: ``estimate`` (may be negative or exceed n: it is unbiased, not clipped;
    clip for display), ``variance`` (plug-in, ``n_c`` taken as the estimate clipped to
    ``[0, n]``), ``n``.

    Examples
    --------
    >>> est = rr_debiased_counts([0, 0, 1, 2], 3, 50.0, 0.0).estimate
    >>> [round(float(v), 6) for v in est]
    [2.0, 1.0, 1.0]
    """
    k = _domain_size(domain_size)
    if k < 2:
        raise InvalidParameter(f"domain_size = {k}: counting needs at least 2 categories")
    q, p = rr_keep(k, epsilon, delta)
    eps, dlt = _epsilon_delta(epsilon, delta)
    t = _exp_neg(eps)
    gap = (-math.expm1(-eps) + k * dlt * t) / ((k - 1) * t + 1.0)  # q - p, without cancellation
    if gap <= 0.0:
        raise InvalidParameter(
            "epsilon = 0, delta = 0: the sanitised codes are uniform noise; no count can be "
            "estimated"
        )
    c = np.asarray(sanitised_codes)
    if c.size and not np.issubdtype(c.dtype, np.integer):
        raise InvalidParameter(f"sanitised_codes: dtype {c.dtype} must be integer codes")
    c = c.astype(np.int64).ravel()
    if c.size and (c.min() < 0 or c.max() >= k):
        raise InvalidParameter(f"sanitised_codes: values outside [0, {k})")
    n = int(c.size)
    counts = np.bincount(c, minlength=k).astype(np.float64)
    estimate = (counts - n * p) / gap
    n_c = np.clip(estimate, 0.0, n)
    variance = (n_c * q * (1.0 - q) + (n - n_c) * p * (1.0 - p)) / gap**2
    return DebiasedCounts(estimate, variance, n)
