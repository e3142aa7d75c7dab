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

Contents
--------
* Perturbation (Eq. 1): :func:`perturbation_matrix`, :func:`perturb`.
* Caps: :func:`rp_cap_theorem_5_13` (Eq. 10, the one Algorithm 1 uses),
  :func:`rp_cap_theorem_5_11` (Eq. 9, full Chernoff, stricter), :func:`rp_cap`,
  :func:`epsilon_max`, :func:`max_retention_probability`, :func:`calc_rp_cap` (calculator).
* The test: :func:`tail_bounds` (Corollary 4.9), :func:`micro_groups`,
  :func:`is_reconstruction_private` (Corollary 4.10 specialised by Theorem 5.13 or 5.11).
* Algorithm 1: :func:`rp_randomize` returns an :class:`RPRelease`.
* Serial rules: :func:`sticky_perturb`, :func:`trial_budget`, :func:`advance_trial_ledger`,
  and their composition :func:`serial_rp_randomize`.
* Analysts: :func:`reconstruct_frequency`, :func:`estimate_count`, :func:`count_variance`,
  :func:`reconstruct_count`.

Notation: ``w = f p + (1-p)/m``, ``θ = ε p f / w`` (Theorem 4.6; independent of ``|g|``),
``μ = |g| w``, ``q1 = p + (1-p)/m``, ``q0 = (1-p)/m``. ``f`` is a frequency in the original
group; ``f_max`` the largest one.

Randomness: every function that draws takes a :class:`numpy.random.Generator`. The guarantee
assumes coins the adversary cannot predict: seed production generators from the operating
system (``np.random.default_rng(secrets.randbits(128))``), fixed seeds only in tests.

References
----------
.. [WHF12] K. Wang, C. Han, A. W.-C. Fu. Randomization Resilient To Sensitive
   Reconstruction. arXiv:1202.3179, 2012. Digest:
   /work/shared/research/seed-reconstruction-privacy.md.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import xlog1py

from stream_release.errors import InvalidParameter
from stream_release.privacy.validation import (
    check_domain_size,
    check_open_probability,
    check_positive,
)

Bound = Literal["theorem_5_13", "theorem_5_11"]
"""Which Chernoff bounds define the cap: simplified (Eq. 10) or full (Eq. 9)."""

CapPolicy = Literal["worst_case", "group_max"]
"""``worst_case``: one data-independent cap ``s(f=1)`` for every group (recommended, see
:func:`rp_randomize`); ``group_max``: the paper's per-group cap ``s(f_max(g))``."""

Scaling = Literal["exact", "randomized"]
"""``exact``: ``|g2*| = |g|``; ``randomized``: the paper's coin per trial."""

BOUNDS: tuple[str, ...] = ("theorem_5_13", "theorem_5_11")
CAP_POLICIES: tuple[str, ...] = ("worst_case", "group_max")
SCALINGS: tuple[str, ...] = ("exact", "randomized")

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


# --- Algorithm 1 (§5) -----------------------------------------------------------------------


