"""Every registered ``[mechanism] kind`` runs offline and in the worker, and passes the audit.

One configuration table per kind (:data:`support.mechanisms.SECTIONS`); a kind registered in
:data:`stream_release.mechanisms.MECHANISMS` without one here fails
:func:`test_every_registered_kind_has_a_section_here`, so a new registration is exercised end to
end the day it lands. The mode's own properties are tested in its unit tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.data import adult_series
from support.kafka_topics import read_topic
from support.mechanisms import SECTIONS, kind_config
from support.schemas import schema_errors
from support.worker import MakeWorker, offline_releases, publish_series

from stream_release.audit import audit_directory
from stream_release.cli.main import main
from stream_release.config import TopicSettings, load_settings
from stream_release.config.mechanisms import SECTIONS as TABLE_MODELS
from stream_release.history.pseudonym import Pseudonymizer
from stream_release.mechanisms import MECHANISMS, make_mechanism


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
    assert type(settings.mechanism.section) is TABLE_MODELS[kind]
    assert make_mechanism(settings, Pseudonymizer(b"a test key, 32 bytes long.......")).kind == kind
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


@pytest.mark.parametrize("kind", sorted(MECHANISMS))
def test_each_kind_runs_in_the_worker_as_offline(
    kind: str,
    make_worker: MakeWorker,
    shared_data: Path,
    snapshots: list[Path],
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
) -> None:
    config = kind_config(tmp_path, shared_data, kind)
    offline = offline_releases(config, snapshots, tmp_path / "offline")
    worker = make_worker(config)
    manifests = publish_series(worker, config, snapshots, kafka_bootstrap, kafka_topics)
    assert [json.loads(m.value)["mechanism"]["kind"] for m in manifests] == [kind, kind]
    groups = read_topic(kafka_bootstrap, kafka_topics.releases)
    assert [[g.value for g in groups if g.key == s.stem.encode()] for s in snapshots] == offline
    assert schema_errors("manifest", [m.value for m in manifests]) == []
    assert schema_errors("group", [g.value for g in groups]) == []
    report = audit_directory(tmp_path / "archive")
    assert report.ok, report.table()
    assert worker.stop() == 0
