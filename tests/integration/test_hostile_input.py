"""Hostile input against a real worker (docs/contract.md §5): nothing bad is released, nothing
valid lost.

``stream-release worker`` runs as a subprocess on the test broker and Redis
(:class:`support.worker.Worker`, as in ``test_worker.py``).

- :func:`test_fuzzed_messages_are_rejected_or_released` sends one worker at least
  :data:`MIN_MESSAGES` messages planned by hypothesis (:data:`BAD_PLANS`: malformed, mistyped,
  out-of-hierarchy, oversize, duplicate, late, too large and conflicting records and seals,
  mixed with the valid records of a few releases, some of them sent twice or re-encoded:
  :data:`VALID_PLANS`) and checks that every bad message is on ``sr.rejected`` at its own
  coordinates with its reason and no valid one is; that every valid record is in its
  published release (the manifest counts them, the archive's private assignments hold exactly
  the pseudonyms of the ids sent, and the archive passes the audit); and that the worker is
  alive at the end and stops with exit code 0 on SIGTERM.
- ``service.max_release_rows``: a seal announcing more ids, and the ids of a release beyond
  it, are rejected and logged, and the worker goes on; ``stream-release publish`` refuses such
  a snapshot before reading it.
- ``service.seal_alert_after_s``: a sealed release that stays incomplete gets a warning log
  line and its ``sr_seal_incomplete`` series satisfies the alert rule of
  ``deploy/prometheus/alerts.yml``.
- Two bugs the fuzzer found have a reproducer each, at the end: a rejection too large for
  the producer (now cut to fit, ``redaction.fitted``) and a non-finite number in a numeric QID
  (now rejected); their inputs are part of the fuzz.

Hypothesis generates the *plans* of the messages (their kind and the choices that make them
bad) in :data:`EXAMPLES` examples of a few hundred plans each; :class:`Fuzz` turns them into
bytes in sending order, tracking the valid ids of every release and where each release's last
new id is, so that an outcome that depends on timing (a copy of a valid record that arrives
after its release was cut is rejected as late) is accepted either way.
"""

from __future__ import annotations

import asyncio
import csv
import json
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from aiokafka import AIOKafkaProducer, ConsumerRecord
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.data import adult_snapshot, adult_table, write_config
from support.hostile_files import NOT_UTF8
from support.http import http_get, metric_samples
from support.kafka_topics import read_topic
from support.worker import (
    KEY,
    RELEASE_TIMEOUT_S,
    Worker,
    metrics_environment,
    publish_with_cli,
    wait_for,
    worker_environment,
)

from stream_release.audit import audit_directory
from stream_release.cli.main import main
from stream_release.config import KafkaSettings, SchemaSettings, TopicSettings, load_settings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.devtools.datasets import ADULT_QID, ADULT_SENSITIVE
from stream_release.devtools.local_services import free_port
from stream_release.history.keys import RedisKeys
from stream_release.history.pseudonym import Pseudonymizer
from stream_release.stream.kafka import ensure_topics
from stream_release.stream.seal_watch import SealWatch
from stream_release.stream.staging import (
    RedisStaging,
    ReleaseStatus,
    SealOutcome,
    StageOutcome,
    staged_row,
)

pytestmark = pytest.mark.integration

ALERT_RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"

MIN_MESSAGES = 10_000
"""The fuzzer sends at least this many messages (asserted)."""
EXAMPLES = 42
"""Hypothesis examples; each plans a list of messages."""
PLANS_PER_EXAMPLE = (250, 300)
"""Messages per example (min, max)."""
MAX_MESSAGE_BYTES = 4096
"""``kafka.max_message_bytes`` of the worker under test: small, so oversize is cheap."""
FUZZ_RELEASES = ("fz-a", "fz-b", "fz-c")
"""The releases of the valid fuzzed records; sealed with their distinct-id counts."""
FUZZ_MAX_RELEASE_ROWS = 5000
"""``service.max_release_rows`` of the fuzzed worker: above every fuzz release."""
LATE_ROWS = 120
"""Rows of the release published before the fuzz (records for it are then late)."""
ID_PREFIX = "fz-id-"
"""Every fuzzed valid id starts with it (the worker's log must never show one)."""
QID = list(ADULT_QID)
FIELDS = ("release", "id", "qid", "sensitive")
STRING_FIELDS = ("release", "id", "sensitive")
NUMERIC = "age"
"""The numeric QID of :func:`_config` (no hierarchy: its values are checked as numbers)."""

LONG = (500, 2500)
"""Length of long ids (valid records whose copies may be rejected as late)."""
HUGE = (1000, 3500)
"""Length of huge strings in bad records (their errors may repeat them)."""

