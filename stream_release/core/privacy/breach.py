r"""Breach probability and minimum group-size ratios of the global guarantee.

All formulas are from [WFLWX10]. Individual ``o`` and sensitive value ``s``; in release ``j``
o's group has ``n_j`` rows of which ``n_{j,s}`` hold ``s``. The running product

.. math:: P(o,s) = \prod_j (1 - n_{j,s}/n_j)

over the releases whose group containing o holds s is all the history the guarantee needs.
We keep it in log space, ``log_p = sum_j log1p(-n_{j,s}/n_j)`` (rule 9 of STYLE.md: never
multiply group sizes across releases in floats).

Floating point and the bound: every margin on the safe side
-----------------------------------------------------------
The bound ``1/l`` is compared exactly: ``l`` is taken as the rational number its float is
(``Fraction(l)``), and a float is never compared with slack in its favour.

* Planning: where a strategy's ratio is [WFLWX10] Theorem 1's own bound ``q = \tilde n`` it plans
  ``q (1 + RATIO_RTOL)`` (``RATIO_RTOL = 1e-9``; :mod:`stream_release.core.privacy.strategy`): by
  Theorem 3 a plan then stays below ``1/l`` by about ``RATIO_RTOL P / q``, far more than the
  rounding of the history, so the check before release passes it; an exact ``p = 1/l``
  (Corollary 2, allowed by the guarantee) is given up for it.
* Dead pairs: a pair whose ``P <= 1 - 1/l + BREACH_ATOL`` (``BREACH_ATOL = 1e-9``) is treated
  as at the bound: never linked again (:func:`minimum_ratio_from_log_product`).
* The check before release (:func:`possibly_exceeds`): the stored ``log P`` is a float sum of
  ``links`` rounded factors; :func:`breach_upper_bound` adds a proven bound on that rounding
  to ``p``, and a release is refused unless that upper bound is ``<= 1/l`` exactly.
* The audit recomputes near the bound in exact rational arithmetic, with its own ledger of
  every factor (:mod:`stream_release.audit.ledger`).

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from numba import njit
from numpy.typing import ArrayLike, NDArray

from stream_release.core.privacy.validation import check_alpha, check_ell, check_k_prime

BREACH_ATOL = 1e-9
RATIO_RTOL = 1e-9


def log_survival_factor(n: ArrayLike, n_s: ArrayLike) -> NDArray[np.float64]:
    r"""Log of one release's factor ``1 - n_s/n`` in Lemma 4 of [WFLWX10].

    Parameters
    ----------
    n : int array, group sizes, >= 1
    n_s : int array, rows with value s in that group, 0 <= n_s <= n

    Returns ``log1p(-n_s/n)`` (``-inf`` where ``n_s == n``).
    """
    n_arr = np.asarray(n, dtype=np.float64)
    ns_arr = np.asarray(n_s, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.log1p(-ns_arr / n_arr)


def breach_from_log_product(log_p: ArrayLike) -> NDArray[np.float64]:
    r"""Breach probability ``p = 1 - P`` from ``log P`` (Lemma 4 of [WFLWX10]).

    ``log_p <= 0`` is the log of the running product ``P(o,s)``; ``0`` means no linkage yet
    (``p = 0``), ``-inf`` means a group made only of s (``p = 1``).
    Evaluated as ``-expm1(log_p)``, exact for tiny probabilities. O(m) in the entries, as
    every bound of this module.
    """
    return -np.expm1(np.asarray(log_p, dtype=np.float64))


def breach_probability(n: ArrayLike, n_s: ArrayLike) -> float:
    r"""Probability that one individual is linked to value s in at least one release 1..k.

    Lemma 4 of [WFLWX10]:
    ``p(o,s,k) = (prod_j n_j - prod_j (n_j - n_{j,s})) / prod_j n_j``
    ``= 1 - prod_j (1 - n_{j,s}/n_j)``.

    Parameters
    ----------
    n : (k,) int, size of o's group in release j, >= 1
    n_s : (k,) int, rows with value s in that group, 0 <= n_s <= n (0 contributes a factor 1,
        Lemma 5)

    Examples
    --------
    Example 2 (Figure 2): o2 in two groups of size 2, one chlamydia each.

    >>> breach_probability([2, 2], [1, 1])
    0.75
    >>> abs(breach_probability([4, 4], [1, 1]) - 7 / 16) < 1e-15  # 0.43749999999999994
    True

    Notes
    -----
    Evaluated as ``-expm1(sum(log1p(-n_s/n)))``; never forms ``prod n_j``. Any ``n_s == n``
    gives exactly 1.0.
    """
    n_arr, ns_arr = _check_history(n, n_s)
    if np.any(ns_arr == n_arr):
        return 1.0
    return float(breach_from_log_product(log_survival_factor(n_arr, ns_arr).sum()))


def minimum_ratio_from_log_product(ell: float, log_p: ArrayLike) -> NDArray[np.float64]:
    r"""Minimum ratio ``n_k / n_{k,s}`` for o's next linkage to s (Theorem 1 of [WFLWX10]).

    With ``P = prod_{j<k} (1 - n_{j,s}/n_j)``:

    .. math:: \tilde n(k) = \frac{1}{1 - (1 - 1/\ell)/P} = \frac{P}{P - (1 - 1/\ell)}

    which is [WFLWX10] Theorem 1's
    ``l prod(n_j - n_{j,s}) / (l prod(n_j - n_{j,s}) - (l-1) prod n_j)`` divided through by
    ``prod n_j``. ``log_p = 0`` (no linkage yet) gives ``\tilde n(1) = l``.

    Returns ``inf`` where ``P <= 1 - 1/l + BREACH_ATOL``: there o can never again share a group
    with s ([WFLWX10] Theorem 2: any further linkage breaches; within the margin the required group
    would exceed 10^8 rows). Treating those as at the bound errs on the safe side.
    """
    ell = check_ell(ell)
    p_keep = np.exp(np.asarray(log_p, dtype=np.float64))
    # [WFLWX10] Theorem 1's own form l P / (l P - (l - 1)): exactly l at P = 1 (l - (l - 1) == 1 in
    # floats), where P / (P - (1 - 1/l)) rounds to l +- a few ulps (e.g. 48.99999999999994 for
    # l = 49).
    # den = l * (P - (1 - 1/l)), so the dead-end test is unchanged: slack <= BREACH_ATOL.
    num = ell * p_keep
    den = num - (ell - 1.0)
    dead = den <= ell * BREACH_ATOL
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(dead, np.inf, num / np.where(dead, 1.0, den))
    return ratio


def minimum_ratio(ell: float, n: ArrayLike = (), n_s: ArrayLike = ()) -> float:
    r"""Theorem 1 of [WFLWX10] from o's earlier groups holding s (sizes ``n``, s-counts ``n_s``).

    Empty history gives ``\tilde n(1) = l``.

    Examples
    --------
    Example 3: l = 2, two earlier groups of size 4 with one s each: P = 9/16.

    >>> round(minimum_ratio(2, [4, 4], [1, 1]), 12)
    9.0
    """
    n_arr, ns_arr = _check_history(n, n_s)
    log_p = float(log_survival_factor(n_arr, ns_arr).sum()) if n_arr.size else 0.0
    return float(minimum_ratio_from_log_product(ell, log_p))


def constant_ratio_target(ell: float, k_prime: int) -> float:
    r"""Constant ratio ``n_c`` that allows ``k'`` linkages (§6.1 of [WFLWX10], Table 1).

    ``1 - (1 - 1/n_c)^{k'} <= 1/l``  iff  ``n_c >= 1 / (1 - (1 - 1/l)^{1/k'})``.

    Evaluated as ``-1 / expm1(log1p(-1/l) / k')``, exact for large ``k'``.

    Examples
    --------
    >>> round(constant_ratio_target(2, 2), 3)
    3.414
    >>> round(constant_ratio_target(10, 20), 2)
    190.32

    Notes
    -----
    The paper's Table 1 prints 3.44, 7.75, 29.41 and 15.10 for l = 2 (k' = 2, 5, 20, 10); the
    closed form above gives 3.414, 7.725, 29.36 and 14.93 (the paper's entries are off by up
    to 1.2 %, a rounding of its own). Its other entries agree within 0.1 %: 90.13 to the digit;
    45.35, 190.33 and 95.42 where the closed form gives 45.32, 190.32 and 95.41.
    """
    ell = check_ell(ell)
    k_prime = check_k_prime(k_prime)
    return -1.0 / math.expm1(math.log1p(-1.0 / ell) / k_prime)


def geometric_ratio(ell: float, alpha: float, log_p: ArrayLike) -> NDArray[np.float64]:
    r"""Geometric strategy (§6.2 of [WFLWX10]): ratio ``alpha * \tilde n(j)`` for the j-th linkage.

    ``alpha > 1``; ``alpha = 1`` would plan at [WFLWX10] Theorem 1's minimum, the dead end of
    Theorem 2.
    """
    alpha = check_alpha(alpha)
    return alpha * minimum_ratio_from_log_product(ell, log_p)


def _check_history(n: ArrayLike, n_s: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Group sizes and s-counts of o's releases as (k,) int64 arrays; ValueError if malformed."""
    n_arr = np.atleast_1d(np.asarray(n, dtype=np.int64))
    ns_arr = np.atleast_1d(np.asarray(n_s, dtype=np.int64))
    if n_arr.shape != ns_arr.shape:
        raise ValueError(f"n has shape {n_arr.shape} but n_s has shape {ns_arr.shape}")
    if np.any(n_arr < 1) or np.any(ns_arr < 0) or np.any(ns_arr > n_arr):
        raise ValueError("need n >= 1 and 0 <= n_s <= n for every release")
    return n_arr, ns_arr


