r"""Laplace sanitisation of a bounded numeric attribute, Example 5 of [HLM14].

``X_d = d + Laplace(b)`` on ``D = [lo, hi]``: the scale of the paper
(:func:`laplace_scale_paper`) and the smallest (epsilon, delta)-DP scale [X]
(:func:`laplace_scale_tight`), the exact delta a scale spends (:func:`laplace_exact_delta`),
the sanitiser (:func:`sanitise_numeric`) and its maximal expected error (13)
(:func:`laplace_expected_error`). Overview, neighbours and seeding:
:mod:`stream_release.core.privacy.metric_dp`; what ``dp-sanitised`` publishes is sampled by
the grid Laplace of :mod:`stream_release.core.privacy.discrete_laplace` instead.

[HLM14]: N. Holohan, D. J. Leith, O. Mason, Differential Privacy in Metric Spaces,
arXiv:1402.6124 (2014); full reference and digest in :mod:`stream_release.core.privacy.metric_dp`.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stream_release.core.privacy.metric_dp import _diameter, _epsilon_delta, _real, _rng
from stream_release.core.privacy.validation import check_epsilon
from stream_release.errors import InvalidParameter

__all__ = [
    "laplace_exact_delta",
    "laplace_expected_error",
    "laplace_scale_paper",
    "laplace_scale_tight",
    "sanitise_numeric",
]

ScaleRule = Literal["tight", "paper"]

# --- parameter checks (public entry points only) ----------------------------------------------


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


def _scale_rule(scale: str) -> ScaleRule:
    if scale == "tight":
        return "tight"
    if scale == "paper":
        return "paper"
    raise InvalidParameter(f"scale = {scale!r}: must be 'tight' or 'paper'")


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
    Compare with :func:`~stream_release.core.privacy.metric_dp_lower_bounds.
    error_lower_bound_compact` (Theorem 6): the ratio is about 2-3
    clamped and 7 or more unclamped.
    """
    w = _diameter(diameter)
    rule = _scale_rule(scale)
    b = (laplace_scale_tight if rule == "tight" else laplace_scale_paper)(w, epsilon, delta)
    if b == 0.0:
        return 0.0
    return -b * math.expm1(-w / (2.0 * b)) if clamped else b
