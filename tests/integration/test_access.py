"""Access (issue 4, item 5) on the real local servers.

- A worker subprocess (the ``adult_worker`` fixture's) runs a short series of snapshots whose
  ids are ``secret-id-<uuid>-<n>``, then bad records; afterwards no raw id is anywhere but on
  the input topics: not in any Redis key or value of its namespace, its log, ``/metrics``,
  ``/health``, the published topics (releases, manifests, rejected: keys and values) or the
  archive (the private assignments too). Its Redis is a ``redis-server`` with ``requirepass``
  and the worker logs in as an ACL user confined to its key prefix and to the commands it needs;
  its key comes from a key file.
- The worker refuses to start without a pseudonymisation key (exit 2, one line), before it
  connects to anything; with a wrong Redis password it exits 2 with one line that does not
  show the password.
- The HTTP endpoint serves ``/metrics`` and ``/health`` only: there is no admin or debug
  route to protect with a token; every other path answers 404, and neither page shows a key,
  a password or the configuration.

Kafka SASL/SCRAM and ACLs are tested on Apache Kafka in ``test_kafka_security.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
import redis
from aiohttp import ClientSession
from redis.backoff import NoBackoff
from redis.retry import Retry
from support.data import adult_table, write_config
from support.http import http_get
from support.kafka_topics import read_topic
from support.services import started_service
from support.worker import Worker, publish_with_cli, send_messages, wait_for

from stream_release.config import SchemaSettings, TopicSettings
from stream_release.devtools.datasets import ADULT_QID, Table
from stream_release.devtools.local_services import (
    free_port,
    redis_answers,
    redis_argv,
    worker_argv,
    worker_env,
)
from stream_release.history.keys import RedisKeys
from stream_release.history.pseudonym import Pseudonymizer
from stream_release.stream.intake import Incoming, rejected_message
from stream_release.stream.messages import Rejection, decode_snapshot_record
from stream_release.stream.observability import HttpEndpoint, Metrics
from stream_release.stream.redaction import Redactor

pytestmark = pytest.mark.integration

ADMIN_PASSWORD = secrets.token_urlsafe(18)
"""``requirepass`` of the secured Redis (its ``default`` user: the test's own connection)."""
SERVICE_COMMANDS = (
    *("+get", "+set", "+mget", "+mset", "+del", "+unlink", "+rpush", "+lrange"),
    *("+hget", "+hset", "+hsetnx", "+hlen", "+hexists", "+hgetall"),
    *("+sadd", "+srem", "+smembers", "+scard", "+sismember", "+ltrim"),
    *("+watch", "+unwatch", "+multi", "+exec", "+discard"),
    *("+evalsha", "+script|load", "+ping"),
)
"""Every command the service sends (found with ``MONITOR`` over the service core and the
worker tests; the Lua scripts' commands are among them): nothing else is granted."""
SERIES_ROWS = ((0, 300), (150, 450))
"""Adult rows of the two snapshots (half of the second's individuals are in the first)."""


@pytest.fixture(scope="module")
def secured_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a ``redis-server`` whose ``default`` user needs :data:`ADMIN_PASSWORD`."""
    workdir = tmp_path_factory.mktemp("redis-acl")
    port = free_port()
    admin = f"redis://:{ADMIN_PASSWORD}@127.0.0.1:{port}/0"
    with started_service(
        "redis-acl",
        lambda: [*redis_argv(port, workdir), "--requirepass", ADMIN_PASSWORD],
        lambda: redis_answers(admin),
        workdir,
    ):
        yield f"127.0.0.1:{port}"


def _admin(address: str) -> redis.Redis:
    return redis.Redis.from_url(f"redis://:{ADMIN_PASSWORD}@{address}/0")


def _worker_user(address: str, prefix: str) -> str:
    """A fresh ACL user allowed :data:`SERVICE_COMMANDS` on the keys of ``prefix`` only; its
    ``redis://user:password@host:port/0`` URL."""
    user, password = f"sr-worker-{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(18)
    rules = ["reset", "on", f">{password}", f"~{RedisKeys(prefix).match}", "resetchannels"]
    with _admin(address) as admin:
        admin.execute_command("ACL", "SETUSER", user, *rules, "-@all", *SERVICE_COMMANDS)
    return f"redis://{user}:{password}@{address}/0"


def _snapshots(data: Path, directory: Path, marker: str) -> list[Path]:
    """Two Adult snapshots (:data:`SERIES_ROWS`) whose ids are ``<marker>-<row>``."""
    table = adult_table(data)
    paths = []
    for k, (start, stop) in enumerate(SERIES_ROWS, start=1):
        rows = np.arange(start, stop)
        ids = np.array([f"{marker}-{row}" for row in rows], dtype=object)
        path = directory / f"a{k:02d}.csv"
        Table({**table.take(rows).columns, "id": ids}).write_csv(path)
        paths.append(path)
    return paths


def _bad_messages(snap: Path, marker: str) -> tuple[list[tuple[bytes, bytes]], bytes, bytes]:
    """Bad ``sr.records`` messages keyed by new ids (each refused once, except the first
    copy of the duplicate, which is staged), and a record sent to ``sr.control`` (key, value).
    """
    header, first = snap.read_text().splitlines()[:2]
    qid = {n: v for n, v in zip(header.split(";"), first.split(";"), strict=True) if n in ADULT_QID}
    ids = [f"{marker}-bad-{n}" for n in range(8)]

    def record(ident: object, **changes: object) -> bytes:
        value = {"release": "a03", "id": ident, "qid": qid, "sensitive": "Sales", **changes}
        return json.dumps(value).encode()

    records = [
        (ids[0], f"id={ids[0]}, not JSON".encode()),
        (ids[1], json.dumps(ids[1]).encode()),  # JSON, but only the id
        (ids[2], record(ids[2], qid={**qid, "education": "Bachelor"})),  # not a leaf
        (ids[3], record(ids[3])),  # staged ...
        (ids[3], record(ids[3], sensitive="Tech-support")),  # ... then a duplicate
        (ids[4], record(ids[4], release="a01")),  # late: a01 is published
        (ids[5], record(None, pid=ids[5])),  # the id in an undeclared field
        (ids[6], record([ids[6]])),  # an id of the wrong type
    ]
    keyed = [(key.encode(), value) for key, value in records]
    return keyed, ids[7].encode(), record(ids[7])


def _redis_contents(client: redis.Redis, prefix: str) -> list[bytes]:
    """Every key of the namespace ``prefix`` and every element of its value, by type."""
    out: list[bytes] = []
    for key in client.scan_iter(match=RedisKeys(prefix).match, count=1000):
        kind = client.type(key).decode()
        out.append(key)
        if kind == "string":
            out.append(client.get(key))
        elif kind == "hash":
            for field, value in client.hgetall(key).items():
                out += [field, value]
        elif kind == "set":
            out += list(client.smembers(key))
        elif kind == "list":
            out += client.lrange(key, 0, -1)
        else:
            pytest.fail(f"Redis key {key!r} is a {kind}, which this test does not read")
    return out


def test_no_raw_id_reaches_redis_logs_metrics_topics_or_files(
    secured_redis: str,
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
    adult_worker: tuple[Path, list[Path], Worker],
) -> None:
    config, _, worker = adult_worker  # the config and a worker on this test's topics
    marker = f"secret-id-{uuid.uuid4().hex}"  # in every id: one search finds them all
    snaps = _snapshots(shared_data, tmp_path, marker)
    prefix = f"sr-access-{uuid.uuid4().hex}"
    worker_url = _worker_user(secured_redis, prefix)
    key = secrets.token_hex(32)
    key_file = tmp_path / "pseudonym.key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    port = free_port()
    del worker.env["SR_HISTORY_KEY"]
    worker.env.update(
        SR_REDIS_URL=worker_url,
        SR_HISTORY_PREFIX=prefix,
        SR_HISTORY_KEY_FILE=str(key_file),
        SR_SERVICE_METRICS_HOST="127.0.0.1",
        SR_SERVICE_METRICS_PORT=str(port),
    )
    worker.start()
    for k, snap in enumerate(snaps, start=1):
        publish_with_cli(config, snap)
        wait_for(
            worker, kafka_bootstrap, kafka_topics.manifests, lambda m, k=k: len(m) >= k, f"a0{k}"
        )
    records, seal_key, seal = _bad_messages(snaps[0], marker)
    asyncio.run(send_messages(kafka_bootstrap, kafka_topics.records, records))
    asyncio.run(send_messages(kafka_bootstrap, kafka_topics.control, [(seal_key, seal)]))
    refused = len(records)  # every message but the staged copy, plus the seal
    rejected = wait_for(
        worker, kafka_bootstrap, kafka_topics.rejected, lambda m: len(m) >= refused, "rejections"
    )
    pages = [http_get(f"http://127.0.0.1:{port}/{page}") for page in ("metrics", "health")]
    assert [status for status, _ in pages] == [200, 200]
    assert worker.stop() == 0

    archive, private = tmp_path / "archive", tmp_path / "archive.private"
    files = sorted(p for d in (archive, private) for p in d.rglob("*") if p.is_file())
    assert {p.name for p in archive.iterdir()} == {
        f"{kind}-000{k}.{ext}"
        for k in (1, 2)
        for kind, ext in (("release", "jsonl"), ("manifest", "json"))
    }
    assert {p.name for p in private.iterdir()} >= {
        f"{kind}-000{k}.{ext}"
        for k in (1, 2)
        for kind, ext in (("assignments", "csv"), ("private", "json"))
    }
    rows = sum(stop - start for start, stop in SERIES_ROWS)
    with _admin(secured_redis) as admin:
        stored = _redis_contents(admin, prefix)
        user = urlsplit(worker_url).username
        denied = [entry for entry in admin.acl_log() if entry["username"] == user]
    assert len(stored) > rows, "the namespace should hold every individual's history"
    assert denied == [], f"the worker was refused a command or key: {denied}"
    published = [
        part
        for topic in (kafka_topics.releases, kafka_topics.manifests, kafka_topics.rejected)
        for message in read_topic(kafka_bootstrap, topic)
        for part in (message.key or b"", message.value)
    ]
    places = {
        "Redis": b"\n".join(stored),
        "the worker's log": worker.log.read_bytes(),
        "/metrics and /health": b"\n".join(body for _, body in pages),
        "the published topics": b"\n".join(published),
        **{f"archive file {p.name}": p.read_bytes() for p in files},
    }
    leaks = [where for where, text in places.items() if marker.encode() in text]
    assert leaks == [], f"raw ids found in: {', '.join(leaks)}"
    # the search does find them where they belong: the input topic
    sent = read_topic(kafka_bootstrap, kafka_topics.records)
    assert sum(marker.encode() in (m.key or b"") for m in sent) == rows + len(records)
    assert len(rejected) == refused
    # no page, no log line shows a secret
    secrets_ = [key, urlsplit(worker_url).password or "?", ADMIN_PASSWORD]
    exposed = [
        where
        for where in ("the worker's log", "/metrics and /health")
        for secret in secrets_
        if secret.encode() in places[where]
    ]
    assert exposed == []


REDACTION_CASES = {
    "not JSON": b"secret-id-7 is not JSON",
    "only the id": b'"secret-id-7"',
    "an id of the wrong type": b'{"release": "r", "id": ["secret-id-7"], "qid": {}}',
    "the id elsewhere": b'{"release": "r", "qid": {"age": 1, "name": "secret-id-7"}}',
    "short undeclared values": (
        b'{"release": "r", "id": "secret-id-7", '
        + b", ".join(b'"f%d": 1' % i for i in range(200))
        + b', "qid": {"age": 1}, "sensitive": "s"}'
    ),
}
"""Bad ``sr.records`` values holding the id ``secret-id-7``."""


@pytest.mark.parametrize("value", REDACTION_CASES.values(), ids=REDACTION_CASES.keys())
def test_a_redacted_rejection_shows_no_id_and_is_no_longer_than_the_full_one(
    value: bytes,
) -> None:
    schema = SchemaSettings(qid=("age",))
    refusal = decode_snapshot_record(value, schema, max_bytes=1 << 20)
    assert isinstance(refusal, Rejection)
    full = rejected_message(Incoming("sr.records", 0, 1, b"secret-id-7", value), refusal)
    redacted = Redactor("redact", Pseudonymizer(b"k" * 32), schema.qid).rejection(
        full, value, b"secret-id-7"
    )
    sent = redacted.model_dump_json().encode() + (redacted.key or b"")
    assert b"secret-id" not in sent
    assert len(redacted.model_dump_json()) <= max(len(full.model_dump_json()), 300)
    assert (redacted.topic, redacted.partition, redacted.offset) == ("sr.records", 0, 1)


PROBES = [
    *(
        ("GET", path)
        for path in (
            "/",
            "/admin",
            "/debug",
            "/config",
            "/settings",
            "/env",
            "/key",
            "/metrics/",
            "/health/x",
        )
    ),
    ("POST", "/metrics"),
    ("DELETE", "/health"),
]
"""Paths and methods the endpoint must refuse."""


def test_http_endpoint_has_no_other_route() -> None:
    """``/metrics``, ``/health``, ``/livez`` and ``/readyz`` (GET; aiohttp adds HEAD) and
    nothing else: no admin or debug route exists, so none needs a token; anything else is 404
    (405 for other methods)."""
    metrics = Metrics()

    async def refresh() -> None:
        return None

    async def health() -> tuple[int, dict[str, object]]:
        return 200, {"status": "ok"}

    endpoint = HttpEndpoint(metrics, refresh, health)
    port = free_port()
    routes = {(r.method, r.resource.canonical) for r in endpoint.app.router.routes()}
    served = ("/metrics", "/health", "/livez", "/readyz")
    assert routes == {(m, p) for m in ("GET", "HEAD") for p in served}

    async def probe() -> dict[tuple[str, str], int]:
        server = asyncio.create_task(endpoint.serve("127.0.0.1", port))
        base = f"http://127.0.0.1:{port}"
        try:
            async with ClientSession() as session:
                for _ in range(100):  # until the server listens
                    try:
                        async with session.get(f"{base}/health"):
                            break
                    except OSError:
                        await asyncio.sleep(0.05)
                answers = {}
                for method, path in PROBES:
                    async with session.request(method, base + path) as response:
                        answers[(method, path)] = response.status
                return answers
        finally:
            server.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await server

    answers = asyncio.run(probe())
    assert answers == {probe: 405 if probe[0] != "GET" else 404 for probe in PROBES}


def test_worker_without_a_key_refuses_to_start_before_connecting(
    shared_data: Path, tmp_path: Path
) -> None:
    config = write_config(tmp_path, shared_data)
    with contextlib.ExitStack() as stack:
        # a Redis and a broker address that record any connection attempt
        listeners = [stack.enter_context(socket.create_server(("127.0.0.1", 0))) for _ in "rk"]
        redis_port, kafka_port = (s.getsockname()[1] for s in listeners)
        env = worker_env(
            bootstrap=f"127.0.0.1:{kafka_port}",
            redis_url=f"redis://127.0.0.1:{redis_port}/0",
            archive=tmp_path / "archive",
        )
        del env["SR_HISTORY_KEY"]  # and SR_HISTORY_KEY_FILE is unset: no key at all
        done = subprocess.run(
            worker_argv(config), env=env, cwd=tmp_path, capture_output=True, timeout=60
        )
        for listener in listeners:
            listener.setblocking(False)
            with pytest.raises(BlockingIOError):  # nobody connected
                listener.accept()
    assert done.returncode == 2
    [line] = done.stderr.decode().splitlines()
    assert line.startswith("stream-release worker: error: no pseudonymisation key")
    for setting in ("history.key_file", "SR_HISTORY_KEY_FILE", "SR_HISTORY_KEY "):  # 3 names
        assert setting in line
    assert done.stdout == b""
    assert not (tmp_path / "archive").exists()


def test_worker_with_a_wrong_redis_password_exits_with_one_line(
    secured_redis: str, shared_data: Path, tmp_path: Path
) -> None:
    config = write_config(tmp_path, shared_data)
    url = _worker_user(secured_redis, "sr-access-wrong")
    password = urlsplit(url).password or "?"
    wrong = url.replace(password, "not-" + password)
    with socket.create_server(("127.0.0.1", 0)) as broker:
        env = worker_env(
            bootstrap=f"127.0.0.1:{broker.getsockname()[1]}",
            redis_url=wrong,
            archive=tmp_path / "archive",
        )
        done = subprocess.run(
            worker_argv(config), env=env, cwd=tmp_path, capture_output=True, timeout=60
        )
    assert done.returncode == 2
    [line] = done.stderr.decode().splitlines()
    assert "invalid username-password pair" in line
    assert f"{secured_redis}/0" in line  # says which Redis ...
    assert password not in line and "@" not in line  # ... without its credentials


def test_the_worker_redis_user_reaches_its_prefix_only(secured_redis: str) -> None:
    prefix = f"sr-access-{uuid.uuid4().hex}"
    with redis.Redis.from_url(_worker_user(secured_redis, prefix)) as client:
        assert client.set(f"{prefix}:probe", b"1") and client.get(f"{prefix}:probe") == b"1"
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.get(f"{prefix}-other:probe")  # another namespace
        for command in (("KEYS", "*"), ("FLUSHALL",), ("CONFIG", "GET", "*"), ("ACL", "LIST")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.execute_command(*command)
    host, port = secured_redis.split(":")
    # no password, nothing (and no retries: redis-py retries a refused login)
    anonymous = redis.Redis(host=host, port=int(port), protocol=2, retry=Retry(NoBackoff(), 0))
    with anonymous, pytest.raises(redis.AuthenticationError, match="Authentication required"):
        anonymous.ping()
