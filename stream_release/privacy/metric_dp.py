r"""Per-record (local) differential privacy in metric spaces: sanitisers, error bounds, budget.

Pure mathematics of [HLM14]: each record is sanitised **once**, independently, by a 1-row
mechanism ``X_d`` (product sanitisation, Eq. 7); the sanitised record is stored and every later
query is post-processing of it (Theorem 4).

* Theorem 5 with Lemma 3: the n-row release is (epsilon, delta)-DP **iff** for all values
  ``d, d'`` of the domain ``D`` and all sets ``A``:
  ``P(X_d in A) <= e^epsilon P(X_{d'} in A) + delta`` (14). The budget does not grow with n.
* Example 5, bounded numeric ``D = [lo, hi]``: ``X_d = d + Laplace(b)``
  (:func:`laplace_scale_paper`, :func:`laplace_scale_tight`, :func:`sanitise_numeric`).
* Example 6, finite ``D`` with ``|D| = m + 1``: k-ary randomised response
  (:func:`rr_keep`, :func:`sanitise_categorical`).
* Theorems 6 and 7: lower bounds on the maximal expected error
  ``E = max_d E[rho(X_d, d)]`` (13) of *any* such mechanism
  (:func:`error_lower_bound_compact`, :func:`error_lower_bound_finite`), next to the error of
  the mechanisms here (:func:`laplace_expected_error`, :func:`rr_expected_error`).

Beyond the paper (marked [X] in the docstrings; the paper has no composition theorem): the
budget split over the attributes of one record and basic composition (:func:`split_budget`,
:func:`compose_budget`), the per-person ledger over serial releases (:func:`new_ledger`,
:func:`ledger_charge`, :func:`ledger_charge_batch`), de-biased counts from randomised response
(:func:`rr_debiased_counts`), the tight Laplace scale, and the self-test helpers
(:func:`hockey_stick_divergence`, :func:`empirical_dp_check`).
``calc_*`` return plain dicts of inputs and outputs for a calculator front end.

Neighbours are substitutions of one record, with n public: membership is *not* protected.
All logarithms are natural. Every random draw comes from the ``numpy.random.Generator``
passed in; production callers seed it from OS entropy (``numpy.random.default_rng()``), never
from a guessable value.

References
----------
.. [HLM14] N. Holohan, D. J. Leith, O. Mason. Differential Privacy in Metric Spaces: Numerical,
   Categorical and Functional Data Under the One Roof. arXiv:1402.6124 (2014). Digest:
   /work/shared/research/seed-dp-metric-spaces.md.
.. [DR14] C. Dwork, A. Roth. The Algorithmic Foundations of Differential Privacy (2014),
   Theorem 3.16 (basic composition).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stream_release.errors import InvalidParameter
from stream_release.privacy.validation import check_delta, check_epsilon

__all__ = [
    "BUDGET_RTOL",
    "BudgetSplit",
    "DebiasedCounts",
    "EmpiricalDPResult",
    "LedgerBatch",
    "LedgerCharge",
    "RRKeep",
    "calc_laplace_scale",
    "calc_lower_bound",
    "calc_rr_keep",
    "compose_budget",
    "empirical_dp_check",
    "error_lower_bound_compact",
    "error_lower_bound_finite",
    "hockey_stick_divergence",
    "laplace_exact_delta",
    "laplace_expected_error",
    "laplace_scale_paper",
    "laplace_scale_tight",
    "ledger_charge",
    "ledger_charge_batch",
    "ledger_spent",
    "new_ledger",
    "rr_debiased_counts",
    "rr_exact_delta",
    "rr_expected_error",
    "rr_keep",
    "sanitise_categorical",
    "sanitise_numeric",
    "split_budget",
]

BUDGET_RTOL = 1e-9
"""A person's spend ``s`` stays within a cap ``c`` iff ``s <= c (1 + BUDGET_RTOL)``: absorbs the
rounding of :func:`split_budget` shares that sum to the cap, and nothing else."""

ScaleRule = Literal["tight", "paper"]

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


def _bounds(lo: float, hi: float) -> tuple[float, float]:
    lo_f, hi_f = _real("lo", lo), _real("hi", hi)
    if not (math.isfinite(lo_f) and math.isfinite(hi_f) and lo_f <= hi_f):
        raise InvalidParameter(
            f"lo = {lo!r}, hi = {hi!r}: the domain [lo, hi] needs finite lo <= hi "
            "(e.g. lo = 0, hi = 100)"
        )
    if not math.isfinite(hi_f - lo_f):
        raise InvalidParameter(f"lo = {lo!r}, hi = {hi!r}: hi - lo overflows; narrow [lo, hi]")
    return lo_f, hi_f


def _rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise InvalidParameter(
            f"rng = {rng!r}: must be a numpy.random.Generator (e.g. numpy.random.default_rng())"
        )
    return rng


def _scale_rule(scale: str) -> ScaleRule:
    if scale == "tight":
        return "tight"
    if scale == "paper":
        return "paper"
    raise InvalidParameter(f"scale = {scale!r}: must be 'tight' or 'paper'")


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


# --- Laplace sanitisation on [lo, hi] (Example 5) ---------------------------------------------


def laplace_scale_paper(diameter: float, epsilon: float, delta: float) -> float:
    r"""Laplace scale of Example 5 of [HLM14]: ``b = diam(D) / (epsilon - ln(1 - delta))``.

    ``X_d = d + Laplace(b)`` on a bounded ``D`` is then (epsilon, delta)-DP per record, hence for
    every n-row product release (Theorem 5).

    Parameters
    ----------
    diameter : float, ``diam(D) = hi - lo``, finite, >= 0 (0: a constant, scale 0)
    epsilon : float, finite, >= 0
    delta : float, ``0 <= delta < 1``

    Returns
    -------
    float, the scale ``b`` (mean absolute noise; variance ``2 b^2``).

    Raises
    ------
    InvalidParameter
        A parameter outside its domain, or ``epsilon = delta = 0`` with ``diameter > 0``: no
        finite scale is (0, 0)-DP, the attribute cannot be published.

    Examples
    --------
    >>> round(laplace_scale_paper(1.0, 1.0, 0.01), 4)
    0.99

    Notes
    -----
    The paper's proof only uses ``1 <= e^{epsilon - |Delta|/b} + delta``: at this scale the
    mechanism is in fact (epsilon - ln(1 - delta), 0)-DP and its exact delta is
    ``1 - sqrt(1 - delta)``, about half the delta asked for (:func:`laplace_exact_delta`).
    Evaluated with ``log1p``.
    """
    w = _diameter(diameter)
    eps, dlt = _epsilon_delta(epsilon, delta)
    return _laplace_scale(w, eps - math.log1p(-dlt))


def laplace_scale_tight(diameter: float, epsilon: float, delta: float) -> float:
    r"""Smallest (epsilon, delta)-DP Laplace scale on ``D``: ``W / (epsilon - 2 ln(1 - delta))``.

    Departure [X] from Example 5 of [HLM14] (same mechanism, smaller noise): equal to
    :func:`laplace_scale_paper` when ``delta = 0``, below it when ``delta > 0``.

    Parameters
    ----------
    diameter : float, ``W = diam(D)``, finite, >= 0
    epsilon : float, finite, >= 0
    delta : float, ``0 <= delta < 1``

    Examples
    --------
    >>> round(laplace_scale_tight(1.0, 1.0, 0.01), 4)
    0.9803

    Notes
    -----
    Proof. Scale out ``b`` and put ``eps0 = W / b``. Two Laplace densities a distance ``eps0``
    apart have ratio ``f_0 / f_eps0 = e^{eps0}`` on ``x <= 0``, ``e^{eps0 - 2x}`` on
    ``[0, eps0]`` and ``e^{-eps0}`` beyond, so the worst set is ``{x < t}`` with
    ``t = (eps0 - epsilon) / 2`` and
    ``sup_A [P_0(A) - e^epsilon P_eps0(A)] = 1 - e^{-t}/2 - e^{epsilon} e^{t - eps0}/2
    = 1 - e^{(epsilon - eps0)/2}``.
    This is ``<= delta`` iff ``eps0 <= epsilon - 2 ln(1 - delta)``; the largest distance in
    ``D`` is ``W``. Checked against quadrature in the tests. Clamping the output into D
    (:func:`sanitise_numeric`) is post-processing and cannot increase delta (Theorem 4).
    """
    w = _diameter(diameter)
    eps, dlt = _epsilon_delta(epsilon, delta)
    return _laplace_scale(w, eps - 2.0 * math.log1p(-dlt))


def _laplace_scale(w: float, eps0: float) -> float:
    if w == 0.0:
        return 0.0
    if eps0 <= 0.0:
        raise InvalidParameter(
            "epsilon = 0, delta = 0: no finite Laplace scale is (0, 0)-DP for a non-constant "
            "numeric attribute; publish nothing or a constant, or give it epsilon > 0"
        )
    return w / eps0


def laplace_exact_delta(diameter: float, scale: float, epsilon: float) -> float:
    r"""Exact delta of ``d + Laplace(scale)`` on ``D`` at ``epsilon`` (Example 5 of [HLM14]).

    ``delta(epsilon) = max(0, 1 - exp((epsilon - W/scale) / 2))``: the supremum over all
    pairs ``d, d'`` in ``D`` and all Borel sets of ``P(X_d in A) - e^epsilon P(X_{d'} in A)``,
    the quantity condition (14) bounds [X; proof in :func:`laplace_scale_tight`].

    Parameters
    ----------
    diameter : float, ``W = diam(D)``, finite, >= 0
    scale : float, ``b > 0`` (``b = 0`` is allowed only with ``W = 0``)
    epsilon : float, finite, >= 0

    Examples
    --------
    >>> round(laplace_exact_delta(1.0, laplace_scale_paper(1.0, 1.0, 0.01), 1.0), 9)
    0.005012563
    """
    w = _diameter(diameter)
    b = _real("scale", scale)
    eps = check_epsilon(epsilon)
    if w == 0.0:
        return 0.0
    if not (b > 0.0 and math.isfinite(b)):
        raise InvalidParameter(f"scale = {scale!r}: the Laplace scale must be finite and > 0")
    return max(0.0, -math.expm1((eps - w / b) / 2.0))


def sanitise_numeric(
    values: ArrayLike,
    lo: float,
    hi: float,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
    *,
    scale: ScaleRule = "tight",
    clamp: bool = True,
) -> NDArray[np.float64]:
    r"""Sanitise each value once: clip into ``[lo, hi]``, add ``Laplace(b)``, clamp the result.

    Example 5 of [HLM14] applied row by row (Eq. 7): (epsilon, delta)-DP per record and, by
    Theorem 5, for the whole array whatever its length.

    Parameters
    ----------
    values : array_like of float, any shape; no NaN (map missing values to an in-domain value
        first: dropping or flagging them would reveal them)
    lo, hi : float, finite, ``lo <= hi``; ``D = [lo, hi]``, ``diam(D) = hi - lo``
    epsilon : float, finite, >= 0
    delta : float, ``0 <= delta < 1``
    rng : numpy.random.Generator, the only source of randomness
    scale : ``"tight"`` (default, :func:`laplace_scale_tight`) or ``"paper"``
        (:func:`laplace_scale_paper`); equal when ``delta = 0``
    clamp : bool, clamp the noisy value into ``[lo, hi]`` (default). ``False`` returns the
        paper's real-valued ``X_d = d + L`` (unbiased, for sums and means); the clamped value
        is ``numpy.clip`` of it, so publishing both from the **same** draw costs nothing more.

    Returns
    -------
    float64 array of the shape of ``values``; no value is dropped.

    Examples
    --------
    >>> out = sanitise_numeric([-5.0, 30.0, 250.0], 0.0, 100.0, 1.0, 0.0,
    ...                        np.random.default_rng(7))
    >>> out.shape, bool(((out >= 0.0) & (out <= 100.0)).all())
    ((3,), True)

    Notes
    -----
    *Inputs outside D* are clipped to the nearest end, never dropped: the proof of Example 5
    needs ``|d - d'| <= diam(D)``, and dropping a row would reveal that it was out of range.

    *Outputs outside D.* The paper's mechanism is real-valued: ``d + L`` leaves ``[lo, hi]``
    with probability up to ``1/2`` (``U = R``, not ``D``). We clamp by default. Clamping is a
    measurable function of the output, so it is free (Theorem 4) and never moves a value away
    from its true ``d``; the maximal expected error drops from ``b`` to
    ``b (1 - e^{-W/(2b)})`` (:func:`laplace_expected_error`). Clamping biases sums and means
    towards the middle: aggregate from ``clamp=False`` output of the same draw. Theorem 6's
    bound holds for either output (real-valued outputs are allowed there).

    Floating point: ``rng.laplace`` is a textbook floating-point sampler; its low-order bits can
    leak (Mironov 2012). A snapped or discrete Laplace is the production-grade choice.
    """
    lo_f, hi_f = _bounds(lo, hi)
    rule = _scale_rule(scale)
    gen = _rng(rng)
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"values: must be an array of real numbers ({exc})") from exc
    if np.isnan(x).any():
        raise InvalidParameter(
            f"values: {int(np.isnan(x).sum())} NaN value(s); map missing values to a fixed value "
            "in [lo, hi] before sanitising (dropping them would reveal them)"
        )
    w = hi_f - lo_f
    b = (laplace_scale_tight if rule == "tight" else laplace_scale_paper)(w, epsilon, delta)
    clipped = np.clip(x, lo_f, hi_f)
    if b == 0.0:
        return clipped  # a constant attribute: D = {lo}, nothing to hide
    noisy = clipped + gen.laplace(loc=0.0, scale=b, size=x.shape)
    return np.clip(noisy, lo_f, hi_f) if clamp else noisy


def laplace_expected_error(
    diameter: float,
    epsilon: float,
    delta: float,
    *,
    scale: ScaleRule = "tight",
    clamped: bool = True,
) -> float:
    r"""Maximal expected error ``E = max_d E|X_d - d|`` (13) of :func:`sanitise_numeric`.

    For Example 5 of [HLM14]: ``E = b`` unclamped (``E|L| = b`` for every d) and
    ``E = b (1 - e^{-W/(2b)})`` clamped into ``[lo, hi]`` [X], attained at the midpoint.

    Parameters
    ----------
    diameter : float, ``W = hi - lo``, finite, >= 0
    epsilon, delta : the budget, as in :func:`sanitise_numeric`
    scale : ``"tight"`` or ``"paper"``, the scale rule used
    clamped : bool, error of the clamped (default) or the raw real-valued output

    Examples
    --------
    >>> round(laplace_expected_error(1.0, 1.0, 0.0), 10)  # b = 1, 1 - e^{-1/2}
    0.3934693403

    Notes
    -----
    Clamped, with the true value at distances ``a`` and ``W - a`` from the ends,
    ``E|clamp(d + L) - d| = (1/2)[b(1 - e^{-a/b}) + b(1 - e^{-(W-a)/b})]``, concave in ``a``
    and largest at ``a = W/2`` (at an end it is ``(b/2)(1 - e^{-W/b})``).
    Compare with :func:`error_lower_bound_compact` (Theorem 6): the ratio is about 2-3
    clamped and 7 or more unclamped (digest §5).
    """
    w = _diameter(diameter)
    rule = _scale_rule(scale)
    b = (laplace_scale_tight if rule == "tight" else laplace_scale_paper)(w, epsilon, delta)
    if b == 0.0:
        return 0.0
    return -b * math.expm1(-w / (2.0 * b)) if clamped else b


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
    return np.where(kept, c, (c + shift) % k)


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
    Valid for outputs outside D too (Laplace outputs in R) [X, digest §4]: the proof's two
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
    Caveat [X, digest §4]: the proof needs the m + 1 radius-kappa balls to be disjoint, true
    inside D but not in U. With outputs outside D the bound can fail: on the vertices of a unit
    equilateral triangle, "always output the centroid" is (0, 0)-DP with
    ``E = 1/sqrt(3) = 0.577 < 2/3``. For such mechanisms (``outputs_in_domain=False``) the proof
    with radius ``kappa/2`` gives ``(1 - delta)(kappa/2) m / (m + e^epsilon)``, returned here.
    """
    m = _domain_size(domain_size) - 1
    eps, dlt = _epsilon_delta(epsilon, delta)
    sep = _kappa(kappa)
    radius = sep if outputs_in_domain else sep / 2.0
    t = _exp_neg(eps)
    return (1.0 - dlt) * radius * m * t / (m * t + 1.0)