@dataclass(frozen=True)
class RPRelease:
    r"""Result of Algorithm 1 (:func:`rp_randomize`): the published trials of every group.

    Group arrays have shape ``(G,)`` (ascending ``group_ids``), trial arrays ``(T,)`` (sorted
    by group, then original code). The release is ``copies[t]`` rows ``(trial_group[t],
    randomized[t])`` per trial; :meth:`published` builds them shuffled.

    Internal only, never publish: ``max_count``, ``cap`` (under ``group_max`` it reveals
    ``f_max``), ``trial_row`` and ``original``.
    """

    group_ids: NDArray[np.int64]
    size: NDArray[np.int64]
    """``|g|``."""
    max_count: NDArray[np.int64]
    """Count of the most frequent original code in ``g``."""
    cap: NDArray[np.float64]
    """``s_g`` used for the group."""
    trials: NDArray[np.int64]
    """``n_g = |g1|``, independent trials kept: ``size`` if ``size <= cap``, else ``<= cap``."""
    trial_row: NDArray[np.int64]
    """Input row index of each trial (the sampled record)."""
    trial_group: NDArray[np.int64]
    """Group id of each trial."""
    original: NDArray[np.int64]
    """Original code of each trial."""
    randomized: NDArray[np.int64]
    """Randomized code of each trial (Perturbing)."""
    copies: NDArray[np.int64]
    """Published copies of each trial (Scaling), ``>= 1``."""

    @property
    def weight(self) -> NDArray[np.float64]:
        """Scaling weight ``b' = |g| / n_g`` per group (1 for groups left intact)."""
        return self.size / self.trials

    @property
    def capped(self) -> NDArray[np.bool_]:
        """True for groups that were sampled (``|g| > s_g``)."""
        return self.trials < self.size

    @property
    def published_size(self) -> NDArray[np.int64]:
        """``|g2*|`` per group (equal to ``size`` under exact scaling)."""
        index = np.searchsorted(self.group_ids, self.trial_group)
        return np.bincount(index, weights=self.copies, minlength=self.group_ids.shape[0]).astype(
            np.int64
        )

    def published(self, rng: np.random.Generator) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The published rows ``(group id, randomized code)``, each ``(sum(copies),)``, shuffled.

        Shuffling keeps duplicates of one trial from sitting side by side (§3.5 of the digest).
        """
        rng = _check_rng(rng)
        groups = np.repeat(self.trial_group, self.copies)
        codes = np.repeat(self.randomized, self.copies)
        perm = rng.permutation(groups.shape[0])
        return groups[perm], codes[perm]


def rp_randomize(
    group: ArrayLike,
    codes: ArrayLike,
    *,
    p: float,
    epsilon: float,
    delta: float,
    m: int,
    rng: np.random.Generator,
    bound: Bound = "theorem_5_13",
    cap_policy: CapPolicy = "worst_case",
    scaling: Scaling = "exact",
) -> RPRelease:
    r"""Algorithm 1 of [WHF12]: Sampling → Perturbing → Scaling on every micro group.

    For each micro group ``g`` with cap ``s_g`` (Theorem 5.13, or 5.11 with ``bound``):
    if ``|g| <= s_g`` every row is a trial and is perturbed (``g2* = g*``); otherwise a
    sample ``g1`` stratified by original code is perturbed and scaled back to about ``|g|``
    rows. Every ``g2*`` is then (ε,δ)-reconstruction-private (Theorem 5.16) and aggregate
    estimates keep their expectation (Theorem 5.18).

    Parameters
    ----------
    group : (n,) int, micro group id per row (the encoded tuple of all published
        non-sensitive values; generalize before grouping)
    codes : (n,) int, original sensitive code per row, ``0 <= code < m``
    p, epsilon, delta, m : as in :func:`rp_cap_theorem_5_13`; additionally the cap at
        ``f = 1`` must be ``>= 1`` (otherwise even one trial of a one-valued group, e.g. a
        singleton, breaks the bound)
    rng : numpy.random.Generator
    bound : ``"theorem_5_13"`` (Eq. 10, the paper's choice) or ``"theorem_5_11"`` (Eq. 9)
    cap_policy : ``"worst_case"`` (default): every group gets the data-independent cap
        ``s* = s(f=1) <= s_g``; ``"group_max"``: the paper's ``s_g = s(f_max(g))``
    scaling : ``"exact"`` (default): every trial gets ``floor(b')`` copies and exactly
        ``|g| mod n_g`` random trials one more, so ``|g2*| = |g|``; ``"randomized"``: the
        paper's coin, one more copy with probability ``b' - floor(b')``

    Returns
    -------
    RPRelease

    Notes
    -----
    Departures from the paper, all toward the guarantee:

    * Sample size. The paper's Sampling draws ``floor(|g_x| b) + Bernoulli(frac)`` per value
      with ``b = s_g / |g|``, so ``|g1|`` is ``s_g`` only in expectation and can exceed it by
      up to the number of distinct values (and can be 0). Here ``n_g = floor(s_g)`` and
      ``b = n_g / |g|``; each value still gets ``floor(|g_x| b)`` plus one with probability
      exactly ``frac(|g_x| b)`` (Fact 1 holds in expectation), but the extras are drawn by
      systematic rounding in exact integer arithmetic, so ``|g1| = n_g <= s_g`` always.
    * Strict size (``group_max`` only). Theorem 5.16's proof needs ``|g1| <= s(f_max(g1))``,
      which the paper has only up to rounding (≃): rounding can raise the sample's own
      ``f_max`` above ``g``'s. ``n_g`` is lowered, before any coin is flipped, until even
      the largest frequency rounding can produce, ``ceil(max_count n_g / |g|) / n_g``,
      passes (e.g. |g| = 200 with 160/40 and s_g = 26.23: ``n_g = 25``, not 26). Redrawing
      until the drawn sample passes would bias the estimate; this does not. Under
      ``worst_case`` no lowering is ever needed (``s(f) >= s(1)``).
    * ``worst_case`` is the default because a per-group cap is a monotone function of
      ``f_max`` that the published counts reveal (no nonzero count of ``g2*`` is below
      ``floor(b')``), and because, in a stream, ``f_max`` drifts while published trials
      cannot be withdrawn. With a public cap analysts can also compute ``n_g =
      min(|g|, floor(s*))`` for error bars (:func:`reconstruct_count`).
    * ``exact`` scaling is the digest's suggestion: it keeps non-sensitive counts exact, the
      advantage the paper claims for perturbation (§3.1). ``randomized`` is the paper's.

    Vectorised: one ``lexsort`` of the rows plus O(n) array passes (10^6 rows in 200,000
    groups: about 0.6-0.7 s on one core, half of it the sort).
    """
    p, epsilon, delta, m, _ = _check_cap_args(p, epsilon, delta, m, 1.0)
    rng = _check_rng(rng)
    bound = _check_choice("bound", bound, BOUNDS)
    cap_policy = _check_choice("cap_policy", cap_policy, CAP_POLICIES)
    scaling = _check_choice("scaling", scaling, SCALINGS)
    worst_cap = _check_cap_at_least_one(p, epsilon, delta, m, bound)
    group_arr, codes_arr = _check_rows(group, codes, m)
    n = group_arr.shape[0]
    if n == 0:
        return _empty_release()

    runs = _runs(group_arr, codes_arr, rng.random(n))
    max_count = _group_max(runs.run_len, runs)
    if cap_policy == "group_max":
        cap = _cap(p, epsilon, delta, m, max_count / runs.size, bound)
    else:
        cap = np.full(runs.size.shape[0], worst_cap)
    n_target = np.where(runs.size <= cap, runs.size, np.floor(cap)).astype(np.int64)
    if cap_policy == "group_max":
        n_target = _strict_sample_size(
            runs.size, max_count, n_target, (p, epsilon, delta, m, bound)
        )
    k = _systematic(runs.run_len, runs.run_group, runs.size, n_target, rng)

    position = np.arange(n, dtype=np.int64) - runs.run_start[runs.row_run]
    chosen = np.flatnonzero(position < k[runs.row_run])
    trial_row = runs.order[chosen].astype(np.int64)
    trial_gidx = runs.run_group[runs.row_run[chosen]]
    original = codes_arr[trial_row]
    randomized = _perturb(original, p, m, rng)
    copies = _scale(trial_gidx, runs.size, n_target, scaling, rng)
    return RPRelease(
        group_ids=runs.group_ids,
        size=runs.size,
        max_count=max_count,
        cap=np.asarray(cap, dtype=np.float64),
        trials=n_target,
        trial_row=trial_row,
        trial_group=runs.group_ids[trial_gidx],
        original=original,
        randomized=randomized,
        copies=copies,
    )


# --- serial rules ------------------------------------------------------------------------------


class StickyDraw(NamedTuple):
    """Result of :func:`sticky_perturb`: values per row plus the entries to persist."""

    randomized: NDArray[np.int64]
    """(n,) randomized code per input row."""
    new_keys: NDArray[Any]
    """(k,) keys drawn for the first time, ascending; persist with ``new_values``."""
    new_values: NDArray[np.int64]
    """(k,) their randomized codes."""


def sticky_perturb(
    keys: ArrayLike,
    codes: ArrayLike,
    p: float,
    m: int,
    rng: np.random.Generator,
    *,
    known_keys: ArrayLike | None = None,
    known_values: ArrayLike | None = None,
) -> StickyDraw:
    r"""Serial rule 1: a record's randomized value is drawn once and reused (§3.1, Eq. 1, [WHF12]).

    Uniform perturbation (Eq. 1) is applied only to keys not in ``known_keys``; known keys
    get ``known_values`` back. The paper covers one static release; this rule is the
    digest's (§5 F4) extension of Theorem 5.13 to a series: re-randomizing a record in every
    release would hand an adversary who averages ``k`` releases ``k`` independent trials per
    record and break any trial cap. The record independence of §3.1 ("insertion and
    deletion of records on D can be done through insertion and deletion of randomized
    records on D*") is what makes reuse sound.

    The state is plain data, a mapping key → randomized code given as two arrays, so a caller
    can keep it anywhere (e.g. a Redis hash written with ``HSETNX`` from ``new_keys``,
    ``new_values``). Entries are never removed: a deleted record that comes back must get its
    old value.

    Parameters
    ----------
    keys : (n,) any sortable dtype (e.g. ``S16`` pseudonyms, int64), one per **record
        version**: when a record's sensitive value or its non-sensitive values change it is a
        new record (a new trial), so build the key from the pseudonym and a version. Rows
        sharing a key share one draw and must share their code.
    codes : (n,) int, original code per row, ``0 <= code < m``
    p, m, rng : as in :func:`perturb`
    known_keys : (K,) unique keys drawn in earlier releases (same dtype kind as ``keys``)
    known_values : (K,) int, their randomized codes, ``0 <= value < m``

    Returns
    -------
    StickyDraw
    """
    p = check_open_probability(p, "p")
    m = check_domain_size(m)
    rng = _check_rng(rng)
    codes_arr = _check_codes(codes, m)
    keys_arr = _check_keys(keys, codes_arr.shape[0], unique=False)
    known_k, known_v = _check_state(known_keys, known_values, m, keys_arr)
    found, index = _lookup(keys_arr, known_k)
    out = np.empty(codes_arr.shape[0], dtype=np.int64)
    out[found] = known_v[index[found]]
    new = ~found
    new_keys, first, inverse = np.unique(keys_arr[new], return_index=True, return_inverse=True)
    new_codes = codes_arr[new]
    if np.any(new_codes != new_codes[first][inverse]):
        raise InvalidParameter(
            "keys: rows sharing a key carry different codes; a key must name one record "
            "version (append a version to the pseudonym when the value changes)"
        )
    drawn = _perturb(new_codes[first], p, m, rng)
    out[new] = drawn[inverse]
    return StickyDraw(out, new_keys, drawn)


class TrialLedger(NamedTuple):
    """Serial rule 2's state: trials ever published per group (plain arrays)."""

    keys: NDArray[Any]
    """(L,) group keys, ascending, unique."""
    counts: NDArray[np.int64]
    """(L,) ``T_g``, distinct independent trials ever published for the group, ``>= 0``."""


def trial_budget(
    group_keys: ArrayLike,
    cap: float,
    *,
    ledger_keys: ArrayLike | None = None,
    ledger_counts: ArrayLike | None = None,
) -> NDArray[np.int64]:
    r"""Fresh trials a group may still publish: ``max(0, floor(s) - T_g)`` (Theorem 5.13, [WHF12]).

    Theorem 5.13 caps the number of independent trials of a micro group; across releases
    the adversary sees every trial ever published, so the cap applies to ``T_g``
    (:func:`advance_trial_ledger`), not to one snapshot. Groups absent from the ledger have
    ``T_g = 0``.

    Parameters
    ----------
    group_keys : (G,) group keys (any sortable dtype matching the ledger's)
    cap : float, ``s >= 0``, e.g. ``rp_cap(p, epsilon, delta, m)`` (the data-independent cap)
    ledger_keys, ledger_counts : the ledger, as in :class:`TrialLedger`

    Returns
    -------
    (G,) int64, ``>= 0``.
    """
    if isinstance(cap, bool) or not isinstance(cap, numbers.Real) or not 0 <= cap < math.inf:
        raise InvalidParameter(f"cap = {cap!r}: must be a finite number >= 0 (e.g. rp_cap(...))")
    keys_arr = _check_keys(group_keys, None, unique=False, name="group_keys")
    ledger = _check_ledger(ledger_keys, ledger_counts, keys_arr)
    used = _ledger_counts_for(keys_arr, ledger)
    return np.maximum(0, math.floor(cap) - used)


def advance_trial_ledger(
    group_keys: ArrayLike,
    new_trials: ArrayLike,
    *,
    ledger_keys: ArrayLike | None = None,
    ledger_counts: ArrayLike | None = None,
) -> TrialLedger:
    r"""Serial rule 2: add a release's fresh trials to ``T_g``, never decreasing it ([WHF12] §5).

    ``|g|`` in Theorem 5.13 is the number of independent trials (§5, "|g| in Equation (10)
    really refers to the number of independent Poisson trials"). A trial once published
    stays known, so ``T_g`` counts every trial ever published for ``g``; deletions do not
    decrement it. Reused (sticky) trials are not fresh and must not be counted again.

    Parameters
    ----------
    group_keys : (k,) group keys of this release (repeats are summed)
    new_trials : (k,) int, fresh trials per key, ``>= 0``
    ledger_keys, ledger_counts : the ledger before the release (absent: empty)

    Returns
    -------
    TrialLedger after the release: every old key kept, counts ``>=`` the old ones. For a
    Redis hash, ``HINCRBY`` each key by its ``new_trials`` is the same update.
    """
    keys_arr = _check_keys(group_keys, None, unique=False, name="group_keys")
    add = np.asarray(new_trials)
    if add.shape != keys_arr.shape or (add.size and add.dtype.kind not in "iu"):
        raise InvalidParameter(
            f"new_trials = {new_trials!r}: need one integer per group key ({keys_arr.shape[0]})"
        )
    add = add.astype(np.int64)
    if np.any(add < 0):
        raise InvalidParameter(
            "new_trials: must be >= 0; a group's count of published trials never decreases "
            "(a trial once published stays known)"
        )
    ledger = _check_ledger(ledger_keys, ledger_counts, keys_arr)
    if ledger.keys.shape[0] == 0 and keys_arr.shape[0] == 0:
        return ledger
    all_keys = np.concatenate([ledger.keys, keys_arr]) if ledger.keys.size else keys_arr
    all_counts = np.concatenate([ledger.counts, add])
    merged, inverse = np.unique(all_keys, return_inverse=True)
    counts = np.bincount(inverse.ravel(), weights=all_counts, minlength=merged.shape[0])
    return TrialLedger(merged, np.rint(counts).astype(np.int64))


@dataclass(frozen=True)
class SerialRelease:
    r"""One release of :func:`serial_rp_randomize`; row arrays are ``(n,)`` in input order.

    Publish ``(group[i], published[i])`` for every row, shuffled and without keys. Then
    persist ``new_keys``/``new_values`` (sticky state) and ``ledger`` (or ``HINCRBY`` the
    groups by ``fresh``) **together with** the release, or not at all.
    """

    published: NDArray[np.int64]
    """Published code per row."""
    trial: NDArray[np.bool_]
    """True where the row is an independent trial (reused or fresh)."""
    source: NDArray[np.int64]
    """Row whose trial value is published (itself for trials); -1 for noise rows."""
    new_keys: NDArray[Any]
    """Keys of the fresh trials (to add to the sticky state)."""
    new_values: NDArray[np.int64]
    """Their randomized codes."""
    ledger: TrialLedger
    """The trial ledger after this release."""
    group_ids: NDArray[np.int64]
    """(G,) groups of this snapshot, ascending."""
    size: NDArray[np.int64]
    """(G,) ``|g|`` in this snapshot (= published rows of the group)."""
    trials: NDArray[np.int64]
    """(G,) trials present in this release (reused + fresh)."""
    fresh: NDArray[np.int64]
    """(G,) fresh trials drawn in this release."""
    cap: int
    """``floor(s*)``, the data-independent trial cap."""


def serial_rp_randomize(
    group: ArrayLike,
    codes: ArrayLike,
    keys: ArrayLike,
    *,
    p: float,
    epsilon: float,
    delta: float,
    m: int,
    rng: np.random.Generator,
    known_keys: ArrayLike | None = None,
    known_values: ArrayLike | None = None,
    ledger_keys: ArrayLike | None = None,
    ledger_counts: ArrayLike | None = None,
    bound: Bound = "theorem_5_13",
) -> SerialRelease:
    r"""One snapshot of a serial release under Algorithm 1's cap (Theorems 5.13, 5.16, [WHF12]).

    Composes the two serial rules with Algorithm 1's Sampling/Scaling, per micro group ``g``
    and with the data-independent cap ``c = floor(s(f=1))``:

    1. Rows whose key has a sticky value are earlier trials: they stay trials and publish
       that value (rule 1, :func:`sticky_perturb`).
    2. Fresh trials: ``min(c - T_g, min(|g|, c) - reused)`` (at least 0) new rows, chosen
       toward a stratified sample of ``min(|g|, c)`` rows (Sampling's per-value targets by
       systematic rounding); first, one slot for each value that has no trial, even if its
       stratified share rounds to 0 (it would otherwise publish noise), the remaining slots
       in random order. With an empty state and every value's share >= 1 this is Algorithm
       1's stratified sample of ``min(|g|, c)`` rows. Fresh trials are perturbed, stored, and
       added to ``T_g`` (rule 2, :func:`advance_trial_ledger`). Hence ``T_g <= c`` forever
       (given a ledger that started within ``c``), which is Theorem 5.13's condition on
       every trial the adversary has ever seen.
    3. Scaling: every other row publishes a copy of a present trial **with the same original
       code**, round-robin from a random start, so each value's published count is exact;
       a row whose value has no present trial publishes a uniform random code (noise: no
       trial, no information, a bias toward ``1/m``).

    Parameters
    ----------
    group : (n,) int, micro group id per row; groups must mean the same NA tuple in every
        release (keep the ledger at the finest granularity ever published)
    codes : (n,) int, original code per row, ``0 <= code < m``
    keys : (n,) unique record-version keys, see :func:`sticky_perturb`
    p, epsilon, delta, m, rng, bound : as in :func:`rp_randomize`
    known_keys, known_values : sticky state (every trial ever published), see
        :func:`sticky_perturb`
    ledger_keys, ledger_counts : trial ledger (int group keys), see :class:`TrialLedger`

    Returns
    -------
    SerialRelease

    Notes
    -----
    Only the data-independent cap is offered: a per-group cap ``s(f_max)`` falls when a group
    grows more skewed, below trials already published, which cannot be withdrawn (digest
    §5 F4). Value-matched copies are the digest's online Sampling/Scaling; they keep every
    published per-value count equal in expectation to plain perturbation's (Fact 4) even
    when the surviving trials are not a stratified sample. If a group holds more reused
    trials than its ledger count, the state is inconsistent (keys not versioned by group,
    or a lost ledger) and InvalidParameter is raised.
    """
    p, epsilon, delta, m, _ = _check_cap_args(p, epsilon, delta, m, 1.0)
    rng = _check_rng(rng)
    bound = _check_choice("bound", bound, BOUNDS)
    cap = math.floor(_check_cap_at_least_one(p, epsilon, delta, m, bound))
    group_arr, codes_arr = _check_rows(group, codes, m)
    n = group_arr.shape[0]
    keys_arr = _check_keys(keys, n, unique=True)
    known_k, known_v = _check_state(known_keys, known_values, m, keys_arr)
    ledger = _check_ledger(ledger_keys, ledger_counts, group_arr)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return SerialRelease(
            published=empty,
            trial=np.zeros(0, dtype=bool),
            source=empty,
            new_keys=keys_arr[:0],
            new_values=empty,
            ledger=ledger,
            group_ids=empty,
            size=empty,
            trials=empty,
            fresh=empty,
            cap=cap,
        )

    found, index = _lookup(keys_arr, known_k)
    # Sort by group, code, reused-first, random: within a run the reused trials come first.
    runs = _runs(group_arr, codes_arr, ~found, rng.random(n))
    n_runs, n_groups = runs.run_len.shape[0], runs.size.shape[0]
    found_sorted = found[runs.order]
    reused_run = np.bincount(runs.row_run[found_sorted], minlength=n_runs)
    reused_group = np.bincount(runs.run_group, weights=reused_run, minlength=n_groups)
    reused_group = np.rint(reused_group).astype(np.int64)
    used = _ledger_counts_for(runs.group_ids, ledger)
    if np.any(reused_group > used):
        bad = int(np.flatnonzero(reused_group > used)[0])
        raise InvalidParameter(
            f"known_keys, ledger_counts: group {runs.group_ids[bad]} has "
            f"{reused_group[bad]} rows with sticky values but a ledger count of {used[bad]}; "
            "keys must name record versions within one group and the ledger must be the one "
            "saved with the sticky state"
        )
    target = np.minimum(runs.size, cap)
    budget = np.maximum(0, cap - used)
    fresh_group = np.minimum(budget, np.maximum(0, target - reused_group))

    # Sampling toward a stratified sample of `target` rows, reused trials counted first.
    want = _systematic(runs.run_len, runs.run_group, runs.size, target, rng)
    need = np.maximum(0, want - reused_run)
    # A value without any trial may take one slot even if its stratified share rounds to 0:
    # copies are value-matched, so trial composition changes variance only, noise adds bias.
    need = np.where(reused_run == 0, np.maximum(need, 1), need)
    fresh_run = _pick_units(need, reused_run, runs.run_group, fresh_group, rng)
    k = reused_run + fresh_run

    position = np.arange(n, dtype=np.int64) - runs.run_start[runs.row_run]
    run_of = runs.row_run
    is_trial = position < k[run_of]
    is_reused = position < reused_run[run_of]
    is_fresh = is_trial & ~is_reused
    codes_sorted = codes_arr[runs.order]
    published_sorted = np.empty(n, dtype=np.int64)
    published_sorted[is_reused] = known_v[index[runs.order[is_reused]]]
    drawn = _perturb(codes_sorted[is_fresh], p, m, rng)
    published_sorted[is_fresh] = drawn
    source_sorted = np.full(n, -1, dtype=np.int64)
    source_sorted[is_trial] = runs.order[is_trial]

    # Scaling: value-matched copies, round-robin over the run's trials from a random start.
    copy = ~is_trial & (k[run_of] > 0)
    start = rng.integers(0, np.maximum(k, 1), dtype=np.int64)
    j = position[copy] - k[run_of[copy]]
    src = runs.run_start[run_of[copy]] + (start[run_of[copy]] + j) % k[run_of[copy]]
    published_sorted[copy] = published_sorted[src]
    source_sorted[copy] = runs.order[src]
    noise = ~is_trial & ~copy
    published_sorted[noise] = rng.integers(0, m, size=int(noise.sum()), dtype=np.int64)

    published = np.empty(n, dtype=np.int64)
    published[runs.order] = published_sorted
    source = np.empty(n, dtype=np.int64)
    source[runs.order] = source_sorted
    trial = np.empty(n, dtype=bool)
    trial[runs.order] = is_trial
    fresh_rows = runs.order[is_fresh]
    fresh_per_group = np.rint(
        np.bincount(runs.run_group, weights=fresh_run, minlength=n_groups)
    ).astype(np.int64)
    grew = fresh_per_group > 0
    new_ledger = advance_trial_ledger(
        runs.group_ids[grew],
        fresh_per_group[grew],
        ledger_keys=ledger.keys,
        ledger_counts=ledger.counts,
    )
    trials_group = np.rint(np.bincount(runs.run_group, weights=k, minlength=n_groups))
    return SerialRelease(
        published=published,
        trial=trial,
        source=source,
        new_keys=keys_arr[fresh_rows],
        new_values=drawn,
        ledger=new_ledger,
        group_ids=runs.group_ids,
        size=runs.size,
        trials=trials_group.astype(np.int64),
        fresh=fresh_per_group,
        cap=cap,
    )


# --- aggregate reconstruction for analysts (§3.1, Lemma 1) -----------------------------------


def reconstruct_frequency(observed: ArrayLike, size: ArrayLike, p: float, m: int) -> Any:
    r"""MLE of a value's frequency, Lemma 1(ii) of [WHF12] (Theorem 1 without inversion).

    ``F' = (O*/|S| - (1-p)/m) / p``; unbiased, ``E[F'] = f`` (Lemma 1(iii)). Not clipped:
    it can be negative or above 1. Vectorised (float or float64 array).

    Parameters
    ----------
    observed : int array, ``O*``, published rows of ``S*`` with the value, ``0 <= O* <= |S|``
    size : int array, ``|S*| >= 1`` (on Algorithm 1's output: ``|S2*|``)
    p, m : the release's retention probability and full domain size

    Examples
    --------
    >>> round(float(reconstruct_frequency(40, 100, 0.5, 14)), 6)
    0.728571
    """
    p = check_open_probability(p, "p")
    m = check_domain_size(m)
    o, n = _check_observed(observed, size)
    return (o / n - (1.0 - p) / m) / p


def estimate_count(observed: ArrayLike, size: ArrayLike, p: float, m: int) -> Any:
    r"""Estimated true count ``est = |S| F' = (O* - |S| (1-p)/m) / p``, §3.1 and Lemma 1 of [WHF12].

    The paper's answer to ``COUNT(*) WHERE φ`` with ``SA = x`` in ``φ``: reconstruct on the
    rows ``S*`` matching ``φ`` without the ``SA`` equality. Unbiased, not clipped.

    Examples
    --------
    The digest's worked example (|S| = 100, p = 0.5, m = 14, O* = 40):

    >>> round(float(estimate_count(40, 100, 0.5, 14)), 3)
    72.857
    """
    p = check_open_probability(p, "p")
    m = check_domain_size(m)
    o, n = _check_observed(observed, size)
    return (o - n * (1.0 - p) / m) / p


def count_variance(
    f: ArrayLike, size: ArrayLike, p: float, m: int, *, trials: ArrayLike | None = None
) -> float:
    r"""Variance of ``est`` over the micro groups of ``S`` (Lemma 1 of [WHF12]; formula derived).

    ``O*`` of a group is a sum of independent Poisson trials with success probability
    ``q1 = p + (1-p)/m`` (original value ``x``) or ``q0 = (1-p)/m`` (§1.3 of the digest), so
    per trial ``v(f) = f q1 (1-q1) + (1-f) q0 (1-q0)`` and ``Var(F') = v / (|S| p²)``. After
    Algorithm 1 a group of ``n_g`` trials scaled by ``b' = |g|/n_g`` has
    ``Var(O*_{g2}) ≈ b'² n_g v = |g| b' v`` (Theorem 5.18 keeps the mean, not the variance):

    .. math:: Var(est) = \sum_g |g| \, (|g| / n_g) \, v(f_g) / p^2

    Parameters
    ----------
    f : array, true frequency of the value in each group, ``0 <= f <= 1``
    size : array, ``|g| >= 1``; broadcast with ``f``
    p, m : the release's parameters
    trials : array, ``n_g`` per group, ``0 < n_g <= |g|`` (default ``|g|``: plain perturbation)

    Examples
    --------
    The digest's simulation group (|g| = 200, f = 0.8, m = 14, p = 0.5), as ``Var(F')``:

    >>> round(count_variance(0.8, 200, 0.5, 14) / 200**2, 6)
    0.004117
    """
    p = check_open_probability(p, "p")
    m = check_domain_size(m)
    f_arr = np.asarray(f, dtype=np.float64)
    if np.any(~((f_arr >= 0) & (f_arr <= 1))):
        raise InvalidParameter(f"f = {f!r}: frequencies must lie in [0, 1]")
    size_arr = np.asarray(size, dtype=np.float64)
    if np.any(~(size_arr >= 1)):
        raise InvalidParameter(f"size = {size!r}: group sizes must be >= 1")
    weight = _weight(size_arr, trials)
    return float(np.sum(size_arr * weight * _per_trial_variance(f_arr, p, m)) / (p * p))


@dataclass(frozen=True)
class CountEstimate:
    """Answer of :func:`reconstruct_count`."""

    estimate: float
    """``est = (O* - |S| (1-p)/m) / p``, unclipped."""
    frequency: float
    """``F' = est / |S|``."""
    observed: int
    """``O*``, published rows of ``S*`` holding the value."""
    size: int
    """``|S*|``."""
    variance: float
    """Estimated ``Var(est)`` (see :func:`reconstruct_count`)."""
    standard_error: float
    """``sqrt(variance)``."""


def reconstruct_count(
    observed: ArrayLike,
    size: ArrayLike,
    p: float,
    m: int,
    *,
    trials: ArrayLike | None = None,
) -> CountEstimate:
    r"""Aggregate reconstruction with a standard error, §3.1, Lemma 1 and Theorem 5.18 of [WHF12].

    ``S*`` is given per micro group: ``observed[g] = O*_g`` and ``size[g] = |g*|``. The
    estimate is Lemma 1(ii) on the totals (by Lemma 4.3 the grouping does not change it);
    the variance is :func:`count_variance` with every ``f_g`` replaced by the group's own
    unclipped ``F'_g``. Because ``v(f)`` is linear in ``f`` and ``E[F'_g] = f_g`` (Theorem
    5.18 for Algorithm 1's output), this plug-in is unbiased for the variance formula
    (rounded up to 0 if negative); on plain perturbation it is ``|S| v(F') / p²``.

    Parameters
    ----------
    observed : (k,) int, ``O*_g``, ``0 <= O*_g <= |g*|``
    size : (k,) int, ``|g*| >= 1``; total ``|S*| >= 1``
    p, m : the release's parameters
    trials : (k,) ``n_g`` per group, ``0 < n_g <= |g*|``; default ``|g*|`` (plain
        perturbation). Under :func:`rp_randomize` with the public ``worst_case`` cap and
        exact scaling, ``n_g = min(|g*|, floor(s*))`` is known to analysts.

    Examples
    --------
    >>> r = reconstruct_count([40], [100], 0.5, 14)
    >>> round(r.estimate, 3), round(r.frequency, 6)
    (72.857, 0.728571)

    Notes
    -----
    The digest's SE (§3.3) plugs in the binomial ``O_g (1 - O_g/|g*|)``, which exceeds the
    Poisson-trial variance by about ``|g| f (1-f) p²``; the linear plug-in used here has no
    such bias. The number of trials of a serial release (:func:`serial_rp_randomize`) can be
    below ``min(|g|, floor(s*))`` after deletions; the standard error then understates.
    """
    p = check_open_probability(p, "p")
    m = check_domain_size(m)
    o, n = _check_observed(observed, size)
    o, n = np.atleast_1d(o), np.atleast_1d(n)
    total_o, total_n = float(o.sum()), float(n.sum())
    q0 = (1.0 - p) / m
    frequency = (total_o / total_n - q0) / p
    weight = _weight(n, trials)
    per_group = (o / n - q0) / p
    variance = max(0.0, float(np.sum(n * weight * _per_trial_variance(per_group, p, m))))
    variance /= p * p
    return CountEstimate(
        estimate=total_n * frequency,
        frequency=frequency,
        observed=round(total_o),
        size=round(total_n),
        variance=variance,
        standard_error=math.sqrt(variance),
    )


def _per_trial_variance(f: Any, p: float, m: int) -> Any:
    """``v(f) = f q1 (1 - q1) + (1 - f) q0 (1 - q0)``, linear in ``f``."""
    q1 = p + (1.0 - p) / m
    q0 = (1.0 - p) / m
    return f * q1 * (1.0 - q1) + (1.0 - f) * q0 * (1.0 - q0)


def _weight(size: NDArray[np.float64], trials: ArrayLike | None) -> NDArray[np.float64]:
    """``b' = |g| / n_g`` (1 when ``trials`` is None)."""
    if trials is None:
        return np.ones_like(size)
    t = np.asarray(trials, dtype=np.float64)
    try:
        t, s = np.broadcast_arrays(t, size)
    except ValueError:
        raise InvalidParameter(
            f"trials has shape {t.shape} but size has shape {size.shape}"
        ) from None
    if np.any(~((t > 0) & (t <= s))):
        raise InvalidParameter(f"trials = {trials!r}: need 0 < trials <= size for every group")
    return s / t


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


def _systematic(
    run_len: NDArray[np.int64],
    run_group: NDArray[np.int64],
    size: NDArray[np.int64],
    n_target: NDArray[np.int64],
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    """Per-run sample sizes: ``floor(len n/|g|)`` plus one with probability ``frac``, the
    extras by systematic rounding in integers so each group's total is exactly ``n_target``.

    ``run_group`` must be non-decreasing (a group's runs contiguous). With ``S = |g|`` and
    remainders ``r`` (their sum is a multiple of ``S``), run ``i`` gets an extra iff a
    multiple of ``S`` lies in ``(R_{i-1} + U, R_i + U]`` for cumulative ``R`` and one uniform
    integer ``U in [0, S)`` per group: exactly ``r_i`` of the ``S`` offsets do.
    """
    if run_len.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    s = size[run_group]
    floor, rem = np.divmod(run_len * n_target[run_group], s)
    first = np.ones(run_len.shape[0], dtype=bool)
    first[1:] = run_group[1:] != run_group[:-1]
    segment = np.cumsum(first) - 1
    csum = np.cumsum(rem)
    cum = csum - (csum - rem)[first][segment]
    offset = rng.integers(0, s[first], dtype=np.int64)[segment]
    extra = (cum + offset) // s - (cum - rem + offset) // s
    return (floor + extra).astype(np.int64)


def _strict_sample_size(
    size: NDArray[np.int64],
    max_count: NDArray[np.int64],
    n_target: NDArray[np.int64],
    params: tuple[float, float, float, int, str],
) -> NDArray[np.int64]:
    """Largest ``n <= n_target`` with ``n <= s(ceil(max_count n / |g|) / n)`` per sampled group.

    Systematic rounding gives every value at most ``ceil(|g_x| n / |g|)`` rows, so the
    sample's ``f_max(g1)`` is at most ``ceil(max_count n / |g|) / n`` whatever the coins, and
    ``n <= s(that)`` makes Theorem 5.16's premise ``|g1| <= s_{g1}`` hold exactly (``s`` is
    decreasing in ``f``). ``n`` is fixed before any coin is flipped, so Fact 1 stays exact in
    expectation. ``n = 1`` always passes since ``s(1) >= 1``.
    """
    p, epsilon, delta, m, bound = params
    n = n_target.copy()
    sampled = n < size
    while True:
        worst_f = (-((-max_count * n) // size)) / n
        bad = sampled & (n > _cap(p, epsilon, delta, m, worst_f, bound))
        if not bad.any():
            return n
        n[bad] -= 1


def _scale(
    trial_gidx: NDArray[np.int64],
    size: NDArray[np.int64],
    n_target: NDArray[np.int64],
    scaling: str,
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    """Copies per trial: ``floor(b')`` plus one for ``|g| mod n_g`` trials (exact) or with
    probability ``frac(b')`` each (randomized); trials sorted by group, ``n_target`` each."""
    base, extra = np.divmod(size, n_target)
    t = trial_gidx.shape[0]
    if scaling == "randomized":
        bump = rng.random(t) * n_target[trial_gidx] < extra[trial_gidx]
    else:
        order = np.lexsort((rng.random(t), trial_gidx))
        start = np.cumsum(n_target) - n_target
        rank = np.empty(t, dtype=np.int64)
        rank[order] = np.arange(t, dtype=np.int64) - start[trial_gidx[order]]
        bump = rank < extra[trial_gidx]
    return base[trial_gidx] + bump.astype(np.int64)


def _pick_units(
    need: NDArray[np.int64],
    reused_run: NDArray[np.int64],
    run_group: NDArray[np.int64],
    quota: NDArray[np.int64],
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    """Choose ``quota[g]`` of each group's needed trial slots; a value without any trial
    gets its first slot before the rest, which are taken in random order."""
    total = int(need.sum())
    if total == 0:
        return np.zeros(need.shape[0], dtype=np.int64)
    unit_run = np.repeat(np.arange(need.shape[0]), need)
    unit_j = np.arange(total) - np.repeat(np.cumsum(need) - need, need)
    priority = ~((reused_run[unit_run] == 0) & (unit_j == 0))
    unit_group = run_group[unit_run]
    order = np.lexsort((rng.random(total), priority, unit_group))
    per_group = np.bincount(unit_group, minlength=quota.shape[0])
    start = np.cumsum(per_group) - per_group
    rank = np.arange(total) - start[unit_group[order]]
    take = order[rank < quota[unit_group[order]]]
    return np.bincount(unit_run[take], minlength=need.shape[0]).astype(np.int64)


def _lookup(keys: NDArray[Any], known: NDArray[Any]) -> tuple[NDArray[np.bool_], NDArray[np.intp]]:
    """``found[i]``: ``keys[i]`` is in ``known`` (unique), at ``known[index[i]]``."""
    n = keys.shape[0]
    if known.shape[0] == 0 or n == 0:
        return np.zeros(n, dtype=bool), np.zeros(n, dtype=np.intp)
    order = np.argsort(known, kind="stable")
    ordered = known[order]
    pos = np.minimum(np.searchsorted(ordered, keys), ordered.shape[0] - 1)
    return ordered[pos] == keys, order[pos]


def _ledger_counts_for(keys: NDArray[Any], ledger: TrialLedger) -> NDArray[np.int64]:
    if ledger.keys.shape[0] == 0:
        return np.zeros(keys.shape[0], dtype=np.int64)
    found, index = _lookup(keys, ledger.keys)
    return np.where(found, ledger.counts[index], 0).astype(np.int64)


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


def _check_keys(
    keys: ArrayLike, n: int | None, *, unique: bool, name: str = "keys"
) -> NDArray[Any]:
    arr = np.asarray(keys)
    if arr.size == 0 and arr.dtype.kind == "f":
        arr = arr.astype(np.int64)  # a bare [] is float64
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        raise InvalidParameter(f"{name}: need a 1-D array with one key per row ({n})")
    if arr.dtype.kind not in "iuSU":
        raise InvalidParameter(f"{name}: keys must be integers or strings, got dtype {arr.dtype}")
    if unique and arr.shape[0] > 1:
        ordered = np.sort(arr)
        if np.any(ordered[1:] == ordered[:-1]):
            raise InvalidParameter(f"{name}: must be unique, one record version per row")
    return arr


def _same_kind(a: NDArray[Any], b: NDArray[Any]) -> bool:
    return (a.dtype.kind in "iu" and b.dtype.kind in "iu") or a.dtype.kind == b.dtype.kind


def _check_state(
    known_keys: ArrayLike | None, known_values: ArrayLike | None, m: int, keys: NDArray[Any]
) -> tuple[NDArray[Any], NDArray[np.int64]]:
    if known_keys is None and known_values is None:
        return keys[:0], np.zeros(0, dtype=np.int64)
    if known_keys is None or known_values is None:
        raise InvalidParameter("known_keys, known_values: give both or neither")
    k_arr = np.asarray(known_keys)
    if k_arr.size == 0:
        return keys[:0], np.zeros(0, dtype=np.int64)
    k_arr = _check_keys(k_arr, None, unique=True, name="known_keys")
    if not _same_kind(k_arr, keys):
        raise InvalidParameter(
            f"known_keys: dtype {k_arr.dtype} does not match the keys' dtype {keys.dtype}"
        )
    v_arr = _check_codes(known_values, m, "known_values")
    if v_arr.shape != k_arr.shape:
        raise InvalidParameter(
            f"known_values has shape {v_arr.shape} but known_keys has shape {k_arr.shape}"
        )
    return k_arr, v_arr


def _check_ledger(
    ledger_keys: ArrayLike | None, ledger_counts: ArrayLike | None, keys: NDArray[Any]
) -> TrialLedger:
    if ledger_keys is None and ledger_counts is None:
        return TrialLedger(keys[:0], np.zeros(0, dtype=np.int64))
    if ledger_keys is None or ledger_counts is None:
        raise InvalidParameter("ledger_keys, ledger_counts: give both or neither")
    k_arr = np.asarray(ledger_keys)
    if k_arr.size == 0:
        return TrialLedger(keys[:0], np.zeros(0, dtype=np.int64))
    k_arr = _check_keys(k_arr, None, unique=True, name="ledger_keys")
    if not _same_kind(k_arr, keys):
        raise InvalidParameter(
            f"ledger_keys: dtype {k_arr.dtype} does not match the group keys' dtype {keys.dtype}"
        )
    c_arr = _int_array("ledger_counts", ledger_counts)
    if c_arr.shape != k_arr.shape or np.any(c_arr < 0):
        raise InvalidParameter(
            "ledger_counts: need one integer >= 0 per ledger key (trials ever published)"
        )
    order = np.argsort(k_arr, kind="stable")
    return TrialLedger(k_arr[order], c_arr[order])


def _check_observed(
    observed: ArrayLike, size: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    o = np.asarray(observed, dtype=np.float64)
    n = np.asarray(size, dtype=np.float64)
    if o.shape != n.shape:
        raise InvalidParameter(f"observed has shape {o.shape} but size has shape {n.shape}")
    if np.any(~(n >= 1)):
        raise InvalidParameter(
            f"size = {size!r}: |S*| must be >= 1; with no matching rows the estimate is undefined"
        )
    if np.any(~((o >= 0) & (o <= n))):
        raise InvalidParameter(f"observed = {observed!r}: need 0 <= observed <= size")
    return o, n


def _empty_release() -> RPRelease:
    i = np.zeros(0, dtype=np.int64)
    return RPRelease(i, i, i, np.zeros(0), i, i, i, i, i, i)
