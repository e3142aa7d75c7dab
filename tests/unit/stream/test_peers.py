"""The configuration tag a worker shows its consumer group (:mod:`stream_release.stream.peers`)."""

from __future__ import annotations

from pathlib import Path

from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from stream_release.config import Settings
from stream_release.stream.peers import TAG_PREFIX, configuration_tag, member_tag, tagged_assignor

KEY = "peers-test-key-0123456789abcdef0123"


def _settings(tmp_path: Path, **sections: dict[str, object]) -> Settings:
    registry = tmp_path / "register.csv"
    if not registry.exists():
        registry.write_text("id,age\np-1,30\n")
    base: dict[str, dict[str, object]] = {
        "schema": {"qid": ["age"]},
        "history": {"key": KEY},
        "virtual": {"registry": registry},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return Settings(**base)


def test_the_tag_follows_what_shapes_a_release_and_the_key(tmp_path: Path) -> None:
    tag = configuration_tag(_settings(tmp_path))
    assert tag.startswith(TAG_PREFIX) and len(tag) == len(TAG_PREFIX) + 32
    assert configuration_tag(_settings(tmp_path)) == tag  # deterministic
    # settings that do not shape a release: same tag
    assert configuration_tag(_settings(tmp_path, service={"metrics_port": 1})) == tag
    assert configuration_tag(_settings(tmp_path, kafka={"client_id": "other"})) == tag
    # what does: another tag
    assert configuration_tag(_settings(tmp_path, privacy={"l": 3})) != tag
    assert configuration_tag(_settings(tmp_path, kafka={"topics": {"records": "r"}})) != tag
    assert configuration_tag(_settings(tmp_path, redis={"url": "redis://h:1/0"})) != tag
    assert configuration_tag(_settings(tmp_path, history={"key": KEY[::-1]})) != tag
    # a file counts by its content, not its name
    (tmp_path / "register.csv").write_text("id,age\np-1,31\n")
    assert configuration_tag(_settings(tmp_path)) != tag


def test_a_member_shows_its_tag_and_other_consumers_none(tmp_path: Path) -> None:
    tag = configuration_tag(_settings(tmp_path))
    metadata = tagged_assignor(tag).metadata(["sr.records"])
    assert metadata.subscription == ["sr.records"] and metadata.user_data == tag
    assert member_tag(metadata.encode()) == tag
    assert member_tag(ConsumerProtocolMemberMetadata(0, ["t"], b"").encode()) is None
    assert member_tag(ConsumerProtocolMemberMetadata(0, ["t"], b"theirs").encode()) is None
    assert member_tag(b"\x00") is None  # not the consumer protocol