# --- budget inside one record and across releases ---------------------------------------------


class BudgetSplit(NamedTuple):
    """Per-attribute budgets ``(k,)`` float64: ``epsilon[j]``, ``delta[j]``."""

    epsilon: NDArray[np.float64]
    delta: NDArray[np.float64]


def split_budget(epsilon: float, delta: float, weights: ArrayLike) -> BudgetSplit:
    r"""Split one record's (epsilon, delta) over its k attributes in proportion to ``weights``.

    Section 5 of [HLM14] (Eq. 7, Theorem 5) sanitises each *row* once and the budget does not
    grow with the number of rows. The *attributes* of one row are several mechanisms applied
    to the same person, and compose [X]: independent (epsilon_j, delta_j)-DP attributes give
    ``(sum epsilon_j, sum delta_j)`` (basic composition, [DR14] Theorem 3.16; exact for
    delta = 0, where the likelihood ratios multiply). So ``epsilon_j = epsilon w_j / sum w``
    and ``delta_j = delta w_j / sum w``.

    Parameters
    ----------
    epsilon : float, the record's epsilon, finite, >= 0
    delta : float, the record's delta, ``0 <= delta < 1``
    weights : (k,) array_like of float, finite, >= 0, positive sum (0: attribute gets no
        budget, i.e. a uniform RR output or an unpublishable numeric attribute)

    Examples
    --------
    >>> s = split_budget(1.0, 0.0, [1, 3])
    >>> s.epsilon.tolist(), s.delta.tolist()
    ([0.25, 0.75], [0.0, 0.0])

    Notes
    -----
    Recommended: ``delta = 0``. For Laplace, delta buys only ``-ln(1 - delta) ~ delta`` of
    epsilon. Alternatives the caller may prefer: the whole record as one categorical value
    over the product domain with one randomised response (exact, Example 6, but useless once
    ``prod |D_j|`` is large); or, numeric attributes only, scales with
    ``sum_j W_j / b_j <= epsilon - ln(1 - delta)`` (weighted-l1 Laplace, [X]).
    The shares sum to the inputs up to rounding; :func:`ledger_charge` allows
    :data:`BUDGET_RTOL` for it.
    """
    eps, dlt = _epsilon_delta(epsilon, delta)
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"weights: must be an array of real numbers ({exc})") from exc
    if w.ndim != 1 or w.size == 0:
        raise InvalidParameter(f"weights: shape {w.shape}, need a non-empty (k,) vector")
    if not (np.isfinite(w).all() and (w >= 0).all() and w.sum() > 0):
        raise InvalidParameter(
            f"weights = {w.tolist()}: must be finite, >= 0, with a positive sum (e.g. [1, 1])"
        )
    share = w / math.fsum(w.tolist())
    return BudgetSplit(eps * share, dlt * share)


