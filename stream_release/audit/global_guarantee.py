r"""The audit of one global-guarantee release, recomputed from its files alone.

Lemma 4 of [WFLWX10] with the audit's own arithmetic (:class:`~stream_release.audit.ledger.
Ledger`): every individual of the release is linked to every value of its group, a published
one through its group line, a suppressed one through the suppressed set (to an adversary who
knows who is in the snapshot and its value counts, one more group with every QID ``*``), whose
multiset the private record keeps. The release fails when

* a group's or the suppressed set's share of a protected value exceeds ``1/l`` (exactly;
  the groups' from the public files alone);
* a pair linked in this release passes ``1/l`` (exactly, :mod:`~stream_release.audit.ledger`),
  unless it is *exempt*: its individual is *withheld for its history* (before this release,
  the strategy's plan for one of its protected values exceeded the cap
  ``strategy.group_size_cap``, or it was at the bound: the rule the planner applies without
  reading a value, recomputed here from the ledger alone) and the suppressed set holds the
  value;
* a row the rule withholds is published, or the private record's ``withheld`` ids are not
  the rule's;
* the manifest's ``breach`` (``max``, ``p50``, ``p99`` of the published individuals, their
  pairs past the bound aside; ``spent``: the release's individuals' pairs past it) or its
  ``suppressed_set`` figures (``rows``, ``share_max``, ``breach_max``: the other members'
  pairs), or the private record's (``exempt_members``), differ from the files.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

from collections.abc import Callable
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
    forced_threshold,
    group_pairs,
    individual_max,
    planned_ratio,
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
    exempt_members: int = 0
    """Suppressed individuals with an exempt pair."""
    withheld: int = 0
    """Rows the rule withholds for their history."""
    spent_people: int = 0
    """The release's individuals with a pair past the bound."""
    spent_pairs: int = 0
    """Their (individual, protected value) pairs past the bound."""


@dataclass(frozen=True)
class SuppressedRecord:
    """What the private record states of the suppressed set (validated on reading)."""

    counts: dict[str, int]
    decoys: int | None
    withheld: frozenset[str] | None
    """The members withheld for their history (``None``: a record that does not list them)."""
    unplaced: frozenset[str]
    exempt_members: int | None

    @classmethod
    def of(cls, record: dict[str, Any] | None) -> SuppressedRecord | None:
        block = (record or {}).get("suppressed")
        if not isinstance(block, dict) or not isinstance(block.get("sensitive"), dict):
            return None
        return cls(
            counts={str(k): int(v) for k, v in block["sensitive"].items()},
            decoys=block.get("decoys"),
            withheld=frozenset(_listed(block["withheld"])) if "withheld" in block else None,
            unplaced=frozenset(_listed(block.get("unplaced"))),
            exempt_members=block.get("exempt_members"),
        )