# what the rejection of each kind of message says (one of these substrings of its ``error``)
NOT_JSON = ("not JSON",)
INVALID = ("record:",)
INVALID_SEAL = ("seal:",)
OVERSIZE = ("exceeds kafka.max_message_bytes",)
LATE = ("late:",)
DUPLICATE = ("duplicate id", "late:")  # late when its release was cut before it arrived
CONFLICT = ("seal conflict",)
TOO_LARGE = ("too large", "service.max_release_rows")


# -- the plans hypothesis generates ----------------------------------------------------------

numbers = st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
json_scalars = st.none() | st.booleans() | numbers | st.text(max_size=6)
json_lists = st.lists(json_scalars, max_size=3)
json_objects = st.dictionaries(st.text(max_size=4), json_scalars | json_lists, max_size=3)
# JSON nested two levels deep, built from parts (st.recursive is ten times slower to draw, and
# filters reject whole examples of a few hundred plans)
json_values = json_scalars | json_lists | json_objects
not_strings = st.none() | st.booleans() | numbers | json_lists | json_objects
not_objects = json_scalars | json_lists
not_qid_values = st.none() | st.booleans() | json_lists | json_objects
"""JSON that no QID value can be (QID values are strings and numbers)."""
picks = st.integers(0, 2**31)
"""Which earlier valid record (modulo their number) a plan starts from."""
PICKING = frozenset({"resend", "reencode", "duplicate", "truncated", "bad_utf8"})
"""The kinds whose first choice is from :data:`picks` (the others start from the record
numbered like their position)."""
keys = st.none() | st.binary(max_size=12)
"""Kafka keys of messages that are not records at all."""
bad_bytes = st.sampled_from(NOT_UTF8)
"""Byte strings that are not UTF-8 wherever they are inserted (the command line's hostile files
use the same)."""


def _not_a_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return True
    return False


VALID_PLANS: dict[str, st.SearchStrategy[Any]] = {
    # release, age as a JSON number, id suffix, ASCII-only JSON
    "valid": st.tuples(
        st.integers(0, len(FUZZ_RELEASES) - 1), st.booleans(), st.text(max_size=8), st.booleans()
    ),
    "valid_long_id": st.tuples(st.integers(0, len(FUZZ_RELEASES) - 1), st.integers(*LONG)),
    "resend": st.tuples(picks),  # the same bytes again
    "reencode": st.tuples(picks),  # the same row, the age as a number <-> a string
}
"""Plans of messages that must not be rejected (unless a copy arrives after its cut)."""

BAD_PLANS: dict[str, st.SearchStrategy[Any]] = {
    "duplicate": st.tuples(picks, st.booleans()),  # an earlier id with another row
    "late": st.tuples(st.integers(0, 2 * LATE_ROWS)),
    "garbage": st.tuples(st.binary(max_size=40), keys),
    "truncated": st.tuples(picks, st.integers(0, 10_000)),
    "bad_utf8": st.tuples(picks, st.integers(0, 10_000), bad_bytes),
    "not_object": st.tuples(not_objects, keys),
    "missing_field": st.tuples(st.sampled_from(FIELDS)),
    "extra_field": st.tuples(st.text(max_size=8).filter(lambda s: s not in FIELDS), json_values),
    "wrong_type": st.tuples(st.sampled_from(STRING_FIELDS), not_strings)
    | st.tuples(st.just("qid"), not_objects),
    "empty_string": st.tuples(st.sampled_from(STRING_FIELDS)),
    "qid_value": st.tuples(st.sampled_from(QID), not_qid_values | st.just("")),
    "outside_hierarchy": st.tuples(
        st.sampled_from([q for q in QID if q != NUMERIC]),
        st.text(max_size=12) | st.integers() | st.floats(allow_nan=False, allow_infinity=False),
    ),
    "not_a_number": st.tuples(st.text(max_size=10).filter(_not_a_number)),
    "unknown_qid": st.tuples(st.text(max_size=10).filter(lambda s: s not in QID)),
    "missing_qid": st.tuples(st.sampled_from(QID)),
    "surrogate": st.tuples(st.sampled_from([*FIELDS, "qid value", "qid name"])),
    "huge_string": st.tuples(st.booleans(), st.integers(*HUGE)),
    "repeated_field": st.tuples(st.sampled_from(FIELDS), not_strings),
    "seal_garbage": st.tuples(st.binary(max_size=40)),
    "seal_not_object": st.tuples(not_objects),
    "seal_missing": st.tuples(st.sampled_from(["release", "records"])),
    "seal_extra": st.tuples(
        st.text(max_size=8).filter(lambda s: s not in ("release", "records")), json_values
    ),
    "seal_records": st.tuples(
        st.integers(max_value=-1)
        | st.none()
        | st.booleans()
        | st.floats(allow_nan=False, allow_infinity=False)
        | json_lists
        | json_objects
        | st.text(max_size=4)
    ),
    "seal_release": st.tuples(not_strings | st.just("")),
    "seal_conflict": st.tuples(st.integers(0, len(FUZZ_RELEASES) - 1), st.integers(1, 50)),
    "seal_too_large": st.tuples(st.integers(0, len(FUZZ_RELEASES) - 1), st.integers(1, 10**30)),
    "oversize": st.tuples(st.integers(1, 4000)),
    "seal_oversize": st.tuples(st.integers(1, 4000)),
    "non_finite": st.tuples(  # strings, and JSON's NaN and Infinity
        st.sampled_from(["nan", "inf", "-Infinity", "1e400", math.nan, math.inf])
    ),
}
"""Plans of messages that must be rejected: ``kind -> choices``."""