def exact_bound(ell: float) -> Fraction:
    """``1/l`` exactly, ``l`` being the rational number its float is."""
    return 1 / Fraction(check_ell(ell))


def bound_limit(ell: float) -> float:
    """The largest float ``<= 1/l`` (exactly): ``x <= bound_limit(l)`` iff ``x <= 1/l`` for
    every float ``x``."""
    bound = exact_bound(ell)
    limit = float(bound)
    if Fraction(limit) > bound:
        limit = math.nextafter(limit, 0.0)
    return limit


def exceeds_bound(p: ArrayLike, ell: float) -> NDArray[np.bool_]:
    """True where a breach probability exceeds ``1/l``, compared exactly (a float as the
    rational number it is; ``p = 1/l`` is allowed, Corollary 2)."""
    return np.asarray(p, dtype=np.float64) > bound_limit(ell)


def breach_probability_exact(n: ArrayLike, n_s: ArrayLike) -> Fraction:
    r"""Lemma 4 of [WFLWX10] in exact rational arithmetic:
    ``1 - prod_j (n_j - n_{j,s}) / n_j``.

    >>> breach_probability_exact([2, 2], [1, 1]), breach_probability_exact([4, 4], [1, 1])
    (Fraction(3, 4), Fraction(7, 16))
    """
    n_arr, ns_arr = _check_history(n, n_s)
    keep = math.prod(
        (Fraction(int(a) - int(b), int(a)) for a, b in zip(n_arr, ns_arr, strict=True)),
        start=Fraction(1),
    )
    return 1 - keep


