"""Refuse a release whose parameters no grouping can meet, naming the largest feasible
setting (Wong et al. 2010, Theorem 1 and §6: a group-size ratio ``r`` needs every protected
value held by at most ``N / r`` of the ``N`` rows)."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from stream_release.core.privacy.breach import constant_ratio_target
from stream_release.core.privacy.strategy import Strategy
from stream_release.core.table import EncodedTable
from stream_release.errors import GuaranteeUnsatisfiable

__all__ = ["check_feasible"]


def check_feasible(
    table: EncodedTable,
    eligible: NDArray[np.bool_],
    is_protected: NDArray[np.bool_],
    strategy: Strategy,
    min_group_size: int,
) -> None:
    """Refuse parameters no grouping can meet: a group-size ratio ``r`` needs every protected
    value held by at most ``N / r`` of the ``N`` rows (summing ``n(G,s) <= |G|/r`` over groups).
    """
    n = int(np.count_nonzero(eligible))
    if n == 0:
        return
    if n < min_group_size:
        raise GuaranteeUnsatisfiable(
            f"min_group_size = {min_group_size} but the release has only {n} publishable rows; "
            f"set min_group_size <= {n}",
            public=True,
        )
    counts = np.bincount(table.sensitive[eligible], minlength=len(table.sensitive_values))
    counts = np.where(is_protected, counts, 0)
    need = strategy.base_ratio
    too_frequent = counts * need > n
    if not too_frequent.any():
        return
    # the message states the snapshot's totals, never the counts of the rows it may publish:
    # those less the totals are the rows it withholds, whose values are what it must not tell
    totals = np.where(is_protected, np.bincount(table.sensitive, minlength=counts.shape[0]), 0)
    worst = int(np.argmax(np.where(too_frequent, totals, -1)))
    rows = int(table.n_rows)
    r_max = rows / max(int(totals[worst]), 1)
    value = table.sensitive_values[worst]
    raise GuaranteeUnsatisfiable(
        f"infeasible: protected value {value!r} is held by {totals[worst]} of the snapshot's "
        f"{rows} rows ({100 * totals[worst] / rows:.2f} %), too many for a group-size ratio of "
        f"{need:.4g} (strategy {strategy.name} with l = {strategy.ell:g}) among the rows the "
        f"release may publish; largest feasible setting: "
        f"{_largest_feasible(strategy, r_max)}",
        public=True,
    )


def _largest_feasible(strategy: Strategy, r_max: float) -> str:
    """The largest settings whose base ratio this release's value frequencies allow.

    Values are rounded *down* (4 significant digits) so the suggestion is itself feasible. It
    holds for this release; later releases' frequencies and histories may need less.
    """
    if r_max <= 1.0:
        return "none (the value is the only one left: drop it from protected or suppress it)"
    options = []
    if strategy.name == "constant-ratio":
        k = strategy.k_prime or 1
        k_max = 0
        while k_max < 10_000 and constant_ratio_target(strategy.ell, k_max + 1) <= r_max:
            k_max += 1
        if k_max >= 1:
            options.append(f"k_prime = {k_max} at l = {strategy.ell:g}")
        ell_for_k = 1.0 / -math.expm1(k * math.log1p(-1.0 / r_max))
        if _floor4(ell_for_k) > 1.0:
            options.append(f"l = {_floor4(ell_for_k):g} at k_prime = {k}")
    elif strategy.name == "geometric":
        if _floor4(r_max / strategy.ell) > 1.0:
            options.append(f"alpha = {_floor4(r_max / strategy.ell):g} at l = {strategy.ell:g}")
        if _floor4(r_max / (strategy.alpha or 2.0)) > 1.0:
            options.append(
                f"l = {_floor4(r_max / (strategy.alpha or 2.0)):g} at alpha = {strategy.alpha:g}"
            )
    elif _floor4(r_max) > 1.0:
        options.append(f"l = {_floor4(r_max):g}")
    return " or ".join(options) or "none: protect fewer values"


def _floor4(x: float) -> float:
    """``x`` rounded down to 4 significant digits."""
    scale = 10.0 ** (3 - math.floor(math.log10(abs(x))))
    return math.floor(x * scale) / scale