def compose_budget(epsilons: ArrayLike, deltas: ArrayLike) -> tuple[float, float]:
    r"""Total budget of several mechanisms on the same person: ``(sum epsilon_i, sum delta_i)``.

    Basic composition [X; [DR14] Theorem 3.16; [HLM14] has no composition theorem]. It is
    what :func:`split_budget` inverts and what :func:`ledger_charge` accumulates. Rows of
    *different* people in one product release do not compose (Theorem 5 of [HLM14]): rows
    with different 1-row mechanisms give ``(max epsilon_i, max delta_i)``.

    Parameters
    ----------
    epsilons, deltas : (k,) array_like of float, each ``epsilon_i >= 0``,
        ``0 <= delta_i < 1``

    Examples
    --------
    >>> compose_budget([0.5, 0.25], [0.0, 1e-6])
    (0.75, 1e-06)
    """
    e = np.atleast_1d(np.asarray(epsilons, dtype=np.float64))
    d = np.atleast_1d(np.asarray(deltas, dtype=np.float64))
    if e.shape != d.shape or e.ndim != 1:
        raise InvalidParameter(f"epsilons has shape {e.shape} but deltas has shape {d.shape}")
    for ei, di in zip(e.tolist(), d.tolist(), strict=True):
        _epsilon_delta(ei, di, ("epsilons[i]", "deltas[i]"))
    return math.fsum(e.tolist()), math.fsum(d.tolist())