@st.composite
def message_plans(draw: st.DrawFn) -> tuple[str, Any]:
    """One message's plan, ``(kind, choices)``: half of them valid, half bad."""
    plans = VALID_PLANS if draw(st.booleans()) else BAD_PLANS
    kind = draw(st.sampled_from(sorted(plans)))
    return kind, draw(plans[kind])


# -- plans to messages -----------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """One message to send and what must become of it."""

    topic: str
    key: bytes | None
    value: bytes
    rejected: bool | None
    """True: must be on ``sr.rejected``; False: must not be; None: either (timing)."""
    errors: tuple[str, ...] = ()
    """A rejection's ``error`` holds one of these."""
    release: int | None = None
    """The fuzz release of a valid record or of a copy of one."""


@dataclass
class Fuzz:
    """Turns plans into messages, in sending order; knows the valid ids of every release."""

    topics: TopicSettings
    rows: list[dict[str, str]]
    """Adult rows (QIDs and the sensitive value) for the valid records."""
    leaves: dict[str, frozenset[str]]
    """The leaves of every hierarchy."""
    late_release: str
    records: list[Message] = field(default_factory=list)
    seal_plans: list[tuple[str, Any]] = field(default_factory=list)
    valid: list[tuple[dict[str, Any], int]] = field(default_factory=list)
    """Every new valid record and its fuzz release."""
    ids: list[list[str]] = field(default_factory=lambda: [[] for _ in FUZZ_RELEASES])
    last_new: dict[int, int] = field(default_factory=dict)
    """Fuzz release -> position in :attr:`records` of its last new id."""
    kinds: set[str] = field(default_factory=set)

    def add(self, plan: tuple[str, Any]) -> None:
        kind, choice = plan
        self.kinds.add(kind)
        if kind.startswith("seal_"):
            self.seal_plans.append(plan)
        else:
            self.records.append(self._record(kind, choice))

    def sent_records(self) -> list[Message]:
        """The records; a copy of a valid record after its release's last new id may arrive
        once the release is cut: rejected as late or not, either is right."""
        out = []
        for position, message in enumerate(self.records):
            release = message.release
            copy = message.rejected is False and release is not None
            if copy and position > self.last_new[release]:
                message = Message(message.topic, message.key, message.value, None, LATE)
            out.append(message)
        return out

    def sent_seals(self) -> list[Message]:
        """The seals of the fuzz releases (their distinct-id counts), then the fuzzed seals
        (after them: a conflicting seal conflicts with a seal already recorded)."""
        control = self.topics.control
        correct = [
            Message(control, label.encode(), _json(_seal(label, len(ids))), False)
            for label, ids in zip(FUZZ_RELEASES, self.ids, strict=True)
        ]
        return correct + [self._seal(kind, choice) for kind, choice in self.seal_plans]

    # -- records -------------------------------------------------------------------------------

    def _record(self, kind: str, choice: Any) -> Message:
        if kind == "valid":
            release, age_as_number, suffix, ascii_only = choice
            return self._new(release, suffix, age_as_number, ascii_only)
        if kind == "valid_long_id":
            return self._new(choice[0], "x" * choice[1])
        if not self.valid:  # nothing to start from yet
            return self._new(0, "")
        pick = choice[0] if kind in PICKING else len(self.records)
        base, release = self.valid[pick % len(self.valid)]
        if kind == "resend":
            return self._record_message(base, False, release=release)
        if kind == "reencode":  # the same staged row
            reencoded = {**base, "qid": _flip_age(base["qid"])}
            return self._record_message(reencoded, False, release=release, ascii_only=False)
        if kind == "duplicate":
            if choice[1]:
                other = {**base["qid"], NUMERIC: str(int(base["qid"][NUMERIC]) + 1)}
                changed = {**base, "qid": other}
            else:
                changed = {**base, "sensitive": base["sensitive"] + "-other"}
            return self._record_message(changed, True, DUPLICATE, release=release)
        if kind == "late":
            row = choice[0]
            ident = f"p-{row}" if row < LATE_ROWS else f"late-{row}"  # known and new ids
            late = _record(self._row_at(row), self.late_release, ident)
            return self._record_message(late, True, LATE)
        return self._bad(kind, choice, base)

    def _bad(self, kind: str, choice: Any, base: dict[str, Any]) -> Message:
        raw = _json(base)
        if kind == "garbage":
            # random bytes, now and then JSON that is not an object ("0", " 7")
            return self._raw(choice[0] or b"{", NOT_JSON + INVALID, key=choice[1])
        if kind == "truncated":
            return self._raw(raw[: choice[1] % len(raw)], NOT_JSON)
        if kind == "bad_utf8":
            at = choice[1] % len(raw)
            return self._raw(raw[:at] + choice[2] + raw[at:], NOT_JSON)
        if kind == "not_object":
            return self._raw(_json(choice[0]), INVALID, key=choice[1])
        record = {**base, "id": f"bad-{len(self.records)}", "qid": dict(base["qid"])}
        errors = INVALID
        if kind == "missing_field":
            del record[choice[0]]
        elif kind in ("extra_field", "wrong_type"):
            record[choice[0]] = choice[1]
        elif kind == "empty_string":
            record[choice[0]] = ""
        elif kind == "qid_value":
            record["qid"][choice[0]] = choice[1]
        elif kind == "outside_hierarchy":
            name, value = choice
            outside = f"{value}~" if str(value) in self.leaves[name] else value
            record["qid"][name] = outside
        elif kind in ("not_a_number", "non_finite"):
            record["qid"][NUMERIC] = choice[0]
        elif kind == "unknown_qid":
            record["qid"][choice[0]] = "x"
        elif kind == "missing_qid":
            del record["qid"][choice[0]]
        elif kind == "surrogate":
            return self._raw(_with_surrogate(record, choice[0]), NOT_JSON)
        elif kind == "huge_string":
            if choice[0]:
                record["qid"][QID[1]] = "x" * choice[1]  # not a leaf of its hierarchy
            else:
                record["qid"]["x" * choice[1]] = "x"  # not a QID
        elif kind == "repeated_field":  # a field twice: the last one counts
            body = _json(record)[:-1] + b", " + _json({choice[0]: choice[1]})[1:]
            return self._raw(body, INVALID)
        elif kind == "oversize":
            record["id"] = "x" * (MAX_MESSAGE_BYTES + choice[0])
            errors = OVERSIZE
        else:
            raise AssertionError(f"no builder for plan kind {kind!r}")
        return self._record_message(record, True, errors)

    def _new(
        self, release: int, suffix: str, age_as_number: bool = False, ascii_only: bool = True
    ) -> Message:
        row = self._row_at(LATE_ROWS + len(self.valid))  # rows the late release does not hold
        record = _record(row, FUZZ_RELEASES[release], f"{ID_PREFIX}{len(self.valid)}-{suffix}")
        if age_as_number:
            record["qid"] = _flip_age(record["qid"])
        self.valid.append((record, release))
        self.ids[release].append(record["id"])
        self.last_new[release] = len(self.records)
        return self._record_message(record, False, release=release, ascii_only=ascii_only)

    def _row_at(self, index: int) -> dict[str, str]:
        return self.rows[index % len(self.rows)]

    def _record_message(
        self,
        record: dict[str, Any],
        rejected: bool,
        errors: tuple[str, ...] = (),
        *,
        release: int | None = None,
        ascii_only: bool = True,
    ) -> Message:
        value = json.dumps(record, ensure_ascii=ascii_only).encode("utf-8")
        key = str(record.get("id", "")).encode("utf-8")
        return Message(self.topics.records, key, value, rejected, errors, release)

    def _raw(self, value: bytes, errors: tuple[str, ...], key: bytes | None = b"k") -> Message:
        return Message(self.topics.records, key, value, True, errors)

    # -- seals ---------------------------------------------------------------------------------

    def _seal(self, kind: str, choice: Any) -> Message:
        control, label = self.topics.control, FUZZ_RELEASES[0]
        seal: Any = _seal(label, 1)
        errors = INVALID_SEAL
        if kind == "seal_garbage":
            return Message(control, b"s", choice[0] or b"[", True, NOT_JSON + INVALID_SEAL)
        if kind == "seal_not_object":
            seal = choice[0]
        elif kind == "seal_missing":
            del seal[choice[0]]
        elif kind == "seal_extra":
            seal[choice[0]] = choice[1]
        elif kind == "seal_records":
            seal["records"] = choice[0]
        elif kind == "seal_release":
            seal["release"] = choice[0]
        elif kind == "seal_conflict":
            label = FUZZ_RELEASES[choice[0]]
            seal, errors = _seal(label, len(self.ids[choice[0]]) + choice[1]), CONFLICT
        elif kind == "seal_too_large":  # refused before it is recorded
            label = FUZZ_RELEASES[choice[0]]
            seal, errors = _seal(label, FUZZ_MAX_RELEASE_ROWS + choice[1]), TOO_LARGE
        elif kind == "seal_oversize":
            seal["release"], errors = "x" * (MAX_MESSAGE_BYTES + choice[0]), OVERSIZE
        else:
            raise AssertionError(f"no builder for plan kind {kind!r}")
        return Message(control, label.encode(), _json(seal), True, errors)


