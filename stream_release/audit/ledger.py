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
from typing import Any

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

    def keep_above(self, keys: NDArray[np.int64], threshold: Fraction) -> NDArray[np.bool_]:
        """Whether each key's ``P = prod(1 - c/n)`` is above ``threshold``, decided exactly
        near it (``P <= 1 - 1/l``: at the bound)."""
        log_p, _ = self.state(keys)
        keep = np.exp(log_p)
        limit = float(threshold)
        out = keep > limit
        near = np.abs(keep - limit) <= SCREEN
        if near.any():
            exact = self.exact_keep(keys[near])
            out[near] = [exact[int(k)] > threshold for k in keys[near].tolist()]
        return out


def breach(log_p: NDArray[np.float64]) -> NDArray[np.float64]:
    """``1 - P`` from ``log P`` (Lemma 4)."""
    return -np.expm1(log_p)


def exact_inverse(ell: float) -> Fraction:
    """``1/l`` exactly, ``l`` being the rational number its float is."""
    return 1 / Fraction(ell)


PLAN_MARGIN = {"constant-ratio": 1e-9, "geometric": 1e-9, "minimal": 1e-6}
"""The relative margins the strategies plan above [WFLWX10] Theorem 1's ratio (``RATIO_RTOL``,
``MINIMAL_MARGIN`` of :mod:`stream_release.core.privacy.strategy`; a test keeps them equal)."""


def forced_threshold(ell: float, cap: int, strategy: dict[str, object]) -> Fraction:
    """The ``P`` of a row's own value below which the strategy's plan for it exceeds ``cap``
    (the row is *forced*: no group may take it): the constant-ratio plan ``max(n_c, m ñ)``
    and the minimal one ``m ñ`` exceed it when ``ñ > cap / m`` (``n_c`` never does: the cap is
    at least the base), the geometric ``max(alpha ñ, m ñ)`` when ``ñ > cap / max(alpha, m)``
    ([WFLWX10] §6 and Theorem 1)."""
    name = str(strategy.get("name"))
    margin = Fraction(1.0 + PLAN_MARGIN.get(name, 0.0))
    alpha = strategy.get("alpha")
    if name == "geometric" and isinstance(alpha, int | float):
        margin = max(margin, Fraction(alpha))
    c = Fraction(cap) / margin
    el = Fraction(ell)
    if c <= el:  # every ratio is at least l: the plan always exceeds the cap
        return Fraction(2)
    return c * (el - 1) / (el * (c - 1))


AT_BOUND_ATOL = Fraction(1e-9)
"""The planner treats ``P <= 1 - 1/l + BREACH_ATOL`` as at the bound (never linked again):
the audit allows exactly that much (``BREACH_ATOL`` of :mod:`stream_release.core.privacy.breach`;
a test keeps them equal)."""


def planned_ratio(
    keep: NDArray[np.float64], ell: float, strategy: dict[str, object], base: float
) -> NDArray[np.float64]:
    """The ratio the strategy plans for pairs whose ``P`` is ``keep`` (1: no history):
    ``max(base, plan(ñ))`` with [WFLWX10] Theorem 1's ``ñ = lP / (lP - (l - 1))``, infinite at the
    bound (``P <= 1 - 1/l`` plus the planner's tolerance); the plan as in
    :func:`forced_threshold`."""
    name = str(strategy.get("name"))
    if name == "localized":
        return np.full(keep.shape, float(ell))
    at_bound = keep <= float(at_bound_threshold(ell))
    with np.errstate(divide="ignore", invalid="ignore"):
        least = np.where(at_bound, np.inf, ell * keep / (ell * keep - (ell - 1.0)))
    plan = least * (1.0 + PLAN_MARGIN.get(name, 0.0))
    alpha = strategy.get("alpha")
    if name == "geometric" and isinstance(alpha, int | float):
        plan = np.maximum(plan, float(alpha) * least)
    return np.maximum(base, plan)


def at_bound_threshold(ell: float) -> Fraction:
    """``1 - 1/l`` plus the planner's tolerance: a pair whose ``P`` is at most this is
    treated as at the bound (never linked again)."""
    return 1 - 1 / Fraction(ell) + AT_BOUND_ATOL


def group_pairs(
    ledger: Ledger,
    lines: list[dict[str, Any]],
    sizes: NDArray[np.int64],
    rows: NDArray[np.int64],
    assigned: NDArray[np.int64],
    published: NDArray[np.bool_],
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """(key, n, c) of every published individual's linkage to each value of its group."""
    pair_group, pair_value, pair_count = [], [], []
    for g, line in enumerate(lines):
        for value, count in line["sensitive"].items():
            pair_group.append(g)
            pair_value.append(ledger.value(str(value)))
            pair_count.append(int(count))
    pg = np.array(pair_group, dtype=np.int64)
    order = np.argsort(pg, kind="stable")
    pg = pg[order]
    pv = np.array(pair_value, dtype=np.int64)[order]
    pc = np.array(pair_count, dtype=np.int64)[order]
    ptr = np.searchsorted(pg, np.arange(len(lines) + 1))
    g_of_row = assigned[published]
    counts = np.diff(ptr)[g_of_row]
    starts = ptr[g_of_row]
    idx = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    idx = idx + np.arange(int(counts.sum()))
    owners = np.repeat(rows[published], counts)
    return owners * VALUE_SPACE + pv[idx], sizes[pg[idx]], pc[idx]


def individual_max(
    owner: NDArray[np.int64], probs: NDArray[np.float64], individuals: NDArray[np.int64]
) -> NDArray[np.float64]:
    """(len(individuals),) each individual's largest probability (0 without any)."""
    out = np.zeros(individuals.shape[0], dtype=np.float64)
    if individuals.size == 0 or owner.size == 0:
        return out
    order = np.argsort(individuals)
    at = np.searchsorted(individuals[order], owner)
    hit = at < individuals.shape[0]
    hit[hit] = individuals[order][at[hit]] == owner[hit]
    np.maximum.at(out, order[at[hit]], probs[hit])
    return out
