"""Reading a series' files for the audit: public lines and manifests, private assignments and
records, snapshots and hierarchies. Standard library and numpy only.

Every malformed input raises :class:`AuditInputError`, one line naming the file, the line and
what is wrong; the command prints it and exits 2.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import ValidationError

from stream_release.errors import StreamReleaseError
from stream_release.release_format import AnyManifest, GroupLine, Manifest

PRIVATE_SUFFIX = ".private"


class AuditInputError(StreamReleaseError):
    """A file the audit reads is missing a part or malformed."""


def default_private(directory: Path) -> Path:
    """The private directory of the public ``directory``: ``DIR.private`` when it exists,
    else ``DIR`` itself (a series written before public and private files were apart)."""
    private = directory.with_name(directory.name + PRIVATE_SUFFIX)
    return private if private.is_dir() else directory


SERIES_FILE = "stream-release writes UTF-8: the file was changed after it was written"
"""What the error says of a series' own file that is not UTF-8."""
USER_FILE = "save the file as UTF-8"
"""The fix the error names for a file the user gives (configuration, hierarchy, snapshot)."""


def read_text(path: Path, fix: str, encoding: str = "utf-8") -> str:
    """The text of ``path``, its newlines translated as text mode does (``\\r\\n`` and a
    lone ``\\r`` become ``\\n``).

    Raises
    ------
    AuditInputError
        The file cannot be read; or its bytes are not ``encoding`` (``utf-8``, or
        ``utf-8-sig`` for a byte-order mark): the line, the bytes and ``fix``.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AuditInputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return _decoded(path, data, fix, encoding).replace("\r\n", "\n").replace("\r", "\n")


def _decoded(path: Path, data: bytes, fix: str, encoding: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise AuditInputError(
            f"{path}, line {line}: the bytes {data[exc.start : exc.end]!r} are not UTF-8 "
            f"text; {fix}"
        ) from None


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AuditInputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AuditInputError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise AuditInputError(f"{path}: holds a {type(value).__name__}, not a JSON object")
    return value


_MANIFEST = re.compile(r"^manifest-(\d+)\.json$")


def manifest_paths(directory: Path) -> list[tuple[int, Path]]:
    """The manifests in ``directory`` with the sequence numbers their names hold, in order."""
    return sorted(
        (int(m.group(1)), p)
        for p in directory.iterdir()
        if (m := _MANIFEST.match(p.name)) is not None
    )


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a ``release-NNNN.jsonl``, each a group line of the format
    (:class:`~stream_release.release_format.GroupLine`: ``group``, ``size``, ``sensitive``, an
    object of counts >= 1, and the fields its kind states).

    Raises
    ------
    AuditInputError
        A line is not a group line of the format: names the line, the field, its value and
        what it must be.
    """
    text = read_text(path, SERIES_FILE)
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise AuditInputError(f"{path}, line {number}: not valid JSON ({exc})") from None
        if not isinstance(line, dict):
            raise AuditInputError(f"{path}, line {number}: not a JSON object")
        try:
            GroupLine.parse(line)
        except ValidationError as exc:
            where = f"{path}, line {number}: {_first_error(exc)}"
            raise AuditInputError(f"{where} (not a group line of the format)") from None
        lines.append(line)
    return lines


def read_assignments(path: Path) -> tuple[list[str], NDArray[np.int64], NDArray[np.bool_]]:
    """``id,group[,virtual]`` rows: the ids, their groups (``-1`` for an empty group:
    suppressed) and which are virtual members (``virtual`` 1; 0, empty or no column: a row
    of the snapshot)."""
    return parse_assignments(read_text(path, SERIES_FILE), str(path))