# --- per-person ledger over serial releases (plain state) -------------------------------------


@dataclass(frozen=True)
class LedgerCharge:
    """Outcome of :func:`ledger_charge`.

    ``granted``: the record may be sanitised (or, if ``cached``, its stored draw re-served).
    ``cached``: the record was charged before; re-serving the stored draw is free.
    ``state``: the ledger after the charge (the input object is never modified).
    ``epsilon_spent``, ``delta_spent``: the person's totals after the charge.
    ``reason``: why a charge was refused ("" if granted).
    """

    granted: bool
    cached: bool
    state: dict[str, Any]
    epsilon_spent: float
    delta_spent: float
    reason: str


@dataclass(frozen=True)
class LedgerBatch:
    """Outcome of :func:`ledger_charge_batch`: ``(n,)`` bool masks and the new state."""

    granted: NDArray[np.bool_]
    cached: NDArray[np.bool_]
    state: dict[str, Any]


def new_ledger(epsilon_cap: float, delta_cap: float) -> dict[str, Any]:
    r"""An empty per-person budget ledger with a lifetime cap ``(epsilon_cap, delta_cap)``.

    Plain JSON data (digest F2 [X]; [HLM14] has no composition theorem)::

        {"epsilon_cap": float, "delta_cap": float,
         "people": {person: {record: [epsilon, delta], ...}, ...}}

    ``person`` is the caller's pseudonym, ``record`` names one sanitised record version; both
    are strings. The caller persists the dict and passes it back; functions here never modify
    it. A person's spend is the basic composition of their records' costs
    (:func:`compose_budget`).

    Examples
    --------
    >>> new_ledger(2.0, 0.0)
    {'epsilon_cap': 2.0, 'delta_cap': 0.0, 'people': {}}
    """
    eps, dlt = _epsilon_delta(epsilon_cap, delta_cap, ("epsilon_cap", "delta_cap"))
    return {"epsilon_cap": eps, "delta_cap": dlt, "people": {}}


