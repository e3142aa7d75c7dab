"""Checks of privacy parameters, shared by every public entry point.

Each ``check_*`` raises :class:`~stream_release.errors.InvalidParameter` naming the
parameter, its value and the allowed domain; it returns the value as the right type.
"""

from __future__ import annotations

import math

from stream_release.errors import InvalidParameter


def check_ell(ell: float) -> float:
    """``l`` of the breach bound ``1/l``: a finite real number greater than 1."""
    value = _as_float("l", ell)
    if not value > 1.0 or not math.isfinite(value):
        raise InvalidParameter(
            f"l = {ell!r}: the breach bound 1/l needs a finite l > 1 (e.g. l = 2)"
        )
    return value


def check_k_prime(k_prime: int) -> int:
    """``k'`` of the constant-ratio strategy: an integer number of linkages >= 1."""
    if isinstance(k_prime, bool) or not isinstance(k_prime, int):
        raise InvalidParameter(f"k_prime = {k_prime!r}: must be an integer >= 1 (e.g. 20)")
    if k_prime < 1:
        raise InvalidParameter(f"k_prime = {k_prime}: must be >= 1 (e.g. 20)")
    return k_prime


def check_alpha(alpha: float) -> float:
    """``alpha`` of the geometric strategy: a finite real number > 1 (1 is Theorem 2's dead end)."""
    value = _as_float("alpha", alpha)
    if not value > 1.0 or not math.isfinite(value):
        raise InvalidParameter(
            f"alpha = {alpha!r}: must be a finite number > 1; alpha = 1 plans at the minimum "
            "ratio, the dead end of Theorem 2 (e.g. alpha = 2)"
        )
    return value


def _as_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidParameter(f"{name} = {value!r}: must be a number")
    return float(value)
