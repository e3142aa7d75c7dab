"""Kafka security on a real broker (issue 12, item 3): SASL/SCRAM-SHA-512 and ACLs.

An Apache Kafka node of this module (:class:`support.kafka_broker.KafkaNode` with SCRAM users)
authenticates clients on a SASL_PLAINTEXT listener and authorizes every request
(``StandardAuthorizer``, nothing allowed without an ACL). The service's user is granted only
what the service needs: its five topics, its two consumer groups and its transactional id.

- The worker and ``publish``, logged in as that user, publish a release.
- A wrong password and an unknown user make ``publish`` and the worker exit 2 with one line
  naming the refused login, never showing the password.
- A missing ACL (topics, the consumer groups, the transactional id) is one line naming what to
  grant, and exit 2.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.data import adult_series, write_config
from support.kafka_broker import KafkaNode
from support.kafka_topics import fresh_topics, read_topic
from support.worker import Worker, wait_for, worker_environment

from stream_release.cli.main import main
from stream_release.config import TopicSettings

pytestmark = pytest.mark.integration

SERVICE_USER = "sr-service"
SERVICE_PASSWORD = secrets.token_urlsafe(18)
STRANGER = "sr-stranger"
STRANGER_PASSWORD = secrets.token_urlsafe(18)
EXIT_TIMEOUT_S = 60.0
"""Longest wait for a worker that must refuse to run."""


@pytest.fixture(scope="module")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaNode]:
    """A node with the service's user and a stranger (no ACL at all)."""
    node = KafkaNode(
        tmp_path_factory.mktemp("kafka-sasl"),
        scram_users={SERVICE_USER: SERVICE_PASSWORD, STRANGER: STRANGER_PASSWORD},
    )
    with node.running():
        yield node


def _grant_service(
    node: KafkaNode,
    topics: TopicSettings,
    group: str,
    *,
    groups: bool = True,
    txn: bool = True,
    reads: bool = True,
) -> None:
    """The service user's ACLs: its topics (Read on them unless ``reads`` is false), and unless
    told otherwise its consumer groups and its transactional id (``group + "-releases"``, the
    default)."""
    node.allow(
        SERVICE_USER,
        ["Read", "Write", "Describe", "Create"] if reads else ["Write", "Describe", "Create"],
        [option for name in topics.every for option in ("--topic", name)],
    )
    if groups:
        node.allow(
            SERVICE_USER, ["Read", "Describe"], ["--group", group, "--group", f"{group}-records"]
        )
    if txn:
        node.allow(SERVICE_USER, ["Write", "Describe"], ["--transactional-id", f"{group}-releases"])


def _login(node: KafkaNode, user: str, password: str) -> dict[str, str]:
    assert node.sasl_bootstrap is not None
    return {
        "SR_KAFKA_BOOTSTRAP": node.sasl_bootstrap,
        "SR_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "SR_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "SR_KAFKA_SASL_USERNAME": user,
        "SR_KAFKA_SASL_PASSWORD": password,
    }


def _publish(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    topics: TopicSettings,
    config: Path,
    snap: Path,
) -> tuple[int, str]:
    for name, value in {**env, "SR_KAFKA_TOPICS": topics.model_dump_json()}.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    code = main(["publish", "--config", str(config), "--release", snap.stem, str(snap)])
    return code, capsys.readouterr().err


@pytest.fixture
def series(shared_data: Path, tmp_path: Path) -> tuple[Path, list[Path]]:
    return write_config(tmp_path, shared_data), adult_series(shared_data, tmp_path, 20, rounds=1)


def _worker(
    node: KafkaNode,
    login: dict[str, str],
    config: Path,
    topics: TopicSettings,
    group: str,
    redis_url: str,
    redis_prefix: str,
) -> Worker:
    env = worker_environment(
        node.bootstrap,
        redis_url,
        config.parent / "archive",
        topics,
        redis_prefix,
        extra={**login, "SR_KAFKA_GROUP_ID": group},
    )
    return Worker(config, env, config.parent / f"worker-{uuid.uuid4().hex[:6]}.log")


