r"""The audit of one global-guarantee release, recomputed from its files alone.

Lemma 4 of [WFLWX10] with the audit's own arithmetic (:class:`~stream_release.audit.ledger.
Ledger`): every individual of the release is linked to every value of its group, a published
one through its group line, a suppressed one through the suppressed set (to an adversary who
knows who is in the snapshot and its value counts, one more group with every QID ``*``), whose
multiset the private record keeps. The release fails when

* a protected value's share of the suppressed rows exceeds ``1/l`` (exactly);
* a pair linked in this release passes ``1/l`` (exactly, :mod:`~stream_release.audit.ledger`),
  unless its individual is a *spent* member of the suppressed set: suppressed, and before this
  release spent for a protected value the set holds (Theorem 1's ratio ``lP / (lP - (l - 1))``
  above the largest group the release may form, ``strategy.group_size_cap``; infinite at the
  bound): the set links it past its bound for that value, and none of its pairs is held to
  it in this release. Their number must equal the manifest's ``suppressed_set.spent``; a pair
  they push past the bound stays out of ``breach.max`` afterwards;
* the manifest's ``breach.max`` (published individuals, spent pairs aside) or its suppressed-set
  figures differ from the files.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.audit.ledger import (
    VALUE_SPACE,
    Ledger,
    breach,
    exact_inverse,
    spent_threshold,
)

CLAIM_ATOL = 1e-9
"""How far a figure a manifest states may lie from the audit's float recomputation of it (a
claim, not the bound: the bound itself is decided exactly)."""


@dataclass
class SeriesState:
    """What the audit carries from release to release of a global-guarantee series."""

    ledger: Ledger = field(default_factory=Ledger)
    spent: set[int] = field(default_factory=set)
    """Pair keys linked past the bound by a suppressed set while spent."""


@dataclass
class GlobalFigures:
    """The recomputed figures of one release."""

    breach_max: float = 0.0
    share_max: float = 0.0
    spent_now: int = 0
    spent_members: int = 0
    """Suppressed individuals spent for a protected value of the set (exempt now)."""


def audit_linkages(
    state: SeriesState,
    manifest: dict[str, Any],
    lines: list[dict[str, Any]],
    ids: list[str],
    assigned: NDArray[np.int64],
    private: dict[str, Any] | None,
    ell: float,
    problems: list[str],
    not_done: list[str],
) -> GlobalFigures:
    """Link the release into the ledger and check every bound (see the module docstring)."""
    ledger = state.ledger
    figures = GlobalFigures()
    strategy = manifest.get("strategy") or {}
    protected_names = set(strategy.get("protected") or [])
    bound = exact_inverse(ell)
    sizes = np.array([int(line["size"]) for line in lines], dtype=np.int64)
    rows = ledger.index(ids)
    published = (assigned >= 0) & (assigned < len(lines))

    # the suppressed set: its members and multiset (the private record)
    star = np.flatnonzero(assigned < 0)
    star_counts: dict[str, int] | None = None
    block = (private or {}).get("suppressed")
    if isinstance(block, dict) and isinstance(block.get("sensitive"), dict):
        star_counts = {str(k): int(v) for k, v in block["sensitive"].items()}
        if sum(star_counts.values()) != star.shape[0]:
            problems.append(
                f"the private record's suppressed multiset has {sum(star_counts.values())} "
                f"rows but {star.shape[0]} ids are suppressed"
            )
    elif star.size:
        not_done.append(
            f"release {manifest.get('sequence')}: the linkages of its {star.size} suppressed "
            "rows (no suppressed multiset in a private record: written before they were kept)"
        )

    def is_protected(name: str) -> bool:
        return not protected_names or name in protected_names

    # spent members: suppressed, spent for a protected value of the set; exempt this release
    exempt_keys = np.zeros(0, dtype=np.int64)
    if star_counts and star.size and strategy.get("name") != "localized":
        cap = strategy.get("group_size_cap")
        values = [ledger.value(v) for v, c in star_counts.items() if c and is_protected(v)]
        if values and not isinstance(cap, int):
            problems.append("the manifest states no strategy.group_size_cap for the suppressed set")
        elif values:
            grid = rows[star][:, None] * VALUE_SPACE + np.array(values)[None, :]
            spent = ledger.keep_below(grid.ravel(), spent_threshold(ell, int(cap)))
            members = spent.reshape(grid.shape).any(axis=1)
            exempt_keys = grid[members].ravel()
            figures.spent_members = int(members.sum())
        shares = [Fraction(c, star.shape[0]) for v, c in star_counts.items() if is_protected(v)]
        worst = max(shares, default=Fraction(0))
        figures.share_max = float(worst)
        if worst > bound:
            problems.append(
                f"a protected value holds {worst.numerator * star.shape[0] // worst.denominator}"
                f" of the {star.shape[0]} suppressed rows: share {float(worst):.4f} > 1/l"
            )

    # link: published rows to their group's values, suppressed rows to the set's
    keys, n, c = _group_pairs(ledger, lines, sizes, rows, assigned, published)
    if star_counts and star.size:
        star_values = [(ledger.value(v), k) for v, k in star_counts.items() if k]
        member = rows[star]
        keys = np.concatenate(
            [keys, (member[:, None] * VALUE_SPACE + np.array([v for v, _ in star_values])).ravel()]
        )
        n = np.concatenate([n, np.full(member.shape[0] * len(star_values), star.shape[0])])
        c = np.concatenate([c, np.tile(np.array([k for _, k in star_values]), member.shape[0])])
    ledger.link(keys, n, c)

    # every pair linked now, protected, not exempt: within 1/l
    names = ledger.value_names()
    prot = np.array([is_protected(v) for v in names], dtype=bool)
    checked = keys[prot[keys % VALUE_SPACE] & ~np.isin(keys, exempt_keys)]
    over = ledger.above(checked, bound)
    if over.any():
        problems.append(
            f"breach above 1/l = {float(bound):.6f}: {int(over.sum())} (individual, value) "
            "pairs linked in this release"
        )
    if exempt_keys.size:
        passed = exempt_keys[ledger.above(exempt_keys, bound)]
        state.spent.update(passed.tolist())
        figures.spent_now = int(exempt_keys.shape[0])

    # breach.max: published individuals, protected pairs, spent ones aside
    mine = np.isin(ledger.keys // VALUE_SPACE, rows[published])
    mine &= prot[ledger.keys % VALUE_SPACE]
    if state.spent:
        mine &= ~np.isin(ledger.keys, np.fromiter(state.spent, dtype=np.int64))
    probs = breach(ledger.log_p[mine])
    figures.breach_max = float(probs.max()) if probs.size else 0.0
    if ledger.above(ledger.keys[mine], bound).any() and not over.any():
        problems.append("a published individual's breach is above 1/l")
    claimed = (manifest.get("breach") or {}).get("max")
    if isinstance(claimed, int | float) and abs(float(claimed) - figures.breach_max) > CLAIM_ATOL:
        problems.append(
            f"manifest breach.max = {float(claimed):.9f} but the files give "
            f"{figures.breach_max:.9f}"
        )
    _check_set_claims(manifest, star.shape[0], figures, star_counts is not None, problems)
    return figures


def _group_pairs(
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


def _check_set_claims(
    manifest: dict[str, Any],
    suppressed: int,
    figures: GlobalFigures,
    known: bool,
    problems: list[str],
) -> None:
    """The manifest's ``suppressed_set`` against the files."""
    block = manifest.get("suppressed_set")
    if not isinstance(block, dict):
        return
    if block.get("rows") != suppressed:
        problems.append(
            f"manifest suppressed_set.rows = {block.get('rows')} but {suppressed} ids are "
            "suppressed"
        )
    if not known:
        return
    share = block.get("share_max")
    if isinstance(share, int | float) and not math.isclose(
        float(share), figures.share_max, rel_tol=0, abs_tol=CLAIM_ATOL
    ):
        problems.append(
            f"manifest suppressed_set.share_max = {share} but the files give "
            f"{figures.share_max:.6f}"
        )
    if block.get("spent") != figures.spent_members:
        problems.append(
            f"manifest suppressed_set.spent = {block.get('spent')} but the files give "
            f"{figures.spent_members} spent members"
        )
