"""The worker's agents' logic (:class:`ServiceRunner`) with a stub service and producer.

A batch whose staging fails (Redis down) is staged again, never skipped (its offsets must not be
committed before), and a bug while staging ends the worker instead of being retried; rejections
go to ``topics.rejected`` keyed as received; a release is marked published only when every one
of its messages was acknowledged, and a failed send is retried.
"""

from __future__ import annotations

import asyncio
import json
import logging
import platform
import subprocess
import sys
from types import SimpleNamespace
from typing import Any, NoReturn

import faust
import pytest
import redis
from support.service_runs import as_worker_logs, log_events
from support.worker_stubs import StubProducer, StubService, stub_runner

from stream_release.config import Settings
from stream_release.errors import SchemaError
from stream_release.stream.app import create_app
from stream_release.stream.intake import Accepted, Incoming, PreparedBatch
from stream_release.stream.logs import WITHHELD
from stream_release.stream.messages import Rejected
from stream_release.stream.peers import configuration_tag, member_tag
from stream_release.stream.records_consumer import consumer_options
from stream_release.stream.runner import ServiceRunner
from stream_release.stream.service import Outgoing
from stream_release.stream.shutdown import BUG_EXIT_CODE
from stream_release.stream.worker import limit_malloc_arenas

SETTINGS = Settings(schema={"qid": ["age"]}, service={"retry_interval_s": 0.001})
TOPICS = SETTINGS.kafka.topics


class StagingStubService(StubService):
    """Redis is down for the first staging; ``b"bad"`` records and seals are rejected; each
    release is two group lines and a manifest."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1
        self.staged: list[list[Incoming]] = []

    def prepare_records(self, messages: list[Incoming]) -> PreparedBatch:
        rejected = [_rejected(m, "not JSON") for m in messages if m.value == b"bad"]
        return PreparedBatch(messages, rejected, {}, {})

    def stage_prepared(self, batch: PreparedBatch) -> Accepted:
        if self.failures:
            self.failures -= 1
            raise redis.ConnectionError("redis down")
        self.staged.append(batch.messages)
        return Accepted(batch.rejected, complete=False)

    def accept_seal(self, message: Incoming) -> Rejected | None:
        return _rejected(message, "seal conflict") if message.value == b"bad" else None

    def cut_ready(self) -> list[dict[str, Any]]:
        return []

    def outgoing(self, sequence: int) -> list[Outgoing]:
        key = f"r{sequence}".encode()
        return [
            Outgoing(TOPICS.releases, key, b"g1"),
            Outgoing(TOPICS.releases, key, b"g2"),
            Outgoing(TOPICS.manifests, key, b"m"),
        ]


def _rejected(message: Incoming, error: str) -> Rejected:
    return Rejected(
        error=error,
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        raw=message.value.decode(),
    )


def _event(offset: int, key: bytes | None, value: bytes) -> Any:
    """A Faust event of ``topics.control`` (seals arrive through a Faust agent)."""
    message = SimpleNamespace(
        topic=TOPICS.control, partition=0, offset=offset, key=key, value=value
    )
    return SimpleNamespace(message=message)


@pytest.fixture
def runner() -> tuple[ServiceRunner, StagingStubService, StubProducer]:
    service = StagingStubService()
    runner, producer = stub_runner(service, SETTINGS)
    return runner, service, producer


def test_a_failed_batch_is_staged_again_and_rejections_keep_their_key(runner) -> None:  # type: ignore[no-untyped-def]
    runner, service, producer = runner
    messages = [
        Incoming(TOPICS.records, 0, 7, b"p-1", b"{}"),
        Incoming(TOPICS.records, 0, 8, b"k", b"bad"),
        Incoming(TOPICS.records, 0, 9, None, b"bad"),
    ]

    async def prepare_then_stage() -> None:
        await runner.stage_records(await runner.prepare_records(messages))

    asyncio.run(prepare_then_stage())
    assert service.failures == 0 and len(service.staged) == 1
    assert [m.offset for m in service.staged[0]] == [7, 8, 9]
    assert [(t, k) for t, k, _ in producer.sent] == [
        (TOPICS.rejected, b"k"),
        (TOPICS.rejected, None),
    ]
    first = Rejected.model_validate_json(producer.sent[0][2])
    assert (first.error, first.offset, first.raw) == ("not JSON", 8, "bad")


class Crashed(Exception):
    """Raised by the test's ``on_bug`` in place of ending the process."""


def test_a_bug_while_staging_is_not_retried_but_ends_the_worker(runner) -> None:  # type: ignore[no-untyped-def]
    runner, service, producer = runner
    ended: list[tuple[str, str]] = []
    attempts: list[PreparedBatch] = []

    def on_bug(action: str, exc: BaseException) -> NoReturn:
        ended.append((action, type(exc).__name__))
        raise Crashed

    def broken(batch: PreparedBatch) -> Accepted:
        attempts.append(batch)
        raise KeyError("p-1")

    runner.on_bug = on_bug
    service.stage_prepared = broken
    batch = PreparedBatch([Incoming(TOPICS.records, 0, 7, b"p-1", b"{}")], [], {}, {})
    with pytest.raises(Crashed):
        asyncio.run(runner.stage_records(batch))
    assert ended == [("stage records", "KeyError")] and attempts == [batch]
    assert producer.sent == []


def test_seals_are_rejected_with_their_coordinates(runner) -> None:  # type: ignore[no-untyped-def]
    runner, _, producer = runner
    asyncio.run(runner.stage_seals([_event(3, b"r1", b"{}"), _event(4, b"r1", b"bad")]))
    [(topic, key, value)] = producer.sent
    assert (topic, key) == (TOPICS.rejected, b"r1")
    assert Rejected.model_validate_json(value).offset == 4


