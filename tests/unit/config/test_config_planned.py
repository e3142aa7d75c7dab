"""``[privacy] planned``: a horizon on shards carries the digest ``stream-release plan`` prints
for the settings it found feasible on every shard (``stream_release.config._planned``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stream_release.config import Settings, check_planned, load_settings, plan_digest
from stream_release.errors import ConfigError

BASE = {"k_prime": 8, "horizon": 8, "protected": ["8"]}


def settings(tmp_path: Path, hierarchy: str = "", **sections: Any) -> Settings:
    path = tmp_path / "c.toml"
    path.write_text(
        '[schema]\nid = "nr"\nsensitive = "occupation"\nqid = ["educ", "exper"]\n'
        + (f'[schema.hierarchies]\neduc = "{hierarchy}"\n' if hierarchy else "")
    )
    privacy = {**BASE, **sections.pop("privacy", {})}
    kafka = {"partitions": 6, **sections.pop("kafka", {})}
    return load_settings(path, privacy=privacy, kafka=kafka, **sections)


def digest(s: Settings, horizon: int | None = None) -> str:
    planned_for = horizon if horizon is not None else s.privacy.horizon
    assert planned_for is not None
    return plan_digest(s.privacy, s.grouping, s.schema, s.kafka.partitions, planned_for)


def check(s: Settings) -> None:
    check_planned(s.privacy, s.grouping, s.schema, s.kafka.partitions)


def test_the_digest_of_the_settings_lets_a_horizon_on_shards_start(tmp_path: Path) -> None:
    planned = digest(settings(tmp_path))
    assert planned.startswith("plan1-") and len(planned) == len("plan1-") + 16
    check(settings(tmp_path, privacy={"planned": planned}))


@pytest.mark.parametrize(
    "change",
    [
        {"privacy": {"protected": ["3", "8"]}},
        {"privacy": {"l": 3}},
        {"privacy": {"k_prime": 9}},
        {"privacy": {"horizon": 7}},
        {"privacy": {"min_group_size": 3}},
        {"grouping": {"max_group_factor": 3.0}},
        {"kafka": {"partitions": 4}},
        {"schema": {"id": "nr", "sensitive": "occupation", "qid": ["educ"]}},
        {"privacy": {"strategy": "geometric", "alpha": 5.0, "k_prime": 20, "horizon": 3}},
    ],
)
def test_a_digest_printed_for_other_settings_is_refused(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    planned = digest(settings(tmp_path))
    changed = settings(tmp_path, **change)
    assert digest(changed) != planned
    stale = settings(
        tmp_path, **{**change, "privacy": {**change.get("privacy", {}), "planned": planned}}
    )
    with pytest.raises(ConfigError, match="printed for other settings") as caught:
        check(stale)
    assert "stream-release plan --config" in str(caught.value)


def test_paths_keys_and_addresses_are_not_part_of_the_digest(tmp_path: Path) -> None:
    planned = digest(settings(tmp_path))
    elsewhere = settings(
        tmp_path,
        history={"key": "ab" * 32, "prefix": "other"},
        redis={"url": "redis://elsewhere:6380/1"},
        service={"archive": str(tmp_path / "archive")},
    )
    assert digest(elsewhere) == planned
    # the parameter of a strategy that does not use it is not part of it either
    assert digest(settings(tmp_path, privacy={"alpha": 3.0})) == planned


@pytest.mark.parametrize("planned", [None, ""])
def test_a_horizon_on_shards_without_a_digest_is_refused_with_the_command(
    tmp_path: Path, planned: str | None
) -> None:
    with pytest.raises(ConfigError, match=r"privacy\.planned is not set") as caught:
        check(settings(tmp_path, privacy={"planned": planned}))
    message = str(caught.value)
    assert "kafka.partitions = 6" in message and "--horizon 8" in message


@pytest.mark.parametrize("change", [{"kafka": {"partitions": 1}}, {"privacy": {"horizon": None}}])
def test_one_shard_or_no_horizon_needs_no_digest(tmp_path: Path, change: dict[str, Any]) -> None:
    check(settings(tmp_path, **change))


def test_the_digest_covers_a_hierarchy_s_contents_not_its_path(tmp_path: Path) -> None:
    """A QID's generalization shapes the groups (and the sensitive hierarchy decides how a
    protected value is spelled): another file's contents is another plan; the same contents
    elsewhere (plan on a laptop, the worker in a container) is the same."""
    first, moved, other = tmp_path / "h.csv", tmp_path / "moved.csv", tmp_path / "other.csv"
    first.write_text("10;10-19;*\n11;10-19;*\n")
    moved.write_text(first.read_text())
    other.write_text("10;10-14;*\n11;10-14;*\n")
    planned = digest(settings(tmp_path, hierarchy=first.name))
    assert digest(settings(tmp_path, hierarchy=moved.name)) == planned
    assert digest(settings(tmp_path, hierarchy=other.name)) != planned
    assert digest(settings(tmp_path)) != planned


def test_an_unreadable_hierarchy_is_named(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_text("10;10-19;*\n")
    loaded = settings(tmp_path, hierarchy=path.name)
    path.unlink()
    with pytest.raises(ConfigError, match=r"schema\.hierarchies\.educ = .*h\.csv"):
        check(loaded)
