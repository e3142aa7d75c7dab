r"""Calculator views of [HLM14]: Laplace scale (Example 5), RR keep (Examples 6, 7), lower bounds.

Each ``calc_*`` returns a plain dict of its inputs and outputs (JSON-ready) for a calculator
front end (``stream-release calc``): the mechanisms of :mod:`stream_release.core.privacy.metric_dp`
next to the error lower bounds of Theorems 6 and 7 and the exact delta they reach.

Paper and digest: see :mod:`stream_release.core.privacy.metric_dp` ([HLM14], Holohan, Leith and
Mason, Differential Privacy in Metric Spaces, arXiv:1402.6124, 2014).
"""

from __future__ import annotations

from typing import Any

from stream_release.core.privacy.metric_dp import _diameter, _domain_size, _epsilon_delta, _kappa
from stream_release.core.privacy.metric_dp_laplace import (
    laplace_exact_delta,
    laplace_expected_error,
    laplace_scale_paper,
    laplace_scale_tight,
)
from stream_release.core.privacy.metric_dp_lower_bounds import (
    error_lower_bound_compact,
    error_lower_bound_finite,
)
from stream_release.core.privacy.metric_dp_rr import rr_exact_delta, rr_expected_error, rr_keep
from stream_release.errors import InvalidParameter

__all__ = [
    "calc_laplace_scale",
    "calc_lower_bound",
    "calc_rr_keep",
]

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
      Laplace at the tight scale (:func:`~stream_release.core.privacy.metric_dp_laplace.
      sanitise_numeric`).
    * **finite set of categories**: ``domain_size = m + 1``, with ``kappa`` the smallest
      distance between two distinct values and ``diameter`` the largest. Both default to 1,
      the discrete metric (all categories equally far apart). Theorem 7 (with ``kappa``) and
      Theorem 6 (with ``diameter``); the bound is the larger. The mechanism is randomised
      response; its error is reported when all distances are equal (``kappa == diameter``),
      and otherwise needs the full metric (:func:`~stream_release.core.privacy.metric_dp_rr.
      rr_expected_error` with ``distances``).

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
