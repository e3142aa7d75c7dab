"""Virtual individuals: people of a population register who dilute a release's groups.

Paper 003 §8 [WFLWX10] makes large ratios feasible with people from a voter list who are
absent from the snapshot: the planner may put them into a group, where they count in its size
and hold no sensitive value. They are real people: every value of their group is linked to
them like to any member (Lemma 4), so their linkages enter their history and the guarantee
holds for them too. It is valid only where the adversary cannot tell who is in a snapshot:
one who knows that a member is absent discounts it, and the group's ratio is the real
members' alone.

Here a virtual candidate is one more row of the table (:func:`with_candidates`) whose
sensitive code is :data:`NO_VALUE`'s, never protected: the grouping treats it as a row of an
unprotected value, the published multiset leaves it out and counts it as ``virtual``.
Every candidate takes part in the grouping; afterwards :func:`trim_virtual` drops the groups
without a real member and, in every other group, the virtual members the group does not need
(the farthest from its real members' QIDs first).

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from stream_release.core.grouping.merge import renumber
from stream_release.core.table import Attribute, EncodedTable
from stream_release.errors import SchemaError

__all__ = ["NO_VALUE", "no_value_code", "trim_virtual", "with_candidates"]

NO_VALUE = ""
"""The sensitive "value" of a virtual candidate: the empty string, which no snapshot row
holds (the reader refuses an empty sensitive value) and which sorts first."""


def no_value_code(table: EncodedTable) -> int | None:
    """The local code of :data:`NO_VALUE` in ``table`` (``None``: the table has no candidate)."""
    values = table.sensitive_values
    return 0 if values and values[0] == NO_VALUE else None


def with_candidates(table: EncodedTable, pool: EncodedTable) -> EncodedTable:
    """The rows of ``table`` then the rows of ``pool`` (the virtual candidates), in one
    encoding: every attribute's domain is the union of both (hierarchies: the same leaves),
    the sensitive values are :data:`NO_VALUE` then ``table``'s, and every pool row holds
    :data:`NO_VALUE`.

    Raises
    ------
    SchemaError
        An attribute encoded as another kind in the register than in the snapshot (a numeric
        column holding text in one of them): declare it in ``schema.numeric`` or fix the value.
    """
    if pool.qid.shape[1] != table.qid.shape[1]:
        raise SchemaError(
            f"the register has {pool.qid.shape[1]} QID columns but the snapshot "
            f"{table.qid.shape[1]}: give the register every column of schema.qid"
        )
    attributes: list[Attribute] = []
    qid = np.empty((table.n_rows + pool.n_rows, table.qid.shape[1]), dtype=np.int32)
    for j, (mine, theirs) in enumerate(zip(table.attributes, pool.attributes, strict=True)):
        if mine.kind != theirs.kind:
            text = mine if mine.kind == "set" else theirs
            where = "snapshot" if text is mine else "register"
            odd = next((str(v) for v in text.domain.tolist() if not _is_number(str(v))), None)
            shown = f" (its value {odd!r} in the {where} is not a number)" if odd else ""
            raise SchemaError(
                f"attribute {mine.name!r} is {mine.kind} in the snapshot but {theirs.kind} in "
                f"the register{shown}; fix the value, or list the attribute in schema.numeric "
                "so that both are read alike"
            )
        if mine.kind == "hierarchy":
            attributes.append(mine)
            qid[: table.n_rows, j] = table.qid[:, j]
            qid[table.n_rows :, j] = pool.qid[:, j]
            continue
        domain = np.union1d(mine.domain, theirs.domain)
        if mine.kind == "numeric":
            domain = domain.astype(np.float64)
        attributes.append(Attribute(mine.name, mine.kind, domain))
        qid[: table.n_rows, j] = np.searchsorted(domain, mine.domain)[table.qid[:, j]]
        qid[table.n_rows :, j] = np.searchsorted(domain, theirs.domain)[pool.qid[:, j]]
    sensitive = np.concatenate([table.sensitive + 1, np.zeros(pool.n_rows, dtype=np.int32)]).astype(
        np.int32
    )
    return EncodedTable(
        ids=np.concatenate([table.ids, pool.ids]),
        qid=qid,
        sensitive=sensitive,
        sensitive_values=(NO_VALUE, *table.sensitive_values),
        attributes=tuple(attributes),
    )


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def trim_virtual(
    group: NDArray[np.int64],
    virtual: NDArray[np.bool_],
    table: EncodedTable,
    valid: Callable[[NDArray[np.int64]], bool],
    *,
    min_group_size: int,
    base_ratio: float,
    protected: NDArray[np.bool_],
) -> NDArray[np.int64]:
    """``group`` without the virtual members no group needs: a group without a real member
    goes whole; in every other group the virtual members are kept nearest first (by the
    normalised distance of their QID codes to the box of the real members' codes) until the
    group is ``valid``. A group is valid with all of them (the grouping made it so), so none
    is refused; a trimmed group is never larger than before.

    Returns the new (n,) group per row (ids ``0..G'-1``; ``-1`` for the dropped virtual rows
    and the suppressed rows).
    """
    out = group.copy()
    grouped = np.flatnonzero((group >= 0) & virtual)
    if grouped.size == 0:
        return out
    scale = np.array([max(a.size - 1, 1) for a in table.attributes], dtype=np.float64)
    order = np.argsort(group, kind="stable")
    order = order[group[order] >= 0]
    bounds = np.flatnonzero(np.diff(group[order])) + 1
    for rows in np.split(order, bounds):
        fake = virtual[rows]
        if not fake.any():
            continue
        real, extra = rows[~fake], rows[fake]
        if real.size == 0:
            out[extra] = -1
            continue
        codes = table.qid[real]
        lo, hi = codes.min(axis=0), codes.max(axis=0)
        theirs = table.qid[extra]
        gap = np.maximum(lo - theirs, 0) + np.maximum(theirs - hi, 0)
        extra = extra[np.argsort((gap / scale).sum(axis=1), kind="stable")]
        counts = np.bincount(table.sensitive[real], minlength=protected.shape[0])
        most = int(np.where(protected, counts, 0).max(initial=0))
        k = max(min_group_size - real.size, int(np.ceil(most * base_ratio)) - real.size, 0)
        k = min(k, extra.size)
        while k < extra.size and not valid(np.concatenate([real, extra[:k]])):
            k += 1
        out[extra[k:]] = -1
    return renumber(out)
