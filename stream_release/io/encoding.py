"""Dictionary encoding of a snapshot.

Every quasi-identifier becomes an order-preserving ``int32`` code column of an
:class:`~stream_release.core.table.EncodedTable` (STYLE.md rule 10: encode once, at ingestion):

* an attribute with a configured hierarchy is ``hierarchy``: codes index the hierarchy's leaves
  in depth-first order (:func:`load_hierarchy`), so the leaves under any node are one contiguous
  code range;
* otherwise it is ``numeric`` if ``schema.numeric`` lists it, or if ``schema.numeric`` is
  ``None`` and every value parses as a finite number; codes index the sorted distinct values;
* otherwise it is ``set``: codes index the sorted distinct strings.

The sensitive column is coded into its sorted distinct values.
The hierarchies are read by :mod:`stream_release.config.hierarchy`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from stream_release.config import SchemaSettings
from stream_release.config.hierarchy import Hierarchy
from stream_release.core.table import Attribute, EncodedTable
from stream_release.errors import ConfigError, SchemaError
from stream_release.io.snapshot import Factorized, RawSnapshot


def encode(
    raw: RawSnapshot, schema: SchemaSettings, hierarchies: Mapping[str, Hierarchy]
) -> EncodedTable:
    """Encode a validated snapshot into the int-coded table every algorithm uses.

    Parameters
    ----------
    raw : the snapshot, from :func:`~stream_release.io.snapshot_csv.read_snapshot` or
        :func:`~stream_release.io.snapshot.snapshot_from_columns`
    schema : ``qid`` gives the attribute order, ``numeric`` the numeric attributes (or ``None``
        to detect them)
    hierarchies : QID name -> hierarchy, for every name in ``schema.hierarchies``

    Returns
    -------
    EncodedTable
        ``qid`` (n, d) int32 in ``schema.qid`` order, ``sensitive`` (n,) int32 codes into the
        sorted distinct sensitive values; see :mod:`stream_release.core.table` for each kind's
        domain.

    Raises
    ------
    SchemaError
        A value that is not a leaf of its attribute's hierarchy, or not a number in an attribute
        that ``schema.numeric`` lists; a QID missing from ``raw``.
    ConfigError
        ``schema.hierarchies`` names an attribute for which no hierarchy was given.
    """
    missing = sorted(set(schema.hierarchies) - set(hierarchies))
    if missing:
        raise ConfigError(
            f"schema.hierarchies names {missing} but no hierarchy was loaded for them; pass "
            "load_hierarchies(schema)"
        )
    n = raw.n_rows
    attributes: list[Attribute] = []
    qid = np.empty((n, len(schema.qid)), dtype=np.int32)
    for j, name in enumerate(schema.qid):
        column = raw.qid_columns.get(name)
        if column is None:
            raise SchemaError(
                f"snapshot {raw.source!r} has no attribute {name!r} (schema.qid); attributes "
                f"found: {sorted(raw.qid_columns)}"
            )
        if name in schema.hierarchies:
            attribute, codes = _encode_hierarchy(raw, name, column, hierarchies[name])
        elif (schema.numeric is not None and name in schema.numeric) or (
            schema.numeric is None and _all_numbers(column.values)
        ):
            attribute, codes = _encode_numeric(raw, name, column)
        else:
            attribute, codes = _encode_set(name, column)
        attributes.append(attribute)
        qid[:, j] = codes
    values, sensitive = _sorted_codes(raw.sensitive_column)
    return EncodedTable(
        ids=raw.ids,
        qid=qid,
        sensitive=sensitive,
        sensitive_values=values,
        attributes=tuple(attributes),
    )


def _encode_hierarchy(
    raw: RawSnapshot, name: str, column: Factorized, hierarchy: Hierarchy
) -> tuple[Attribute, NDArray[np.int32]]:
    leaf_code = {leaf: code for code, leaf in enumerate(hierarchy.leaves)}
    remap = np.fromiter(
        (leaf_code.get(v, -1) for v in column.values), dtype=np.int32, count=len(column.values)
    )
    unknown = np.flatnonzero(remap < 0)
    if unknown.size:
        first = unknown[np.argmin(column.first[unknown])]
        others = f" (and {unknown.size - 1} other unknown values)" if unknown.size > 1 else ""
        raise SchemaError(
            f"snapshot {raw.source!r}: attribute {name!r} value {column.values[first]!r} "
            f"({raw.locate(int(column.first[first]))}) is not a leaf of hierarchy "
            f"{hierarchy.source!r}{others}; add it to the hierarchy or fix the value"
        )
    domain = np.empty(hierarchy.size, dtype=object)
    domain[:] = hierarchy.leaves
    attribute = Attribute(
        name=name,
        kind="hierarchy",
        domain=domain,
        levels=hierarchy.levels,
        labels=hierarchy.labels,
    )
    return attribute, remap[column.codes]


def _parse_number(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _all_numbers(values: tuple[str, ...]) -> bool:
    return all(_parse_number(v) is not None for v in values)


def _encode_numeric(
    raw: RawSnapshot, name: str, column: Factorized
) -> tuple[Attribute, NDArray[np.int32]]:
    numbers = [_parse_number(v) for v in column.values]
    bad = [i for i, x in enumerate(numbers) if x is None]
    if bad:  # only reachable for a declared numeric QID: detection checked every value
        first = min(bad, key=lambda i: int(column.first[i]))
        raise SchemaError(
            f"snapshot {raw.source!r}: attribute {name!r} is listed in schema.numeric but value "
            f"{column.values[first]!r} ({raw.locate(int(column.first[first]))}) is not a finite "
            f"number; fix the value or remove {name!r} from schema.numeric"
        )
    parsed = np.asarray(numbers, dtype=np.float64)
    domain, remap = np.unique(parsed, return_inverse=True)
    attribute = Attribute(name=name, kind="numeric", domain=domain.astype(np.float64))
    return attribute, remap.astype(np.int32)[column.codes]


def _sorted_codes(column: Factorized) -> tuple[tuple[str, ...], NDArray[np.int32]]:
    """Sorted distinct values and the rows' codes into them."""
    order = sorted(range(len(column.values)), key=column.values.__getitem__)
    remap = np.empty(len(order), dtype=np.int32)
    remap[order] = np.arange(len(order), dtype=np.int32)
    return tuple(column.values[i] for i in order), remap[column.codes]


def _encode_set(name: str, column: Factorized) -> tuple[Attribute, NDArray[np.int32]]:
    values, codes = _sorted_codes(column)
    domain = np.empty(len(values), dtype=object)
    domain[:] = values
    return Attribute(name=name, kind="set", domain=domain), codes