def _refusal(worker: Worker) -> tuple[int, list[str]]:
    """Run ``worker`` until it exits (it must), its exit code and its log's lines."""
    worker.start()
    try:
        code = worker.exit_code(EXIT_TIMEOUT_S)
    finally:
        worker.kill()
    return code, worker.log.read_text(errors="replace").splitlines()


def test_worker_and_publish_work_as_a_user_confined_to_the_service(
    secured_kafka: KafkaNode,
    series: tuple[Path, list[Path]],
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, snaps = series
    topics, group = fresh_topics(), f"sr-test-{uuid.uuid4().hex}"
    _grant_service(secured_kafka, topics, group)
    login = _login(secured_kafka, SERVICE_USER, SERVICE_PASSWORD)
    worker = _worker(secured_kafka, login, config, topics, group, redis_url, redis_prefix)
    worker.start()
    try:
        assert _publish(monkeypatch, capsys, login, topics, config, snaps[0]) == (0, "")
        manifests = wait_for(
            worker, secured_kafka.bootstrap, topics.manifests, lambda m: len(m) >= 1, "a manifest"
        )
    finally:
        worker.kill()
    assert [json.loads(m.value)["sequence"] for m in manifests] == [1]
    assert read_topic(secured_kafka.bootstrap, topics.releases)
    assert SERVICE_PASSWORD not in worker.log.read_text(errors="replace")

    # the same user is refused any other topic
    other = fresh_topics()
    code, err = _publish(monkeypatch, capsys, login, other, config, snaps[0])
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "TopicAuthorizationFailedError" in err and "grant this client's user" in err


@pytest.mark.parametrize(
    ("user", "password"),
    [(SERVICE_USER, "not-the-password"), ("nobody-knows-me", "whatever-it-is")],
    ids=["wrong-password", "unknown-user"],
)
def test_a_refused_login_is_one_line_and_exit_2(
    secured_kafka: KafkaNode,
    series: tuple[Path, list[Path]],
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    user: str,
    password: str,
) -> None:
    config, snaps = series
    topics, group = fresh_topics(), f"sr-test-{uuid.uuid4().hex}"
    login = _login(secured_kafka, user, password)
    code, err = _publish(monkeypatch, capsys, login, topics, config, snaps[0])
    assert code == 2
    [line] = err.strip().splitlines()
    assert "SaslAuthenticationFailed" in line and "sasl_username and sasl_password" in line
    assert password not in line

    worker = _worker(secured_kafka, login, config, topics, group, redis_url, redis_prefix)
    code, lines = _refusal(worker)
    assert code == 2
    assert len(lines) == 1, lines
    assert "SaslAuthenticationFailed" in lines[0] and password not in lines[0]


@pytest.mark.parametrize(
    ("groups", "txn", "reads", "expected"),
    [
        (False, True, True, "GroupAuthorizationFailedError"),
        ("describe", True, True, "GroupAuthorizationFailedError"),
        (True, False, True, "TransactionalIdAuthorizationFailed"),
        (True, True, False, "TopicAuthorizationFailedError"),
    ],
    ids=["no-group-acl", "group-describe-only", "no-transactional-id-acl", "no-topic-read"],
)
def test_a_worker_missing_an_acl_says_what_to_grant_and_exits_2(
    secured_kafka: KafkaNode,
    series: tuple[Path, list[Path]],
    redis_url: str,
    redis_prefix: str,
    groups: bool | str,
    txn: bool,
    reads: bool,
    expected: str,
) -> None:
    config, _ = series
    topics, group = fresh_topics(), f"sr-test-{uuid.uuid4().hex}"
    _grant_service(secured_kafka, topics, group, groups=groups is True, txn=txn, reads=reads)
    if groups == "describe":  # finds the groups, may not join them
        secured_kafka.allow(
            SERVICE_USER, ["Describe"], ["--group", group, "--group", f"{group}-records"]
        )
    login = _login(secured_kafka, SERVICE_USER, SERVICE_PASSWORD)
    worker = _worker(secured_kafka, login, config, topics, group, redis_url, redis_prefix)
    code, lines = _refusal(worker)
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert expected in lines[0] and "grant this client's user" in lines[0]
