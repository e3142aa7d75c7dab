r"""Lower bounds on the error of any per-record (epsilon, delta) mechanism, Lemma 4 and
Theorems 6 and 7 of [HLM14].

``E = max_{d in D} E[rho(X_d, d)]`` (13) of every 1-row mechanism is at least
:func:`error_lower_bound_compact` on a compact domain (Theorem 6) and
:func:`error_lower_bound_finite` on a finite one (Theorem 7); compare with the error of the
mechanisms (:func:`~stream_release.core.privacy.metric_dp_laplace.laplace_expected_error`,
:func:`~stream_release.core.privacy.metric_dp_rr.rr_expected_error`). Overview:
:mod:`stream_release.core.privacy.metric_dp`.

[HLM14]: N. Holohan, D. J. Leith, O. Mason, Differential Privacy in Metric Spaces,
arXiv:1402.6124 (2014); full reference and digest in :mod:`stream_release.core.privacy.metric_dp`.
"""

from __future__ import annotations

from stream_release.core.privacy.metric_dp import (
    _diameter,
    _domain_size,
    _epsilon_delta,
    _exp_neg,
    _kappa,
)

__all__ = [
    "error_lower_bound_compact",
    "error_lower_bound_finite",
]


# --- lower bounds on error (Lemma 4, Theorems 6 and 7) ----------------------------------------


def error_lower_bound_compact(diameter: float, epsilon: float, delta: float) -> float:
    r"""Theorem 6 of [HLM14]: every (epsilon, delta) 1-row mechanism has
    ``E >= (1 - delta) diam(D) / (2 (1 + e^epsilon))``.

    ``E = max_{d in D} E[rho(X_d, d)]`` (13). Holds for every product sanitisation (Lemma 3)
    and every compact D, whatever the metric.

    Parameters
    ----------
    diameter : float, ``diam(D)``, finite, >= 0 (the width ``hi - lo`` of an interval)
    epsilon : float, finite, >= 0
    delta : float, ``0 <= delta < 1`` (the bound is 0 at delta = 1, where anything is private)

    Examples
    --------
    >>> round(error_lower_bound_compact(1.0, 1.0, 0.0), 10)
    0.1344707107

    Notes
    -----
    Valid for outputs outside D too (Laplace outputs in R) (the proof of [HLM14] Theorem 6): its two
    radius-``diam/2`` balls around a diametral pair, taken in the output space U, are disjoint
    by the triangle inequality. Evaluated as ``(1-delta) W e^{-epsilon} / (2(e^{-epsilon}+1))``.
    """
    w = _diameter(diameter)
    eps, dlt = _epsilon_delta(epsilon, delta)
    t = _exp_neg(eps)
    return (1.0 - dlt) * w * t / (2.0 * (t + 1.0))


def error_lower_bound_finite(
    domain_size: int,
    epsilon: float,
    delta: float,
    *,
    kappa: float = 1.0,
    outputs_in_domain: bool = True,
) -> float:
    r"""Theorem 7 of [HLM14]: ``E >= (1 - delta) kappa m / (m + e^epsilon)`` for finite D.

    ``|D| = m + 1`` and ``kappa = min_{d != d'} rho(d, d')`` (the paper prints the min over
    all pairs; ``d = d'`` must be excluded). Attained by randomised response under the
    discrete metric (Example 7).

    Parameters
    ----------
    domain_size : int, ``|D| = m + 1 >= 1``
    epsilon : float, finite, >= 0
    delta : float, ``0 <= delta < 1``
    kappa : float, the minimum separation, finite, > 0 (1 for the discrete metric)
    outputs_in_domain : bool, whether the mechanism's outputs lie in D. Default True, as for
        randomised response. False gives the bound for outputs in a larger space U.

    Examples
    --------
    >>> round(error_lower_bound_finite(8, 1.0, 0.0), 5)
    0.72029

    Notes
    -----
    Caveat (the proof of [HLM14] Theorem 7): it needs the m + 1 radius-kappa balls to be
    disjoint, true inside D but not in U. With outputs outside D the bound can fail: on the
    vertices of a unit equilateral triangle, "always output the centroid" is (0, 0)-DP with
    ``E = 1/sqrt(3) = 0.577 < 2/3``. For such mechanisms (``outputs_in_domain=False``) the proof
    with radius ``kappa/2`` gives ``(1 - delta)(kappa/2) m / (m + e^epsilon)``, returned here.
    """
    m = _domain_size(domain_size) - 1
    eps, dlt = _epsilon_delta(epsilon, delta)
    sep = _kappa(kappa)
    radius = sep if outputs_in_domain else sep / 2.0
    t = _exp_neg(eps)
    return (1.0 - dlt) * radius * m * t / (m * t + 1.0)
