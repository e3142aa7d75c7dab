r"""Reconstruction privacy for a randomized sensitive attribute [WHF12].

Uniform perturbation (retention probability ``p`` over a full domain of ``m`` values, Eq. 1)
hides one record's value, yet an adversary who knows a target's non-sensitive values can
rebuild the value distribution of the target's *micro group* (the records that agree on all
non-sensitive attributes) from the published rows. The accuracy of that micro reconstruction
grows with the number of independent randomization trials in the group.
(ε,δ)-reconstruction-privacy (Definition 3) requires the best known upper bounds on both
tails of the relative reconstruction error beyond ±ε to stay ``>= δ``. Theorems 5.11 and
5.13 turn that into a maximum number of trials per group, the cap ``s_g``, and Algorithm 1
(Sampling → Perturbing → Scaling) enforces the cap while keeping every value's frequency.

This module holds the definitions and the test; the algorithms live next to it:

* :mod:`stream_release.core.privacy.reconstruction_algorithm`: Algorithm 1 (§5,
  Theorems 5.16 and 5.18),
  :func:`~stream_release.core.privacy.reconstruction_algorithm.rp_randomize`.
* :mod:`stream_release.core.privacy.reconstruction_serial`: the serial rules (sticky values, the
  trial ledger) and :func:`~stream_release.core.privacy.reconstruction_serial.serial_rp_randomize`.
* :mod:`stream_release.core.privacy.reconstruction_estimate`: aggregate reconstruction for analysts
  (§3.1, Lemma 1).
* :mod:`stream_release.core.privacy.reconstruction_check`: the test: :func:`~stream_release.
  core.privacy.reconstruction_check.tail_bounds` (Corollary 4.9), :func:`~stream_release.core.
  privacy.reconstruction_check.micro_groups`, :func:`~stream_release.core.privacy.
  reconstruction_check.is_reconstruction_private` (Corollary 4.10 specialised by Theorem 5.13
  or 5.11).
* :mod:`stream_release.core.privacy.reconstruction_kernels`: kernels and checks shared by these
  modules (private).

Contents
--------
* Perturbation (Eq. 1): :func:`perturbation_matrix`, :func:`perturb`,
  :func:`perturb_from_uniforms`.
* Caps: :func:`rp_cap_theorem_5_13` (Eq. 10, the one Algorithm 1 uses),
  :func:`rp_cap_theorem_5_11` (Eq. 9, full Chernoff, stricter), :func:`rp_cap`,
  :func:`epsilon_max`, :func:`max_retention_probability`, :func:`calc_rp_cap` (calculator).

Notation: ``w = f p + (1-p)/m``, ``θ = ε p f / w`` (Theorem 4.6; independent of ``|g|``),
``μ = |g| w``, ``q1 = p + (1-p)/m``, ``q0 = (1-p)/m``. ``f`` is a frequency in the original
group; ``f_max`` the largest one.

Randomness: every function that draws takes a :class:`numpy.random.Generator`. The guarantee
assumes coins the adversary cannot predict: seed production generators from the operating
system (``np.random.default_rng(secrets.randbits(128))``), fixed seeds only in tests.

References
----------
.. [WHF12] K. Wang, C. Han, A. W.-C. Fu. Randomization Resilient To Sensitive
   Reconstruction. arXiv:1202.3179, 2012.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import xlog1py

from stream_release.core.privacy.reconstruction_kernels import (
    _check_cap_args,
    _check_choice,
    _check_codes,
    _check_delta,
    _check_frequency,
    _check_rng,
)
from stream_release.core.privacy.validation import (
    check_domain_size,
    check_open_probability,
    check_positive,
)
from stream_release.errors import InvalidParameter

Bound = Literal["theorem_5_13", "theorem_5_11"]
"""Which Chernoff bounds define the cap: simplified (Eq. 10) or full (Eq. 9)."""

BOUNDS: tuple[str, ...] = ("theorem_5_13", "theorem_5_11")

_SERIES_BELOW = 0.1
"""Below this θ the full-Chernoff exponent ``θ + (1-θ) ln(1-θ)`` is summed as a series."""


# --- perturbation (§3.1, Eq. 1) ---------------------------------------------------------------


def perturbation_matrix(p: float, m: int) -> NDArray[np.float64]:
    r"""Perturbation matrix of uniform perturbation, Eq. (1) of [WHF12].

    ``P[j, i] = Pr[published x_j | original x_i] = p + (1-p)/m`` if ``j == i`` and
    ``(1-p)/m`` otherwise, i.e. ``P = p I + ((1-p)/m) J``.

    Parameters
    ----------
    p : float, retention probability, ``0 < p < 1``
    m : int, size of the full domain of the sensitive attribute, ``>= 2``

    Returns
    -------
    (m, m) float64, columns sum to 1.

    Examples
    --------
    >>> perturbation_matrix(0.5, 2).tolist()
    [[0.75, 0.25], [0.25, 0.75]]
    """
    p = check_open_probability(p, "p")
    m = check_domain_size(m)
    return np.full((m, m), (1.0 - p) / m) + p * np.eye(m)


def perturb(codes: ArrayLike, p: float, m: int, rng: np.random.Generator) -> NDArray[np.int64]:
    r"""Uniform perturbation of sensitive codes, §3.1 and Eq. (1) of [WHF12].

    Each code is kept with probability ``p``; otherwise it is replaced by a value drawn
    uniformly from the full domain ``{0, ..., m-1}`` (which may redraw the original). So a
    code is published unchanged with probability ``p + (1-p)/m`` and as each other value with
    probability ``(1-p)/m``. Records are perturbed independently.

    Parameters
    ----------
    codes : (n,) int, original codes, ``0 <= code < m``
    p : float, retention probability, ``0 < p < 1``
    m : int, size of the full domain (values absent from the data included), ``>= 2``
    rng : numpy.random.Generator, the coins (see the module docstring on seeding)

    Returns
    -------
    (n,) int64, the randomized codes.
    """
    p = check_open_probability(p, "p")
    m = check_domain_size(m)
    rng = _check_rng(rng)
    return _perturb(_check_codes(codes, m), p, m, rng)


def _perturb(
    codes: NDArray[np.int64], p: float, m: int, rng: np.random.Generator
) -> NDArray[np.int64]:
    keep = rng.random(codes.shape[0]) < p
    replacement = rng.integers(0, m, size=codes.shape[0], dtype=np.int64)
    return np.where(keep, codes, replacement)


def perturb_from_uniforms(
    codes: NDArray[np.int64], u: NDArray[np.float64], p: float, m: int
) -> NDArray[np.int64]:
    r"""Uniform perturbation of sensitive codes, Eq. (1) of [WHF12], from two uniforms per code.

    Code ``i`` is kept if ``u[i, 0] < p``, otherwise replaced by ``floor(u[i, 1] m)`` (at most
    ``m - 1``): the law of :func:`perturb`, drawn from the caller's uniforms instead of a
    generator (e.g. keyed uniforms that give a record the same value in every release).

    Parameters
    ----------
    codes : (n,) int64, original codes, ``0 <= code < m``
    u : (n, 2) float64, uniforms in ``[0, 1)``
    p : float, retention probability, ``0 < p < 1``
    m : int, size of the full domain, ``>= 2``

    Returns
    -------
    (n,) int64, the randomized codes.

    Notes
    -----
    Trusts its inputs: the caller checked ``p``, ``m`` and the codes once.
    """
    replacement = np.minimum((u[:, 1] * m).astype(np.int64), m - 1)
    return np.where(u[:, 0] < p, codes, replacement)


# --- the cap (Theorems 5.11 and 5.13) -----------------------------------------------------------


def epsilon_max(p: float, m: int, f: float = 1.0) -> float:
    r"""Largest ε of Corollary 4.10's range, ``1 + (1-p)/(m p f)`` (``θ = 1``), of [WHF12].

    For ``ε`` beyond it ``θ > 1``: the lower-tail event ``F' < (1-ε) f`` is empty, so no
    positive ``δ`` can be met. Every ``ε <= 1`` is in range for every ``f``; the range is
    narrowest at ``f = 1``.

    Examples
    --------
    >>> round(epsilon_max(0.5, 14), 6)
    1.071429
    """
    p = check_open_probability(p, "p")
    m = check_domain_size(m)
    f = _check_frequency(f)
    return 1.0 + (1.0 - p) / (m * p * f)


def rp_cap_theorem_5_13(p: float, epsilon: float, delta: float, m: int, f: float = 1.0) -> float:
    r"""Cap ``s_g`` of Theorem 5.13 of [WHF12] (Eq. 10; simplified Chernoff bounds L2, U2).

    ``g*`` is (ε,δ)-reconstruction-private iff ``|g| <= s_g`` with

    .. math:: s_g = \frac{-2 \ln\delta}{w \theta^2}
              = \frac{2 \ln(1/\delta) (f p + (1-p)/m)}{(\varepsilon p f)^2}

    where ``f`` is the group's maximum frequency. This is the cap Algorithm 1 uses. ``s_g``
    is a maximum number of independent trials; it is strictly decreasing in ``f``, ``p``,
    ``ε``, ``δ`` and ``m``, and ``f = 1`` gives the smallest, data-independent cap.

    Parameters
    ----------
    p : float, retention probability, ``0 < p < 1``
    epsilon : float, relative error, ``0 < ε <= epsilon_max(p, m, f)``
    delta : float, tail-bound floor, ``0 < δ < 1``
    m : int, full domain size, ``>= 2``
    f : float, maximum frequency of a value in the group, ``0 < f <= 1``

    Examples
    --------
    m = 14, f = 1, p = ε = 0.5, δ = 0.3:

    >>> round(rp_cap_theorem_5_13(0.5, 0.5, 0.3, 14, 1.0), 4)
    20.6395
    """
    p, epsilon, delta, m, f = _check_cap_args(p, epsilon, delta, m, f)
    return float(_cap(p, epsilon, delta, m, np.asarray(f, dtype=np.float64), "theorem_5_13"))


def rp_cap_theorem_5_11(p: float, epsilon: float, delta: float, m: int, f: float = 1.0) -> float:
    r"""Cap of Theorem 5.11 of [WHF12] (Eq. 9; full Chernoff bounds L1, U1).

    ``g*`` is (ε,δ)-reconstruction-private iff

    .. math:: |g| \le \frac{\ln\delta}{w \ln\left(e^{-\theta} / (1-\theta)^{1-\theta}\right)}
              = \frac{\ln(1/\delta)}{w\,[\theta + (1-\theta)\ln(1-\theta)]}

    with ``0 ln 0 = 0`` at ``θ = 1``. Since ``L1 <= L2`` this cap is never above Theorem
    5.13's (it is stricter); a literal reading of Definition 3, whose "best" bound is L1,
    favours it. Same parameters as :func:`rp_cap_theorem_5_13`.

    Examples
    --------
    >>> round(rp_cap_theorem_5_11(0.5, 0.5, 0.3, 14, 1.0), 4)
    17.1025

    Notes
    -----
    For ``θ < 0.1`` the exponent ``θ + (1-θ) ln(1-θ) = sum_{k>=2} θ^k / (k (k-1))`` is
    summed as that series (``θ²/2 + θ³/6 + ...``) to avoid cancellation.
    """
    p, epsilon, delta, m, f = _check_cap_args(p, epsilon, delta, m, f)
    return float(_cap(p, epsilon, delta, m, np.asarray(f, dtype=np.float64), "theorem_5_11"))


def rp_cap(
    p: float,
    epsilon: float,
    delta: float,
    m: int,
    f: float = 1.0,
    *,
    bound: Bound = "theorem_5_13",
) -> float:
    r"""Cap ``s_g`` on a micro group's independent trials, Theorem 5.13 or 5.11 of [WHF12].

    Dispatches to :func:`rp_cap_theorem_5_13` (default, Eq. 10, the paper's algorithm) or
    :func:`rp_cap_theorem_5_11` (Eq. 9). ``f = 1`` (default) is the data-independent cap
    ``s* <= s_g`` for every group.

    Examples
    --------
    >>> round(rp_cap(0.5, 0.5, 0.3, 14, 1.0), 4)
    20.6395
    >>> round(rp_cap(0.5, 0.5, 0.3, 14, 1.0, bound="theorem_5_11"), 4)
    17.1025
    """
    bound = _check_choice("bound", bound, BOUNDS)
    if bound == "theorem_5_13":
        return rp_cap_theorem_5_13(p, epsilon, delta, m, f)
    return rp_cap_theorem_5_11(p, epsilon, delta, m, f)


def max_retention_probability(
    size: ArrayLike, f: ArrayLike, epsilon: float, delta: float, m: int
) -> NDArray[np.float64]:
    r"""Largest ``p`` with ``|g| <= s_g`` (Theorem 5.13 of [WHF12] solved for ``p``).

    ``|g| ε² f² p² <= 2 ln(1/δ) (p (f - 1/m) + 1/m)``; with ``c = 2 ln(1/δ) / (|g| ε² f²)``
    and ``a = f - 1/m`` the positive root is

    .. math:: p_{max} = \left(c a + \sqrt{c^2 a^2 + 4 c / m}\right) / 2

    capped at 1 (1 means every ``p`` passes). ``min_g p_max(g)`` is the largest global ``p``
    under which plain uniform perturbation violates no group; the paper rejects lowering
    ``p`` as too noisy, but it is the audit's yardstick.

    Parameters
    ----------
    size : int array, ``|g| >= 1``
    f : float array, maximum frequency in the group, ``0 < f <= 1``
    epsilon : float, ``0 < ε <= 1`` (so Corollary 4.10's range holds for every ``p``)
    delta : float, ``0 < δ < 1``
    m : int, full domain size, ``>= 2``

    Examples
    --------
    >>> round(float(max_retention_probability(100, 1.0, 0.5, 0.3, 14)), 6)
    0.138951
    """
    epsilon = check_positive(epsilon, "epsilon")
    if epsilon > 1.0:
        raise InvalidParameter(
            f"epsilon = {epsilon!r}: max_retention_probability needs epsilon <= 1, where "
            "Corollary 4.10's range holds for every p (e.g. epsilon = 0.5)"
        )
    delta = _check_delta(delta)
    m = check_domain_size(m)
    size_arr = np.asarray(size, dtype=np.float64)
    f_arr = np.asarray(f, dtype=np.float64)
    if np.any(~(size_arr >= 1)):
        raise InvalidParameter(f"size = {size!r}: group sizes must be >= 1")
    if np.any(~((f_arr > 0) & (f_arr <= 1))):
        raise InvalidParameter(f"f = {f!r}: frequencies must lie in (0, 1] (e.g. f = 1.0)")
    c = 2.0 * math.log(1.0 / delta) / (size_arr * epsilon**2 * f_arr**2)
    a = f_arr - 1.0 / m
    root = (c * a + np.sqrt(c * c * a * a + 4.0 * c / m)) / 2.0
    return np.minimum(root, 1.0)


def calc_rp_cap(
    p: float, epsilon: float, delta: float, domain_size: int, f: float = 1.0
) -> dict[str, float | int]:
    r"""Calculator view of the cap, Theorems 5.13 and 5.11 of [WHF12], as a plain dict.

    For ``stream-release calc rp-cap --p P --epsilon E --delta D --domain-size M --f F``.
    Keys: the inputs (``p``, ``epsilon``, ``delta``, ``domain_size``, ``f``), then ``w``,
    ``theta``, ``epsilon_max`` (Corollary 4.10's range), ``cap_theorem_5_13`` (Eq. 10),
    ``cap_theorem_5_11`` (Eq. 9) and the integer trial counts they allow,
    ``max_trials_theorem_5_13`` and ``max_trials_theorem_5_11`` (their floors). Every value is
    a Python ``float`` or ``int`` (JSON-ready).

    Examples
    --------
    >>> out = calc_rp_cap(0.5, 0.5, 0.3, 14, 1.0)
    >>> round(out["cap_theorem_5_13"], 4), out["max_trials_theorem_5_13"]
    (20.6395, 20)
    >>> round(out["cap_theorem_5_11"], 4), out["max_trials_theorem_5_11"]
    (17.1025, 17)
    """
    p, epsilon, delta, m, f = _check_cap_args(p, epsilon, delta, domain_size, f, "domain_size")
    w = f * p + (1.0 - p) / m
    s13 = float(_cap(p, epsilon, delta, m, np.asarray(f, dtype=np.float64), "theorem_5_13"))
    s11 = float(_cap(p, epsilon, delta, m, np.asarray(f, dtype=np.float64), "theorem_5_11"))
    return {
        "p": p,
        "epsilon": epsilon,
        "delta": delta,
        "domain_size": m,
        "f": f,
        "w": w,
        "theta": epsilon * p * f / w,
        "epsilon_max": 1.0 + (1.0 - p) / (m * p * f),
        "cap_theorem_5_13": s13,
        "cap_theorem_5_11": s11,
        "max_trials_theorem_5_13": math.floor(s13),
        "max_trials_theorem_5_11": math.floor(s11),
    }


def _cap(
    p: float, epsilon: float, delta: float, m: int, f: NDArray[np.float64], bound: str
) -> NDArray[np.float64]:
    """Vectorised cap kernel over ``f``; inputs already checked."""
    w = f * p + (1.0 - p) / m
    theta = epsilon * p * f / w
    log_inv_delta = -math.log(delta)
    if bound == "theorem_5_13":
        return 2.0 * log_inv_delta / (w * theta * theta)
    return log_inv_delta / (w * _full_exponent(theta))


def _full_exponent(theta: NDArray[np.float64]) -> NDArray[np.float64]:
    """``θ + (1-θ) ln(1-θ)`` on (0, 1], the negated log of Theorem 4.8's L1 base."""
    theta = np.asarray(theta, dtype=np.float64)
    direct = theta + xlog1py(1.0 - theta, -theta)
    small = np.minimum(theta, _SERIES_BELOW)
    series = np.zeros_like(small)
    power = small * small
    for k in range(2, 26):  # truncation error < 0.1**26 relative
        series = series + power / (k * (k - 1))
        power = power * small
    return np.where(theta < _SERIES_BELOW, series, direct)


def _check_cap_at_least_one(p: float, epsilon: float, delta: float, m: int, bound: str) -> float:
    worst = float(_cap(p, epsilon, delta, m, np.asarray(1.0, dtype=np.float64), bound))
    if worst < 1.0:
        raise InvalidParameter(
            f"p = {p}, epsilon = {epsilon}, delta = {delta}: the cap at f = 1 is "
            f"{worst:.4g} < 1, so even one randomized record of a one-valued group (e.g. a "
            "singleton) breaks the bound; lower p, epsilon or delta"
        )
    return worst
