"""The audit's comparison of published groups with the snapshot rows assigned to them, and of
hierarchy labels with the configured hierarchies. Standard library and numpy only.

A published QID value covers a row's value when it is the value itself (a number equal to
it), an interval ``[lo, hi]`` holding it, a list holding it, or a label of the attribute's
configured hierarchy with the value among its leaves. Without the hierarchy a label that is no
member's value cannot be checked: the audit says so (:class:`Findings` ``not_done``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.audit.files import Hierarchies, Snapshot


@dataclass
class Findings:
    """What a comparison found wrong (``problems``) and could not check (``not_done``)."""

    problems: list[str] = field(default_factory=list)
    not_done: list[str] = field(default_factory=list)


def check_labels(lines: list[dict[str, Any]], hierarchies: Hierarchies, found: Findings) -> None:
    """Every string QID value of an attribute with a configured hierarchy is one of its
    labels (leaves included)."""
    for line in lines:
        for name, value in (line.get("qid") or {}).items():
            if not isinstance(value, str) or not hierarchies.has(name):
                continue
            if value not in hierarchies.leaves_of[name]:
                found.problems.append(
                    f"group {line['group']}: {name} = {value!r} is no label of its "
                    "configured hierarchy"
                )
                return


def check_rows(
    lines: list[dict[str, Any]],
    ids: list[str],
    assigned: NDArray[np.int64],
    snapshot: Snapshot,
    schema: dict[str, Any],
    hierarchies: Hierarchies | None,
    found: Findings,
    *,
    virtual: NDArray[np.bool_] | None = None,
    register: Snapshot | None = None,
) -> dict[str, list[str]] | None:
    """Compare each group with its assigned rows: the sensitive multiset, and each QID value
    (generalized: it covers every member; anatomy: the members' exact values).

    ``virtual`` (the assignments' flags): virtual members are absent from the snapshot, hold
    no value, and their QIDs are the ``register``'s rows (without it, a group with virtual
    members has its multiset and its real members checked; the caller says what was not).

    Returns each assigned real id's row (``None`` when the assignments do not name the
    snapshot's ids, e.g. the worker's pseudonyms: then nothing is compared).
    """
    virtual = virtual if virtual is not None else np.zeros(len(ids), dtype=np.bool_)
    fake = {i for i, v in zip(ids, virtual.tolist(), strict=True) if v}
    real = [i for i in ids if i not in fake]
    qids = list(schema.get("qid") or [])
    header = snapshot.header
    sensitive = schema.get("sensitive")
    if _lacks("snapshot", snapshot, [sensitive, *qids], found):
        return None
    if not _ids_match(fake, real, snapshot, schema.get("id"), found):
        return None
    rows_of = {i: snapshot.rows[i] for i in real if i in snapshot.rows}
    register = _usable_register(register, qids, found)
    others = (
        _register_rows(ids, assigned, fake, register, qids, header, found)
        if register is not None
        else {}
    )
    columns = _Columns(header.index(str(sensitive)), {q: header.index(q) for q in qids})
    members = _members(ids, assigned, rows_of)
    unchecked = _check_groups(lines, members, others, columns, hierarchies, register, found)
    if unchecked and hierarchies is not None:
        found.not_done.append(
            f"{unchecked} hierarchy labels in {snapshot.path.name}'s release (give --config "
            "with the hierarchies)"
        )
    return rows_of


@dataclass(frozen=True)
class _Columns:
    """Where the snapshot holds the sensitive value and each QID."""

    sensitive: int
    qids: dict[str, int]


def _members(
    ids: list[str], assigned: NDArray[np.int64], rows_of: dict[str, list[str]]
) -> dict[int, list[list[str]]]:
    """Each group's real members' rows (ids without a row aside)."""
    members: dict[int, list[list[str]]] = {}
    for i, g in zip(ids, assigned.tolist(), strict=True):
        if g >= 0 and i in rows_of:
            members.setdefault(g, []).append(rows_of[i])
    return members


def _usable_register(
    register: Snapshot | None, qids: list[str], found: Findings
) -> Snapshot | None:
    """The ``register`` when it holds every QID column (else the problem into ``found``)."""
    if register is None or _lacks("register", register, qids, found):
        return None
    return register


def _lacks(kind: str, table: Snapshot, columns: list[Any], found: Findings) -> bool:
    """Whether ``table`` (the ``kind`` of file it is) lacks one of ``columns`` (the problem
    into ``found``)."""
    lacking = [c for c in columns if c not in table.header]
    if lacking:
        found.problems.append(f"the {kind} {table.path.name} lacks the columns {lacking}")
    return bool(lacking)


def _check_groups(
    lines: list[dict[str, Any]],
    members: dict[int, list[list[str]]],
    others: dict[int, list[list[str]]],
    columns: _Columns,
    hierarchies: Hierarchies | None,
    register: Snapshot | None,
    found: Findings,
) -> int:
    """Each group line against its real ``members``' rows and its virtual ones (``others``,
    from the ``register``); returns how many labels need a hierarchy the audit was not given
    (0 after the first group that differs: its problem into ``found``)."""
    unchecked = 0
    for line in lines:
        g = int(line["group"])
        has_virtual = bool(int(line.get("virtual", 0) or 0))
        verdict = _check_group(
            line,
            members.get(g, []),
            others.get(g, []) if has_virtual else [],
            columns,
            hierarchies,
            partial=has_virtual and register is None,
        )
        if isinstance(verdict, str):
            found.problems.append(f"group {g}: {verdict}")
            return 0
        unchecked += verdict
    return unchecked


def _ids_match(
    fake: set[str], real: list[str], snapshot: Snapshot, id_column: object, found: Findings
) -> bool:
    """Check the assignments' ids against the snapshot's rows (problems into ``found``);
    False when they do not name the snapshot's ids at all (nothing can be compared)."""
    present = [i for i in fake if i in snapshot.rows]
    if present:
        found.problems.append(
            f"{len(present)} virtual members are in {snapshot.path.name} (a virtual member is "
            "someone absent from the snapshot)"
        )
    absent = [i for i in real if i not in snapshot.rows]
    if absent and len(absent) == len(real):
        found.not_done.append(
            f"comparison with {snapshot.path.name}: the assignments do not hold its "
            f"{id_column!r} values (the worker's assignments hold keyed pseudonyms)"
        )
        return False
    if absent:
        found.problems.append(f"{len(absent)} assigned ids are not in {snapshot.path.name}")
    if len(real) != len(snapshot.rows):
        found.problems.append(
            f"the assignments list {len(real)} ids but {snapshot.path.name} has "
            f"{len(snapshot.rows)} rows"
        )
    return True


