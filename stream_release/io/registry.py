"""The population register of virtual individuals (``[virtual] registry``).

A CSV (``,`` or ``;``, a header row, UTF-8) with the id column and the QID columns of
``[schema]`` (other columns ignored, no sensitive value), checked like a snapshot's columns
(:func:`~stream_release.io.snapshot.snapshot_from_columns`): every id non-empty and distinct.
It is encoded like a snapshot whose rows hold
:data:`~stream_release.core.grouping.virtual.NO_VALUE`.
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from stream_release.config import SchemaSettings
from stream_release.config.hierarchy import Hierarchy
from stream_release.core.grouping.virtual import NO_VALUE
from stream_release.core.table import EncodedTable
from stream_release.errors import SchemaError
from stream_release.io.encoding import encode
from stream_release.io.snapshot import Factorized, snapshot_from_columns

__all__ = ["Registry", "read_registry"]


@dataclass(frozen=True, eq=False)
class Registry:
    """The encoded register: ``table`` (every row holding NO_VALUE), its file and sha256."""

    table: EncodedTable
    path: Path
    sha256: str

    @property
    def source(self) -> dict[str, str]:
        """What the private record keeps of it (never published)."""
        return {"file": str(self.path), "sha256": self.sha256}


def read_registry(
    path: Path, schema: SchemaSettings, hierarchies: dict[str, Hierarchy]
) -> Registry:
    """Read, validate and encode the register at ``path``.

    Raises
    ------
    SchemaError
        As :func:`~stream_release.io.snapshot_csv.read_snapshot` and
        :func:`~stream_release.io.encoding.encode` (a missing column, an empty or
        repeated id, a value outside its hierarchy), naming the register's file.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise SchemaError(
            f"virtual.registry {str(path)!r} does not exist; check the path"
        ) from None
    except OSError as exc:
        raise SchemaError(f"virtual.registry {str(path)!r} cannot be read: {exc}") from None
    ids, qid = _read_columns(Path(path), data, schema)
    raw = snapshot_from_columns(ids, qid, ["-"] * len(ids), source=str(path))
    n = raw.n_rows
    first = np.zeros(1 if n else 0, dtype=np.int64)
    raw = replace(
        raw, sensitive_column=Factorized((NO_VALUE,) if n else (), np.zeros(n, np.int32), first)
    )
    try:
        table = encode(raw, schema, hierarchies)
    except SchemaError as exc:
        raise SchemaError(f"virtual.registry: {exc}") from None
    return Registry(table, Path(path), hashlib.sha256(data).hexdigest())


def _read_columns(
    path: Path, data: bytes, schema: SchemaSettings
) -> tuple[list[str], dict[str, list[str]]]:
    """The id column and the QID columns of the CSV ``data`` read from ``path`` (``,`` or
    ``;``, a header)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SchemaError(
            f"virtual.registry {str(path)!r}, line {line}: the bytes "
            f"{data[exc.start : exc.end]!r} are not UTF-8 text; save the file as UTF-8"
        ) from None
    first = text.split("\n", 1)[0]
    delimiter = ";" if first.count(";") > first.count(",") else ","
    rows = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, skipinitialspace=True)
    header = [name.strip(" \t") for name in next(rows, [])]
    wanted = [schema.id, *schema.qid]
    missing = [name for name in wanted if name not in header]
    if missing:
        raise SchemaError(
            f"virtual.registry {str(path)!r} has no column {missing[0]!r}; it needs the id "
            f"column and every QID of [schema] ({', '.join(map(repr, wanted))}); columns "
            f"found: {', '.join(map(repr, header))}"
        )
    at = [header.index(name) for name in wanted]
    columns: list[list[str]] = [[] for _ in wanted]
    line_of: dict[str, int] = {}
    for number, row in enumerate(rows, start=2):
        if not any(cell.strip(" \t") for cell in row):
            continue  # a blank line
        if len(row) != len(header):
            raise SchemaError(
                f"virtual.registry {str(path)!r}, line {number}: {len(row)} fields but the "
                f"header has {len(header)}; fix the line"
            )
        person = row[at[0]].strip(" \t")
        if not person:
            raise SchemaError(
                f"virtual.registry {str(path)!r}, line {number}: the id (column "
                f"{schema.id!r}) is empty; give every person of the register an id"
            )
        if person in line_of:
            raise SchemaError(
                f"virtual.registry {str(path)!r}: id {person!r} is on lines {line_of[person]} "
                f"and {number}; a register lists each person once: remove the duplicate"
            )
        line_of[person] = number
        for column, i in zip(columns, at, strict=True):
            column.append(row[i])
    return columns[0], dict(zip(schema.qid, columns[1:], strict=True))
