"""ARX-format generalization hierarchies: one file per attribute, read into a :class:`Hierarchy`
whose leaves are in depth-first order (so the leaves under any node are one contiguous code
range). Imports nothing of the package but its errors: the configuration's section models read
a hierarchy too (``reconstruction-private-rr``'s ``domain_hierarchy``).

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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stream_release.errors import SchemaError

if TYPE_CHECKING:
    from stream_release.config._sections import SchemaSettings

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
