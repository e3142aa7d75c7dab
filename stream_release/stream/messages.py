"""Wire models of the streaming service (docs/contract.md §5), validated at the edge.

Every message on a topic is one of these pydantic models; their JSON Schemas are exported to
``deploy/schemas/`` (:func:`export_schemas`, checked by the tests). Decoding never raises on
bad input: :func:`decode_snapshot_record` and :func:`decode_seal` return a :class:`Rejection` naming
the field, the value and the fix, which the worker publishes to ``sr.rejected``, and a stable
:class:`RejectReason` code, which the worker counts (``sr_records_rejected_total{reason}``) but
does not send: the wire message of docs/contract.md §5 is unchanged.
"""

from __future__ import annotations

import json
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from stream_release.config import SchemaSettings
from stream_release.release_format import GroupLine, Manifest, QidValue


class RejectReason(StrEnum):
    """Why a message was refused, as a short stable code (a metric label; never an id)."""

    NOT_JSON = "not_json"
    """The value is not UTF-8 JSON."""
    OVERSIZE = "oversize"
    """The value exceeds ``kafka.max_message_bytes``."""
    INVALID_FIELD = "invalid_field"
    """A field is missing, extra or of the wrong type, or a numeric QID is not a number."""
    HIERARCHY = "hierarchy"
    """A QID value is not a leaf of its hierarchy."""
    DUPLICATE_ID = "duplicate_id"
    """The release already holds another row for this id."""
    LATE = "late"
    """The release is already published."""
    OVER_SEAL = "over_seal"
    """The release already holds the number of ids its seal announced."""
    SEAL_CONFLICT = "seal_conflict"
    """The release was sealed with another record count."""
    TOO_LARGE = "too_large"
    """The release would hold more ids than ``service.max_release_rows``."""


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SnapshotRecord(_Message):
    """One row of a snapshot (topic ``sr.records``, key = the individual id)."""

    release: str = Field(min_length=1, description="the producer's release label")
    id: str = Field(
        min_length=1,
        description="the individual's identifier (surrounding spaces and tabs are dropped, "
        "as from a CSV snapshot's cells and a register's ids)",
    )
    qid: dict[str, QidValue] = Field(description="every configured QID, by name")
    sensitive: str = Field(min_length=1, description="the sensitive value")

    @field_validator("id")
    @classmethod
    def _trimmed(cls, value: str) -> str:
        """One id, one pseudonym, whichever way it arrives."""
        trimmed = value.strip(" \t")
        if not trimmed:
            raise ValueError("only spaces or tabs: give the individual's identifier")
        return trimmed