VALUE = "HIV-" + "positive"
"""A sensitive value a failure quotes (built: no source line of a traceback shows it)."""


def test_a_failed_publication_logs_its_traceback_and_no_value_of_the_data(runner, caplog) -> None:  # type: ignore[no-untyped-def]
    runner, service, _ = runner

    def cut_ready() -> list[dict[str, Any]]:  # a mechanism's check quoting a value of a record
        raise SchemaError(f"sensitive: value {VALUE!r} is not in sensitive_domain")

    service.cut_ready = cut_ready
    with caplog.at_level(logging.DEBUG):  # no value at any level
        asyncio.run(runner.cut_and_send())
    [record] = log_events(caplog, "publication_failed")
    assert record.getMessage() == "publication failed, will retry: SchemaError"
    assert runner.publication_error == "SchemaError" and runner.publication_ok is False
    lines = as_worker_logs(caplog.records)
    [entry] = [e for e in lines if e.get("event") == "publication_failed"]
    assert "in cut_ready" in entry["exc_info"]  # where it failed: a failure of the program
    assert entry["exc_info"].endswith(f"stream_release.errors.SchemaError: {WITHHELD}")
    assert VALUE not in json.dumps(lines)


def test_a_publication_failed_by_redis_is_one_line(runner, caplog) -> None:  # type: ignore[no-untyped-def]
    runner, service, _ = runner

    def cut_ready() -> list[dict[str, Any]]:
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    service.cut_ready = cut_ready
    with caplog.at_level(logging.DEBUG):
        asyncio.run(runner.cut_and_send())
    [entry] = [e for e in as_worker_logs(caplog.records) if e.get("event") == "publication_failed"]
    assert entry["message"] == (
        "publication failed, will retry: ConnectionError: Error 111 connecting to "
        "127.0.0.1:6379. Connection refused."
    )
    assert "exc_info" not in entry


def test_a_release_is_marked_published_only_once_acknowledged(runner) -> None:  # type: ignore[no-untyped-def]
    runner, service, producer = runner
    service.committed = 2
    producer.failing = {TOPICS.manifests}
    asyncio.run(runner.cut_and_send())
    assert service.published() == 0  # the manifest of release 1 failed: nothing marked, no more
    assert [v for _, _, v in producer.sent] == [b"g1", b"g2", b"m"]
    assert (runner.releases.committed, runner.releases.aborted) == (0, 1)  # its transaction
    producer.failing = set()
    asyncio.run(runner.cut_and_send())  # the retry sends release 1 again, then release 2
    assert service.published() == 2
    assert (runner.releases.committed, runner.releases.aborted) == (2, 1)  # one per release
    assert [(k, v) for _, k, v in producer.sent[3:]] == [
        (b"r1", b"g1"),
        (b"r1", b"g2"),
        (b"r1", b"m"),
        (b"r2", b"g1"),
        (b"r2", b"g2"),
        (b"r2", b"m"),
    ]


def test_the_app_takes_its_settings_from_the_configuration() -> None:
    settings = Settings(
        schema={"qid": ["age"]},
        kafka={
            "bootstrap": "k1:9093,k2:9093",
            "group_id": "g",
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "u",
            "sasl_password": "secret-password",
        },
        service={"session_timeout_s": 4, "heartbeat_interval_s": 1, "rebalance_timeout_s": 5},
        history={"key": "worker-runner-test-key-0123456789abcdef"},
    )
    app = create_app(settings, StagingStubService())  # type: ignore[arg-type]
    conf = app.conf
    assert conf.id == "g" and [u.host for u in conf.broker] == ["k1", "k2"]
    assert (conf.broker_session_timeout, conf.broker_heartbeat_interval) == (4.0, 1.0)
    assert conf.broker_rebalance_timeout == 5.0 and conf.producer_acks == -1
    credentials = conf.broker_credentials
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.protocol.value == "SASL_SSL"
    assert credentials.mechanism.value == "SCRAM-SHA-512"
    assert credentials.password == "secret-password"
    assert "secret-password" not in repr(credentials)
    assert set(app.agents) == {"stage-seals"}  # records: the batch consumer below
    records = consumer_options(settings)
    assert records["group_id"] == "g-records" and records["enable_auto_commit"] is False
    assert records["auto_offset_reset"] == "earliest"
    assert (records["session_timeout_ms"], records["heartbeat_interval_ms"]) == (4000, 1000)
    assert records["rebalance_timeout_ms"] == 5000
    assert records["sasl_mechanism"] == "SCRAM-SHA-512"
    assert records["sasl_plain_password"] == "secret-password"
    [assignor] = records["partition_assignment_strategy"]
    assert member_tag(assignor.metadata(["t"]).encode()) == configuration_tag(settings)


def test_a_heartbeat_not_below_the_session_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="heartbeat_interval_s"):
        Settings(schema={"qid": ["age"]}, service={"session_timeout_s": 1})


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_worker_caps_malloc_arenas_on_glibc() -> None:
    assert limit_malloc_arenas() is True


def test_a_bug_ends_the_process_at_once_naming_only_the_exception_type() -> None:
    code = (
        "import logging.config, sys; from stream_release.stream.logs import logging_config; "
        "logging.config.dictConfig(logging_config('text', 'info')); "
        "from stream_release.stream.shutdown import exit_on_bug\n"
        "try: {}['p-' + '1']\n"
        "except KeyError as exc: exit_on_bug('stage records', exc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == BUG_EXIT_CODE, done.stderr
    assert "cannot stage records: KeyError" in done.stdout
    assert "Traceback (most recent call last)" in done.stdout  # with where it failed
    assert f"KeyError: {WITHHELD}" in done.stdout
    assert "p-1" not in done.stdout + done.stderr
