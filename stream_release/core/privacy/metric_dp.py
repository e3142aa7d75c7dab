r"""Per-record (local) differential privacy in metric spaces [HLM14]: the overview and the
parameter checks its modules share.

Pure mathematics of [HLM14]: each record is sanitised **once**, independently, by a 1-row
mechanism ``X_d`` (product sanitisation, Eq. 7); the sanitised record is stored and every later
query is post-processing of it (Theorem 4).

* Theorem 5 with Lemma 3: the n-row release is (epsilon, delta)-DP **iff** for all values
  ``d, d'`` of the domain ``D`` and all sets ``A``:
  ``P(X_d in A) <= e^epsilon P(X_{d'} in A) + delta`` (14). The budget does not grow with n.
* Example 5, bounded numeric ``D = [lo, hi]``: ``X_d = d + Laplace(b)``
  (:mod:`stream_release.core.privacy.metric_dp_laplace`: :func:`~stream_release.core.privacy.
  metric_dp_laplace.laplace_scale_paper`, :func:`~stream_release.core.privacy.metric_dp_laplace.
  laplace_scale_tight`, :func:`~stream_release.core.privacy.metric_dp_laplace.sanitise_numeric`).
* Example 6, finite ``D`` with ``|D| = m + 1``: k-ary randomised response
  (:mod:`stream_release.core.privacy.metric_dp_rr`: :func:`~stream_release.core.privacy.
  metric_dp_rr.rr_keep`, :func:`~stream_release.core.privacy.metric_dp_rr.sanitise_categorical`,
  :func:`~stream_release.core.privacy.metric_dp_rr.rr_from_uniform`).
* Theorems 6 and 7: lower bounds on the maximal expected error
  ``E = max_d E[rho(X_d, d)]`` (13) of *any* such mechanism
  (:mod:`stream_release.core.privacy.metric_dp_lower_bounds`), next to the error of the
  mechanisms here (:func:`~stream_release.core.privacy.metric_dp_laplace.laplace_expected_error`,
  :func:`~stream_release.core.privacy.metric_dp_rr.rr_expected_error`).

Beyond the paper (marked [X] in the docstrings): de-biased counts from randomised response
(:func:`~stream_release.core.privacy.metric_dp_rr.rr_debiased_counts`) and the tight Laplace
scale. The budget split, basic composition and the per-person ledger are in
:mod:`stream_release.core.privacy.dp_budget`, the self-test helpers in
:mod:`stream_release.core.privacy.dp_selftest`, the calculator views (plain dicts) in
:mod:`stream_release.core.privacy.dp_calculators`. This module holds the checks of the
parameters those modules share (private; each public entry point calls them once).

Neighbours are substitutions of one record, with n public: membership is *not* protected.
All logarithms are natural. Every random draw comes from the ``numpy.random.Generator``
passed in; production callers seed it from OS entropy (``numpy.random.default_rng()``), never
from a guessable value.

References
----------
.. [HLM14] N. Holohan, D. J. Leith, O. Mason. Differential Privacy in Metric Spaces: Numerical,
   Categorical and Functional Data Under the One Roof. arXiv:1402.6124 (2014).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from stream_release.core.privacy.validation import check_delta, check_epsilon
from stream_release.errors import InvalidParameter

__all__: list[str] = []

# --- parameter checks (public entry points only) ----------------------------------------------


def _epsilon_delta(
    epsilon: float, delta: float, names: tuple[str, str] = ("epsilon", "delta")
) -> tuple[float, float]:
    """Definition 1 of [HLM14] with ``delta = 1`` refused: every mechanism is then private."""
    eps = check_epsilon(epsilon, names[0])
    dlt = check_delta(delta, names[1])
    if dlt >= 1.0:
        raise InvalidParameter(
            f"{names[1]} = {delta!r}: must be < 1; with {names[1]} = 1 every mechanism counts as "
            f"private and the error bounds vanish (e.g. {names[1]} = 0 or 1e-6)"
        )
    return eps, dlt


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidParameter(f"{name} = {value!r}: must be a real number")
    return float(value)


def _diameter(diameter: float) -> float:
    value = _real("diameter", diameter)
    if not (value >= 0.0 and math.isfinite(value)):
        raise InvalidParameter(
            f"diameter = {diameter!r}: diam(D) = hi - lo must be a finite number >= 0 "
            "(e.g. diameter = 100 for ages in [0, 100])"
        )
    return value


def _domain_size(domain_size: int) -> int:
    if isinstance(domain_size, bool) or not isinstance(domain_size, numbers.Integral):
        raise InvalidParameter(
            f"domain_size = {domain_size!r}: |D| = m + 1 must be an integer >= 1 "
            "(e.g. domain_size = 8 for 8 categories)"
        )
    if domain_size < 1:
        raise InvalidParameter(
            f"domain_size = {domain_size}: |D| = m + 1 must be >= 1 (e.g. domain_size = 8)"
        )
    return int(domain_size)


def _rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise InvalidParameter(
            f"rng = {rng!r}: must be a numpy.random.Generator (e.g. numpy.random.default_rng())"
        )
    return rng


def _kappa(kappa: float) -> float:
    value = _real("kappa", kappa)
    if not (value > 0.0 and math.isfinite(value)):
        raise InvalidParameter(
            f"kappa = {kappa!r}: the minimum separation min rho(d, d') over d != d' must be "
            "finite and > 0 (kappa = 1 for the discrete metric)"
        )
    return value


def _exp_neg(epsilon: float) -> float:
    """``e^{-epsilon}``; never overflows (``e^epsilon`` does for epsilon > 709)."""
    return math.exp(-epsilon)
