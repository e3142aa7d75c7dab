"""Digests of the files a series wrote, with the figures that differ from run to run taken out,
for the golden tests that pin them (issue 28: a refactoring changes no published byte)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

ELAPSED = re.compile(rb'"elapsed_s": [0-9.eE+-]+')
RUN_DEPENDENT_LEDGER_KEYS = ("manifest_sha256", "private_sha256")
"""The ledger's digests of files that hold a run-dependent figure (a manifest's ``elapsed_s``,
a private record's snapshot path); the files themselves are digested normalised."""


def normalised(path: Path, work: Path) -> bytes:
    """``path``'s bytes without what changes between two runs of the same series: a
    manifest's ``elapsed_s`` reads 0, the working directory reads ``<work>``, and a ledger
    line drops :data:`RUN_DEPENDENT_LEDGER_KEYS`."""
    data = path.read_bytes()
    if path.name.startswith("manifest-"):
        data = ELAPSED.sub(b'"elapsed_s": 0', data)
    if path.suffix == ".ledger":
        lines = (json.loads(line) for line in data.splitlines())
        data = b"".join(
            json.dumps(
                {k: v for k, v in line.items() if k not in RUN_DEPENDENT_LEDGER_KEYS}
            ).encode("utf-8")
            + b"\n"
            for line in lines
        )
    return data.replace(str(work).encode("utf-8"), b"<work>")


def series_digests(work: Path, *roots: Path) -> dict[str, str]:
    """``relative path -> sha256`` (first 16 hex digits) of every file under ``roots`` (files
    or directories, relative to ``work``), normalised (:func:`normalised`); a directory named
    ``history`` (the store's own files) is left out."""
    files: list[Path] = []
    for root in roots:
        files.extend(
            [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        )
    return {
        str(f.relative_to(work)): hashlib.sha256(normalised(f, work)).hexdigest()[:16]
        for f in files
        if "history" not in f.relative_to(work).parts
    }
