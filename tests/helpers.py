"""Builders shared by the end-to-end tests (not fixtures: plain functions)."""

from __future__ import annotations

import asyncio
import bz2
import csv
import io
import json
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import jsonschema
import numpy as np
import redis
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from stream_release.config import SchemaSettings, TopicSettings
from stream_release.core.table import EncodedTable
from stream_release.devtools.datasets import (
    ADULT_QID,
    ADULT_SENSITIVE,
    Table,
    make_series,
    read_csv_table,
)
from stream_release.history.keys import RedisKeys
from stream_release.io.encoding import encode
from stream_release.io.hierarchy import load_hierarchies
from stream_release.io.snapshot import snapshot_from_columns


def _write_config(directory: Path, schema: str, privacy: dict[str, object]) -> Path:
    """``config.toml`` in ``directory``: the ``[schema]`` text, constant-ratio at l = 2 with
    ``privacy`` overrides, 500 queries per release."""
    settings = {"l": 2, "strategy": "constant-ratio", **privacy}
    lines = [f"{k} = {_toml(v)}" for k, v in settings.items()]
    path = directory / "config.toml"
    path.write_text(schema + "[privacy]\n" + "\n".join(lines) + "\n[output]\nqueries = 500\n")
    return path


def write_config(directory: Path, data: Path, **privacy: object) -> Path:
    """An Adult configuration (ARX hierarchies from ``data``) with ``privacy`` overrides."""
    hierarchies = "\n".join(f'"{a}" = "{data / f"adult_hierarchy_{a}.csv"}"' for a in ADULT_QID)
    schema = (
        f'[schema]\nid = "id"\nsensitive = "{ADULT_SENSITIVE}"\n'
        f"qid = {_toml(list(ADULT_QID))}\n[schema.hierarchies]\n{hierarchies}\n"
    )
    return _write_config(directory, schema, {"k_prime": 3, **privacy})


def adult_series(
    data: Path, directory: Path, n: int, *, rounds: int | None = None, seed: int = 0
) -> list[Path]:
    """Write the first ``rounds`` (default all ``n``) snapshots of the paper's series on Adult."""
    series = make_series(read_csv_table(data / "adult.csv"), ADULT_SENSITIVE, n, seed=seed)
    paths = []
    for i, table in enumerate(series[: rounds or n], start=1):
        path = directory / f"t{i:02d}.csv"
        table.write_csv(path)
        paths.append(path)
    return paths


def adult_register(data: Path, path: Path) -> Path:
    """Write Adult's ids and QIDs (no sensitive value) to ``path``: the population register
    of virtual individuals for :func:`adult_series` (Wong et al. 2010, §8)."""
    table = adult_table(data)
    Table({c: table.columns[c] for c in ("id", *ADULT_QID)}).write_csv(path)
    return path


WAGE_PANEL = Path(__file__).resolve().parent / "data" / "wage_panel.csv.bz2"
"""Vella and Verbeek's 8-year wage panel (``tests/data/README.md``)."""

WAGE_QID = ("black", "hisp", "married", "union", "educ", "exper")


def wage_panel_series(directory: Path) -> list[Path]:
    """Write the wage panel as one snapshot per year (``y1980.csv`` ...): id ``nr``, sensitive
    ``occupation``, QIDs :data:`WAGE_QID`."""
    rows = list(csv.DictReader(io.StringIO(bz2.decompress(WAGE_PANEL.read_bytes()).decode())))
    columns = ["nr", "occupation", *WAGE_QID]
    paths = []
    for year in sorted({r["year"] for r in rows}):
        path = directory / f"y{year}.csv"
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(columns)
            writer.writerows([r[c] for c in columns] for r in rows if r["year"] == year)
        paths.append(path)
    return paths


def wage_panel_config(directory: Path, **privacy: object) -> Path:
    """A configuration of :func:`wage_panel_series`: every occupation protected."""
    schema = f'[schema]\nid = "nr"\nsensitive = "occupation"\nqid = {_toml(list(WAGE_QID))}\n'
    return _write_config(directory, schema, {"k_prime": 2, **privacy})


def adult_table(data: Path) -> Table:
    return read_csv_table(data / "adult.csv")


def adult_snapshot(data: Path, path: Path, rows: int) -> Path:
    """Write the first ``rows`` rows of Adult (ids ``p-0``, ``p-1``, ...) to ``path`` (``;``)."""
    adult_table(data).take(np.arange(rows)).write_csv(path)
    return path


@contextmanager
def redis_namespace(url: str) -> Iterator[str]:
    """A fresh Redis key prefix; every key under it is deleted when the block exits."""
    prefix = f"sr-test-{uuid.uuid4().hex}"
    try:
        yield prefix
    finally:
        client = redis.Redis.from_url(url)
        try:
            keys = list(client.scan_iter(match=RedisKeys(prefix).match, count=10_000))
            for start in range(0, len(keys), 10_000):
                client.unlink(*keys[start : start + 10_000])
        finally:
            client.close()


SCHEMAS = Path(__file__).resolve().parents[1] / "deploy" / "schemas"
"""The exported JSON Schemas of the wire messages and files."""