def _ledger(state: object) -> tuple[float, float, dict[str, Any]]:
    if not isinstance(state, dict) or not {"epsilon_cap", "delta_cap", "people"} <= set(state):
        raise InvalidParameter(
            "state: not a ledger; need a dict with epsilon_cap, delta_cap and people "
            "(build one with new_ledger)"
        )
    eps, dlt = _epsilon_delta(
        state["epsilon_cap"], state["delta_cap"], ("epsilon_cap", "delta_cap")
    )
    if not isinstance(state["people"], dict):
        raise InvalidParameter("state['people']: must be a dict person -> {record: [eps, delta]}")
    return eps, dlt, state["people"]


def _person_spent(records: dict[str, Any]) -> tuple[float, float]:
    try:
        costs = [(float(c[0]), float(c[1])) for c in records.values()]
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        raise InvalidParameter(
            f"state: a record cost is not an [epsilon, delta] pair ({exc}); the ledger is corrupt"
        ) from exc
    return math.fsum(c[0] for c in costs), math.fsum(c[1] for c in costs)


def ledger_spent(state: dict[str, Any], person: str) -> tuple[float, float]:
    """``(epsilon, delta)`` spent by ``person`` so far: basic composition of their records.

    See :func:`new_ledger` (digest F2 [X]; [HLM14] Theorem 4 makes re-serving free).
    """
    _, _, people = _ledger(state)
    return _person_spent(people.get(person, {}))


