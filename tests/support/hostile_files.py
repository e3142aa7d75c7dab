"""Hostile files for the command line: each must be refused with one line naming the problem,
exit code 2 and nothing written (docs/contract.md §3).

One definition for the tests (``tests/offline/test_bad_input.py``,
``tests/unit/io/test_snapshot_csv.py``) and for ``tests/bad_input_runs.py``, which runs the
command line on them many times over.

- :data:`HOSTILE_SNAPSHOTS`: an Adult snapshot (``;``, ``\\r\\n``, as
  :func:`support.data.adult_series` writes it) spoiled one way each: bytes that are not UTF-8
  in a value, the id, the sensitive value, a quoted field, the header or after a blank line; a
  ragged row, an empty id, a missing or repeated column, a value outside its hierarchy, a
  repeated id, a file of a header only, an empty file.
- :data:`HOSTILE_SETTINGS`: privacy settings refused on the first snapshot of the series.
- :func:`spoil_line`: any other file a command reads with bytes that are not UTF-8 on one
  line; :func:`hostile_configurations` (the configuration, a hierarchy, the population
  register) and :func:`spoil_series` (a series' public and private files) apply it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from support.data import adult_register

NOT_UTF8 = (b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\x80", b"\xf0\x9f")
"""Byte strings that are not UTF-8 wherever they are inserted: a byte no UTF-8 text holds, a
lead byte without its continuation, an encoded surrogate, a lone continuation byte, a
truncated four-byte sequence."""

SPOILED_LINE = 11
"""The line of the file (the header is line 1) that the value spoilers change."""


@dataclass(frozen=True)
class HostileSnapshot:
    """A way to spoil a valid snapshot, and what the error line must say about it.

    Attributes
    ----------
    name : the case's name (a test id)
    spoil : the valid snapshot's bytes -> the hostile snapshot's bytes
    says : substrings of the one error line (with the file's path, always checked)
    read : whether reading the file refuses it (``publish`` reads, ``anonymize`` and ``plan``
        also encode: a value outside its hierarchy is refused by encoding)
    """

    name: str
    spoil: Callable[[bytes], bytes]
    says: tuple[str, ...]
    read: bool = True

    def write(self, valid: Path, path: Path) -> Path:
        """Write the spoiled copy of the snapshot ``valid`` to ``path``; returns ``path``."""
        path.write_bytes(self.spoil(valid.read_bytes()))
        return path


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\r\n")


def _joined(lines: list[bytes]) -> bytes:
    return b"\r\n".join(lines)


def _column(data: bytes, name: str) -> int:
    return _lines(data)[0].split(b";").index(name.encode())


def _change(data: bytes, name: str, change: Callable[[bytes], bytes]) -> bytes:
    """``data`` with ``change`` applied to the value of column ``name`` on
    :data:`SPOILED_LINE`."""
    lines = _lines(data)
    fields = lines[SPOILED_LINE - 1].split(b";")
    at = _column(data, name)
    fields[at] = change(fields[at])
    lines[SPOILED_LINE - 1] = b";".join(fields)
    return _joined(lines)


def _inserted(bad: bytes) -> Callable[[bytes], bytes]:
    """A change that puts ``bad`` in the middle of a value."""
    return lambda value: value[:2] + bad + value[2:]


def _bytes_in(name: str, bad: bytes) -> Callable[[bytes], bytes]:
    """A spoiler that puts ``bad`` in the value of column ``name`` on :data:`SPOILED_LINE`."""
    return lambda data: _change(data, name, _inserted(bad))


def _without_column(name: str) -> Callable[[bytes], bytes]:
    def spoil(data: bytes) -> bytes:
        at = _column(data, name)
        rows = [line.split(b";") for line in _lines(data)]
        return _joined([b";".join(f for j, f in enumerate(r) if j != at) for r in rows])

    return spoil


def _ragged(data: bytes) -> bytes:
    lines = _lines(data)
    lines[SPOILED_LINE - 1] = lines[SPOILED_LINE - 1].rsplit(b";", 1)[0]
    return _joined(lines)


def _repeated_id(data: bytes) -> bytes:
    lines = _lines(data)
    last = len(lines) - 1 if lines[-1] else len(lines) - 2
    return _joined([*lines[: last + 1], lines[SPOILED_LINE - 1], *lines[last + 1 :]])


def _after_blank_line(bad: bytes) -> Callable[[bytes], bytes]:
    """Bytes ``bad`` in a value after a blank line (the reader numbers the lines apart)."""

    def spoil(data: bytes) -> bytes:
        lines = _lines(_bytes_in("education", bad)(data))
        return _joined([*lines[:2], b" ", *lines[2:]])

    return spoil


def _bad_header(data: bytes) -> bytes:
    lines = _lines(data)
    lines[0] = lines[0].replace(b"salary-class", b"salary\xff-class")
    return _joined(lines)


NOT_UTF8_SAYS = (f"line {SPOILED_LINE}", "is not UTF-8 text", "save the file as UTF-8")

HOSTILE_SNAPSHOTS = (
    *(
        HostileSnapshot(f"not-utf8-value-{bad.hex()}", _bytes_in("education", bad), NOT_UTF8_SAYS)
        for bad in NOT_UTF8
    ),
    HostileSnapshot("not-utf8-id", _bytes_in("id", b"\xff"), NOT_UTF8_SAYS),
    HostileSnapshot("not-utf8-sensitive", _bytes_in("occupation", b"\xc3("), NOT_UTF8_SAYS),
    HostileSnapshot(
        "not-utf8-quoted",
        lambda d: _change(d, "education", lambda v: b'"' + _inserted(b"\xff")(v) + b'"'),
        (f"line {SPOILED_LINE}", "are not UTF-8 text", "save the file as UTF-8"),
    ),
    HostileSnapshot(
        "not-utf8-after-a-blank-line",
        _after_blank_line(b"\x80"),
        (f"line {SPOILED_LINE + 1}", "is not UTF-8 text", "save the file as UTF-8"),
    ),
    HostileSnapshot(
        "not-utf8-header", _bad_header, ("line 1", "header is not UTF-8", "save the file as UTF-8")
    ),
    HostileSnapshot(
        "ragged-row",
        _ragged,
        (f"line {SPOILED_LINE}", "field(s) where the header has", "must be quoted"),
    ),
    HostileSnapshot(
        "empty-id", lambda d: _change(d, "id", lambda v: b" "), (f"line {SPOILED_LINE}", "empty")
    ),
    HostileSnapshot(
        "missing-column",
        _without_column("education"),
        ("no column 'education'", "columns found"),
    ),
    HostileSnapshot(
        "repeated-column",
        lambda d: d.replace(b"salary-class", b"education", 1),
        ("'education'", "appears 2 times"),
    ),
    HostileSnapshot(
        "value-outside-its-hierarchy",
        lambda d: _change(d, "education", lambda v: b"Bachelor"),
        ("'Bachelor'", "education", f"line {SPOILED_LINE}"),
        read=False,
    ),
    HostileSnapshot("repeated-id", _repeated_id, ("more than once", f"lines {SPOILED_LINE} and")),
    HostileSnapshot("header-only", lambda d: _lines(d)[0] + b"\r\n", ("has a header but no rows",)),
    HostileSnapshot("empty-file", lambda d: b"", ("is empty",)),
)
"""Every way the command line's tests spoil a snapshot."""


@dataclass(frozen=True)
class HostileSetting:
    """A ``[privacy]`` setting that :func:`support.data.write_config` writes and the command
    line refuses on the first snapshot of :func:`support.data.adult_series`.

    Attributes
    ----------
    name : the case's name (a test id)
    privacy : the overrides of ``write_config``
    says : substrings of the one error line
    """

    name: str
    privacy: dict[str, object]
    says: tuple[str, ...]


HOSTILE_SETTINGS = (
    # k' = 5 at l = 2 needs a ratio of 7.725; the most frequent occupation of the snapshot
    # (Exec-managerial, 14.65 % of its rows) allows 6.828: refused by the plan, after grouping
    HostileSetting(
        "infeasible", {"k_prime": 5}, ("infeasible", "largest feasible setting: k_prime = 4")
    ),
    HostileSetting("l-1", {"l": 1}, ("privacy", "l = 1")),
)
"""Every setting the command line's tests have refused."""


def spoil_line(valid: Path, path: Path, line: int, bad: bytes = b"\xff") -> Path:
    """Write a copy of the text file ``valid`` to ``path`` with ``bad`` (bytes that are not
    UTF-8) at the start of its line ``line`` (1 is the first); returns ``path``. For the files
    a command reads besides snapshots: the configuration, a hierarchy, the population
    register, a series' public and private files."""
    lines = valid.read_bytes().split(b"\n")
    lines[line - 1] = bad + lines[line - 1]
    path.write_bytes(b"\n".join(lines))
    return path


def hostile_configurations(
    config: Path, data: Path, directory: Path
) -> dict[str, tuple[Path, Path, int]]:
    """Configurations whose files hold bytes that are not UTF-8, written in ``directory``.

    Returns, by the name of the file spoiled, ``(configuration, spoiled file, its line)``:

    - ``configuration``: a copy of ``config`` (the Adult configuration of
      :func:`support.data.write_config`) spoiled on line 2;
    - ``hierarchy``: ``config`` with the education hierarchy of ``data`` spoiled on line 2;
    - ``register``: ``config`` with ``[virtual] registry``, Adult's register
      (:func:`support.data.adult_register`) spoiled on line :data:`SPOILED_LINE`.
    """
    text = config.read_text(encoding="utf-8")
    spoiled = spoil_line(config, directory / "configuration.toml", 2)
    hierarchy = data / "adult_hierarchy_education.csv"
    bad_hierarchy = spoil_line(hierarchy, directory / "education.csv", 2, NOT_UTF8[1])
    with_hierarchy = directory / "bad-hierarchy.toml"
    with_hierarchy.write_text(text.replace(str(hierarchy), str(bad_hierarchy)), encoding="utf-8")
    register = adult_register(data, directory / "valid-register.csv")
    bad_register = spoil_line(register, directory / "register.csv", SPOILED_LINE, NOT_UTF8[2])
    with_register = directory / "bad-register.toml"
    with_register.write_text(text + f'[virtual]\nregistry = "{bad_register}"\n', encoding="utf-8")
    return {
        "configuration": (spoiled, spoiled, 2),
        "hierarchy": (with_hierarchy, bad_hierarchy, 2),
        "register": (with_register, bad_register, SPOILED_LINE),
    }


SERIES_FILES = ("manifest-0001.json", "release-0001.jsonl")
"""The public files of a series' first release, which the audit reads."""
PRIVATE_SERIES_FILES = ("assignments-0001.csv", "private-0001.json")
"""Its private files (in ``OUT.private``)."""


def spoil_series(published: Path, name: str, copy: Path) -> Path:
    """Copy the series in ``published`` (and ``published.private``) to ``copy`` (and
    ``copy.private``) with bytes that are not UTF-8 on line 1 of its file ``name`` (one of
    :data:`SERIES_FILES` and :data:`PRIVATE_SERIES_FILES`); returns the spoiled file."""
    private, copy_private = (p.with_name(p.name + ".private") for p in (published, copy))
    shutil.copytree(published, copy)
    shutil.copytree(private, copy_private)
    where, into = (private, copy_private) if name in PRIVATE_SERIES_FILES else (published, copy)
    return spoil_line(where / name, into / name, 1)