def _register_rows(
    ids: list[str],
    assigned: NDArray[np.int64],
    fake: set[str],
    register: Snapshot,
    qids: list[str],
    header: list[str],
    found: Findings,
) -> dict[int, list[list[str]]]:
    """Each group's virtual members as rows of the snapshot's columns, read from the
    ``register`` (a member it does not hold is a problem)."""
    r_col = {q: register.header.index(q) for q in qids}
    others: dict[int, list[list[str]]] = {}
    unknown = 0
    for i, g in zip(ids, assigned.tolist(), strict=True):
        if i not in fake:
            continue
        row = register.rows.get(i)
        if row is None:
            unknown += 1
            continue
        others.setdefault(g, []).append([row[r_col[q]] if q in r_col else "" for q in header])
    if unknown:
        found.problems.append(f"{unknown} virtual members are not in the register")
    return others


def _check_group(
    line: dict[str, Any],
    real: list[list[str]],
    virtual: list[list[str]],
    columns: _Columns,
    hierarchies: Hierarchies | None,
    *,
    partial: bool,
) -> str | int:
    """What is wrong with a group line against its members' rows (``real``, and ``virtual``
    from the register: they hold no value), or how many of its labels need a hierarchy the
    audit was not given. ``partial``: virtual members without the register (the real members
    must be among the listed ones)."""
    s_col, q_col = columns.sensitive, columns.qids
    multiset: dict[str, int] = {}
    for row in real:
        multiset[row[s_col]] = multiset.get(row[s_col], 0) + 1
    if multiset != {str(k): int(v) for k, v in line["sensitive"].items()}:
        return "published sensitive values differ from its rows"
    got = real + virtual
    if "members" in line:
        if _anatomy_differs(line["members"], got, q_col, subset=partial):
            return "its members' QIDs differ from its rows"
        return 0
    unchecked = 0
    for name, published in (line.get("qid") or {}).items():
        if name not in q_col:
            continue
        verdict = _covers_all(published, [row[q_col[name]] for row in got], name, hierarchies)
        if verdict is False:
            return f"{name} = {published!r} does not cover its rows' values"
        if verdict is None:
            unchecked += 1
    return unchecked


def _covers_all(
    published: Any, values: list[str], name: str, hierarchies: Hierarchies | None
) -> bool | None:
    """True if ``published`` covers every value, False if it does not, None if that needs a
    hierarchy the audit was not given."""
    if isinstance(published, bool):
        return False
    if isinstance(published, list):
        return _list_covers(published, values)
    if isinstance(published, int | float):
        return all(_number(v) == float(published) for v in values)
    if isinstance(published, str):
        return _label_covers(published, values, name, hierarchies)
    return False


def _list_covers(published: list[Any], values: list[str]) -> bool:
    """Whether an interval ``[lo, hi]`` holds every value, or a list of values lists each."""
    if len(published) == 2 and all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in published
    ):
        numbers = [_number(v) for v in values]
        return all(x is not None and published[0] <= x <= published[1] for x in numbers)
    allowed = {_canonical(x) for x in published}
    return all(_canonical(v) in allowed for v in values)


def _label_covers(
    published: str, values: list[str], name: str, hierarchies: Hierarchies | None
) -> bool | None:
    """Whether a text value covers every value: as a label of the attribute's hierarchy, else
    as the value itself (None: a label no member holds, and no hierarchy was given)."""
    if hierarchies is not None and hierarchies.has(name):
        leaves = hierarchies.leaves_of[name].get(published)
        return leaves is not None and all(v in leaves for v in values)
    if all(v == published for v in values):
        return True
    if hierarchies is not None or any(v == published for v in values):
        return False  # no hierarchy for it: only the value itself covers it
    return None


def _anatomy_differs(
    published: list[dict[str, Any]],
    rows: list[list[str]],
    q_col: dict[str, int],
    *,
    subset: bool = False,
) -> bool:
    """Whether the listed members' QIDs differ from the rows' (``subset``: whether some row's
    QIDs are not among the listed members', as a multiset)."""
    mine = Counter(tuple(_canonical(m.get(q)) for q in q_col) for m in published)
    theirs = Counter(tuple(_canonical(row[c]) for c in q_col.values()) for row in rows)
    if subset:
        return bool(theirs - mine)
    return mine != theirs


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _canonical(value: Any) -> str:
    """A value as text, numbers in one form (``34`` and ``34.0`` alike)."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        return repr(float(value))
    number = _number(str(value))
    return repr(number) if number is not None else str(value)