def parse_assignments(
    text: str, name: str
) -> tuple[list[str], NDArray[np.int64], NDArray[np.bool_]]:
    """:func:`read_assignments` of the text of a file ``name`` (named in errors)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None or header[:2] != ["id", "group"]:
        raise AuditInputError(f"{name}: the header must start with id,group")
    flagged = header[2:3] == ["virtual"]
    ids, groups, virtual = [], [], []
    for number, row in enumerate(reader, start=2):
        if not row:
            continue
        ids.append(row[0])
        cell = row[1] if len(row) > 1 else ""
        try:
            groups.append(int(cell) if cell != "" else -1)
        except ValueError:
            raise AuditInputError(
                f"{name}, line {number}: group {cell!r} is not a number"
            ) from None
        mark = row[2] if flagged and len(row) > 2 else ""
        if mark not in ("", "0", "1"):
            raise AuditInputError(f"{name}, line {number}: virtual {mark!r} is not 0 or 1")
        virtual.append(mark == "1")
    return ids, np.array(groups, dtype=np.int64), np.array(virtual, dtype=np.bool_)


def groups_in_order(
    ids: list[str], groups: NDArray[np.int64], order: Sequence[str]
) -> NDArray[np.int64]:
    """The group of each id of ``order`` (e.g. a table's rows) from assignments ``ids``,
    ``groups``."""
    where = dict(zip(ids, groups.tolist(), strict=True))
    return np.array([where[i] for i in order], dtype=np.int64)


@dataclass
class Snapshot:
    """The rows of a snapshot CSV by id: its columns and the row of each id."""

    path: Path
    header: list[str]
    rows: dict[str, list[str]]
    sha256: str


def read_snapshot(path: Path, id_column: str) -> Snapshot:
    """A snapshot CSV (``,`` or ``;``, the delimiter taken from the header line)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AuditInputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    text = _decoded(path, data, USER_FILE, "utf-8-sig")
    first = text.split("\n", 1)[0]
    delimiter = ";" if first.count(";") > first.count(",") else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header = [h.strip() for h in next(reader, [])]
    if id_column not in header:
        raise AuditInputError(f"{path}: no column {id_column!r} (the id column of the series)")
    at = header.index(id_column)
    rows: dict[str, list[str]] = {}
    for number, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise AuditInputError(
                f"{path}, line {number}: {len(row)} fields where the header has {len(header)}"
            )
        rows[row[at].strip()] = [cell.strip() for cell in row]
    return Snapshot(path, header, rows, hashlib.sha256(data).hexdigest())


@dataclass
class Hierarchies:
    """The configured ARX hierarchies: per attribute, every label (leaves too) and the leaves
    under it, and the leaves in depth-first order (:func:`leaf_order`)."""

    leaves_of: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    order: dict[str, list[str]] = field(default_factory=dict)

    def has(self, attribute: str) -> bool:
        return attribute in self.leaves_of


def read_toml(config: Path) -> dict[str, Any]:
    """A configuration file's TOML (one-line errors: unreadable, not UTF-8, not TOML)."""
    text = read_text(config, USER_FILE)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AuditInputError(f"{config}: not valid TOML ({exc})") from None


def read_hierarchies(config: Path) -> Hierarchies:
    """``schema.hierarchies`` of a configuration file (paths relative to the file)."""
    settings = read_toml(config)
    named = (settings.get("schema") or {}).get("hierarchies") or {}
    if not isinstance(named, dict):
        raise AuditInputError(f"{config}: schema.hierarchies must be a table")
    out = Hierarchies()
    for attribute, name in named.items():
        path = Path(str(name))
        path = path if path.is_absolute() else config.resolve().parent / path
        rows = _hierarchy_rows(path)
        under: dict[str, set[str]] = {}
        for cells in rows:
            for label in cells:
                under.setdefault(label, set()).add(cells[0])
        out.leaves_of[str(attribute)] = {k: frozenset(v) for k, v in under.items()}
        out.order[str(attribute)] = leaf_order(rows)
    return out


def _hierarchy_rows(path: Path) -> list[list[str]]:
    """The rows ``leaf;level1;...;*`` of an ARX hierarchy, blank cells and lines dropped."""
    text = read_text(path, USER_FILE, "utf-8-sig")
    rows = []
    for row in csv.reader(io.StringIO(text, newline=""), delimiter=";"):
        cells = [c.strip() for c in row if c.strip() != ""]
        if cells:
            rows.append(cells)
    return rows


def leaf_order(rows: list[list[str]]) -> list[str]:
    """The leaves of a hierarchy's rows in depth-first order: sorted by the rank of first
    appearance (in the file, at its level) of their root, then of each ancestor down to the
    leaf, so that siblings are adjacent and keep the file's order. This is the order of the
    codes a release's planner gives a hierarchy attribute, so that the leaves under any label
    are one range of codes (what a count query's range means)."""
    height = max((len(cells) for cells in rows), default=0)
    first: list[dict[str, int]] = [{} for _ in range(height)]
    keys = []
    for r, cells in enumerate(rows):
        ranks = [first[h].setdefault(cells[h], r) for h in range(len(cells))]
        keys.append((tuple(reversed(ranks)), r))
    return [rows[r][0] for _, r in sorted(keys)]


def check_manifest(path: Path, manifest: dict[str, Any]) -> AnyManifest:
    """``manifest`` (read from ``path``) parsed with the format's models
    (:mod:`stream_release.release_format`), of either kind.

    Raises
    ------
    AuditInputError
        It is not a manifest of the format: names the first field, its value and what it
        must be.
    """
    try:
        return Manifest.parse(manifest)
    except ValidationError as exc:  # the first part of where is the kind's tag
        message = _first_error(exc, skip=1)
        raise AuditInputError(f"{path}: {message} (not a manifest of the format)") from None


def _first_error(exc: ValidationError, skip: int = 0) -> str:
    """The first error of ``exc`` as ``field.path = value: what it must be`` (the value left
    out when it is an object, or missing), the first ``skip`` parts of its path left out."""
    first = exc.errors()[0]
    loc = [str(part) for part in first["loc"]][skip:]
    given = first.get("input")
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] in ("value_error", "missing") or isinstance(given, dict):
        shown = ""
    else:
        shown = f" = {given!r}"
    return ".".join(loc) + shown + ": " + message if loc else message