def _listed(ids: object) -> list[str]:
    """A record's list of ids (a count, as records kept before the ids: none)."""
    return list(ids) if isinstance(ids, list) else []


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
    own_values: dict[str, str] | None = None,
    virtual: NDArray[np.bool_] | None = None,
) -> GlobalFigures:
    """Link the release into the ledger and check every bound and claim (see the module
    docstring). ``own_values``: each suppressed id's value, from the snapshot (``None``:
    no snapshot); ``virtual`` (len(ids),): the virtual members (never withheld)."""
    ledger = state.ledger
    figures = GlobalFigures()
    strategy = manifest["strategy"]
    is_protected = _protection(strategy)
    bound = exact_inverse(ell)
    rows = ledger.index(ids)
    published = (assigned >= 0) & (assigned < len(lines))

    # the suppressed set: its members and multiset (the private record)
    star = np.flatnonzero(assigned < 0)
    record = SuppressedRecord.of(private)
    if record is not None:
        star_ids = {ids[i] for i in star.tolist()}
        figures.share_max = _check_record(
            record, star_ids, star.shape[0], bound, is_protected, problems
        )
    else:
        _check_no_record(manifest, int(star.size), problems, not_done)

    # the rows withheld for their history: the planner's rule, recomputed from the ledger
    # before this release is linked; their pairs for the set's protected values are exempt
    exempt_keys = np.zeros(0, dtype=np.int64)
    history = strategy.get("name") != "localized"
    if history:
        real = np.ones(len(ids), dtype=bool) if virtual is None else ~virtual
        sure, maybe = _withheld(ledger, rows, real, ell, strategy, is_protected, not_done)
        withheld = _check_withheld(sure, maybe, ids, assigned, record, problems)
        figures.withheld = int(np.count_nonzero(withheld))
        if record is not None and star.size:
            exempt = withheld & (assigned < 0)
            exempt_keys, figures.exempt_members = _exempt_pairs(
                ledger, record, manifest, ids, rows, exempt, is_protected
            )
            _check_unplaced(
                ledger, record, lines, ids, rows, assigned, ell, strategy, own_values, problems,
                not_done,
            )  # fmt: skip

    keys = _link(ledger, lines, rows, assigned, published, record, rows[star])

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

    # the claims: breach of the published, of the other members of the set, pairs past it
    spent_keys = np.fromiter(state.spent, dtype=np.int64, count=len(state.spent))
    mine = prot[ledger.keys % VALUE_SPACE] & ~np.isin(ledger.keys, spent_keys)
    owner = ledger.keys // VALUE_SPACE
    probs = breach(ledger.log_p)
    worst = individual_max(owner[mine], probs[mine], rows[published])
    figures.breach_max = float(worst.max(initial=0.0))
    ours = mine & np.isin(owner, rows[published])
    if not over.any() and ledger.above(ledger.keys[ours], bound).any():
        problems.append("a published individual's breach is above 1/l")
    claimed = manifest.get("breach") or {}
    _check_breach_claims(claimed, figures.breach_max, worst, problems)
    if history:
        figures.spent_pairs, figures.spent_people = _spent(ledger, rows, prot, bound)
        _check_spent(claimed, figures.spent_pairs, figures.spent_people, problems)
        _check_horizon(manifest, figures.spent_people, figures.withheld, problems)
    set_breach = 0.0
    if record is not None:  # the other members' pairs: those not exempt
        others = mine & ~np.isin(ledger.keys, exempt_keys)
        set_worst = individual_max(owner[others], probs[others], rows[star])
        set_breach = float(set_worst.max(initial=0.0))
    _check_set_claims(manifest, star.shape[0], figures, record, set_breach, problems)
    return figures


def _protection(strategy: dict[str, Any]) -> Callable[[str], bool]:
    """Whether a value is protected: one of the strategy's ``protected`` (every value when it
    names none)."""
    names = set(strategy.get("protected") or [])

    def is_protected(name: str) -> bool:
        return not names or name in names

    return is_protected


def _check_no_record(
    manifest: dict[str, Any], suppressed: int, problems: list[str], not_done: list[str]
) -> None:
    """A suppressed set that no private record keeps the multiset of: a problem when the
    manifest states the set, else its linkages are not checked."""
    if not suppressed:
        return
    if isinstance(manifest.get("suppressed_set"), dict):
        problems.append(
            "the manifest states a suppressed set but no private record keeps its multiset"
        )
    else:
        not_done.append(
            f"release {manifest.get('sequence')}: the linkages of its {suppressed} suppressed "
            "rows (no suppressed multiset in a private record: written before they were kept)"
        )


def _check_withheld(
    sure: NDArray[np.bool_],
    maybe: NDArray[np.bool_],
    ids: list[str],
    assigned: NDArray[np.int64],
    record: SuppressedRecord | None,
    problems: list[str],
) -> NDArray[np.bool_]:
    """The rows the rule withholds (``sure`` and ``maybe``, :func:`_withheld`) against the
    published rows and the private record's list; returns the rows withheld: the record's
    list, else the rule's."""
    published_withheld = sure & (assigned >= 0)
    if published_withheld.any():
        problems.append(
            f"{int(published_withheld.sum())} rows the rule withholds for their history "
            "(a plan above the cap) are published"
        )
    if record is None or record.withheld is None:
        return sure
    listed = np.array([i in record.withheld for i in ids], dtype=bool)
    suppressed_rows = assigned < 0
    if np.any(sure & suppressed_rows & ~listed) or np.any(listed & ~maybe):
        problems.append(
            f"the private record lists {len(record.withheld)} rows withheld for their "
            f"history, but the rule withholds "
            f"{int(np.count_nonzero(sure & suppressed_rows))} of the suppressed ones"
        )
    return listed


