"""Bad input: one clear line naming the problem, exit 2, nothing half-written (docs/contract.md
§3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.data import adult_series, write_config
from support.hostile_files import (
    HOSTILE_SETTINGS,
    HOSTILE_SNAPSHOTS,
    HostileSetting,
    HostileSnapshot,
)

from stream_release.cli.main import main


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err.strip()


def _anonymize(
    capsys: pytest.CaptureFixture[str], config: Path, out: Path, *snaps: Path
) -> tuple[int, str]:
    """``stream-release anonymize`` of ``snaps`` into ``out``: its exit code and stderr."""
    return _run(capsys, "anonymize", "--config", str(config), "--out", str(out), *map(str, snaps))


@pytest.fixture(scope="module")
def series(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two snapshots of the Adult series, written once for the module (the tests only read
    them)."""
    return adult_series(shared_data, tmp_path_factory.mktemp("series"), 20, rounds=2)


def _nothing_written(out: Path) -> bool:
    """Neither the public directory ``out`` nor its private one (``out.private``: the
    history, its key) exists: a refused run writes nothing anywhere."""
    return not out.exists() and not out.with_name(out.name + ".private").exists()


@pytest.mark.parametrize("hostile", HOSTILE_SNAPSHOTS, ids=lambda h: h.name)
def test_a_hostile_snapshot_gets_one_line_and_publishes_nothing(
    shared_data: Path,
    tmp_path: Path,
    series: list[Path],
    hostile: HostileSnapshot,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # after a valid snapshot: the run publishes neither
    path = hostile.write(series[1], tmp_path / "hostile.csv")
    out = tmp_path / "out"
    code, err = _anonymize(capsys, write_config(tmp_path, shared_data), out, series[0], path)
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert repr(str(path)) in err and all(s in err for s in hostile.says), err
    assert _nothing_written(out)


@pytest.mark.parametrize("hostile", HOSTILE_SETTINGS, ids=lambda h: h.name)
def test_a_hostile_setting_gets_one_line_and_publishes_nothing(
    shared_data: Path,
    tmp_path: Path,
    series: list[Path],
    hostile: HostileSetting,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    config = write_config(tmp_path, shared_data, **hostile.privacy)
    code, err = _anonymize(capsys, config, out, series[0])
    assert code == 2
    assert len(err.splitlines()) == 1 and all(s in err for s in hostile.says), err
    assert _nothing_written(out)


def test_a_configuration_that_does_not_exist(
    series: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _anonymize(capsys, tmp_path / "nope.toml", tmp_path / "o", series[0])
    assert code == 2 and "does not exist" in err


def test_audit_of_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, "audit", str(tmp_path / "nothing"))
    assert code == 2 and "not a directory" in err