def ledger_charge(
    state: dict[str, Any], person: str, record: str, epsilon: float, delta: float
) -> LedgerCharge:
    r"""Charge ``(epsilon, delta)`` to ``person`` for sanitising ``record``, unless over the cap.

    Digest F2 [X], resting on [HLM14]: a record is sanitised once and stored. Re-serving the
    stored draw, or any query on it, is post-processing and free (Theorem 4), so charging a
    ``record`` already in the ledger is granted as ``cached`` at no cost. A new record of the
    same person (an update, a new period) is a new mechanism on that person and composes:
    ``(sum epsilon_r, sum delta_r)``. A charge that would take the person past the cap (with
    :data:`BUDGET_RTOL`) is refused: the result has ``granted = False`` and the unchanged
    state; the caller suppresses the record, or refuses the release.

    Parameters
    ----------
    state : dict, a ledger from :func:`new_ledger` (or a previous charge)
    person : str, the person's pseudonym
    record : str, the sanitised record's id; a new version must get a new id
    epsilon, delta : float, the record's budget (its :func:`split_budget` total)

    Examples
    --------
    >>> s = new_ledger(1.0, 0.0)
    >>> c = ledger_charge(s, "p1", "r1", 0.75, 0.0)
    >>> c.granted, ledger_charge(c.state, "p1", "r2", 0.5, 0.0).granted
    (True, False)

    Notes
    -----
    *Never redraw* noise for a cached record: a fresh draw per request is the averaging attack
    Section 4 of the paper warns about, and the ledger could not see it.
    *Timing leaks*: the fact that a new version exists can reveal that the value changed;
    re-sanitise on a fixed schedule, whether or not the value changed, to avoid it.
    *k records of one person in one release* are k charges: independent (epsilon, delta)
    rows compose to ``(k epsilon, k delta)``, tighter than the group-privacy chaining
    ``(k epsilon, delta sum_i e^{i epsilon})`` of digest F2.
    """
    batch = ledger_charge_batch(state, [person], [record], epsilon, delta)
    e_spent, d_spent = _person_spent(batch.state["people"].get(person, {}))
    granted = bool(batch.granted[0])
    reason = ""
    if not granted:
        cap_e, cap_d, _ = _ledger(state)
        reason = (
            f"person {person!r}: spent (epsilon, delta) = ({e_spent:.6g}, {d_spent:.6g}); "
            f"this record needs ({float(epsilon):.6g}, {float(delta):.6g}) more, over the cap "
            f"({cap_e:.6g}, {cap_d:.6g})"
        )
    return LedgerCharge(granted, bool(batch.cached[0]), batch.state, e_spent, d_spent, reason)