def _exempt_pairs(
    ledger: Ledger,
    record: SuppressedRecord,
    manifest: dict[str, Any],
    ids: list[str],
    rows: NDArray[np.int64],
    exempt: NDArray[np.bool_],
    is_protected: Callable[[str], bool],
) -> tuple[NDArray[np.int64], int]:
    """The exempt pairs' keys: each ``exempt`` member (past the horizon, each unplaced one
    too) with each protected value of the set; and how many members they link."""
    values = [ledger.value(v) for v, c in record.counts.items() if c and is_protected(v)]
    if _past_horizon(manifest):  # the unplaced rows too: the per-release bound
        exempt = exempt | np.array([i in record.unplaced for i in ids], dtype=bool)
    members = np.flatnonzero(exempt)
    if not values or not members.size:
        return np.zeros(0, dtype=np.int64), 0
    grid = rows[members][:, None] * VALUE_SPACE + np.array(values)[None, :]
    return grid.ravel(), int(members.size)


def _link(
    ledger: Ledger,
    lines: list[dict[str, Any]],
    rows: NDArray[np.int64],
    assigned: NDArray[np.int64],
    published: NDArray[np.bool_],
    record: SuppressedRecord | None,
    suppressed: NDArray[np.int64],
) -> NDArray[np.int64]:
    """Link the published rows to their group's values, the ``suppressed`` ones (their
    ledger rows) to the set's (with its ``record``); returns the keys linked."""
    keys, n, c = group_pairs(ledger, lines, sizes_of(lines), rows, assigned, published)
    if record is not None and suppressed.size:
        star_values = [(ledger.value(v), k) for v, k in record.counts.items() if k]
        size = suppressed.shape[0]
        codes = np.array([v for v, _ in star_values])
        keys = np.concatenate([keys, (suppressed[:, None] * VALUE_SPACE + codes).ravel()])
        n = np.concatenate([n, np.full(size * len(star_values), size)])
        c = np.concatenate([c, np.tile(np.array([k for _, k in star_values]), size)])
    ledger.link(keys, n, c)
    return keys


def _spent(
    ledger: Ledger, rows: NDArray[np.int64], prot: NDArray[np.bool_], bound: Fraction
) -> tuple[int, int]:
    """The release's individuals' protected pairs past the bound (``prot``: whether each value
    code is protected), and how many individuals hold them."""
    owner = ledger.keys // VALUE_SPACE
    in_release = np.isin(owner, rows) & prot[ledger.keys % VALUE_SPACE]
    passed_now = ledger.above(ledger.keys[in_release], bound)
    return int(passed_now.sum()), int(np.unique(owner[in_release][passed_now]).shape[0])


def _check_breach_claims(
    claimed: dict[str, Any], breach_max: float, worst: NDArray[np.float64], problems: list[str]
) -> None:
    """The manifest's ``breach.max``, ``p50`` and ``p99`` against the published individuals'
    largest breaches (``worst``, their largest ``breach_max``)."""
    _claim(problems, "breach.max", claimed.get("max"), breach_max)
    if worst.size:
        _claim(problems, "breach.p50", claimed.get("p50"), float(np.quantile(worst, 0.5)))
        _claim(problems, "breach.p99", claimed.get("p99"), float(np.quantile(worst, 0.99)))


def _check_record(
    record: SuppressedRecord,
    star_ids: set[str],
    suppressed: int,
    bound: Fraction,
    is_protected: Callable[[str], bool],
    problems: list[str],
) -> float:
    """The private record's suppressed set against the ``suppressed`` rows and their ids (its
    multiset's size, its withheld and unplaced ids); returns the set's largest share of a
    protected value."""
    if sum(record.counts.values()) != suppressed:
        problems.append(
            f"the private record's suppressed multiset has {sum(record.counts.values())} "
            f"rows but {suppressed} ids are suppressed"
        )
    named = (record.withheld or frozenset()) | record.unplaced
    if not named <= star_ids or (record.withheld or frozenset()) & record.unplaced:
        problems.append(
            "the private record lists a withheld or unplaced id that is not suppressed, or "
            "one id as both"
        )
    return _set_share(record.counts, suppressed, bound, is_protected, problems)


def _check_spent(claimed: dict[str, Any], pairs: int, people: int, problems: list[str]) -> None:
    """The manifest's ``breach.spent`` and ``breach.spent_people`` against the ledger's."""
    if "spent" in claimed and claimed["spent"] != pairs:
        problems.append(f"manifest breach.spent = {claimed['spent']} but the files give {pairs}")
    if "spent_people" in claimed and claimed["spent_people"] != people:
        problems.append(
            f"manifest breach.spent_people = {claimed['spent_people']} but the files give {people}"
        )


def sizes_of(lines: list[dict[str, Any]]) -> NDArray[np.int64]:
    return np.array([int(line["size"]) for line in lines], dtype=np.int64)