def check_private_record(path: Path, record: dict[str, Any]) -> None:
    """The ``suppressed`` block of a private record, with its types."""
    block = record.get("suppressed")
    if block is None:
        return
    if not isinstance(block, dict):
        raise AuditInputError(f"{path}: suppressed must be an object")
    counts = block.get("sensitive", {})
    if not isinstance(counts, dict) or not all(_is_int(c) and c >= 1 for c in counts.values()):
        raise AuditInputError(f"{path}: suppressed.sensitive must be an object of counts >= 1")
    for key in ("rows", "decoys", "exempt_members"):
        if key in block and not (_is_int(block[key]) and block[key] >= 0):
            raise AuditInputError(
                f"{path}: suppressed.{key} = {block[key]!r} must be an integer >= 0"
            )
    # a count instead of the ids: a record written before they were kept (no exemption then)
    for key in ("withheld", "unplaced", "forced"):
        ids = block.get(key, [])
        if not _is_int(ids) and not (
            isinstance(ids, list) and all(isinstance(i, str) for i in ids)
        ):
            raise AuditInputError(f"{path}: suppressed.{key} must be a list of ids")
    exhausted = block.get("exhausted", {})
    if not _is_int(exhausted) and not (
        isinstance(exhausted, dict) and all(isinstance(v, str) for v in exhausted.values())
    ):
        raise AuditInputError(f"{path}: suppressed.exhausted must map ids to values")


def _field(path: Path, table: dict[str, Any], prefix: str, key: str, kind: type) -> None:
    if not isinstance(table.get(key), kind):
        raise AuditInputError(f"{path}: {prefix}{key} = {table.get(key)!r} is missing or mistyped")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
