"""Mode ``sampled-k-anonymity`` end to end on Adult: offline ``anonymize`` and the worker.

Both publish through :class:`~stream_release.pipeline.publisher.Publisher`, so the worker's
releases equal
offline's byte for byte (same key, same snapshots); the audit recomputes delta and the series
total from the files; a series refuses a configuration of another kind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.data import adult_series, write_config
from support.kafka_topics import read_topic
from support.worker import (
    MakeWorker,
    Worker,
    manifest_sequences,
    offline_releases,
    publish_series,
)

from stream_release.audit import audit_directory
from stream_release.cli.main import main
from stream_release.config import TopicSettings, load_settings
from stream_release.core.privacy.sampling_dp_calculators import calc_delta
from stream_release.pipeline.publisher import Publisher

K, BETA, EPSILON = 10, 0.3, 1.5
LEVELS = (
    '{age = 3, sex = 0, race = 1, "marital-status" = 2, education = 3, '
    '"native-country" = 2, workclass = 2}'
)
SECTION = (
    '[mechanism]\nkind = "sampled-k-anonymity"\n[mechanism.sampled_k_anonymity]\n'
    f"k = {K}\nbeta = {BETA}\nepsilon = {EPSILON}\nlevels = {LEVELS}\n"
)


def sampled_config(directory: Path, data: Path, section: str = SECTION) -> Path:
    """The Adult configuration of :func:`support.data.write_config` in sampled-k-anonymity mode."""
    path = write_config(directory, data)
    path.write_text(path.read_text(encoding="utf-8") + section, encoding="utf-8")
    return path


@pytest.fixture
def snapshots(shared_data: Path, tmp_path: Path) -> list[Path]:
    """Two releases of about 15,000 Adult rows (enough for cells of k sampled rows)."""
    return adult_series(shared_data, tmp_path, 2)


def test_anonymize_publishes_two_sampled_releases_that_pass_the_audit(
    shared_data: Path, tmp_path: Path, snapshots: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config = sampled_config(tmp_path, shared_data)
    out = tmp_path / "out"
    args = ["anonymize", "--config", str(config), "--out", str(out)]
    assert main([*args, *map(str, snapshots)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed] == ["release    1 t01", "release    2 t02"]
    assert "sampled-k-anonymity: epsilon 1.5" in printed[1]

    figures = calc_delta(K, BETA, EPSILON)
    manifests = [json.loads((out / f"manifest-{s:04d}.json").read_text()) for s in (1, 2)]
    for sequence, manifest in enumerate(manifests, start=1):
        block = manifest["mechanism"]
        assert block["kind"] == "sampled-k-anonymity"
        assert block["delta"] == figures["delta"]
        assert block["log10_delta"] == figures["log10_delta"]
        assert block["series"]["releases"] == sequence
        assert block["series"]["epsilon"] == sequence * EPSILON
        assert block["series"]["delta"] == pytest.approx(sequence * figures["delta"], rel=1e-12)
        # only functions of the output: nothing about the input's size, hash or timing
        for key in ("records_in", "suppressed", "elapsed_s", "breach", "l", "strategy"):
            assert key not in manifest
        assert "source" not in manifest  # nor the path of the snapshot
        assert manifest["groups"] > 0
        text = (out / f"release-{sequence:04d}.jsonl").read_text()
        lines = [json.loads(x) for x in text.splitlines()]
        assert manifest["published"] == sum(line["size"] for line in lines) > 0
        assert all(c >= K for line in lines for c in line["sensitive"].values())
        assert {line["qid"]["race"] for line in lines} == {"*"}
    report = audit_directory(out)
    assert report.ok, report.table()
    assert [r.kind for r in report.releases] == ["sampled-k-anonymity"] * 2
    assert main(["audit", str(out)]) == 0
    assert "sampled-k-anonymity: epsilon 1.5" in capsys.readouterr().out

    # the series goes on: release 3 composes three fresh samples
    assert main([*args, str(snapshots[0])]) == 0
    third = json.loads((out / "manifest-0003.json").read_text())
    assert third["mechanism"]["series"]["epsilon"] == 3 * EPSILON
    assert (out / "release-0003.jsonl").read_bytes() != (out / "release-0001.jsonl").read_bytes()
    assert audit_directory(out).ok

    # a tampered count fails the audit (exit 1)
    lines = (out / "release-0002.jsonl").read_text().splitlines()
    line = json.loads(lines[0])
    value = next(iter(line["sensitive"]))
    line["size"] -= line["sensitive"][value] - 1
    line["sensitive"][value] = 1
    lines[0] = json.dumps(line)
    (out / "release-0002.jsonl").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["audit", str(out)]) == 1
    assert f"published 1 times, below k = {K}" in capsys.readouterr().out


def test_a_series_keeps_its_mechanism_kind(
    shared_data: Path, tmp_path: Path, snapshots: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    sampled = sampled_config(_mkdir(tmp_path / "s"), shared_data)
    plain = write_config(_mkdir(tmp_path / "g"), shared_data)
    for first, second in ((sampled, plain), (plain, sampled)):
        out = tmp_path / f"out-{first.parent.name}"
        assert (
            main(["anonymize", "--config", str(first), "--out", str(out), str(snapshots[0])]) == 0
        )
        capsys.readouterr()
        code = main(["anonymize", "--config", str(second), "--out", str(out), str(snapshots[1])])
        assert code == 2
        err = capsys.readouterr().err
        assert "a series keeps its mechanism" in err
        assert not (out / "manifest-0002.json").exists()
        assert audit_directory(out).ok


def test_a_level_beyond_the_hierarchy_exits_2_before_anything_is_written(
    shared_data: Path, tmp_path: Path, snapshots: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config = sampled_config(tmp_path, shared_data, SECTION.replace("age = 3", "age = 9"))
    out = tmp_path / "out"
    assert main(["anonymize", "--config", str(config), "--out", str(out), str(snapshots[0])]) == 2
    err = capsys.readouterr().err
    assert "mechanism.sampled_k_anonymity.levels.age = 9" in err
    assert "has levels 0..4" in err
    assert not list(out.glob("manifest-*"))


@pytest.mark.parametrize("point", ["planned", "files_staged", "committed", "finalizing"])
def test_anonymize_killed_on_the_release_path_resumes_to_the_uninterrupted_series(
    point: str,
    shared_data: Path,
    tmp_path: Path,
    snapshots: list[Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Killed (SIGKILL) the second time it reaches ``point`` (``planned``: in the run's dry
    plan of release 2, before anything is written; ``finalizing``, reached once per file: in
    release 1; the others in release 2), the series resumes with the same releases (same
    keyed sample) and the same series total as a run nobody kills: the mechanism state
    commits with the release record, or not at all."""
    monkeypatch.setenv("SR_HISTORY_KEY", "sampled-k-crash-test-key-0123456789")
    config = sampled_config(tmp_path, shared_data)
    clean, crashed = tmp_path / "clean", tmp_path / "crashed"
    assert (
        main(["anonymize", "--config", str(config), "--out", str(clean), *map(str, snapshots)]) == 0
    )
    argv = [sys.executable, "-m", "stream_release.cli.main", "anonymize", "--config", str(config)]
    killed = subprocess.run(
        [*argv, "--out", str(crashed), *map(str, snapshots)],
        env={**os.environ, "STREAM_RELEASE_KILL_AT": f"{point}:2"},
        capture_output=True,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    assert not (crashed / "manifest-0002.json").exists()
    publisher = Publisher.open(load_settings(config), crashed)  # finalises a committed release
    done = publisher.store.last_sequence()
    publisher.close()
    assert done == {"planned": 0, "committed": 2}.get(point, 1)
    if done < 2:
        rest = map(str, snapshots[done:])
        assert main(["anonymize", "--config", str(config), "--out", str(crashed), *rest]) == 0
    for name in ("release-0001.jsonl", "release-0002.jsonl", "manifest-0002.json"):
        assert (crashed / name).read_text().replace(str(crashed), "") == (
            clean / name
        ).read_text().replace(str(clean), "")
    assert audit_directory(crashed).ok


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- the worker ---------------------------------------------------------------------------------


@pytest.fixture
def worker_setup(shared_data: Path, tmp_path: Path, make_worker: MakeWorker) -> tuple[Path, Worker]:
    """The sampled-k-anonymity configuration and a (not yet started) worker of it."""
    config = sampled_config(tmp_path, shared_data)
    return config, make_worker(config)


def test_the_worker_publishes_the_offline_sampled_releases_byte_for_byte(
    worker_setup: tuple[Path, Worker],
    snapshots: list[Path],
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
) -> None:
    config, worker = worker_setup
    offline = offline_releases(config, snapshots, tmp_path / "offline")
    manifests = publish_series(worker, config, snapshots, kafka_bootstrap, kafka_topics)
    assert manifest_sequences(manifests) == [1, 2]
    groups = read_topic(kafka_bootstrap, kafka_topics.releases)
    by_release = [[g.value for g in groups if g.key == s.stem.encode()] for s in snapshots]
    assert by_release == offline
    assert all(offline)
    for sequence, message in enumerate(manifests, start=1):
        sent = json.loads(message.value)
        local = json.loads((tmp_path / "offline" / f"manifest-{sequence:04d}.json").read_text())
        assert sent["mechanism"] == local["mechanism"]
        assert "source" not in sent
        assert {k: v for k, v in sent.items() if k != "source"} == {
            k: v for k, v in local.items() if k != "source"
        }
    archive = tmp_path / "archive"
    for sequence in (1, 2):
        assert (archive / f"release-{sequence:04d}.jsonl").read_bytes() == (
            tmp_path / "offline" / f"release-{sequence:04d}.jsonl"
        ).read_bytes()
    report = audit_directory(archive)
    assert report.ok, report.table()
    assert worker.stop() == 0
    log = [json.loads(line) for line in worker.log.read_text().splitlines() if line.strip()]
    committed = [entry for entry in log if entry.get("event") == "committed"]
    assert [(e["sequence"], e["mechanism"]) for e in committed] == [
        (1, "sampled-k-anonymity"),
        (2, "sampled-k-anonymity"),
    ]
