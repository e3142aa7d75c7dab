r"""The audit's own record of every linkage, with exact arithmetic where it matters.

For every (individual, value) pair the ledger keeps ``sum log1p(-c/n)`` over the releases
whose group of the individual held the value (Lemma 4 of [WFLWX10]:
``p = 1 - prod (1 - c/n)``), the number of those releases, and every factor's integers
``(n, c)``. Comparisons with a bound are screened in floats and decided exactly
(:class:`fractions.Fraction` of the integers) whenever the float lies within
:data:`SCREEN` of the bound: the float sum of ``k`` factors is within ``(k + 6) 2^-52 |L|``
of the exact logarithm, below :data:`SCREEN` for any ``k`` under a million.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

VALUE_SPACE = 1 << 24
"""Value indexes per individual in a pair key ``individual * VALUE_SPACE + value``."""

SCREEN = 1e-9
"""Floats closer than this to a bound are decided in exact rational arithmetic."""


class Ledger:
    """Linkages per (individual, value) pair, keyed ``individual * VALUE_SPACE + value``."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.values: dict[str, int] = {}
        self.keys = np.zeros(0, dtype=np.int64)
        self.log_p = np.zeros(0, dtype=np.float64)
        self.links = np.zeros(0, dtype=np.int64)
        self._factors: list[tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]] = []

    def index(self, ids: list[str]) -> NDArray[np.int64]:
        table = self.ids
        return np.fromiter(
            (table.setdefault(i, len(table)) for i in ids), dtype=np.int64, count=len(ids)
        )

    def value(self, name: str) -> int:
        return self.values.setdefault(name, len(self.values))

    def value_names(self) -> list[str]:
        names = [""] * len(self.values)
        for name, i in self.values.items():
            names[i] = name
        return names

    def state(self, keys: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """``(log_p, links)`` of each key (``0, 0``: never linked)."""
        at = np.searchsorted(self.keys, keys)
        hit = at < self.keys.shape[0]
        hit[hit] = self.keys[at[hit]] == keys[hit]
        log_p = np.zeros(keys.shape[0], dtype=np.float64)
        links = np.zeros(keys.shape[0], dtype=np.int64)
        log_p[hit] = self.log_p[at[hit]]
        links[hit] = self.links[at[hit]]
        return log_p, links

    def link(self, keys: NDArray[np.int64], n: NDArray[np.int64], c: NDArray[np.int64]) -> None:
        """One linkage per key (distinct keys): a group of ``n`` rows, ``c`` of them with the
        value."""
        with np.errstate(divide="ignore"):
            factor = np.where(c < n, np.log1p(-c / np.maximum(n, 1)), -np.inf)
        self._factors.append((keys.copy(), n.astype(np.int64), c.astype(np.int64)))
        all_keys = np.concatenate([self.keys, keys])
        uniq, inverse = np.unique(all_keys, return_inverse=True)
        log_p = np.zeros(uniq.shape[0], dtype=np.float64)
        links = np.zeros(uniq.shape[0], dtype=np.int64)
        np.add.at(log_p, inverse, np.concatenate([self.log_p, factor]))
        np.add.at(links, inverse, np.concatenate([self.links, np.ones(keys.shape[0], np.int64)]))
        self.keys, self.log_p, self.links = uniq, log_p, links

    def exact_keep(self, keys: NDArray[np.int64]) -> dict[int, Fraction]:
        """``prod (n - c)/n`` of each key, exactly."""
        out = {int(k): Fraction(1) for k in keys.tolist()}
        for stored, n, c in self._factors:
            mask = np.isin(stored, keys)
            picked = zip(stored[mask].tolist(), n[mask].tolist(), c[mask].tolist(), strict=True)
            for k, a, b in picked:
                out[k] *= Fraction(a - b, a)
        return out

    def above(self, keys: NDArray[np.int64], bound: Fraction) -> NDArray[np.bool_]:
        """Whether each key's breach probability ``1 - prod(1 - c/n)`` exceeds ``bound``,
        decided exactly near it."""
        log_p, _ = self.state(keys)
        p = -np.expm1(log_p)
        limit = float(bound)
        out = p > limit
        near = np.abs(p - limit) <= SCREEN
        if near.any():
            exact = self.exact_keep(keys[near])
            out[near] = [1 - exact[int(k)] > bound for k in keys[near].tolist()]
        return out

    def keep_below(self, keys: NDArray[np.int64], threshold: Fraction) -> NDArray[np.bool_]:
        """Whether each key's ``P = prod(1 - c/n)`` is below ``threshold``, decided exactly
        near it."""
        log_p, _ = self.state(keys)
        keep = np.exp(log_p)
        limit = float(threshold)
        out = keep < limit
        near = np.abs(keep - limit) <= SCREEN
        if near.any():
            exact = self.exact_keep(keys[near])
            out[near] = [exact[int(k)] < threshold for k in keys[near].tolist()]
        return out


def breach(log_p: NDArray[np.float64]) -> NDArray[np.float64]:
    """``1 - P`` from ``log P`` (Lemma 4)."""
    return -np.expm1(log_p)


def exact_inverse(ell: float) -> Fraction:
    """``1/l`` exactly, ``l`` being the rational number its float is."""
    return 1 / Fraction(ell)


def spent_threshold(ell: float, cap: int) -> Fraction:
    """The ``P`` below which Theorem 1's ratio ``lP / (lP - (l - 1))`` exceeds ``cap`` (or
    is infinite): ``cap (l - 1) / (l (cap - 1))``."""
    el = Fraction(ell)
    if cap <= 1:  # no ratio fits: every pair is spent
        return Fraction(2)
    return cap * (el - 1) / (el * (cap - 1))