def ledger_charge_batch(
    state: dict[str, Any],
    persons: Sequence[str],
    records: Sequence[str],
    epsilon: float,
    delta: float,
) -> LedgerBatch:
    r"""Charge each ``(persons[i], records[i])`` of one release in order (:func:`ledger_charge`).

    Digest F2 [X] on Theorems 4 and 5 of [HLM14]. A person with several new records in the
    batch is charged for each; once a charge is refused, their later records in the batch may
    still fit (a cached or cheaper one) and are judged one by one.

    Parameters
    ----------
    state : dict, the ledger
    persons, records : length-n sequences of str
    epsilon, delta : float, each record's budget

    Returns
    -------
    LedgerBatch: ``granted``, ``cached`` ``(n,)`` bool and the new state (input unchanged).
    """
    cap_e, cap_d, people = _ledger(state)
    eps, dlt = _epsilon_delta(epsilon, delta)
    if len(persons) != len(records):
        raise InvalidParameter(
            f"persons has {len(persons)} entries but records has {len(records)}; one per record"
        )
    new_people = dict(people)
    copied: set[str] = set()
    granted = np.zeros(len(persons), dtype=bool)
    cached = np.zeros(len(persons), dtype=bool)
    for i, (person, record) in enumerate(zip(persons, records, strict=True)):
        if not isinstance(person, str) or not isinstance(record, str):
            raise InvalidParameter(
                f"persons[{i}] = {person!r}, records[{i}] = {record!r}: must be str "
                "(pseudonym and record id)"
            )
        mine = new_people.get(person, {})
        if not isinstance(mine, dict):
            raise InvalidParameter(f"state['people'][{person!r}]: must be a dict record -> cost")
        if record in mine:
            granted[i] = cached[i] = True
            continue
        spent_e, spent_d = _person_spent(mine)
        if math.fsum([spent_e, eps]) > cap_e * (1.0 + BUDGET_RTOL) or math.fsum(
            [spent_d, dlt]
        ) > cap_d * (1.0 + BUDGET_RTOL):
            continue
        if person not in copied:
            mine = dict(mine)
            new_people[person] = mine
            copied.add(person)
        mine[record] = [eps, dlt]
        granted[i] = True
    new_state = {"epsilon_cap": cap_e, "delta_cap": cap_d, "people": new_people}
    return LedgerBatch(granted, cached, new_state)


# --- calculators (plain dicts) ----------------------------------------------------------------


def calc_laplace_scale(diameter: float, epsilon: float, delta: float) -> dict[str, Any]:
    r"""Laplace sanitisation of ``[lo, hi]`` at a glance (Example 5 and Theorem 6 of [HLM14]).

    Parameters
    ----------
    diameter : float, ``hi - lo``, finite, >= 0
    epsilon : float, finite, > 0 unless ``delta > 0``
    delta : float, ``0 <= delta < 1``

    Returns
    -------
    dict of floats: the inputs; ``scale_paper`` and ``scale_tight``; ``exact_delta_paper``
    (the delta the paper's scale really spends); ``expected_error_clamped`` and
    ``expected_error_unclamped`` at the tight scale; ``lower_bound`` (Theorem 6) and
    ``ratio_clamped`` (``None`` when the bound is 0).

    Examples
    --------
    >>> r = calc_laplace_scale(1.0, 1.0, 0.01)
    >>> round(r["scale_paper"], 4), round(r["scale_tight"], 4)
    (0.99, 0.9803)
    """
    w = _diameter(diameter)
    eps, dlt = _epsilon_delta(epsilon, delta)
    b_paper = laplace_scale_paper(w, eps, dlt)
    b_tight = laplace_scale_tight(w, eps, dlt)
    err = laplace_expected_error(w, eps, dlt, scale="tight", clamped=True)
    lb = error_lower_bound_compact(w, eps, dlt)
    return {
        "diameter": w,
        "epsilon": eps,
        "delta": dlt,
        "scale_paper": b_paper,
        "scale_tight": b_tight,
        "exact_delta_paper": laplace_exact_delta(w, b_paper, eps) if w > 0 else 0.0,
        "expected_error_clamped": err,
        "expected_error_unclamped": b_tight,
        "lower_bound": lb,
        "ratio_clamped": err / lb if lb > 0 else None,
    }


def calc_rr_keep(domain_size: int, epsilon: float, delta: float) -> dict[str, Any]:
    r"""Randomised response at a glance (Examples 6 and 7, Theorem 7 of [HLM14]).

    Parameters
    ----------
    domain_size : int, the number of categories ``m + 1 >= 1``
    epsilon : float, finite, >= 0
    delta : float, ``0 <= delta < 1``

    Returns
    -------
    dict: the inputs, ``m``, ``keep``, ``p_other`` (``p_min``), ``exact_delta`` (equal to delta
    at ``p_min`` up to rounding), ``expected_error`` (discrete metric), ``lower_bound``
    (Theorem 7, discrete metric) and ``ratio`` (1 up to rounding; ``None`` if the bound is 0).

    Examples
    --------
    >>> r = calc_rr_keep(8, 1.0, 0.0)
    >>> round(r["p_other"], 5), round(r["expected_error"], 5), round(r["ratio"], 9)
    (0.1029, 0.72029, 1.0)
    """
    k = _domain_size(domain_size)
    eps, dlt = _epsilon_delta(epsilon, delta)
    keep, p = rr_keep(k, eps, dlt)
    err = rr_expected_error(k, eps, dlt)
    lb = error_lower_bound_finite(k, eps, dlt)
    return {
        "domain_size": k,
        "m": k - 1,
        "epsilon": eps,
        "delta": dlt,
        "keep": keep,
        "p_other": p,
        "exact_delta": rr_exact_delta(k, p, eps),
        "expected_error": err,
        "lower_bound": lb,
        "ratio": err / lb if lb > 0 else None,
    }


