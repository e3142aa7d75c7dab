"""The files of one release (CONTRACT.md §4): groups, manifest, private assignments.

Files are written under temporary names first (``.tmp`` suffix) and renamed into place only
after the history commit, so a crash never leaves a half-written release: see
:func:`stage_release` and :func:`finalize_release`.
"""

from __future__ import annotations

import csv
import io
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from stream_release.faults import kill_point

TMP_SUFFIX = ".tmp"


@dataclass(frozen=True)
class ReleasePaths:
    """Where release ``sequence`` lives under ``directory``."""

    directory: Path
    sequence: int

    @property
    def groups(self) -> Path:
        return self.directory / f"release-{self.sequence:04d}.jsonl"

    @property
    def manifest(self) -> Path:
        return self.directory / f"manifest-{self.sequence:04d}.json"

    @property
    def assignments(self) -> Path:
        return self.directory / f"assignments-{self.sequence:04d}.csv"

    def all(self) -> tuple[Path, Path, Path]:
        return (self.groups, self.assignments, self.manifest)


def group_lines(
    label: str,
    sequence: int,
    sizes: np.ndarray,
    qids: list[dict[str, Any]] | None,
    members: list[list[dict[str, Any]]] | None,
    sensitive: list[dict[str, int]],
) -> Iterator[dict[str, Any]]:
    """The JSON objects of ``release-NNNN.jsonl``, one per group, in group order."""
    for g in range(sizes.shape[0]):
        line: dict[str, Any] = {
            "release": label,
            "sequence": sequence,
            "group": g,
            "size": int(sizes[g]),
        }
        if members is not None:
            line["members"] = members[g]
        else:
            line["qid"] = qids[g] if qids is not None else {}
        line["sensitive"] = sensitive[g]
        yield line


def encode_lines(lines: list[dict[str, Any]]) -> bytes:
    """The bytes of ``release-NNNN.jsonl``: one compact JSON object per line, UTF-8 (orjson)."""
    return b"".join(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE) for line in lines)


def encode_record(groups: bytes, manifest: dict[str, Any]) -> bytes:
    """The release record kept with the history: zlib of the manifest line then the groups."""
    head = json.dumps(manifest, ensure_ascii=False).encode("utf-8") + b"\n"
    return zlib.compress(head + groups, 1)


def decode_record(record: bytes) -> tuple[dict[str, Any], bytes]:
    """Inverse of :func:`encode_record`: the manifest and the groups' JSONL bytes."""
    head, _, groups = zlib.decompress(record).partition(b"\n")
    return json.loads(head), groups


def decode_record_manifest(record: bytes) -> dict[str, Any]:
    """The manifest of a release record (:func:`encode_record`), decompressing only as far as
    its first line."""
    inflater = zlib.decompressobj()
    head = inflater.decompress(record, 1 << 16)
    while b"\n" not in head and inflater.unconsumed_tail:
        head += inflater.decompress(inflater.unconsumed_tail, 1 << 16)
    manifest: dict[str, Any] = json.loads(head.partition(b"\n")[0])
    return manifest


def stage_release(
    paths: ReleasePaths,
    groups: bytes,
    manifest: dict[str, Any],
    ids: np.ndarray,
    group: np.ndarray,
) -> None:
    """Write the three files under temporary names (fsynced)."""
    paths.directory.mkdir(parents=True, exist_ok=True)
    with _tmp(paths.groups).open("wb") as fh:
        fh.write(groups)
        _sync(fh)
    with _tmp(paths.assignments).open("w", encoding="utf-8", newline="") as fh:
        fh.write(assignments_csv(ids.tolist(), group.tolist()))
        _sync(fh)
    with _tmp(paths.manifest).open("w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2, ensure_ascii=False)
        fh.write("\n")
        _sync(fh)


def assignments_csv(ids: list[str], group: list[int]) -> str:
    """The text of ``assignments-NNNN.csv``: ``id,group`` then a row per id, the group empty
    for a suppressed row (``group < 0``); exactly what :func:`csv.writer` writes, built
    without it when no id needs quoting (a million rows: 0.4 s instead of 1.4 s)."""
    texts = [str(g) if g >= 0 else "" for g in group]
    joined = "\x1f".join(ids)
    if any(special in joined for special in ',"\r\n'):
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["id", "group"])
        writer.writerows(zip(ids, texts, strict=True))
        return out.getvalue()
    return "id,group\r\n" + "".join(map("{},{}\r\n".format, ids, texts))


def finalize_release(paths: ReleasePaths) -> None:
    """Rename the staged files into place (the manifest last: its presence marks completion).

    A file already in place (an earlier finalisation interrupted by a crash) is left as is.
    """
    for path in paths.all():
        if _tmp(path).exists() or not path.exists():
            os.replace(_tmp(path), path)
        kill_point("finalizing")


def is_staged(paths: ReleasePaths) -> bool:
    """True when every file of a release is staged or, from an interrupted finalisation,
    already in place (:func:`finalize_release` completes either)."""
    return all(_tmp(p).exists() or p.exists() for p in paths.all())


def discard_staged(paths: ReleasePaths) -> None:
    for path in paths.all():
        _tmp(path).unlink(missing_ok=True)


def published_sequences(directory: Path) -> list[int]:
    """Sequences whose manifest is in ``directory``, ascending."""
    out = []
    for path in directory.glob("manifest-*.json"):
        stem = path.stem.removeprefix("manifest-")
        if stem.isdigit():
            out.append(int(stem))
    return sorted(out)


def _tmp(path: Path) -> Path:
    return path.with_name(path.name + TMP_SUFFIX)


def _sync(fh: Any) -> None:
    fh.flush()
    os.fsync(fh.fileno())
