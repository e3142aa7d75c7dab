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
trial
  ledger) and :func:`~stream_release.core.privacy.reconstruction_serial.serial_rp_randomize`.
* :mod:`stream_release.core.privacy.reconstruction_estimate`: aggregate reconstruction for analysts
  (§3.1, Lemma 1).

Contents
--------
* Perturbation (Eq. 1): :func:`perturbation_matrix`, :func:`perturb`.
* Caps: :func:`rp_cap_theorem_5_13` (Eq. 10, the one Algorithm 1 uses),
  :func:`rp_cap_theorem_5_11` (Eq. 9, full Chernoff, stricter), :func:`rp_cap`,
  :func:`epsilon_max`, :func:`max_retention_probability`, :func:`calc_rp_cap` (calculator).
* The test: :func:`tail_bounds` (Corollary 4.9), :func:`micro_groups`,
  :func:`is_reconstruction_private` (Corollary 4.10 specialised by Theorem 5.13 or 5.11).
* Kernels and checks shared by the algorithm modules (private).

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
import numbers
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import xlog1py

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
    The digest's oracle (m = 14, f = 1, p = ε = 0.5, δ = 0.3):

    >>> round(rp_cap_theorem_5_13(0.5, 0.5, 0.3, 14, 1.0), 4)
    20.6395
    """
    p, epsilon, delta, m, f = _check_cap_args(p, epsilon, delta, m, f)
    return float(_cap(p, epsilon, delta, m, np.float64(f), "theorem_5_13"))


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
    return float(_cap(p, epsilon, delta, m, np.float64(f), "theorem_5_11"))


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
    s13 = float(_cap(p, epsilon, delta, m, np.float64(f), "theorem_5_13"))
    s11 = float(_cap(p, epsilon, delta, m, np.float64(f), "theorem_5_11"))
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


# --- the privacy test (Corollaries 4.9, 4.10) --------------------------------------------------


class TailBounds(NamedTuple):
    """Corollary 4.9's Chernoff upper bounds on the tails of ``(F' - f)/f`` (arrays)."""

    theta: NDArray[np.float64]
    mu: NDArray[np.float64]
    u1: NDArray[np.float64]
    """Eq. (2)/(6): ``Pr[(F'-f)/f > ε] < (e^θ / (1+θ)^(1+θ))^μ``."""
    l1: NDArray[np.float64]
    """Eq. (3)/(7): ``Pr[(F'-f)/f < -ε] < (e^-θ / (1-θ)^(1-θ))^μ``."""
    u2: NDArray[np.float64]
    """Eq. (4)/(6): ``exp(-θ² μ / (2+θ))``."""
    l2: NDArray[np.float64]
    """Eq. (5)/(7): ``exp(-θ² μ / 2)``."""


def tail_bounds(size: ArrayLike, f: ArrayLike, p: float, epsilon: float, m: int) -> TailBounds:
    r"""Chernoff bounds on micro-reconstruction error, Corollary 4.9 (Theorems 4.6, 4.8) of [WHF12].

    With ``μ = E[O*] = |g| (f p + (1-p)/m)`` and ``θ = ε |g| p f / μ = ε p f / w``:
    ``Pr[(F'-f)/f > ε] < U_i(θ, μ)`` and ``Pr[(F'-f)/f < -ε] < L_i(θ, μ)`` for
    ``i = 1`` (full, Eqs. 2-3) and ``i = 2`` (simplified, Eqs. 4-5). ``L1 <= L2 <= U2`` and
    ``L1 <= U1`` on ``θ in (0, 1]``.

    Parameters
    ----------
    size : array, number of independent trials ``|g| > 0`` (real values allowed)
    f : array, frequency of the value in the group, ``0 < f <= 1``; broadcast with ``size``
    p, epsilon, m : as in :func:`rp_cap_theorem_5_13`; ``ε <= epsilon_max(p, m, f)``

    Returns
    -------
    TailBounds of float64 arrays of the broadcast shape.
    """
    p = check_open_probability(p, "p")
    epsilon = check_positive(epsilon, "epsilon")
    m = check_domain_size(m)
    size_arr = np.asarray(size, dtype=np.float64)
    f_arr = np.asarray(f, dtype=np.float64)
    if np.any(~(size_arr > 0)):
        raise InvalidParameter(f"size = {size!r}: the number of trials must be > 0")
    if np.any(~((f_arr > 0) & (f_arr <= 1))):
        raise InvalidParameter(f"f = {f!r}: frequencies must lie in (0, 1] (e.g. f = 1.0)")
    _check_epsilon_range(epsilon, p, m, float(np.max(f_arr)))
    w = f_arr * p + (1.0 - p) / m
    theta = epsilon * p * f_arr / w
    mu = size_arr * w
    log_u1 = theta - (1.0 + theta) * np.log1p(theta)
    return TailBounds(
        theta=np.asarray(theta + 0.0 * mu),
        mu=np.asarray(mu + 0.0 * theta),
        u1=np.exp(mu * log_u1),
        l1=np.exp(-mu * _full_exponent(theta)),
        u2=np.exp(-theta * theta * mu / (2.0 + theta)),
        l2=np.exp(-theta * theta * mu / 2.0),
    )


class MicroGroups(NamedTuple):
    """Per micro group statistics (internal: ``max_count`` reveals ``f_max``)."""

    group_ids: NDArray[np.int64]
    """(G,) distinct group ids, ascending."""
    size: NDArray[np.int64]
    """(G,) ``|g|``."""
    max_count: NDArray[np.int64]
    """(G,) count of the most frequent code, so ``f_max = max_count / size``."""


def micro_groups(group: ArrayLike, codes: ArrayLike) -> MicroGroups:
    r"""Sizes and maximum value counts of micro groups (Definition 1 of [WHF12]).

    A micro group is the set of rows sharing one ``group`` id (the encoded tuple of all
    published non-sensitive values). Theorems 5.11 and 5.13 need only ``|g|`` and ``f_max``.

    Parameters
    ----------
    group : (n,) int, micro group id per row
    codes : (n,) int, sensitive code per row (any non-negative ints)

    Examples
    --------
    >>> micro_groups([7, 7, 7, 3], [1, 1, 0, 2])
    MicroGroups(group_ids=array([3, 7]), size=array([1, 3]), max_count=array([1, 2]))
    """
    group_arr, codes_arr = _check_rows(group, codes, None)
    if group_arr.shape[0] == 0:
        empty = np.zeros(0, dtype=np.int64)
        return MicroGroups(empty, empty.copy(), empty.copy())
    runs = _runs(group_arr, codes_arr)
    return MicroGroups(runs.group_ids, runs.size, _group_max(runs.run_len, runs))


def is_reconstruction_private(
    size: ArrayLike,
    max_count: ArrayLike,
    p: float,
    epsilon: float,
    delta: float,
    m: int,
    *,
    bound: Bound = "theorem_5_13",
) -> NDArray[np.bool_]:
    r"""The privacy test of Corollary 4.10, specialised by Theorem 5.13 (or 5.11), of [WHF12].

    ``g*`` (plainly perturbed) is (ε,δ)-reconstruction-private iff ``δ <= min{U_i, L_i}`` for
    every value in ``g`` (Eq. 8), which Theorem 5.13 reduces to ``|g| <= s_g(f_max)`` (Eq. 10;
    Theorem 5.11: Eq. 9). ``1 - mean(result)`` is the paper's "% of violating micro groups"
    (weighted by groups, not rows).

    Parameters
    ----------
    size : (G,) int, ``|g| >= 1`` (the number of independent trials)
    max_count : (G,) int, count of the most frequent value, ``1 <= max_count <= size``
    p, epsilon, delta, m : as in :func:`rp_cap_theorem_5_13`; ``ε`` is checked against
        Corollary 4.10's range at ``f = 1``, which covers every group
    bound : ``"theorem_5_13"`` (Eq. 10, default) or ``"theorem_5_11"`` (Eq. 9)

    Returns
    -------
    (G,) bool.

    Examples
    --------
    EDU group 1 of Table 4 (|g| = 89, f = 0.87, m = 14) under p = ε = 0.5, δ = 0.3:

    >>> is_reconstruction_private([89, 20], [77, 20], 0.5, 0.5, 0.3, 14).tolist()
    [False, True]
    """
    p, epsilon, delta, m, _ = _check_cap_args(p, epsilon, delta, m, 1.0)
    bound = _check_choice("bound", bound, BOUNDS)
    size_arr = np.asarray(size)
    count_arr = np.asarray(max_count)
    if size_arr.shape != count_arr.shape:
        raise InvalidParameter(
            f"size has shape {size_arr.shape} but max_count has shape {count_arr.shape}"
        )
    if np.any(~(size_arr >= 1)) or np.any(~((count_arr >= 1) & (count_arr <= size_arr))):
        raise InvalidParameter(
            "size, max_count: need size >= 1 and 1 <= max_count <= size for every group"
        )
    f = count_arr.astype(np.float64) / size_arr.astype(np.float64)
    return np.asarray(size_arr <= _cap(p, epsilon, delta, m, f, bound))


# --- shared kernels ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Runs:
    """Rows sorted by (group, code, tie-breakers); a run is one (group, code) block."""

    order: NDArray[np.intp]
    run_start: NDArray[np.int64]
    run_len: NDArray[np.int64]
    run_group: NDArray[np.int64]
    row_run: NDArray[np.int64]
    group_ids: NDArray[np.int64]
    group_first_run: NDArray[np.int64]
    size: NDArray[np.int64]


def _runs(group: NDArray[np.int64], codes: NDArray[np.int64], *tiebreak: ArrayLike) -> _Runs:
    """Sort rows (n >= 1) by group, code, then ``tiebreak`` keys in order."""
    n = group.shape[0]
    order = np.lexsort((*reversed(tiebreak), codes, group))
    g_sorted, c_sorted = group[order], codes[order]
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = g_sorted[1:] != g_sorted[:-1]
    new_run = new_group.copy()
    new_run[1:] |= c_sorted[1:] != c_sorted[:-1]
    run_start = np.flatnonzero(new_run).astype(np.int64)
    run_len = np.diff(np.append(run_start, n)).astype(np.int64)
    row_run = (np.cumsum(new_run) - 1).astype(np.int64)
    group_start = np.flatnonzero(new_group)
    group_of_row = np.cumsum(new_group) - 1
    return _Runs(
        order=order,
        run_start=run_start,
        run_len=run_len,
        run_group=group_of_row[run_start].astype(np.int64),
        row_run=row_run,
        group_ids=g_sorted[group_start],
        group_first_run=row_run[group_start],
        size=np.diff(np.append(group_start, n)).astype(np.int64),
    )


def _group_max(per_run: NDArray[np.int64], runs: _Runs) -> NDArray[np.int64]:
    return np.maximum.reduceat(per_run, runs.group_first_run).astype(np.int64)


# --- validation ------------------------------------------------------------------------------


def _check_rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise InvalidParameter(
            f"rng = {rng!r}: must be a numpy.random.Generator "
            "(e.g. np.random.default_rng(secrets.randbits(128)))"
        )
    return rng


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> Any:
    if value not in allowed:
        raise InvalidParameter(f"{name} = {value!r}: must be one of {', '.join(allowed)}")
    return value


def _check_delta(delta: object) -> float:
    if isinstance(delta, numbers.Real) and not isinstance(delta, bool):
        if float(delta) == 1.0:
            raise InvalidParameter(
                "delta = 1: makes the cap 0, so no group can be published; use 0 < delta < 1 "
                "(e.g. delta = 0.3)"
            )
        if float(delta) == 0.0:
            raise InvalidParameter(
                "delta = 0: imposes no constraint (the cap is infinite); use plain "
                "perturbation, or 0 < delta < 1 (e.g. delta = 0.3)"
            )
    return check_open_probability(delta, "delta")  # type: ignore[arg-type]


def _check_frequency(f: object, name: str = "f") -> float:
    if isinstance(f, bool) or not isinstance(f, numbers.Real) or not 0.0 < float(f) <= 1.0:
        raise InvalidParameter(
            f"{name} = {f!r}: the maximum frequency in a group must lie in (0, 1]; f = 1 gives "
            "the data-independent cap (e.g. f = 1.0)"
        )
    return float(f)


def _check_epsilon_range(epsilon: float, p: float, m: int, f: float) -> None:
    top = 1.0 + (1.0 - p) / (m * p * f)
    if epsilon > top:
        raise InvalidParameter(
            f"epsilon = {epsilon!r}: Corollary 4.10 needs epsilon <= 1 + (1-p)/(m p f) = "
            f"{top:.6g} at p = {p}, m = {m}, f = {f} (theta <= 1); beyond it the lower tail "
            "is empty and no delta > 0 can hold (e.g. epsilon = 0.5)"
        )


def _check_cap_args(
    p: object, epsilon: object, delta: object, m: object, f: object, m_name: str = "m"
) -> tuple[float, float, float, int, float]:
    p_ = check_open_probability(p, "p")  # type: ignore[arg-type]
    eps = check_positive(epsilon, "epsilon")  # type: ignore[arg-type]
    d = _check_delta(delta)
    m_ = check_domain_size(m, m_name)  # type: ignore[arg-type]
    f_ = _check_frequency(f)
    _check_epsilon_range(eps, p_, m_, f_)
    return p_, eps, d, m_, f_


def _check_cap_at_least_one(p: float, epsilon: float, delta: float, m: int, bound: str) -> float:
    worst = float(_cap(p, epsilon, delta, m, np.float64(1.0), bound))
    if worst < 1.0:
        raise InvalidParameter(
            f"p = {p}, epsilon = {epsilon}, delta = {delta}: the cap at f = 1 is "
            f"{worst:.4g} < 1, so even one randomized record of a one-valued group (e.g. a "
            "singleton) breaks the bound; lower p, epsilon or delta"
        )
    return worst


def _int_array(name: str, values: ArrayLike) -> NDArray[np.int64]:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise InvalidParameter(f"{name}: must be a 1-D integer array, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise InvalidParameter(f"{name}: must hold integer codes, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _check_codes(codes: ArrayLike, m: int, name: str = "codes") -> NDArray[np.int64]:
    arr = _int_array(name, codes)
    if arr.size and (arr.min() < 0 or arr.max() >= m):
        raise InvalidParameter(
            f"{name}: codes must lie in [0, m) = [0, {m}), got [{arr.min()}, {arr.max()}]; "
            "encode every value of the full domain once, at ingestion"
        )
    return arr


def _check_rows(
    group: ArrayLike, codes: ArrayLike, m: int | None
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    group_arr = _int_array("group", group)
    if m is None:
        codes_arr = _int_array("codes", codes)
        if codes_arr.size and codes_arr.min() < 0:
            raise InvalidParameter("codes: must be >= 0")
    else:
        codes_arr = _check_codes(codes, m)
    if group_arr.shape != codes_arr.shape:
        raise InvalidParameter(
            f"group has shape {group_arr.shape} but codes has shape {codes_arr.shape}"
        )
    return group_arr, codes_arr