def _json(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8")


def _record(row: dict[str, str], label: str, ident: str) -> dict[str, Any]:
    """The ``sr.records`` value of an Adult ``row`` (all strings, as the publisher sends)."""
    return {
        "release": label,
        "id": ident,
        "qid": {q: row[q] for q in QID},
        "sensitive": row[ADULT_SENSITIVE],
    }


def _adult_rows(data: Path) -> list[dict[str, str]]:
    """The Adult rows, each a dict of its columns."""
    columns = {name: v.tolist() for name, v in adult_table(data).columns.items()}
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def _seal(label: str, records: int) -> dict[str, Any]:
    return {"release": label, "records": records}


def _flip_age(qid: dict[str, Any]) -> dict[str, Any]:
    """The QIDs with the numeric one as a JSON number if it was a string, and back."""
    age = qid[NUMERIC]
    return {**qid, NUMERIC: str(age) if isinstance(age, int) else int(age)}


def _with_surrogate(record: dict[str, Any], where: str) -> bytes:
    """``record`` as JSON with a lone surrogate escape (``\\ud800``) in one of its strings."""
    marker = "SURROGATE-MARKER"
    record = {**record, "qid": dict(record["qid"])}
    if where == "qid value":
        record["qid"][QID[1]] = marker
    elif where == "qid name":
        record["qid"][marker] = "x"
    elif where == "qid":
        record["qid"] = {marker: marker}
    else:
        record[where] = marker
    return _json(record).replace(marker.encode(), b"\\ud800", 1)


# -- the worker ------------------------------------------------------------------------------


def _config(directory: Path, data: Path) -> Path:
    """The Adult configuration of :func:`support.data.write_config` with ``age`` numeric (no
    hierarchy), so that its values are checked as numbers."""
    path = write_config(directory, data)
    kept = [line for line in path.read_text().splitlines() if not line.startswith(f'"{NUMERIC}"')]
    text = "\n".join(kept).replace("[schema]\n", f'[schema]\nnumeric = ["{NUMERIC}"]\n', 1)
    path.write_text(text + "\n")
    return path


@dataclass(frozen=True)
class Hostile:
    """A worker under test (not yet started) and where it reads and writes."""

    config: Path
    archive: Path
    worker: Worker
    bootstrap: str
    topics: TopicSettings


@pytest.fixture
def hostile(
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
    redis_url: str,
    redis_prefix: str,
    shared_data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Hostile]:
    """A worker with a small ``kafka.max_message_bytes``, on this test's topics and prefix."""
    archive = tmp_path / "archive"
    env = worker_environment(
        kafka_bootstrap,
        redis_url,
        archive,
        kafka_topics,
        redis_prefix,
        extra={"SR_KAFKA_MAX_MESSAGE_BYTES": str(MAX_MESSAGE_BYTES)},
    )
    for name in [n for n in env if n.startswith("SR_KAFKA_")]:  # for `publish`, run here
        monkeypatch.setenv(name, env[name])
    # one partition each (as the worker makes them), before a test sends to one: a topic that
    # a producer creates may have several, and then the order of its messages is lost
    settings = KafkaSettings(bootstrap=kafka_bootstrap, topics=kafka_topics)
    asyncio.run(ensure_topics(settings, kafka_topics.model_dump().values()))
    config = _config(tmp_path, shared_data)
    worker = Worker(config, env, tmp_path / "worker.log")
    try:
        yield Hostile(config, archive, worker, kafka_bootstrap, kafka_topics)
    finally:
        worker.kill()


async def _produce(bootstrap: str, messages: list[Message]) -> list[tuple[str, int, int]]:
    """Send ``messages`` in order (one producer, all in flight); their coordinates."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(m.topic, m.value, key=m.key) for m in messages]
        done = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return [(d.topic, d.partition, d.offset) for d in done]


def _place(message: ConsumerRecord) -> tuple[str, int, int]:
    """The coordinates of the message a rejection is about."""
    value = json.loads(message.value)
    return value["topic"], value["partition"], value["offset"]


def _log_entries(worker: Worker) -> list[dict[str, Any]]:
    """The worker's JSON log lines so far (a line still being written is skipped)."""
    entries = []
    for line in worker.log.read_text(errors="replace").splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


STUCK = frozenset({"publication_failed"})
"""Log events that mean the worker cannot go on (Redis and the broker are up in these tests)."""

RETRIES_TOLERATED = 3
"""``retrying`` lines allowed before the worker counts as stuck: the embedded broker
sometimes times out one send under the suite's load (the worker retries it, by design);
a broker or Redis that stays away produces one line per attempt, the pauses growing to
``retry_interval_s``."""


def _handle(
    h: Hostile, messages: list[Message], what: str
) -> tuple[list[tuple[str, int, int]], list[ConsumerRecord]]:
    """Send ``messages``, then a sentinel (not JSON) to each topic they went to, and wait until
    the sentinels are rejected: every message sent before them has then been handled. Fails at
    once if the worker logs a failed publication or keeps retrying (more than
    :data:`RETRIES_TOLERATED` times). Returns the coordinates of
    ``messages`` and the messages on the rejected topic but the sentinels'."""
    sentinels = [Message(t, b"end", b"end", True, NOT_JSON) for t in {m.topic for m in messages}]
    coordinates = asyncio.run(_produce(h.bootstrap, [*messages, *sentinels]))
    ends = set(coordinates[len(messages) :])

    def done(rejected: list[ConsumerRecord]) -> bool:
        entries = _log_entries(h.worker)
        stuck = [e for e in entries if e.get("event") in STUCK]
        retries = [e for e in entries if e.get("event") == "retrying"]
        stuck += retries if len(retries) > RETRIES_TOLERATED else []
        if stuck:
            pytest.fail(f"the worker is stuck: {stuck[-1].get('message')}\n{h.worker.tail()}")
        return ends <= {_place(r) for r in rejected}

    rejected = wait_for(h.worker, h.bootstrap, h.topics.rejected, done, what)
    return coordinates[: len(messages)], [r for r in rejected if _place(r) not in ends]


# -- the fuzzer ------------------------------------------------------------------------------


def test_fuzzed_messages_are_rejected_or_released(
    hostile: Hostile, shared_data: Path, tmp_path: Path
) -> None:
    topics, bootstrap, worker = hostile.topics, hostile.bootstrap, hostile.worker
    schema = load_settings(hostile.config, history={"key": KEY}).schema
    leaves = {name: frozenset(h.leaves) for name, h in load_hierarchies(schema).items()}
    late = adult_snapshot(shared_data, tmp_path / "late.csv", LATE_ROWS)
    fuzz = Fuzz(topics, _adult_rows(shared_data), leaves, late.stem)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(message_plans(), min_size=PLANS_PER_EXAMPLE[0], max_size=PLANS_PER_EXAMPLE[1]))
    def plan(plans: list[tuple[str, Any]]) -> None:
        for one in plans:
            fuzz.add(one)

    plan()
    assert fuzz.kinds == set(VALID_PLANS) | set(BAD_PLANS), "a kind was never generated"
    sent = [*fuzz.sent_seals(), *fuzz.sent_records()]
    assert len(sent) >= MIN_MESSAGES
    assert max(len(ids) for ids in fuzz.ids) <= FUZZ_MAX_RELEASE_ROWS

    worker.env["SR_SERVICE_MAX_RELEASE_ROWS"] = str(FUZZ_MAX_RELEASE_ROWS)
    worker.start()
    publish_with_cli(hostile.config, late)  # the release whose records are then late
    wait_for(worker, bootstrap, topics.manifests, lambda m: len(m) >= 1, "the first release")
    coordinates, rejected = _handle(hostile, sent, "the rejection of every fuzzed message")
    manifests = wait_for(
        worker,
        bootstrap,
        topics.manifests,
        lambda m: len(m) >= 1 + len(FUZZ_RELEASES),
        "the fuzzed releases",
    )

    # every bad message is rejected at its coordinates with its reason; no valid message is
    # (``raw`` and the key are as received or redacted: service.rejected_raw)
    expected = dict(zip(coordinates, sent, strict=True))
    by_place: dict[tuple[str, int, int], dict[str, Any]] = {}
    for message in rejected:
        place, value = _place(message), json.loads(message.value)
        assert place in expected, f"a rejection of a message never sent: {value}"
        assert by_place.setdefault(place, value) == value  # a repeat is the same rejection
    problems = []
    for place, message in expected.items():
        got = by_place.get(place)
        if message.rejected is True and got is None:
            problems.append(f"not rejected: {message.value[:200]!r}")
        elif message.rejected is False and got is not None:
            problems.append(f"rejected ({got['error']}): {message.value[:200]!r}")
        elif got is not None and not any(e in got["error"] for e in message.errors):
            problems.append(f"{got['error']!r} holds none of {message.errors}")
    assert not problems, f"{len(problems)} wrong outcomes, e.g.\n" + "\n".join(problems[:20])

    # every valid record is released, once, in its release
    by_label = {m["release"]: m for m in (json.loads(m.value) for m in manifests)}
    pseudonymizer = Pseudonymizer(KEY.encode())
    for label, ids in zip(FUZZ_RELEASES, fuzz.ids, strict=True):
        manifest = by_label[label]
        assert manifest["records_in"] == len(ids)
        assert manifest["published"] + manifest["suppressed"] == len(ids)
        private = hostile.archive.with_name(hostile.archive.name + ".private")
        path = private / f"assignments-{manifest['sequence']:04d}.csv"
        with path.open(encoding="utf-8", newline="") as fh:
            released = [row["id"] for row in csv.DictReader(fh)]
        # an id loses surrounding spaces and tabs (a fuzzed suffix may end with them)
        expected_ids = (pseudonymizer.pseudonym(i.strip(" \t")).hex() for i in ids)
        assert sorted(released) == sorted(expected_ids)
    assert audit_directory(hostile.archive).ok

    worker.check_alive()
    assert worker.stop() == 0
    assert ID_PREFIX not in worker.log.read_text(errors="replace"), "the worker logged an id"


