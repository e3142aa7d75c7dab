"""Public and private output apart, nothing written by a failed run, and the key that
belongs to its history (docs/contract.md §6; issue 10, items 2-4)."""

from __future__ import annotations

import csv
import hashlib
import json
import stat
from pathlib import Path

import pytest
from support.data import adult_series, write_config

from stream_release.audit import audit_directory
from stream_release.cli.main import main
from stream_release.devtools.datasets import ADULT_SENSITIVE

PUBLIC_FILES = ("release-", "manifest-")


def _anonymize(config: Path, out: Path, *snaps: Path, extra: tuple[str, ...] = ()) -> int:
    return main(["anonymize", "--config", str(config), "--out", str(out), *extra, *map(str, snaps)])


def _infeasible_copy(snapshot: Path, path: Path) -> Path:
    """``snapshot`` with nine rows in ten holding one occupation: no ratio above 1.1."""
    with snapshot.open(newline="") as fh:
        rows = list(csv.reader(fh, delimiter=";"))
    column = rows[0].index(ADULT_SENSITIVE)
    for i, row in enumerate(rows[1:]):
        if i % 10:
            row[column] = "Sales"
    with path.open("w", newline="") as fh:
        csv.writer(fh, delimiter=";").writerows(rows)
    return path


@pytest.fixture
def series(shared_data: Path, tmp_path: Path) -> tuple[Path, list[Path]]:
    """The Adult configuration and two snapshots of the series, in ``tmp_path``."""
    return write_config(tmp_path, shared_data), adult_series(shared_data, tmp_path, 20, rounds=2)


def _everything_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*")) if path.exists() else []


def test_out_holds_only_publishable_files_and_private_is_0700(
    series: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    config, snaps = series
    out = tmp_path / "out"
    assert _anonymize(config, out, *snaps) == 0
    public = sorted(p.name for p in out.iterdir())
    assert public == [
        "manifest-0001.json",
        "manifest-0002.json",
        "release-0001.jsonl",
        "release-0002.jsonl",
    ]
    private = tmp_path / "out.private"
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    names = {p.relative_to(private).as_posix() for p in _everything_under(private)}
    assert {
        "assignments-0001.csv",
        "assignments-0002.csv",
        "private-0001.json",
        "private-0002.json",
        "history/head.npz",
        "history/pseudonym.key",
    } <= names
    assert stat.S_IMODE((private / "history" / "pseudonym.key").stat().st_mode) == 0o600
    assert audit_directory(out).ok


def test_public_files_hold_no_digest_of_an_input_and_no_local_path(
    series: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    config, snaps = series
    out = tmp_path / "out"
    assert _anonymize(config, out, *snaps) == 0
    public = b"".join(p.read_bytes() for p in _everything_under(out))
    for snap in snaps:
        data = snap.read_bytes()
        for digest in (hashlib.sha256(data), hashlib.sha1(data), hashlib.md5(data)):
            assert digest.hexdigest().encode() not in public
        assert str(snap).encode() not in public
        assert str(snap.parent).encode() not in public
    assert str(tmp_path).encode() not in public
    manifest = json.loads((out / "manifest-0001.json").read_text())
    assert "source" not in manifest
    # the audit's needs are in the private record
    record = json.loads((tmp_path / "out.private" / "private-0001.json").read_text())
    assert record["source"] == {
        "file": str(snaps[0]),
        "sha256": hashlib.sha256(snaps[0].read_bytes()).hexdigest(),
    }


def test_private_directory_and_history_can_be_chosen(
    series: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    config, snaps = series
    out, private, history = tmp_path / "pub", tmp_path / "secret" / "p", tmp_path / "hist"
    extra = ("--private", str(private), "--history", str(history))
    assert _anonymize(config, out, snaps[0], extra=extra) == 0
    assert _anonymize(config, out, snaps[1], extra=extra) == 0
    assert (private / "assignments-0002.csv").is_file()
    assert (history / "head.npz").is_file() and (history / "pseudonym.key").is_file()
    assert not (tmp_path / "pub.private").exists()
    assert all(p.name.startswith(PUBLIC_FILES) for p in out.iterdir())
    assert audit_directory(out, private=private).ok


def test_an_infeasible_run_writes_nothing_anywhere(
    series: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    config, snaps = series
    bad = _infeasible_copy(snaps[1], tmp_path / "bad.csv")
    out = tmp_path / "out"
    before = _everything_under(tmp_path)
    assert _anonymize(config, out, bad) == 2
    # two good snapshots and a bad third: planned whole first, so nothing is published
    assert _anonymize(config, out, snaps[0], snaps[1], bad) == 2
    assert _everything_under(tmp_path) == before
    # a series in progress is not touched either
    assert _anonymize(config, out, snaps[0]) == 0
    published = {p: p.read_bytes() for p in _everything_under(tmp_path) if p.is_file()}
    assert _anonymize(config, out, snaps[1], bad) == 2
    assert {p: p.read_bytes() for p in _everything_under(tmp_path) if p.is_file()} == published


def test_a_series_in_the_old_layout_is_refused_with_the_move(
    series: tuple[Path, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, snaps = series
    out = tmp_path / "out"
    assert _anonymize(config, out, snaps[0]) == 0
    # the layout of earlier versions: history and assignments inside --out
    private = tmp_path / "out.private"
    (private / "history").rename(out / "history")
    (private / "assignments-0001.csv").rename(out / "assignments-0001.csv")
    (private / "private-0001.json").unlink()
    private.rmdir()
    capsys.readouterr()
    assert _anonymize(config, out, snaps[1]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mkdir -m 700" in err and "mv" in err
    assert not (out / "manifest-0002.json").exists()


def test_a_lost_key_file_stops_the_series(
    series: tuple[Path, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, snaps = series
    out = tmp_path / "out"
    assert _anonymize(config, out, snaps[0]) == 0
    key = tmp_path / "out.private" / "history" / "pseudonym.key"
    key.unlink()
    capsys.readouterr()
    assert _anonymize(config, out, snaps[1]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another pseudonymisation key" in err
    assert not key.exists() and not (out / "manifest-0002.json").exists()


@pytest.mark.parametrize("store", ["file", "redis"])
def test_another_key_is_refused_by_either_store(
    series: tuple[Path, list[Path]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    store: str,
) -> None:
    config, snaps = series
    out = tmp_path / "out"
    extra: tuple[str, ...] = ()
    if store == "redis":
        monkeypatch.setenv("SR_HISTORY_PREFIX", request.getfixturevalue("redis_prefix"))
        extra = ("--history", request.getfixturevalue("redis_url"))
    monkeypatch.setenv("SR_HISTORY_KEY", "a" * 64)
    assert _anonymize(config, out, snaps[0], extra=extra) == 0
    monkeypatch.setenv("SR_HISTORY_KEY", "b" * 64)
    capsys.readouterr()
    assert _anonymize(config, out, snaps[1], extra=extra) == 2
    assert "another pseudonymisation key" in capsys.readouterr().err
    monkeypatch.setenv("SR_HISTORY_KEY", "a" * 64)
    assert _anonymize(config, out, snaps[1], extra=extra) == 0
    assert audit_directory(out).ok
