"""Checks of privacy parameters, shared by every public entry point.

Each ``check_*`` raises :class:`~stream_release.errors.InvalidParameter` naming the
parameter, its value and the allowed domain; it returns the value as the right type.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

import math
import numbers

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
    """``alpha`` of the geometric strategy: a finite real number > 1 (1 is [WFLWX10] Theorem 2's
    dead end)."""
    value = _as_float("alpha", alpha)
    if not value > 1.0 or not math.isfinite(value):
        raise InvalidParameter(
            f"alpha = {alpha!r}: must be a finite number > 1; alpha = 1 plans at the minimum "
            "ratio, the dead end of Wong et al.'s Theorem 2 (e.g. alpha = 2)"
        )
    return value


def _as_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidParameter(f"{name} = {value!r}: must be a number")
    return float(value)


def check_k(k: int) -> int:
    """``k`` of k-anonymity / k-suppression: an integer crowd size >= 1.

    ``numpy`` integers are accepted; ``bool`` and non-integral numbers (``20.0``) are not.
    """
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise InvalidParameter(f"k = {k!r}: must be an integer >= 1 (e.g. k = 20)")
    if k < 1:
        raise InvalidParameter(
            f"k = {k}: must be >= 1; a generalized tuple is published only if it occurs at "
            "least k times (e.g. k = 20)"
        )
    return int(k)


def check_beta(beta: float, *, allow_one: bool = False) -> float:
    """``beta``, the per-record sampling probability: ``0 < beta < 1`` (``<= 1`` if allowed).

    ``beta = 1`` samples every record (the identity); it is refused unless ``allow_one``,
    because sampling is what makes safe k-anonymization private.
    """
    value = _as_float("beta", beta)
    upper_ok = value <= 1.0 if allow_one else value < 1.0
    if not (value > 0.0 and upper_ok):
        domain = "0 < beta <= 1" if allow_one else "0 < beta < 1"
        raise InvalidParameter(
            f"beta = {beta!r}: the sampling probability must satisfy {domain} (e.g. beta = 0.1)"
        )
    return value


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    """A privacy loss ``epsilon``: a finite real number >= 0."""
    value = _as_float(name, epsilon)
    if not (value >= 0.0 and math.isfinite(value)):
        raise InvalidParameter(
            f"{name} = {epsilon!r}: must be a finite number >= 0 (e.g. {name} = 1.0)"
        )
    return value


def check_delta(delta: float, name: str = "delta") -> float:
    """A failure probability ``delta``: a real number in ``[0, 1]``."""
    value = _as_float(name, delta)
    if not 0.0 <= value <= 1.0:
        raise InvalidParameter(
            f"{name} = {delta!r}: must be a probability in [0, 1] (e.g. {name} = 1e-6)"
        )
    return value


def check_count(n: int, name: str = "n") -> int:
    """A number of records ``n``: an integer >= 0."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise InvalidParameter(f"{name} = {n!r}: must be an integer >= 0 (a number of records)")
    if n < 0:
        raise InvalidParameter(f"{name} = {n}: must be >= 0 (a number of records)")
    return int(n)


def check_open_probability(value: float, name: str = "p") -> float:
    """A probability strictly between 0 and 1 (e.g. a retention probability ``p``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidParameter(f"{name} = {value!r}: must be a number in (0, 1) (e.g. 0.5)")
    if not 0.0 < float(value) < 1.0:
        raise InvalidParameter(
            f"{name} = {value!r}: must lie strictly between 0 and 1 (e.g. {name} = 0.5)"
        )
    return float(value)


def check_positive(value: float, name: str) -> float:
    """A finite real number > 0 (e.g. a relative error bound)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidParameter(f"{name} = {value!r}: must be a finite number > 0 (e.g. 0.5)")
    if not (float(value) > 0.0 and math.isfinite(float(value))):
        raise InvalidParameter(f"{name} = {value!r}: must be a finite number > 0 (e.g. 0.5)")
    return float(value)


def check_domain_size(m: int, name: str = "m") -> int:
    """The size of a sensitive attribute's full domain: an integer >= 2."""
    if isinstance(m, bool) or not isinstance(m, numbers.Integral):
        raise InvalidParameter(
            f"{name} = {m!r}: must be an integer >= 2, the number of values in the full "
            "domain including values absent from the data (e.g. 14)"
        )
    if m < 2:
        raise InvalidParameter(
            f"{name} = {m}: must be >= 2; a one-value domain has nothing to hide (e.g. 14)"
        )
    return int(m)
