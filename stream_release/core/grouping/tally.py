r"""What makes a group valid, and the tally of a group being formed (numba). Private: the
kernels trust their inputs.

A group G is *valid* iff ``|G| >= min_size`` and, for every protected value t present,
``|G| >= n(G,t) * R(G,t)`` with ``R(G,t) = max(base, max_{o in G} req(o,t))`` (the ratios
carry the margin on the safe side where they are [WFLWX10] Theorem 1's own bound:
:mod:`stream_release.core.privacy.strategy`)
(Wong et al. 2010, Theorem 1 and §6).

:class:`GroupRules` holds the terms of that rule, :class:`Tally` the counts ``n(G,t)`` and
ratios ``R(G,t)`` of one group while rows join it: :func:`add_row` takes a row in,
:func:`is_valid` applies the rule and :func:`reset_tally` clears what the group touched.

Notes
-----
The helpers take the arrays, not the structs: numba takes a reference to every array of a
tuple argument at each call of a function it does not inline (seen in the generated code),
and these run once per member or candidate row. The passes take the structs and unpack them
once.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = [
    "GroupRules",
    "Tally",
    "add_row",
    "extra_rows",
    "is_compatible",
    "is_valid",
    "new_tally",
    "reset_tally",
    "rows_needed",
]


class GroupRules(NamedTuple):
    """The requirement and exemption arrays every group is held to.

    ``protected`` (V,) bool over the local value codes; ``base`` the ratio required of a pair
    with no history; ``min_size`` the k-anonymity floor; ``cap`` the largest group a pass may
    form; ``ex_ptr`` (n+1,) int64, ``ex_val`` (m,) int32, ``ex_req`` (m,) float64: a CSR over
    rows of the pairs (row, value) whose required ratio exceeds ``base`` (``inf`` = may never
    share a group with that value).
    """

    protected: NDArray[np.bool_]
    base: float
    min_size: int
    cap: int
    ex_ptr: NDArray[np.int64]
    ex_val: NDArray[np.int32]
    ex_req: NDArray[np.float64]


class Tally(NamedTuple):
    """Scratch of one group being formed, (V,) each: ``cnt`` int64 the rows per value,
    ``req`` float64 the ratio ``R(G,t)`` its members require, ``touched`` int64 the values
    set so far (the first ``n_touched``, which the caller keeps). Zeroed between groups."""

    cnt: NDArray[np.int64]
    req: NDArray[np.float64]
    touched: NDArray[np.int64]


@njit(cache=True)
def new_tally(n_values: int) -> Tally:
    """A zeroed :class:`Tally` over ``n_values`` values."""
    return Tally(
        np.zeros(n_values, np.int64), np.zeros(n_values, np.float64), np.empty(n_values, np.int64)
    )


@njit(cache=True)
def add_row(
    row: int,
    sens: NDArray[np.int32],
    protected: NDArray[np.bool_],
    base: float,
    ex_ptr: NDArray[np.int64],
    ex_val: NDArray[np.int32],
    ex_req: NDArray[np.float64],
    cnt: NDArray[np.int64],
    req: NDArray[np.float64],
    touched: NDArray[np.int64],
    n_touched: int,
) -> int:
    """Add ``row``'s value count and requirements to the group scratch; returns n_touched."""
    v = sens[row]
    if cnt[v] == 0 and req[v] == 0.0:
        touched[n_touched] = v
        n_touched += 1
    cnt[v] += 1
    if protected[v] and req[v] < base:
        req[v] = base
    for e in range(ex_ptr[row], ex_ptr[row + 1]):
        t = ex_val[e]
        if cnt[t] == 0 and req[t] == 0.0:
            touched[n_touched] = t
            n_touched += 1
        if req[t] < ex_req[e]:
            req[t] = ex_req[e]
    return n_touched


@njit(cache=True)
def is_valid(
    size: int,
    min_size: int,
    protected: NDArray[np.bool_],
    cnt: NDArray[np.int64],
    req: NDArray[np.float64],
    touched: NDArray[np.int64],
    n_touched: int,
) -> bool:
    """Whether a group of ``size`` rows with this tally is valid (the module's rule)."""
    if size < min_size:
        return False
    for i in range(n_touched):
        t = touched[i]
        if cnt[t] > 0 and protected[t] and size < cnt[t] * req[t]:
            return False
    return True


@njit(cache=True)
def reset_tally(
    cnt: NDArray[np.int64], req: NDArray[np.float64], touched: NDArray[np.int64], n_touched: int
) -> None:
    """Zero the counts and ratios of the first ``n_touched`` touched values."""
    for i in range(n_touched):
        cnt[touched[i]] = 0
        req[touched[i]] = 0.0


@njit(cache=True)
def is_compatible(
    row: int,
    sens: NDArray[np.int32],
    protected: NDArray[np.bool_],
    base: float,
    ex_ptr: NDArray[np.int64],
    ex_val: NDArray[np.int32],
    ex_req: NDArray[np.float64],
    cnt: NDArray[np.int64],
    req: NDArray[np.float64],
    cap: int,
    repeat: bool,
) -> bool:
    """Can ``row`` join the group and the group still become valid within ``cap`` rows?

    Protected values stay distinct inside a bucketized group unless ``repeat``: then a value
    may come again if the group can still hold it (``(n(G,v) + 1) R(G,v) <= cap``).
    """
    v = sens[row]
    if protected[v]:
        if cnt[v] > 0 and not repeat:
            return False
        r_own = req[v] if req[v] > base else base
        for e in range(ex_ptr[row], ex_ptr[row + 1]):
            if ex_val[e] == v and ex_req[e] > r_own:
                r_own = ex_req[e]
        if (cnt[v] + 1) * r_own > cap:
            return False
    for e in range(ex_ptr[row], ex_ptr[row + 1]):
        t = ex_val[e]
        if cnt[t] > 0 and cnt[t] * ex_req[e] > cap:
            return False
    return True


@njit(cache=True)
def rows_needed(
    size: int,
    protected: NDArray[np.bool_],
    cnt: NDArray[np.int64],
    req: NDArray[np.float64],
    touched: NDArray[np.int64],
    n_touched: int,
) -> float:
    """Rows the group needs: ``max(size, max_t n(G,t) R(G,t))`` over its protected values."""
    need = float(size)
    for i in range(n_touched):
        t = touched[i]
        if cnt[t] > 0 and protected[t] and cnt[t] * req[t] > need:
            need = cnt[t] * req[t]
    return need


@njit(cache=True)
def extra_rows(
    row: int,
    need: float,
    sens: NDArray[np.int32],
    protected: NDArray[np.bool_],
    base: float,
    ex_ptr: NDArray[np.int64],
    ex_val: NDArray[np.int32],
    ex_req: NDArray[np.float64],
    cnt: NDArray[np.int64],
    req: NDArray[np.float64],
) -> int:
    """How many more rows the group would need if ``row`` joined it (its history can raise the
    ratio a present value requires, and its own value adds one to a count)."""
    after = need
    v = sens[row]
    if protected[v]:
        r = max(req[v], base)
        for e in range(ex_ptr[row], ex_ptr[row + 1]):
            if ex_val[e] == v and ex_req[e] > r:
                r = ex_req[e]
        after = max(after, (cnt[v] + 1) * r)
    for e in range(ex_ptr[row], ex_ptr[row + 1]):
        t = ex_val[e]
        if cnt[t] > 0:
            after = max(after, cnt[t] * max(req[t], ex_req[e]))
    return int(np.ceil(after)) - int(np.ceil(need))