_UNIT = 2.0**-53
"""Unit roundoff of float64."""


def breach_upper_bound(log_p: ArrayLike, links: ArrayLike) -> NDArray[np.float64]:
    r"""An upper bound on the exact breach probability of a stored history entry.

    ``log_p`` is a float sum, in release order, of ``links`` rounded factors
    ``fl(log1p(fl(-c/n)))``. With unit roundoff ``u = 2^-53``, exact ``L`` and its float
    ``\hat L`` (both <= 0), ``P = e^L``:

    * one factor: the quotient's rounding moves ``log1p`` by at most ``u (c/n)/(1 - c/n) <=
      u |phi| / P`` (``1 - c/n >= P``, ``c/n <= |phi|``), ``log1p`` itself by at most 4 ulp:
      ``|f - phi| <= |phi| u (1/P + 4)``;
    * the sum of ``k`` non-positive terms: each addition at most ``u`` times the partial sum,
      which never exceeds ``|L|`` in magnitude: ``k u |L|``;
    * so ``|\hat L - L| <= u |L| (1/P + 4 + k)`` and ``p = -expm1(L)`` moves by at most
      ``P`` times that (``dp/dL = -e^L``) plus ``expm1``'s own 2 ulp.

    The returned bound doubles that: ``p + 2u (|L| (1 + (k + 4) P) + 2p)``, rounded up;
    ``-inf`` (a group made only of the value) gives 1.
    """
    return breach_bounds(log_p, links)[1]


