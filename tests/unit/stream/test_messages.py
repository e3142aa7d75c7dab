"""Wire models: bad input becomes a named rejection; exported schemas match the models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.paths import REPO
from support.schemas import SCHEMAS, schema_errors

from stream_release.cli.main import main
from stream_release.config import SchemaSettings
from stream_release.stream.messages import (
    GroupLine,
    Manifest,
    Rejection,
    Seal,
    SnapshotRecord,
    decode_seal,
    decode_snapshot_record,
    json_schemas,
)

SCHEMA = SchemaSettings(id="id", sensitive="disease", qid=("sex", "age"))
LIMIT = 1024
GOOD = {"release": "2026-10", "id": "p-17", "qid": {"sex": "M", "age": 34}, "sensitive": "flu"}


def _record(**changes: object) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def test_a_valid_record_and_seal_decode() -> None:
    record = decode_snapshot_record(_record(), SCHEMA, max_bytes=LIMIT)
    assert isinstance(record, SnapshotRecord) and record.qid == {"sex": "M", "age": 34}
    seal = decode_seal(b'{"release": "2026-10", "records": 5234}', max_bytes=LIMIT)
    assert seal == Seal(release="2026-10", records=5234)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"\xff\xfe not json", "not JSON"),
        (b'{"release": "r", "id": "p"', "not JSON"),
        (_record(sensitive=None), "sensitive"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "id"}).encode(), "field id is missing"),
        (_record(id=17), "id = 17"),
        (_record(id=""), "id"),
        (_record(id=" \t "), "only spaces or tabs"),
        (_record(extra="x"), "field extra is not part of the message"),
        (_record(qid={"sex": "M"}), "qid.age is missing"),
        (_record(qid={"sex": "M", "age": 3, "zip": "1"}), "qid.zip is not a configured QID"),
        (_record(qid={"sex": "M", "age": [3]}), "qid.age"),
        (json.dumps({**GOOD, "sensitive": "x" * 2000}).encode(), "exceeds kafka.max_message_bytes"),
    ],
)
def test_bad_records_are_rejected_with_a_reason(raw: bytes, expected: str) -> None:
    result = decode_snapshot_record(raw, SCHEMA, max_bytes=LIMIT)
    assert isinstance(result, Rejection)
    assert expected in result.error


def test_an_id_is_the_same_id_with_surrounding_blanks() -> None:
    # as a CSV snapshot's cell and a register's id: one individual, one pseudonym
    record = decode_snapshot_record(_record(id=" \tp-17 "), SCHEMA, max_bytes=LIMIT)
    assert isinstance(record, SnapshotRecord) and record.id == "p-17"
    inner = decode_snapshot_record(_record(id="p 17"), SCHEMA, max_bytes=LIMIT)
    assert isinstance(inner, SnapshotRecord) and inner.id == "p 17"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"release": "r", "records": "5"}', "records"),
        (b'{"release": "r", "records": -1}', "records"),
        (b'{"release": "r", "records": true}', "records"),
        (b'{"records": 5}', "field release is missing"),
        (b"[]", "seal"),
        (
            b'{"release": "r", "records": 5, "partitions": [2, 2]}',
            "add up to 4, not to records = 5",
        ),
        (b'{"release": "r", "records": 1, "partitions": [2, -1]}', "count of ids is >= 0"),
        (b'{"release": "r", "records": 0, "partitions": []}', "partitions"),
        (b'{"release": "r", "records": 2, "partitions": [1.0, 1]}', "partitions"),
    ],
)
def test_bad_seals_are_rejected_with_a_reason(raw: bytes, expected: str) -> None:
    result = decode_seal(raw, max_bytes=LIMIT)
    assert isinstance(result, Rejection)
    assert expected in result.error


def test_a_seal_gives_the_ids_of_each_partition() -> None:
    seal = decode_seal(b'{"release": "r", "records": 5, "partitions": [2, 0, 3]}', max_bytes=LIMIT)
    assert isinstance(seal, Seal)
    assert seal.counts(3) == [2, 0, 3]
    assert "gives 3 partition counts, but the records topic has 4" in str(seal.counts(4))
    old_form = Seal(release="r", records=5)
    assert old_form.counts(1) == [5]  # the seal of before partitions, valid on one partition
    assert '"partitions"' in str(old_form.counts(2))


def test_exported_schemas_are_up_to_date() -> None:
    directory = REPO / "deploy" / "schemas"
    for name, schema in json_schemas().items():
        path = directory / f"{name}.schema.json"
        assert path.is_file(), f"run: python -m stream_release.stream.messages {directory}"
        assert json.loads(path.read_text()) == schema, f"{path.name} is stale: re-export it"


def test_published_releases_match_the_wire_models(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(
        "id,sex,age,disease\n"
        + "".join(f"p{i},{'MF'[i % 2]},{20 + i},{'abcde'[i % 5]}\n" for i in range(20))
    )
    (tmp_path / "c.toml").write_text(
        '[schema]\nid = "id"\nsensitive = "disease"\nqid = ["sex", "age"]\n'
        "[privacy]\nl = 2\nk_prime = 2\n[output]\nqueries = 20\n"
    )
    assert (
        main(
            [
                "anonymize",
                "--config",
                str(tmp_path / "c.toml"),
                "--out",
                str(tmp_path / "o"),
                str(tmp_path / "t.csv"),
            ]
        )
        == 0
    )
    manifest = (tmp_path / "o" / "manifest-0001.json").read_text()
    Manifest.model_validate_json(manifest)
    lines = (tmp_path / "o" / "release-0001.jsonl").read_text().splitlines()
    for line in lines:
        GroupLine.model_validate_json(line)
    assert schema_errors("manifest", [manifest]) == []
    assert schema_errors("group", lines) == []


def test_the_schema_set_declares_its_dialect_and_refuses_what_no_kind_writes(
    tmp_path: Path,
) -> None:
    for path in sorted(SCHEMAS.glob("*.schema.json")):
        schema = json.loads(path.read_text())
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", path.name
    guarantee = {
        "release": "r", "sequence": 1, "records_in": 4, "published": 4, "suppressed": 0,
        "groups": 2, "l": 2.0, "strategy": {"name": "constant-ratio", "l": 2.0, "base_ratio": 2.0},
        "breach": {"bound": 0.5, "max": 0.25, "p50": 0.25, "p99": 0.25},
        "utility": {}, "elapsed_s": 0.1,
    }  # fmt: skip
    assert schema_errors("manifest", [guarantee]) == []
    without_breach = {k: v for k, v in guarantee.items() if k != "breach"}
    assert schema_errors("manifest", [without_breach])
    mechanism = {
        "release": "r", "sequence": 1, "published": 4, "groups": 2, "utility": {},
        "mechanism": {"kind": "dp-sanitised", "epsilon": 1.0},
    }  # fmt: skip
    assert schema_errors("manifest", [mechanism]) == []
    for kind in ("global-guarantee", "no-such-kind"):
        assert schema_errors("manifest", [{**mechanism, "mechanism": {"kind": kind}}])
    group = {"release": "r", "sequence": 1, "group": 0, "size": 2, "sensitive": {"a": 2}}
    assert schema_errors("group", [group]) == []
    assert schema_errors("group", [{**group, "member_ids": ["p-1"]}])
    assert schema_errors("group", [{**group, "trials": 0}])