# -- a release too large for memory (service.max_release_rows) ---------------------------------

SMALL_MAX_ROWS = 150
"""``service.max_release_rows`` of the tests below (the 120-row release fits)."""


def test_a_release_over_max_release_rows_is_refused_and_the_worker_goes_on(
    hostile: Hostile, shared_data: Path, tmp_path: Path
) -> None:
    topics, worker = hostile.topics, hostile.worker
    worker.env["SR_SERVICE_MAX_RELEASE_ROWS"] = str(SMALL_MAX_ROWS)
    worker.start()
    rows = _adult_rows(shared_data)
    over = SMALL_MAX_ROWS + 10
    seal = Message(topics.control, b"huge", _json(_seal("huge", SMALL_MAX_ROWS + 1)), True)
    records = [  # a release that never stops growing: the ids beyond the limit are refused
        Message(topics.records, b"k", _json(_record(rows[i], "unsealed", f"{ID_PREFIX}{i}")), None)
        for i in range(over)
    ]
    coordinates, rejected = _handle(hostile, [seal, *records], "the refusals")
    errors = {_place(r): json.loads(r.value)["error"] for r in rejected}
    assert set(errors) == {coordinates[0], *coordinates[1 + SMALL_MAX_ROWS :]}
    for error in errors.values():
        assert error.startswith("too large") and f"max_release_rows = {SMALL_MAX_ROWS}" in error
        assert "SR_SERVICE_MAX_RELEASE_ROWS" in error
    assert f"announces {SMALL_MAX_ROWS + 1} ids" in errors[coordinates[0]]

    # each refusal is logged, without an id; a release within the limit is still published
    refusals = [e for e in _log_entries(worker) if e.get("event") == "release_too_large"]
    assert {e["release"] for e in refusals} == {"huge", "unsealed"}
    assert sum(e.get("refused", 0) for e in refusals) == over - SMALL_MAX_ROWS
    snapshot = adult_snapshot(shared_data, tmp_path / "fits.csv", LATE_ROWS)
    publish_with_cli(hostile.config, snapshot)
    wait_for(worker, hostile.bootstrap, topics.manifests, lambda m: len(m) >= 1, "a release")
    assert worker.stop() == 0
    assert ID_PREFIX not in worker.log.read_text(errors="replace"), "the worker logged an id"