def check_public_bounds(
    manifest: dict[str, Any], lines: list[dict[str, Any]], ell: float, problems: list[str]
) -> None:
    """What the public files alone show against ``1/l``: no published group holds a protected
    value above it (a lower bound of its members' breach in this release), and the manifest
    claims no breach or suppressed share above it (the localized baseline's breach aside)."""
    bound = exact_inverse(ell)
    is_protected = _protection(manifest["strategy"])
    claimed = (manifest.get("breach") or {}).get("max")
    history = manifest["strategy"].get("name") != "localized"
    if history and isinstance(claimed, int | float) and Fraction(claimed) > bound:
        problems.append(f"manifest breach.max = {claimed} is above 1/l = {float(bound):.6f}")
    for line in lines:
        size = int(line["size"])
        for value, count in line["sensitive"].items():
            if is_protected(str(value)) and Fraction(int(count), size) > bound:
                problems.append(
                    f"group {line['group']}: {count} of its {size} rows hold {value!r}, a share "
                    f"above 1/l = {float(bound):.6f}"
                )
                return
    block = manifest.get("suppressed_set")
    share = block.get("share_max") if isinstance(block, dict) else None
    if isinstance(share, int | float) and Fraction(share) > bound:
        problems.append(f"manifest suppressed_set.share_max = {share} is above 1/l")


def _set_share(
    counts: dict[str, int],
    size: int,
    bound: Fraction,
    is_protected: Callable[[str], bool],
    problems: list[str],
) -> float:
    """The largest share of a protected value in the suppressed set, checked against 1/l."""
    if size == 0:
        return 0.0
    worst = max(
        (Fraction(c, size) for v, c in counts.items() if is_protected(v)), default=Fraction(0)
    )
    if worst > bound:
        problems.append(
            f"a protected value holds {worst.numerator * size // worst.denominator} of the "
            f"{size} suppressed rows: share {float(worst):.4f} > 1/l"
        )
    return float(worst)


def _check_horizon(
    manifest: dict[str, Any], people: int, withheld: int, problems: list[str]
) -> None:
    """Inside the series' horizon (``strategy.horizon``) nobody is withheld for their history
    and nobody's breach passes ``1/l``; the manifest's ``past_horizon`` says which side the
    release is on."""
    horizon = (manifest.get("strategy") or {}).get("horizon")
    if not isinstance(horizon, int):
        return
    sequence = int(manifest["sequence"])
    past = sequence > horizon
    if manifest.get("past_horizon") is not None and manifest["past_horizon"] != past:
        problems.append(
            f"manifest past_horizon = {manifest['past_horizon']} but release {sequence} of a "
            f"horizon of {horizon} is {'past' if past else 'inside'} it"
        )
    if not past and (people or withheld):
        problems.append(
            f"inside its horizon of {horizon} releases, {withheld} rows withheld for their "
            f"history and {people} individuals past 1/l"
        )