def breach_lower_bound(log_p: ArrayLike, links: ArrayLike) -> NDArray[np.float64]:
    """A lower bound on the exact breach probability of a stored entry: ``p`` less the
    rounding bound of :func:`breach_upper_bound`, rounded down (``-inf`` gives 1)."""
    return breach_bounds(log_p, links)[0]


def breach_bounds(
    log_p: ArrayLike, links: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``(lower, upper)``: :func:`breach_lower_bound` and :func:`breach_upper_bound` at once,
    in one compiled pass over the entries (a release bounds every entry of its individuals:
    3M entries at 1M rows took 0.49 s in numpy's passes, each a temporary array)."""
    log_arr, k = np.broadcast_arrays(
        np.asarray(log_p, dtype=np.float64), np.asarray(links, dtype=np.float64)
    )
    lower, upper = _bounds(
        np.ascontiguousarray(log_arr).reshape(-1), np.ascontiguousarray(k).reshape(-1)
    )
    return lower.reshape(log_arr.shape), upper.reshape(log_arr.shape)


@njit(cache=True, nogil=True)
def _bounds(  # pragma: no cover - jit
    log_p: NDArray[np.float64], links: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Each entry's ``p`` (``-expm1(log_p)``) less and plus the rounding bound of
    :func:`breach_upper_bound`, ``2u (|L| (1 + (k + 4) P) + 2p)``, rounded outward; ``-inf``
    (a group made only of the value) gives 1 for both."""
    n = log_p.shape[0]
    lower = np.empty(n, np.float64)
    upper = np.empty(n, np.float64)
    for i in range(n):
        x = log_p[i]
        if np.isfinite(x):
            p = -np.expm1(x)
            error = 2.0 * _UNIT * (-x * (1.0 + (links[i] + 4.0) * np.exp(x)) + 2.0 * p)
            lower[i] = np.nextafter(p - error, -np.inf)
            upper[i] = np.nextafter(p + error, np.inf)
        else:
            lower[i] = 1.0
            upper[i] = 1.0
    return lower, upper


def possibly_exceeds(log_p: ArrayLike, links: ArrayLike, ell: float) -> NDArray[np.bool_]:
    """True where a stored entry's exact breach probability may exceed ``1/l``: the check
    before release, with its margin on the safe side (:func:`breach_upper_bound`)."""
    return breach_upper_bound(log_p, links) > bound_limit(ell)


def past_bound(upper: NDArray[np.float64], ell: float) -> NDArray[np.bool_]:
    """:func:`possibly_exceeds` of entries whose upper bounds (:func:`breach_bounds`) are
    ``upper``."""
    return upper > bound_limit(ell)
