"""KafkaSettings -> aiokafka keyword arguments, and the errors that wrap aiokafka's."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
from aiokafka import errors as aiokafka_errors

from stream_release.config import KafkaSettings, load_settings
from stream_release.errors import ConfigError, KafkaError
from stream_release.stream import kafka
from stream_release.stream.kafka import client_options, kafka_error, producer_options

PASSWORD = "hunter2-s3cret"


def _settings(**kafka_values: Any) -> KafkaSettings:
    return load_settings(schema={"qid": ["age"]}, kafka=kafka_values).kafka


@pytest.fixture(autouse=True)
def _no_kafka_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SR_KAFKA_* variables of the shell must not leak into these mappings."""
    import os

    for name in [n for n in os.environ if n.startswith("SR_KAFKA_")]:
        monkeypatch.delenv(name)


def test_plaintext_defaults() -> None:
    options = client_options(_settings(bootstrap="broker-1:9092,broker-2:9092", client_id="c1"))
    assert options == {
        "bootstrap_servers": "broker-1:9092,broker-2:9092",
        "client_id": "c1",
        "request_timeout_ms": 5000,
        "security_protocol": "PLAINTEXT",
    }


def test_producer_options_follow_idempotent_and_max_message_bytes() -> None:
    on = producer_options(_settings(max_message_bytes=2_000_000))
    assert on["enable_idempotence"] is True
    assert on["acks"] == "all"
    assert on["max_request_size"] == 2_000_000
    off = producer_options(_settings(idempotent=False, transactions=False))
    assert off["enable_idempotence"] is False
    assert off["acks"] == "all"


def test_sasl_ssl_passes_the_secret_and_never_shows_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[dict[str, Any]] = []
    context = ssl.create_default_context()

    def fake_create_ssl_context(**kwargs: Any) -> ssl.SSLContext:
        calls.append(kwargs)
        return context

    monkeypatch.setattr(kafka, "create_ssl_context", fake_create_ssl_context)
    settings = load_settings(
        schema={"qid": ["age"]},
        kafka={
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "alice",
            "sasl_password": PASSWORD,
            "ssl_cafile": "ca.pem",
            "ssl_certfile": str(tmp_path / "client.pem"),
        },
    )
    options = client_options(settings.kafka)
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "alice"
    assert options["sasl_plain_password"] == PASSWORD
    assert options["ssl_context"] is context
    # relative paths are resolved (here against the working directory: no config file)
    assert calls == [
        {
            "cafile": Path.cwd() / "ca.pem",
            "certfile": tmp_path / "client.pem",
            "keyfile": None,
        }
    ]
    assert PASSWORD not in repr(settings)
    assert PASSWORD not in str(settings)
    assert PASSWORD not in repr(settings.kafka)
    assert PASSWORD not in settings.model_dump_json()


def test_sasl_plaintext_defaults_to_plain_and_has_no_ssl_context() -> None:
    options = client_options(
        _settings(security_protocol="SASL_PLAINTEXT", sasl_username="u", sasl_password="p")
    )
    assert options["sasl_mechanism"] == "PLAIN"
    assert options["sasl_plain_password"] == "p"
    assert "ssl_context" not in options


def test_ssl_without_files_uses_the_system_cas() -> None:
    options = client_options(_settings(security_protocol="SSL"))
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    assert "sasl_plain_password" not in options


def test_a_missing_ssl_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigError, match="ssl_cafile") as info:
        client_options(_settings(security_protocol="SSL", ssl_cafile=str(missing)))
    assert str(missing) in str(info.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"security_protocol": "SASL_SSL", "sasl_username": "u"}, "needs sasl_username"),
        ({"sasl_password": PASSWORD}, "sasl_password set but security_protocol"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_username": "u", "sasl_password": "p",
          "ssl_cafile": "ca.pem"}, "ssl_cafile set but"),
    ],
)  # fmt: skip
def test_inconsistent_security_settings_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        _settings(**values)
    assert PASSWORD not in str(info.value)


def test_kafka_error_names_the_address_and_the_fix() -> None:
    settings = _settings(bootstrap="10.0.0.9:9093")
    error = kafka_error(
        settings,
        "connect",
        aiokafka_errors.KafkaConnectionError("Unable to bootstrap from [('10.0.0.9', 9093)]"),
    )
    assert isinstance(error, KafkaError)
    text = str(error)
    assert "10.0.0.9:9093" in text and "SR_KAFKA_BOOTSTRAP" in text
    assert "\n" not in text
    idempotent = str(kafka_error(settings, "connect", aiokafka_errors.UnknownError()))
    assert "idempotent = false" in idempotent
    plain_settings = _settings(idempotent=False, transactions=False)
    plain = str(kafka_error(plain_settings, "connect", aiokafka_errors.UnknownError()))
    assert "idempotent" not in plain
    auth = str(kafka_error(settings, "connect", aiokafka_errors.SaslAuthenticationFailed()))
    assert "sasl_password" in auth
    # a SCRAM exchange the broker ends without its signature (aiokafka: KeyError 'v')
    scram = str(kafka_error(settings, "connect", KeyError("v")))
    assert "unknown user?" in scram and "sasl_password" in scram
    group = str(kafka_error(settings, "join", aiokafka_errors.GroupAuthorizationFailedError()))
    assert "'stream-release' and 'stream-release-records'" in group
    txn = str(kafka_error(settings, "init", aiokafka_errors.TransactionalIdAuthorizationFailed()))
    assert "'stream-release-releases'" in txn and "Write and Describe" in txn


def test_transactions_need_idempotence_and_take_a_stable_id() -> None:
    assert _settings().release_transactional_id == "stream-release-releases"
    assert _settings(group_id="ward-7").release_transactional_id == "ward-7-releases"
    assert _settings(transactional_id="w-1").release_transactional_id == "w-1"
    assert _settings(idempotent=False, transactions=False).release_transactional_id is None
    with pytest.raises(ConfigError, match=r"kafka\.transactions = true needs kafka\.idempotent"):
        _settings(idempotent=False)