def _withheld(
    ledger: Ledger,
    rows: NDArray[np.int64],
    real: NDArray[np.bool_],
    ell: float,
    strategy: dict[str, Any],
    is_protected: Callable[[str], bool],
    not_done: list[str],
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """``(sure, maybe)`` (len(rows),): the rows the planner's rule withholds for their history
    (a protected pair whose ``P`` before this release lies below the plan's threshold of the
    cap, :func:`~stream_release.audit.ledger.forced_threshold`: the plan exceeds the cap, or
    the pair is at the bound), decided exactly with the planner's float rounding allowed for:
    ``sure`` below ``threshold (1 - WITHHOLD_BAND)``, ``maybe`` below ``threshold (1 +
    WITHHOLD_BAND)`` (a plan computed in floats may land on either side of the cap it equals
    exactly). Virtual members are never withheld. Without the cap in the manifest, nobody
    (and the check is listed as not done)."""
    cap = strategy.get("group_size_cap")
    sure = np.zeros(rows.shape[0], dtype=bool)
    if not isinstance(cap, int):
        not_done.append(
            "the rule that withholds rows for their history (the manifest states no "
            "strategy.group_size_cap): no pair is exempt"
        )
        return sure, sure.copy()
    prot = np.array([is_protected(v) for v in ledger.value_names()], dtype=bool)
    owner = ledger.keys // VALUE_SPACE
    mine = np.isin(owner, rows[real]) & prot[ledger.keys % VALUE_SPACE]
    keys = ledger.keys[mine]
    threshold = forced_threshold(ell, cap, strategy)
    maybe = sure.copy()
    for out, factor in ((sure, 1 - WITHHOLD_BAND), (maybe, 1 + WITHHOLD_BAND)):
        below = ledger.keep_below(keys, threshold * factor)
        out[np.isin(rows, keys[below] // VALUE_SPACE)] = True
    return sure & real, maybe & real


WITHHOLD_BAND = Fraction(1, 10**9)
"""How close to the cap a plan computed in floats may fall on either side of it: the planner's
history keeps ``log P`` in floats (a sum of rounded logarithms), the audit its exact factors."""


def _past_horizon(manifest: dict[str, Any]) -> bool:
    """Whether the release lies past its series' horizon (``strategy.horizon``)."""
    horizon = (manifest.get("strategy") or {}).get("horizon")
    return isinstance(horizon, int) and int(manifest["sequence"]) > horizon


def _check_unplaced(
    ledger: Ledger,
    record: SuppressedRecord,
    lines: list[dict[str, Any]],
    ids: list[str],
    rows: NDArray[np.int64],
    assigned: NDArray[np.int64],
    ell: float,
    strategy: dict[str, Any],
    own_values: dict[str, str] | None,
    problems: list[str],
    not_done: list[str],
) -> None:
    """No published group could take an unplaced row as it stands: below the cap, and for
    every protected value of the group with the row, ``|G| + 1 >= n(G + x, s) R`` with ``R``
    the largest ratio the strategy plans for it among the members and the row
    (:func:`~stream_release.audit.ledger.planned_ratio`; before this release is linked). The
    planner tried swaps and regrouping too: those the audit does not redo."""
    if not record.unplaced:
        return
    cap, base = strategy.get("group_size_cap"), strategy.get("base_ratio", ell)
    if own_values is None or not isinstance(cap, int):
        not_done.append(
            f"that no group could take the {len(record.unplaced)} rows the private record "
            "lists as unplaced (give the snapshots)"
        )
        return
    is_protected = _protection(strategy)
    members: list[list[int]] = [[] for _ in lines]
    for r, g in zip(rows.tolist(), assigned.tolist(), strict=True):
        if 0 <= g < len(lines):
            members[g].append(r)
    row_of = {i: int(r) for i, r in zip(ids, rows.tolist(), strict=True)}
    for x in sorted(record.unplaced & set(row_of)):
        own = own_values.get(x)
        for g, line in enumerate(lines):
            size = int(line["size"])
            if own is None or size + 1 > cap:
                continue
            counts = {str(v): int(c) for v, c in line["sensitive"].items()}
            counts[own] = counts.get(own, 0) + 1
            values = [v for v in counts if is_protected(v)]
            people = np.array([*members[g], row_of[x]], dtype=np.int64)
            codes = np.array([ledger.value(v) for v in values], dtype=np.int64)
            keep = np.exp(ledger.state((people[:, None] * VALUE_SPACE + codes).ravel())[0])
            ratio = planned_ratio(keep, ell, strategy, float(base))
            need = np.array([counts[v] for v in values]) * ratio.reshape(people.size, -1).max(0)
            if np.all(size + 1 >= need):
                problems.append(
                    f"the private record lists an unplaced row that group {g} could take as "
                    "it stands"
                )
                return


def _claim(problems: list[str], name: str, stated: object, found: float) -> None:
    if isinstance(stated, int | float) and abs(float(stated) - found) > CLAIM_ATOL:
        problems.append(f"manifest {name} = {float(stated):.9f} but the files give {found:.9f}")


def _check_set_claims(
    manifest: dict[str, Any],
    suppressed: int,
    figures: GlobalFigures,
    record: SuppressedRecord | None,
    breach_max: float,
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
    share = block.get("share_max")
    if record is None:
        return
    _claim(problems, "suppressed_set.share_max", share, figures.share_max)
    _claim(problems, "suppressed_set.breach_max", block.get("breach_max"), breach_max)
    if record.exempt_members is not None and record.exempt_members != figures.exempt_members:
        problems.append(
            f"the private record's suppressed.exempt_members = {record.exempt_members} but the "
            f"files give {figures.exempt_members} members with an exempt pair"
        )
    if "decoys" in block:
        problems.append(
            "the manifest states suppressed_set.decoys: a public count that separates the "
            "decoys from the rows withheld for their history"
        )
    if isinstance(record.decoys, int) and record.decoys > suppressed:
        problems.append(f"the private record's suppressed.decoys = {record.decoys} exceeds the set")
