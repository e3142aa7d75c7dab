"""The Apache Kafka broker of the integration tests: KRaft, one node (broker and controller),
its log on disk, on free ports.

Maven resolves the broker's jars (``tests/kafka/pom.xml``, the version docker-compose.yml
runs) into :data:`JARS` once per machine; ``.ci/run`` does it before the tests. The node is
formatted (``kafka.tools.StorageTool``) and run (``kafka.Kafka``) with this machine's Java.
Its log directory survives a restart of the process, so a test can stop the broker and start
it again on the same data (:meth:`KafkaNode.running` entered again).

A node given ``scram_users`` also listens for SASL_PLAINTEXT clients logging in with
SCRAM-SHA-512 (:attr:`KafkaNode.sasl_bootstrap`), with those users created at format time, and
authorizes every request with the KRaft ``StandardAuthorizer``: a user may do only what an ACL
allows (:meth:`KafkaNode.allow`). Its PLAINTEXT listener stays open to the tests' own admin
connections, whose anonymous principal is a super user.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from stream_release.devtools.local_services import (
    ManagedProcess,
    free_port,
    kafka_answers,
    managed_process,
)
from stream_release.errors import StreamReleaseError

POM = Path(__file__).resolve().parents[1] / "kafka" / "pom.xml"
JARS = Path(
    os.environ.get("SR_TEST_KAFKA_JARS", Path.home() / ".cache" / "stream-release" / "kafka")
)
"""Where the jars of each Kafka version go (``<JARS>/<version>/``)."""
START_TIMEOUT_S = 90.0
"""Seconds a starting broker has to answer a metadata request (a JVM on a loaded machine)."""
MAVEN_TIMEOUT_S = 900.0

_LOG4J = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaServer=INFO
log4j.logger.kafka.server.BrokerServer=INFO
"""


def kafka_version() -> str:
    """The ``kafka.version`` property of :data:`POM`."""
    namespace = {"m": "http://maven.apache.org/POM/4.0.0"}
    found = ElementTree.parse(POM).getroot().find("m:properties/m:kafka.version", namespace)
    if found is None or not found.text:
        raise StreamReleaseError(f"{POM}: no <kafka.version> property")
    return found.text.strip()


def kafka_jars() -> Path:
    """The directory of the broker's jars, resolved by Maven the first time."""
    target = JARS / kafka_version()
    done = target / ".resolved"
    if done.exists():
        return target
    maven = shutil.which("mvn")
    if maven is None:
        raise StreamReleaseError(
            "mvn is not on PATH: install Maven (Debian package maven) to resolve the Kafka "
            "broker's jars, or set SR_TEST_KAFKA to a running broker"
        )
    argv = [
        maven, "--batch-mode", "--quiet", "--file", str(POM),
        "dependency:copy-dependencies", f"-DoutputDirectory={target}",
        "-DincludeScope=runtime",
    ]  # fmt: skip
    try:
        subprocess.run(argv, check=True, capture_output=True, timeout=MAVEN_TIMEOUT_S)
    except subprocess.CalledProcessError as exc:
        output = (exc.stdout + exc.stderr).decode(errors="replace")[-3000:]
        raise StreamReleaseError(f"Maven could not resolve {POM}:\n{output}") from exc
    done.touch()
    return target


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = Path(home) / "bin" / "java" if home else shutil.which("java")
    if java is None:
        raise StreamReleaseError("java is not on PATH: the Kafka broker needs Java 17")
    return str(java)


class KafkaNode:
    """One KRaft node in ``directory``: ``server.properties``, ``log4j.properties``, the
    data under ``data/``, its output in ``kafka.log``."""

    def __init__(self, directory: Path, *, scram_users: Mapping[str, str] | None = None) -> None:
        self.directory = directory
        self.port, self.controller_port = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.scram_users = dict(scram_users or {})
        self.sasl_port = free_port() if self.scram_users else None
        self.sasl_bootstrap = f"127.0.0.1:{self.sasl_port}" if self.sasl_port else None
        self.jars = kafka_jars()
        self.runs = 0
        directory.mkdir(parents=True, exist_ok=True)
        self.config = directory / "server.properties"
        self.config.write_text(self._properties())
        (directory / "log4j.properties").write_text(_LOG4J)
        self._format()

    def _properties(self) -> str:
        data = self.directory / "data"
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data),
            "num.partitions": "1",
            # one node: every internal topic has one replica (as docker-compose.yml)
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "group.initial.rebalance.delay.ms": "0",
            # the tests' workers use session timeouts of a few seconds (LOCAL_WORKER_SETTINGS)
            "group.min.session.timeout.ms": "500",
        }
        if self.sasl_port is not None:
            settings["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
            settings["advertised.listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
            settings["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            settings |= {
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                ),
                "authorizer.class.name": (
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                ),
                # the controller link and the tests' admin connections (PLAINTEXT, anonymous)
                "super.users": "User:ANONYMOUS",
                "allow.everyone.if.no.acl.found": "false",
            }
        return "".join(f"{k}={v}\n" for k, v in settings.items())

    def _java_argv(self, main: str, *args: str) -> list[str]:
        return [
            _java(), "-Xms256m", "-Xmx768m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{self.directory / 'log4j.properties'}",
            "-cp", f"{self.jars}/*", main, *args,
        ]  # fmt: skip

    def _format(self) -> None:
        cluster = "-"
        while cluster.startswith("-"):  # as Kafka's own ids: a leading "-" reads as an option
            cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        argv = self._java_argv(
            "kafka.tools.StorageTool", "format", "--cluster-id", cluster,
            "--config", str(self.config), "--ignore-formatted",
            *(
                option
                for name, password in self.scram_users.items()
                for option in ("--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]")
            ),
        )  # fmt: skip
        done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")[-3000:]
            raise StreamReleaseError(f"kafka-storage format failed:\n{output}")

    def allow(self, user: str, operations: Sequence[str], resource: Sequence[str]) -> None:
        """Add ACLs allowing ``user`` the ``operations`` (``Read``, ``Write``, ``Describe``,
        ``Create``...) on ``resource``, given as ``kafka-acls`` options (``["--topic", "t"]``,
        ``["--group", "g"]``, ``["--transactional-id", "x"]``, and
        ``["--resource-pattern-type", "prefixed"]`` for prefixes). The node must be running."""
        argv = self._java_argv(
            "kafka.admin.AclCommand", "--bootstrap-server", self.bootstrap, "--add",
            "--allow-principal", f"User:{user}",
            *(option for operation in operations for option in ("--operation", operation)),
            *resource,
        )  # fmt: skip
        done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")[-3000:]
            raise StreamReleaseError(f"kafka-acls failed:\n{output}")

    @contextmanager
    def running(self) -> Iterator[ManagedProcess]:
        """The broker started on its data, answering; stopped (SIGTERM: a clean shutdown)
        when the block exits. Each run logs to ``kafka-<n>.log``."""
        argv = self._java_argv("kafka.Kafka", str(self.config))
        self.runs += 1
        log = self.directory / f"kafka-{self.runs}.log"
        with managed_process("kafka", argv, log, self.directory) as process:
            process.wait_until(lambda: kafka_answers(self.bootstrap), timeout=START_TIMEOUT_S)
            yield process