def schema_errors(name: str, documents: Iterable[bytes | str | dict[str, object]]) -> list[str]:
    """Why each of ``documents`` (JSON text or parsed) fails ``deploy/schemas/<name>
    .schema.json``, checked by the ``jsonschema`` validator of the dialect the schema declares
    in ``$schema``; ``[]`` when every one is valid."""
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema, default=None)
    assert validator_class is not None, f"{name}.schema.json declares no known $schema"
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    errors = []
    for document in documents:
        parsed = document if isinstance(document, dict) else json.loads(document)
        errors += [f"{name}: {e.message}" for e in validator.iter_errors(parsed)]
    return errors


def fresh_topics() -> TopicSettings:
    """Topic names no other test uses: the defaults with a uuid suffix."""
    suffix = uuid.uuid4().hex
    defaults = TopicSettings()
    return TopicSettings(
        **{name: f"{topic}.{suffix}" for name, topic in defaults.model_dump().items()}
    )


def read_topic(
    bootstrap: str, topic: str, timeout: float = 10.0, *, committed: bool = True
) -> list[ConsumerRecord]:
    """Every message in ``topic`` (all partitions, from the start); ``[]`` if it does not exist.

    ``committed``: as a consumer with ``isolation.level = read_committed`` sees it (the
    messages of committed transactions and those sent outside any), up to the last stable
    offsets; else every message written, aborted ones included, up to the high watermarks.
    The ends are those of the first fetch, so it never waits for more messages.
    """
    return asyncio.run(_read_topic(bootstrap, topic, timeout, committed))


async def _read_topic(
    bootstrap: str, topic: str, timeout: float, committed: bool
) -> list[ConsumerRecord]:
    isolation = "read_committed" if committed else "read_uncommitted"
    consumer = AIOKafkaConsumer(
        isolation_level=isolation,
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        request_timeout_ms=5000,
    )
    await consumer.start()
    try:
        if topic not in await consumer.topics():  # all-topic metadata: creates nothing
            return []
        # the topic exists, so asking for its partitions creates nothing either; a topic
        # created a moment ago can be listed before its partitions are known: nothing is
        # readable yet, and callers poll again
        known = await _partitions(bootstrap, topic)
        if not known:
            return []
        partitions = [TopicPartition(topic, p) for p in known]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        records: list[ConsumerRecord] = []
        end: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + timeout
        while True:
            for tp in partitions:
                last = consumer.last_stable_offset(tp) if committed else consumer.highwater(tp)
                if tp not in end and last is not None:
                    end[tp] = last
            if len(end) == len(partitions) and all(
                [await consumer.position(tp) >= end[tp] for tp in partitions]
            ):
                return records
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"read {len(records)} messages of {topic!r} but not to its end in {timeout} s"
                )
            batch = await consumer.getmany(*partitions, timeout_ms=100)
            for tp, messages in batch.items():
                records.extend(m for m in messages if tp not in end or m.offset < end[tp])
    finally:
        await consumer.stop()


async def _partitions(bootstrap: str, topic: str) -> list[int]:
    """The partitions of an existing ``topic`` (a consumer's ``topics()`` lists the names
    without adding their partitions to the consumer's own metadata)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return sorted(
        int(p["partition"])
        for t in described
        if t["topic"] == topic and t["error_code"] == 0
        for p in t["partitions"]
    )


def _toml(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


EDUCATION_HIERARCHY = """\
Bachelors;Undergraduate;Higher education;*
Some-college;Undergraduate;Higher education;*
11th;High School;Secondary education;*
HS-grad;High School;Secondary education;*
Masters;Graduate;Higher education;*
9th;High School;Secondary education;*
Doctorate;Graduate;Higher education;*
"""
"""A small ARX-format hierarchy for hand-built tables."""

SMALL_ROWS = [  # id, age, education, city, disease
    ("a", "30", "Bachelors", "Paris", "flu"),
    ("b", "34", "Masters", "Lyon", "cold"),
    ("c", "30", "Bachelors", "Paris", "flu"),
    ("d", "41", "9th", "Nice", "hiv"),
    ("e", "25.5", "Some-college", "Lyon", "flu"),
    ("f", "30", "Bachelors", "Paris", "cold"),
    ("g", "34", "Doctorate", "Paris", "flu"),
]
"""Seven rows with a numeric, a hierarchy and a set attribute."""


def encode_columns(
    tmp_path: Path,
    columns: dict[str, list[str]],
    sensitive: list[str],
    ids: list[str] | None = None,
) -> EncodedTable:
    """Encode hand-built columns; ``education`` uses :data:`EDUCATION_HIERARCHY`."""
    hierarchy = tmp_path / "education.csv"
    hierarchy.write_text(EDUCATION_HIERARCHY, encoding="utf-8")
    hierarchies = {"education": hierarchy} if "education" in columns else {}
    schema = SchemaSettings(id="id", sensitive="s", qid=tuple(columns), hierarchies=hierarchies)
    ids = ids if ids is not None else [f"p{i}" for i in range(len(sensitive))]
    raw = snapshot_from_columns(ids, columns, sensitive)
    return encode(raw, schema, load_hierarchies(schema))
