"""Dictionary encoding of a snapshot and ARX-format generalization hierarchies.

Every quasi-identifier becomes an order-preserving ``int32`` code column of an
:class:`~stream_release.core.table.EncodedTable` (STYLE.md rule 10: encode once, at ingestion):

* an attribute with a configured hierarchy is ``hierarchy``: codes index the hierarchy's leaves
  in depth-first order (:func:`load_hierarchy`), so the leaves under any node are one contiguous
  code range;
* otherwise it is ``numeric`` if ``schema.numeric`` lists it, or if ``schema.numeric`` is
  ``None`` and every value parses as a finite number; codes index the sorted distinct values;
* otherwise it is ``set``: codes index the sorted distinct strings.

The sensitive column is coded into its sorted distinct values.

ARX hierarchy format
--------------------
No header, fields separated by ``;``, one line per leaf: ``leaf;level1;...;*``; every line has
the same number of fields (ARX ``AttributeType.Hierarchy.create(file, charset, ';')``). Nodes
are identified by their label within a level, so a label must have a single parent; the last
field is the one root (conventionally ``*``). UTF-8 (a BOM is allowed), any line ending,
surrounding spaces and tabs are ignored, blank lines skipped.
"""

from __future__ import annotations

import codecs
import csv
import io
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from stream_release.config import SchemaSettings
from stream_release.core.table import Attribute, EncodedTable
from stream_release.errors import ConfigError, SchemaError
from stream_release.io.snapshot import Factorized, RawSnapshot

_BLANKS = " \t"


@dataclass(frozen=True, eq=False)
class Hierarchy:
    """A generalization hierarchy with its leaves in depth-first order.

    Attributes
    ----------
    attribute : the QID it generalizes (for messages)
    source : the file it was read from
    labels : ``labels[h][i]`` is the label of node ``i`` of level ``h``; level 0 are the leaves,
        the last level is the root. Node ids of every level are numbered in depth-first order.
    levels : (c, height) int32
        ``levels[c, h]`` is the id of leaf ``c``'s ancestor at level ``h`` (column 0 is
        ``arange(c)``, the last column all 0). Each column is non-decreasing.
    """

    attribute: str
    source: str
    labels: tuple[tuple[str, ...], ...]
    levels: NDArray[np.int32]

    @property
    def leaves(self) -> tuple[str, ...]:
        """The leaves in depth-first order (the code order of the attribute)."""
        return self.labels[0]

    @property
    def height(self) -> int:
        """Number of levels, the leaf level and the root included."""
        return int(self.levels.shape[1])

    @property
    def size(self) -> int:
        """Number of leaves."""
        return int(self.levels.shape[0])


def load_hierarchy(path: Path | str, attribute: str) -> Hierarchy:
    """Read an ARX-format hierarchy (see the module docstring) for QID ``attribute``.

    Leaves are put in depth-first order: a stable sort keyed, from the top level down, by the
    rank of first appearance in the file of each ancestor. Siblings are then adjacent at every
    level and keep the file's order among themselves.

    Raises
    ------
    SchemaError
        Unreadable or empty file, a line whose number of fields differs from the first line's
        (ragged), fewer than two levels, an empty label, a duplicate leaf, a label with two
        parents, more than one root. The message names the attribute, the file and the line.
    """
    file = Path(path)
    where = f"hierarchy {str(file)!r} of attribute {attribute!r}"
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise SchemaError(f"{where} does not exist; check schema.hierarchies") from None
    except OSError as exc:
        raise SchemaError(f"{where} cannot be read: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8-sig" if data.startswith(codecs.BOM_UTF8) else "utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SchemaError(f"{where}, line {line}: not UTF-8 text; save the file as UTF-8") from None

    rows: list[list[str]] = []
    line_numbers: list[int] = []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=";")
    consumed = 0
    try:
        for record in reader:
            line = consumed + 1
            consumed = reader.line_num
            fields = [f.strip(_BLANKS) for f in record]
            if not any(fields):
                continue
            if rows and len(fields) != len(rows[0]):
                raise SchemaError(
                    f"{where}, line {line}: {len(fields)} levels where line {line_numbers[0]} has "
                    f"{len(rows[0])}; ARX hierarchies need the same height on every line: pad the "
                    "line by repeating a label"
                )
            if "" in fields:
                raise SchemaError(
                    f"{where}, line {line}: level {fields.index('')} is empty; give every level "
                    "a label"
                )
            rows.append(fields)
            line_numbers.append(line)
    except csv.Error as exc:
        raise SchemaError(f"{where}, line {consumed + 1}: malformed ({exc})") from None
    if not rows:
        raise SchemaError(f"{where} is empty; it needs one line 'leaf;...;*' per value")
    height = len(rows[0])
    if height < 2:
        raise SchemaError(
            f"{where}, line {line_numbers[0]}: a single level; each line needs the leaf and at "
            "least the root, e.g. 'value;*'"
        )
    return _build_hierarchy(attribute, str(file), where, rows, line_numbers)


def _build_hierarchy(
    attribute: str, source: str, where: str, rows: list[list[str]], line_numbers: list[int]
) -> Hierarchy:
    height = len(rows[0])
    n = len(rows)
    # rank[h][row] = order of first appearance of row's level-h label among level-h labels
    rank = np.empty((height, n), dtype=np.int64)
    for h in range(height):
        seen: dict[str, int] = {}
        parent: dict[str, tuple[str, int]] = {}
        for r, fields in enumerate(rows):
            label = fields[h]
            if h == 0 and label in seen:
                raise SchemaError(
                    f"{where}, line {line_numbers[r]}: leaf {label!r} already appears on line "
                    f"{line_numbers[seen[label]]}; list every leaf once"
                )
            rank[h, r] = seen.setdefault(label, r)
            if h + 1 < height:
                up = fields[h + 1]
                known = parent.setdefault(label, (up, r))
                if known[0] != up:
                    raise SchemaError(
                        f"{where}, line {line_numbers[r]}: label {label!r} of level {h} has "
                        f"parent {up!r} here but {known[0]!r} on line {line_numbers[known[1]]}; a "
                        "label must have one parent: rename one of them"
                    )
        if h == height - 1 and len(seen) > 1:
            roots = list(seen)
            raise SchemaError(
                f"{where}: the last level holds {len(roots)} labels ({roots[0]!r}, {roots[1]!r}"
                f"{', ...' if len(roots) > 2 else ''}); the hierarchy needs one root, e.g. '*'"
            )
    order = np.lexsort(rank)  # the last key (the top level) is the primary one
    levels = np.empty((n, height), dtype=np.int32)
    labels: list[tuple[str, ...]] = []
    for h in range(height):
        ids: dict[str, int] = {}
        column = [rows[r][h] for r in order.tolist()]
        levels[:, h] = [ids.setdefault(label, len(ids)) for label in column]
        labels.append(tuple(ids))
    return Hierarchy(attribute=attribute, source=source, labels=tuple(labels), levels=levels)


def load_hierarchies(schema: SchemaSettings) -> dict[str, Hierarchy]:
    """Load every hierarchy of ``schema.hierarchies`` (QID name -> :class:`Hierarchy`)."""
    return {name: load_hierarchy(path, name) for name, path in schema.hierarchies.items()}


def encode(
    raw: RawSnapshot, schema: SchemaSettings, hierarchies: Mapping[str, Hierarchy]
) -> EncodedTable:
    """Encode a validated snapshot into the int-coded table every algorithm uses.

    Parameters
    ----------
    raw : the snapshot, from :func:`~stream_release.io.snapshot.read_snapshot` or
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