def calc_lower_bound(
    epsilon: float,
    delta: float,
    *,
    diameter: float | None = None,
    domain_size: int | None = None,
    kappa: float | None = None,
    outputs_in_domain: bool = True,
) -> dict[str, Any]:
    r"""Per-record error lower bound and this module's mechanism's error (Thms 6, 7 of [HLM14]).

    Describe the attribute's domain D in one of two ways:

    * **numeric interval**: ``diameter = hi - lo`` only. Theorem 6; the mechanism is clamped
      Laplace at the tight scale (:func:`sanitise_numeric`).
    * **finite set of categories**: ``domain_size = m + 1``, with ``kappa`` the smallest
      distance between two distinct values and ``diameter`` the largest. Both default to 1,
      the discrete metric (all categories equally far apart). Theorem 7 (with ``kappa``) and
      Theorem 6 (with ``diameter``); the bound is the larger. The mechanism is randomised
      response; its error is reported when all distances are equal (``kappa == diameter``),
      and otherwise needs the full metric (:func:`rr_expected_error` with ``distances``).

    Parameters
    ----------
    epsilon : float, finite, >= 0
    delta : float, ``0 <= delta < 1``
    diameter : float, optional, ``diam(D)``, finite, >= 0
    domain_size : int, optional, ``|D| >= 1``
    kappa : float, optional, ``min_{d != d'} rho(d, d') > 0``; needs ``domain_size``
    outputs_in_domain : bool, for the finite case: does the mechanism output values of D?
        (Theorem 7 is only proved for such mechanisms; False uses radius ``kappa/2``.)

    Returns
    -------
    dict: the inputs (with defaults filled in), ``theorem_6``, ``theorem_7`` (``None`` when not
    applicable), ``lower_bound``, ``mechanism`` (``"laplace"`` or ``"randomised_response"``),
    ``expected_error`` and ``ratio`` (``None`` when unknown or the bound is 0), ``note``.

    Examples
    --------
    >>> r = calc_lower_bound(1.0, 0.0, domain_size=8)
    >>> round(r["lower_bound"], 5), round(r["expected_error"], 5), round(r["ratio"], 9)
    (0.72029, 0.72029, 1.0)
    """
    eps, dlt = _epsilon_delta(epsilon, delta)
    if diameter is None and domain_size is None:
        raise InvalidParameter(
            "diameter = None, domain_size = None: give diameter (hi - lo) for a numeric "
            "interval, or domain_size (number of categories) for a finite domain"
        )
    note = ""
    if domain_size is None:
        if kappa is not None:
            raise InvalidParameter(
                f"kappa = {kappa!r}: the minimum separation needs domain_size (a finite D)"
            )
        w = _diameter(diameter)  # type: ignore[arg-type]
        thm6 = error_lower_bound_compact(w, eps, dlt)
        thm7 = None
        mechanism = "laplace"
        if w > 0 and eps == 0.0 and dlt == 0.0:
            err = None
            note = "epsilon = delta = 0: Laplace cannot publish this attribute"
        else:
            err = laplace_expected_error(w, eps, dlt, scale="tight", clamped=True)
            note = "clamped Laplace, tight scale; unclamped error is the scale itself"
        k = None
        sep = None
    else:
        k = _domain_size(domain_size)
        sep = 1.0 if kappa is None else _kappa(kappa)
        w = sep if diameter is None else _diameter(diameter)
        if k == 1:
            w = 0.0
        elif w < sep:
            raise InvalidParameter(
                f"diameter = {diameter!r}, kappa = {kappa!r}: the largest distance cannot be "
                "below the smallest one"
            )
        thm6 = error_lower_bound_compact(w, eps, dlt)
        thm7 = error_lower_bound_finite(k, eps, dlt, kappa=sep, outputs_in_domain=outputs_in_domain)
        mechanism = "randomised_response"
        if k == 1 or w == sep:
            err = sep * rr_expected_error(k, eps, dlt)
        else:
            err = None
            note = "non-uniform metric: use rr_expected_error(..., distances=...) for the error"
    lb = thm6 if thm7 is None else max(thm6, thm7)
    return {
        "epsilon": eps,
        "delta": dlt,
        "diameter": w,
        "domain_size": k,
        "kappa": sep,
        "outputs_in_domain": bool(outputs_in_domain),
        "theorem_6": thm6,
        "theorem_7": thm7,
        "lower_bound": lb,
        "mechanism": mechanism,
        "expected_error": err,
        "ratio": err / lb if err is not None and lb > 0 else None,
        "note": note,
    }


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
