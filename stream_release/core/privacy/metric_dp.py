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

Beyond the paper (marked [X] in the docstrings): de-biased counts from randomised response
(:func:`rr_debiased_counts`) and the tight Laplace scale. The budget split, basic composition
and the per-person ledger are in :mod:`stream_release.core.privacy.dp_budget`, the self-test helpers
in :mod:`stream_release.core.privacy.dp_selftest`, the calculator views (plain dicts) in
:mod:`stream_release.core.privacy.dp_calculators`.

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
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stream_release.core.privacy.validation import check_delta, check_epsilon
from stream_release.errors import InvalidParameter

__all__ = [
    "DebiasedCounts",
    "RRKeep",
    "error_lower_bound_compact",
    "error_lower_bound_finite",
    "laplace_exact_delta",
    "laplace_expected_error",
    "laplace_scale_paper",
    "laplace_scale_tight",
    "rr_debiased_counts",
    "rr_exact_delta",
    "rr_expected_error",
    "rr_keep",
    "sanitise_categorical",
    "sanitise_numeric",
]

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

    Floating point: ``rng.laplace`` is a textbook floating-point sampler whose low-order bits can
    leak the input (Mironov 2012): this function is the paper's real-valued mechanism, for
    analysis and for the papers' numbers. What is published (``dp-sanitised``) is sanitised
    by the grid Laplace of :mod:`stream_release.core.privacy.discrete_laplace` instead.
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
