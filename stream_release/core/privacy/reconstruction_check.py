r"""The reconstruction-privacy test of [WHF12]: Corollaries 4.9 and 4.10 (§4).

:func:`tail_bounds` gives Corollary 4.9's Chernoff bounds on the tails of a micro group's
relative reconstruction error; :func:`micro_groups` the group sizes and largest value counts
the test needs; :func:`is_reconstruction_private` the test of Corollary 4.10, specialised by
Theorem 5.13 (or 5.11) to ``|g| <= s_g(f_max)`` with the caps of
:mod:`stream_release.core.privacy.reconstruction` (definitions, notation and seeding there).

[WHF12]: K. Wang, C. Han, A. W.-C. Fu, Randomization Resilient To Sensitive Reconstruction,
arXiv:1202.3179 (2012); full reference and digest in
:mod:`stream_release.core.privacy.reconstruction`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stream_release.core.privacy.reconstruction import BOUNDS, Bound, _cap, _full_exponent
from stream_release.core.privacy.reconstruction_kernels import (
    _check_cap_args,
    _check_choice,
    _check_epsilon_range,
    _check_rows,
    _group_max,
    _runs,
)
from stream_release.core.privacy.validation import (
    check_domain_size,
    check_open_probability,
    check_positive,
)
from stream_release.errors import InvalidParameter

__all__ = ["MicroGroups", "TailBounds", "is_reconstruction_private", "micro_groups", "tail_bounds"]


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
