"""Every registered ``[mechanism] kind`` runs offline and in the worker, and passes the audit.

One configuration table per kind (:data:`SECTIONS`); a kind registered in
:data:`stream_release.mechanisms.MECHANISMS` without one here fails
:func:`test_every_registered_kind_has_a_section_here`, so a new registration is exercised end to
end the day it lands. The mode's own properties are tested in its unit tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import adult_series, read_topic, schema_errors, write_config
from test_worker import (
    Worker,
    _offline,
    _publish,
    _stop,
    _wait_for,
    set_publish_environment,
    worker_environment,
)

from stream_release.audit import audit_directory
from stream_release.cli.main import main
from stream_release.config import TopicSettings, load_settings
from stream_release.mechanisms import MECHANISMS, make_mechanism, section_name

OCCUPATIONS = [
    "Adm-clerical",
    "Armed-Forces",
    "Craft-repair",
    "Exec-managerial",
    "Farming-fishing",
    "Handlers-cleaners",
    "Machine-op-inspct",
    "Other-service",
    "Priv-house-serv",
    "Prof-specialty",
    "Protective-serv",
    "Sales",
    "Tech-support",
    "Transport-moving",
]

SECTIONS: dict[str, str] = {
    "sampled-k-anonymity": (
        "k = 10\nbeta = 0.3\nepsilon = 1.5\n"
        'levels = {age = 3, sex = 0, race = 1, "marital-status" = 2, education = 3, '
        '"native-country" = 2, workclass = 2}\n'
    ),
    "reconstruction-private-rr": (
        "p = 0.5\nepsilon = 0.5\ndelta = 0.3\n"
        'domain_hierarchy = "adult_hierarchy_occupation.csv"\n'  # relative to the config file
    ),
    "dp-sanitised": (
        f"epsilon = 4.0\nepsilon_budget = 12.0\nsensitive_domain = {json.dumps(OCCUPATIONS)}\n"
    ),
}
"""The ``[mechanism.<kind>]`` table of each kind on the Adult configuration."""


def kind_config(directory: Path, data: Path, kind: str) -> Path:
    """The Adult configuration with ``kind``'s table, in ``directory`` beside a copy of the
    occupation hierarchy (for relative paths in a table)."""
    occupation = "adult_hierarchy_occupation.csv"
    (directory / occupation).write_bytes((data / occupation).read_bytes())
    path = write_config(directory, data)
    text = path.read_text(encoding="utf-8")
    text += f'[mechanism]\nkind = "{kind}"\n[mechanism.{section_name(kind)}]\n{SECTIONS[kind]}'
    path.write_text(text, encoding="utf-8")
    return path


def test_every_registered_kind_has_a_section_here() -> None:
    assert sorted(SECTIONS) == sorted(MECHANISMS)


@pytest.fixture
def snapshots(shared_data: Path, tmp_path: Path) -> list[Path]:
    return adult_series(shared_data, tmp_path, 2)


@pytest.mark.parametrize("kind", sorted(MECHANISMS))
def test_each_kind_publishes_offline_and_passes_the_audit(
    kind: str, shared_data: Path, tmp_path: Path, snapshots: list[Path]
) -> None:
    config = kind_config(tmp_path, shared_data, kind)
    settings = load_settings(config)
    assert type(settings.mechanism.section) is MECHANISMS[kind].settings
    assert make_mechanism(settings) is not None
    out = tmp_path / "out"
    assert (
        main(["anonymize", "--config", str(config), "--out", str(out), *map(str, snapshots)]) == 0
    )
    for sequence in (1, 2):
        manifest = json.loads((out / f"manifest-{sequence:04d}.json").read_text())
        assert manifest["mechanism"]["kind"] == kind
        assert "breach" not in manifest
        # every output of every kind is valid under the one schema set of deploy/schemas
        assert schema_errors("manifest", [manifest]) == []
        lines = (out / f"release-{sequence:04d}.jsonl").read_bytes().splitlines()
        assert lines and schema_errors("group", lines) == []
    report = audit_directory(out)
    assert report.ok, report.table()
    assert {r.kind for r in report.releases} == {kind}


@pytest.fixture
def make_worker(
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[Path], Worker]]:
    """Builds a (not yet started) worker for a configuration, on this test's topics and Redis
    prefix; every worker built is killed at the end."""
    set_publish_environment(monkeypatch, kafka_bootstrap, kafka_topics)
    env = worker_environment(
        kafka_bootstrap, redis_url, tmp_path / "archive", kafka_topics, redis_prefix
    )
    built: list[Worker] = []

    def make(config: Path) -> Worker:
        built.append(Worker(config, env, tmp_path / "worker.log"))
        return built[-1]

    try:
        yield make
    finally:
        for worker in built:
            worker.kill()


@pytest.mark.parametrize("kind", sorted(MECHANISMS))
def test_each_kind_runs_in_the_worker_as_offline(
    kind: str,
    make_worker: Callable[[Path], Worker],
    shared_data: Path,
    snapshots: list[Path],
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
) -> None:
    config = kind_config(tmp_path, shared_data, kind)
    offline = _offline(config, snapshots, tmp_path / "offline")
    worker = make_worker(config)
    worker.start()
    for snap in snapshots:
        _publish(config, snap)
    manifests = _wait_for(
        worker, kafka_bootstrap, kafka_topics.manifests, lambda m: len(m) >= 2, "two manifests"
    )
    assert [json.loads(m.value)["mechanism"]["kind"] for m in manifests] == [kind, kind]
    groups = read_topic(kafka_bootstrap, kafka_topics.releases)
    assert [[g.value for g in groups if g.key == s.stem.encode()] for s in snapshots] == offline
    assert schema_errors("manifest", [m.value for m in manifests]) == []
    assert schema_errors("group", [g.value for g in groups]) == []
    report = audit_directory(tmp_path / "archive")
    assert report.ok, report.table()
    assert _stop(worker) == 0
