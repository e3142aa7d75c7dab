"""Settings from the environment: ``SR_<SECTION>_<KEY>``, and ``__`` into nested tables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stream_release.config import load_settings
from stream_release.errors import ConfigError

CONFIG = '[schema]\nqid = ["age"]\n[kafka.topics]\nrecords = "from-file.records"\n'


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(CONFIG)
    return path


def test_a_section_key_and_a_nested_table_key(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SR_KAFKA_BOOTSTRAP", "broker:9093")
    monkeypatch.setenv("SR_PRIVACY_K_PRIME", "5")
    monkeypatch.setenv("SR_KAFKA_TOPICS__CONTROL", "ward7.control")
    settings = load_settings(config)
    assert settings.kafka.bootstrap == "broker:9093"
    assert settings.privacy.k_prime == 5
    # the nested key overrides one key of the file's table; the others stay
    assert settings.kafka.topics.control == "ward7.control"
    assert settings.kafka.topics.records == "from-file.records"


def test_a_whole_table_as_json_and_one_of_its_keys(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SR_KAFKA_TOPICS", '{"records": "r9", "control": "c9"}')
    monkeypatch.setenv("SR_KAFKA_TOPICS__CONTROL", "c10")
    topics = load_settings(config).kafka.topics
    assert (topics.records, topics.control) == ("r9", "c10")


def test_a_mechanism_table_key_and_a_json_list(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SR_MECHANISM_KIND", "dp-sanitised")
    monkeypatch.setenv("SR_MECHANISM_DP_SANITISED__EPSILON", "2")
    monkeypatch.setenv("SR_MECHANISM_DP_SANITISED__EPSILON_BUDGET", "8")
    monkeypatch.setenv("SR_MECHANISM_DP_SANITISED__SENSITIVE_DOMAIN", '["flu", "cold"]')
    monkeypatch.setenv("SR_MECHANISM_DP_SANITISED__BOUNDS__AGE", "[0, 120]")  # two tables deep
    section = load_settings(config).mechanism.section
    assert dict(section.bounds)["age"] == (0, 120)  # type: ignore[union-attr]
    assert (section.epsilon, section.epsilon_budget) == (2.0, 8.0)  # type: ignore[union-attr]
    assert tuple(section.sensitive_domain) == ("flu", "cold")  # type: ignore[union-attr]


def test_the_schema_section_reads_its_prefixed_variables_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCHEMA_QID", '["not-this"]')
    monkeypatch.setenv("SCHEMA", '{"qid": ["nor-this"]}')
    monkeypatch.setenv("SR_SCHEMA_QID", '["age", "zip"]')
    assert load_settings().schema.qid == ("age", "zip")


def test_a_nested_key_with_one_underscore_names_the_variable_to_use(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SR_KAFKA_TOPICS_CONTROL", "ward7.control")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert str(info.value) == (
        "config kafka.topics_control: [kafka] has no key 'topics_control'; for 'control' of "
        "[kafka.topics] set SR_KAFKA_TOPICS__CONTROL (a double underscore before a nested "
        "table's key)"
    )


def test_the_more_specific_variable_wins_whatever_the_order(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for first, second in (
        (("SR_KAFKA_TOPICS__CONTROL", "c10"), ("SR_KAFKA_TOPICS", '{"control": "c9"}')),
        (("SR_KAFKA_TOPICS", '{"control": "c9"}'), ("SR_KAFKA_TOPICS__CONTROL", "c10")),
    ):
        for name in ("SR_KAFKA_TOPICS", "SR_KAFKA_TOPICS__CONTROL"):
            monkeypatch.delenv(name, raising=False)
        for name, value in (first, second):
            monkeypatch.setenv(name, value)
        assert list(os.environ).index(first[0]) < list(os.environ).index(second[0])
        assert load_settings(config).kafka.topics.control == "c10"


def test_a_nested_key_under_a_value_that_is_not_a_table_is_refused(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SR_KAFKA_BOOTSTRAP", "broker:9093")
    monkeypatch.setenv("SR_KAFKA_BOOTSTRAP__PORT", "9094")
    with pytest.raises(ConfigError, match="bootstrap__port"):
        load_settings(config)