def test_publish_refuses_a_snapshot_over_max_release_rows_before_reading_it(
    hostile: Hostile,
    shared_data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SR_SERVICE_MAX_RELEASE_ROWS", str(SMALL_MAX_ROWS))
    snapshot = adult_snapshot(shared_data, tmp_path / "big.csv", SMALL_MAX_ROWS + 1)
    argv = ["publish", "--config", str(hostile.config), "--release", "big", str(snapshot)]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert f"{SMALL_MAX_ROWS + 1} rows, more than service.max_release_rows" in error
    assert "SR_SERVICE_MAX_RELEASE_ROWS" in error
    assert read_topic(hostile.bootstrap, hostile.topics.records) == []  # nothing sent


def test_staging_holds_at_most_max_rows_ids_per_release(redis_url: str, redis_prefix: str) -> None:
    schema = SchemaSettings(qid=("age",))
    staging = RedisStaging(
        redis.Redis.from_url(redis_url), RedisKeys(redis_prefix), schema, max_rows=3
    )
    ids = [bytes([i]) * 16 for i in range(5)]
    rows = [staged_row([str(30 + i)], "flu") for i in range(5)]
    outcomes = staging.stage("r", ids, rows).outcomes
    assert outcomes == [StageOutcome.STAGED] * 3 + [StageOutcome.TOO_LARGE] * 2
    assert staging.stage("r", ids[:1], rows[:1]).outcomes == [StageOutcome.REDELIVERED]
    assert staging.stage("r", ids[:1], rows[1:2]).outcomes == [StageOutcome.DUPLICATE_ID]
    assert staging.seal("r", 4) is SealOutcome.TOO_LARGE  # refused, not recorded
    assert staging.status("r").sealed is None
    assert staging.seal("r", 3) is SealOutcome.SEALED
    assert staging.status("r").ready


# -- a seal that never completes ---------------------------------------------------------------

ALERT_AFTER_S = 1.0
"""``service.seal_alert_after_s`` of the test below."""


def test_a_seal_that_never_completes_is_logged_and_alerted_on(
    hostile: Hostile, shared_data: Path
) -> None:
    topics, worker = hostile.topics, hostile.worker
    port = free_port()
    worker.env.update(
        {"SR_SERVICE_SEAL_ALERT_AFTER_S": str(ALERT_AFTER_S), **metrics_environment(port)}
    )
    worker.start()
    rows = _adult_rows(shared_data)
    staged, sealed = 3, 5
    records = [
        Message(topics.records, b"k", _json(_record(rows[i], "waiting", f"{ID_PREFIX}{i}")), False)
        for i in range(staged)
    ]
    seal = Message(topics.control, b"waiting", _json(_seal("waiting", sealed)), False)
    _, rejected = _handle(hostile, [*records, seal], "the records and the seal")
    assert rejected == []

    # the log line, once the release has waited service.seal_alert_after_s
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while not (lines := [e for e in _log_entries(worker) if e.get("event") == "seal_incomplete"]):
        worker.check_alive()
        assert time.monotonic() < deadline, f"no seal_incomplete line:\n{worker.tail()}"
        time.sleep(0.2)
    line = lines[0]
    assert line["level"] == "WARNING" and line["release"] == "waiting"
    assert (line["sealed"], line["staged"], line["missing"]) == (sealed, staged, sealed - staged)
    assert line["waited_s"] >= ALERT_AFTER_S

    # the metric, and the alert rule's expression holds on it
    status, body = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    value = metric_samples(body.decode())["sr_seal_incomplete{release=waiting}"]
    assert value == sealed - staged
    rules = [
        rule
        for group in yaml.safe_load(ALERT_RULES.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
    ]
    metric, operator, threshold = next(
        r["expr"] for r in rules if r["alert"] == "StreamReleaseSealIncomplete"
    ).split()
    assert metric == "sr_seal_incomplete" and operator == ">" and value > float(threshold)

    assert worker.stop() == 0
    assert ID_PREFIX not in worker.log.read_text(errors="replace"), "the worker logged an id"


def test_seal_watch_logs_a_waiting_release_once_per_period(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = SealWatch(after_s=10)
    waiting = [ReleaseStatus("a", staged=3, sealed=5, committed=None)]
    with caplog.at_level(logging.WARNING, logger="stream_release.stream.seal_watch"):
        assert watch.check(waiting, now=100) == []  # first seen
        assert watch.check(waiting, now=109) == []
        assert [w for _, w in watch.check(waiting, now=110)] == [10]
        assert watch.check(waiting, now=115) == []  # logged 5 s ago
        assert [w for _, w in watch.check(waiting, now=120)] == [20]
        assert watch.check([], now=121) == []  # cut, or gone: forgotten
        assert watch.check(waiting, now=125) == []  # waiting again: a new wait
    assert [r.event for r in caplog.records] == ["seal_incomplete"] * 2  # type: ignore[attr-defined]
    assert caplog.records[0].missing == 2  # type: ignore[attr-defined]


# -- reproducers of the bugs the fuzzer found ------------------------------------------------


def test_messages_near_or_over_the_size_limit_are_rejected(
    hostile: Hostile, shared_data: Path
) -> None:
    topics = hostile.topics
    hostile.worker.start()
    row = _adult_rows(shared_data)[0]
    oversize = _record(row, "r", "x" * MAX_MESSAGE_BYTES)
    near = _record(row, "r", "near")
    near["qid"][QID[1]] = "y" * (MAX_MESSAGE_BYTES * 3 // 4)  # not a leaf, quoted in the error
    messages = [
        Message(topics.records, b"k", _json(oversize), True, OVERSIZE),
        Message(topics.records, b"k", _json(near), True, INVALID),
        Message(topics.control, b"k", _json(_seal("x" * MAX_MESSAGE_BYTES, 1)), True, OVERSIZE),
    ]
    # before the fix, the worker retried a rejection its producer refused (too large) forever
    coordinates, rejected = _handle(hostile, messages, "the rejections")
    errors = {_place(r): json.loads(r.value)["error"] for r in rejected}
    for place, message in zip(coordinates, messages, strict=True):
        assert any(e in errors[place] for e in message.errors)
    assert hostile.worker.stop() == 0


def test_a_non_finite_number_in_a_numeric_qid_is_rejected(
    hostile: Hostile, shared_data: Path
) -> None:
    topics = hostile.topics
    hostile.worker.start()
    rows = _adult_rows(shared_data)
    values: list[Any] = ["nan", "inf", "-Infinity", "1e400", math.nan, math.inf]  # JSON NaN
    messages = []
    for i, value in enumerate(values):
        record = _record(rows[i], "r", f"{ID_PREFIX}{i}")
        record["qid"][NUMERIC] = value
        messages.append(Message(topics.records, b"k", _json(record), True, INVALID))
    coordinates, rejected = _handle(hostile, messages, "the rejections")
    # before the fix, these records were staged, and their release could never be cut
    assert {_place(r) for r in rejected} == set(coordinates)
    assert hostile.worker.stop() == 0