class Seal(_Message):
    """The end of a snapshot (topic ``sr.control``, key = the release label).

    ``partitions`` (needed when ``topics.records`` has more than one partition): element ``p``
    is the number of distinct ids of the snapshot sent to partition ``p`` (keyed by the id,
    Kafka's default partitioner); they add up to ``records``. Shard ``p`` knows its part is
    complete when it has staged that many.
    """

    release: str = Field(min_length=1)
    records: int = Field(ge=0, description="distinct ids the snapshot holds")
    partitions: list[int] | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="distinct ids per partition of the records topic, partition 0 first; "
        "they add up to records (needed when the topic has more than one partition)",
    )

    @field_validator("partitions")
    @classmethod
    def _counts(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(count < 0 for count in value):
            raise ValueError("a partition's count of ids is >= 0")
        return value

    @model_validator(mode="after")
    def _adds_up(self) -> Self:
        if self.partitions is not None and sum(self.partitions) != self.records:
            raise ValueError(
                f"the partitions' counts add up to {sum(self.partitions)}, not to records = "
                f"{self.records}: give each partition's number of distinct ids"
            )
        return self

    def counts(self, partitions: int) -> list[int] | str:
        """The number of ids of each of ``partitions`` partitions, or why this seal does not
        say (no counts on a topic of several partitions, or counts for another number)."""
        if self.partitions is None:
            if partitions == 1:
                return [self.records]
            return (
                f"the records topic has {partitions} partitions: the seal must give "
                '"partitions": the distinct ids sent to each (stream-release publish does)'
            )
        if len(self.partitions) != partitions:
            return (
                f"the seal gives {len(self.partitions)} partition counts, but the records topic "
                f"has {partitions} partitions (kafka.partitions); give one count per partition"
            )
        return list(self.partitions)


class Rejected(_Message):
    """A message the service refused (topic ``sr.rejected``)."""

    error: str
    topic: str
    partition: int
    offset: int
    raw: str = Field(description="the message value as received (UTF-8, replaced if invalid)")
    _reason: RejectReason = PrivateAttr(default=RejectReason.INVALID_FIELD)

    @classmethod
    def because(cls, reason: RejectReason, **fields: Any) -> Self:
        """A :class:`Rejected` of ``fields`` whose :attr:`reason` is ``reason``."""
        rejected = cls(**fields)
        rejected._reason = reason
        return rejected

    @property
    def reason(self) -> RejectReason:
        """The code of :attr:`error` (not serialised: the worker's metrics label)."""
        return self._reason


class ReleaseNotice(_Message):
    """Why a sealed release was not published (topic ``sr.status``, key = the release label):
    what ``stream-release publish --wait`` waits for besides the manifest.

    ``refused``: its cut found the release cannot be made (the guarantee is unsatisfiable on
    it, or a value is outside a configured domain); it is closed, its label burnt.
    ``blocked``: sealed, but at least as many of its records were rejected as it still misses
    (``sr.rejected`` says which and why): it waits for records sent again under its label,
    or for the snapshot published again under a new one.
    ``held``: ready, but not cut because the history store is behind what was already
    published (``sr.manifests``, the archive or the series ledger): it stays staged and is cut
    once the store is restored.
    """

    release: str = Field(min_length=1)
    status: Literal["refused", "blocked", "held"]
    error: str = Field(description="the exception's type, or records_rejected")
    reason: str = Field(description="what made it impossible: counts and settings, no values")
    fix: str
    sealed: int | None = Field(default=None, ge=0, description="blocked: the sealed ids")
    staged: int | None = Field(default=None, ge=0, description="blocked: the ids staged")
    rejected: int | None = Field(default=None, ge=0, description="blocked: records rejected")


class Rejection(_Message):
    """Why a message was refused; becomes a :class:`Rejected` with its coordinates."""

    error: str
    reason: RejectReason


SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
"""The JSON Schema dialect pydantic writes, declared in every exported schema."""
SCHEMA_BASE = "https://stream-release.invalid/schemas/"
"""Base of each exported schema's ``$id`` (a name, not a place to fetch it from)."""

MODELS: dict[str, type[BaseModel]] = {
    "record": SnapshotRecord,
    "seal": Seal,
    "group": GroupLine,
    "manifest": Manifest,
    "rejected": Rejected,
    "status": ReleaseNotice,
}


def decode_snapshot_record(
    raw: bytes, schema: SchemaSettings, *, max_bytes: int
) -> SnapshotRecord | Rejection:
    """Parse and check one ``sr.records`` value against the configured schema.

    The value is parsed and validated in one pass by pydantic-core
    (``model_validate_json``): this is the worker's per-record hot path.
    """
    if len(raw) > max_bytes:
        return _oversize(raw, max_bytes)
    try:
        record = SnapshotRecord.model_validate_json(raw)
    except ValidationError as exc:
        return _invalid(exc, "record")
    qid = record.qid
    if qid.keys() != _names(schema.qid):
        missing = [q for q in schema.qid if q not in qid]
        if missing:
            return Rejection(
                error=(
                    f"record: qid.{missing[0]} is missing; every record needs qid "
                    f"{list(schema.qid)}"
                ),
                reason=RejectReason.INVALID_FIELD,
            )
        extra = sorted(set(qid) - set(schema.qid))
        return Rejection(
            error=f"record: qid.{extra[0]} is not a configured QID; configured: {list(schema.qid)}",
            reason=RejectReason.INVALID_FIELD,
        )
    return record


@cache
def _names(qid: tuple[str, ...]) -> frozenset[str]:
    return frozenset(qid)


def decode_seal(raw: bytes, *, max_bytes: int) -> Seal | Rejection:
    """Parse and check one ``sr.control`` value."""
    if len(raw) > max_bytes:
        return _oversize(raw, max_bytes)
    try:
        return Seal.model_validate_json(raw)
    except ValidationError as exc:
        return _invalid(exc, "seal")


def _oversize(raw: bytes, max_bytes: int) -> Rejection:
    return Rejection(
        error=f"message of {len(raw)} bytes exceeds kafka.max_message_bytes = {max_bytes}",
        reason=RejectReason.OVERSIZE,
    )


def _invalid(exc: ValidationError, what: str) -> Rejection:
    """The rejection of a value pydantic refused: not JSON (or not UTF-8) at all, or JSON
    whose fields are missing, extra or mistyped."""
    first = exc.errors()[0]
    if first["type"] == "json_invalid":
        return Rejection(
            error=f"not JSON: {first['ctx'].get('error', first['msg'])}",
            reason=RejectReason.NOT_JSON,
        )
    return Rejection(error=_explain(exc, what), reason=RejectReason.INVALID_FIELD)


def _explain(exc: ValidationError, what: str) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(message)"
    given = first.get("input")
    shown = "" if isinstance(given, dict) else f" = {given!r}"
    if first["type"] == "missing":
        return f"{what}: field {where} is missing"
    if first["type"] == "extra_forbidden":
        return f"{what}: field {where} is not part of the message; remove it"
    return f"{what}: {where}{shown}: {first['msg']}"


def json_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schema (draft 2020-12, declared in ``$schema``) of every wire model, by file
    stem."""
    return {
        name: {
            "$schema": SCHEMA_DIALECT,
            "$id": f"{SCHEMA_BASE}{name}.schema.json",
            **model.model_json_schema(by_alias=True),
        }
        for name, model in MODELS.items()
    }


def export_schemas(directory: Path) -> list[Path]:
    """Write ``<name>.schema.json`` for every wire model into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, schema in json_schemas().items():
        path = directory / f"{name}.schema.json"
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":
    import sys

    for written in export_schemas(Path(sys.argv[1] if len(sys.argv) > 1 else "deploy/schemas")):
        print(written)
