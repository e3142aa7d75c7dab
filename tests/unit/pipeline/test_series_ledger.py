"""The series ledger (issue 26, item 5): every release published, with the sha256 of its files,
kept outside both archives, and a history store or archive that went back behind it refused.

Measured on main before it: restoring the history and both archives from one backup published
the next snapshot under a reused sequence, and the audit passed.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.tiny_series import anonymize, tiny_config, tiny_snapshots

from stream_release.faults import ENV
from stream_release.io.series_ledger import FILES, SeriesLedger, sha256_hex


@pytest.fixture
def series(tmp_path: Path) -> tuple[Path, list[Path]]:
    return tiny_config(tmp_path), tiny_snapshots(tmp_path, 4)


def _backup(tmp_path: Path, *names: str) -> Path:
    backup = tmp_path / "backup"
    for name in names:
        shutil.copytree(tmp_path / name, backup / name)
    return backup


def _restore(tmp_path: Path, backup: Path, *names: str) -> None:
    for name in names:
        shutil.rmtree(tmp_path / name)
        shutil.copytree(backup / name, tmp_path / name)


def _files(tmp_path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(tmp_path)): p.read_bytes()
        for p in sorted(tmp_path.rglob("*"))
        if p.is_file() and "backup" not in p.parts
    }


def test_each_release_is_recorded_with_the_sha256_of_its_four_files(
    series: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    config, snaps = series
    out = tmp_path / "out"
    assert anonymize(config, out, snaps[0]) == 0
    assert anonymize(config, out, snaps[1], snaps[2]) == 0
    ledger = tmp_path / "out.ledger"
    assert stat.S_IMODE(ledger.stat().st_mode) == 0o600  # it holds private digests
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [line["sequence"] for line in lines] == [1, 2, 3]
    assert [line["release"] for line in lines] == ["s01", "s02", "s03"]
    private = tmp_path / "out.private"
    for k, line in enumerate(lines, start=1):
        files = {
            "release": out / f"release-{k:04d}.jsonl",
            "manifest": out / f"manifest-{k:04d}.json",
            "assignments": private / f"assignments-{k:04d}.csv",
            "private": private / f"private-{k:04d}.json",
        }
        assert set(files) == set(FILES)
        for kind, path in files.items():
            assert line[f"{kind}_sha256"] == sha256_hex(path.read_bytes())
    assert not any(p.name.endswith(".ledger") for p in out.iterdir())


def test_the_history_and_both_archives_restored_from_a_backup_are_refused(
    series: tuple[Path, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, snaps = series
    out = tmp_path / "out"
    assert anonymize(config, out, snaps[0]) == 0
    backup = _backup(tmp_path, "out", "out.private")  # the history is in out.private
    assert anonymize(config, out, snaps[1], snaps[2]) == 0
    _restore(tmp_path, backup, "out", "out.private")
    before = _files(tmp_path)
    capsys.readouterr()
    assert anonymize(config, out, snaps[3]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1  # one line
    assert "records releases 1..3 as published" in error
    assert "is at release 1" in error and "holds releases up to 1" in error
    assert "would reuse sequence 2" in error
    assert "from a backup of release 3 or later" in error
    assert "restarts every individual's count" in error and "stay public" in error
    assert _files(tmp_path) == before  # nothing written


def test_a_history_kept_elsewhere_and_an_archive_restored_alone_are_refused(
    series: tuple[Path, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, snaps = series
    out, history = tmp_path / "out", tmp_path / "history"
    extra = ("--history", str(history))
    assert anonymize(config, out, snaps[0], extra=extra) == 0
    backup = _backup(tmp_path, "out", "out.private", "history")
    assert anonymize(config, out, snaps[1], extra=extra) == 0
    _restore(tmp_path, backup, "history")  # the store alone
    assert anonymize(config, out, snaps[2], extra=extra) == 2
    assert "is at release 1 and" in capsys.readouterr().err
    _restore(tmp_path, backup, "out", "out.private")  # now all three agree on 1
    assert anonymize(config, out, snaps[2], extra=extra) == 2
    assert "records releases 1..2" in capsys.readouterr().err


def test_an_archive_holding_another_last_release_is_refused(
    series: tuple[Path, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, snaps = series
    out = tmp_path / "out"
    assert anonymize(config, out, snaps[0], snaps[1]) == 0
    path = out / "release-0002.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[1:] + lines[:1]) + "\n")  # the same groups, reordered
    assert anonymize(config, out, snaps[2]) == 2
    error = capsys.readouterr().err
    assert "release 2 in" in error and "its release file(s) differ" in error


def test_a_ledger_one_release_behind_is_brought_up_from_the_archive(
    series: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    """What a crash between the history commit and the ledger's append leaves (and a series
    started before the ledger existed: no file at all)."""
    config, snaps = series
    out = tmp_path / "out"
    assert anonymize(config, out, snaps[0], snaps[1]) == 0
    ledger = tmp_path / "out.ledger"
    complete = ledger.read_bytes()
    ledger.write_bytes(complete.splitlines(keepends=True)[0])
    assert anonymize(config, out, snaps[2]) == 0
    entries = SeriesLedger(ledger).entries()
    assert [e.sequence for e in entries] == [1, 2, 3]
    assert ledger.read_bytes().startswith(complete)  # release 2 recorded as it was
    ledger.unlink()
    assert anonymize(config, out, snaps[3]) == 0
    assert [e.sequence for e in SeriesLedger(ledger).entries()] == [1, 2, 3, 4]


def test_a_line_torn_by_a_crash_is_no_entry_and_is_cut_off(
    series: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    config, snaps = series
    out = tmp_path / "out"
    assert anonymize(config, out, snaps[0]) == 0
    ledger = tmp_path / "out.ledger"
    with ledger.open("ab") as fh:
        fh.write(b'{"sequence": 2, "release": "s0')
    assert [e.sequence for e in SeriesLedger(ledger).entries()] == [1]
    assert anonymize(config, out, snaps[1]) == 0
    assert [e.sequence for e in SeriesLedger(ledger).entries()] == [1, 2]


def test_the_ledger_path_is_configurable(
    series: tuple[Path, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, snaps = series
    elsewhere = tmp_path / "elsewhere"
    config = tiny_config(tmp_path, ledger="elsewhere/series.ledger")  # relative to the config
    out = tmp_path / "out"
    assert anonymize(config, out, snaps[0]) == 0
    assert [e.sequence for e in SeriesLedger(elsewhere / "series.ledger").entries()] == [1]
    assert not (tmp_path / "out.ledger").exists()
    flag = tmp_path / "flag.ledger"
    assert anonymize(config, out, snaps[1], extra=("--ledger", str(flag))) == 0
    assert [e.sequence for e in SeriesLedger(flag).entries()] == [1, 2]  # brought up first
    # a corrupt ledger is one line, not a traceback
    flag.write_text("not json\n")
    assert anonymize(config, out, snaps[2], extra=("--ledger", str(flag))) == 2
    assert "line 1: not an entry" in capsys.readouterr().err


def test_an_offline_run_killed_after_the_ledger_append_finishes_the_release(
    series: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    """SIGKILL after the ledger's line, before the files are renamed into place: the next run
    finishes release 2, records it once, and goes on. (Killed before the line, at
    ``committed``, the ledger is one release behind: the test above; the worker's crash
    matrix, ``tests/integration/test_crash_consistency.py``, kills at both points.)"""
    config, snaps = series
    out = tmp_path / "out"
    assert anonymize(config, out, snaps[0]) == 0
    command = [sys.executable, "-m", "stream_release.cli.main", "anonymize"]
    run = subprocess.run(
        [*command, "--config", str(config), "--out", str(out), str(snaps[1])],
        env={**os.environ, ENV: "ledgered"},
        capture_output=True,
        check=False,
    )
    assert run.returncode == -9, run.stderr.decode()
    assert anonymize(config, out, snaps[2]) == 0
    entries = SeriesLedger(tmp_path / "out.ledger").entries()
    assert [(e.sequence, e.release) for e in entries] == [(1, "s01"), (2, "s02"), (3, "s03")]
    manifest = (out / "manifest-0002.json").read_bytes()
    assert entries[1].digests["manifest"] == sha256_hex(manifest)
    assert not list(out.glob("*.tmp"))
