"""Bad input: one clear line naming the problem, exit 2, nothing half-written (docs/contract.md
§3).

The hostile files are those of :mod:`support.hostile_files` (which ``tests/bad_input_runs.py``
runs through the command line in fresh processes, many times): every hostile snapshot through
``anonymize``, ``plan`` and ``publish``, every hostile setting, and bytes that are not UTF-8
in each file ``anonymize`` and ``audit`` read.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.data import adult_series, write_config
from support.hostile_files import (
    HOSTILE_SETTINGS,
    HOSTILE_SNAPSHOTS,
    PRIVATE_SERIES_FILES,
    SERIES_FILES,
    SPOILED_LINE,
    HostileSetting,
    HostileSnapshot,
    hostile_configurations,
    spoil_series,
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


@pytest.mark.parametrize("hostile", HOSTILE_SNAPSHOTS, ids=lambda h: h.name)
def test_plan_and_publish_refuse_a_hostile_snapshot(
    shared_data: Path,
    tmp_path: Path,
    series: list[Path],
    hostile: HostileSnapshot,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = hostile.write(series[1], tmp_path / "hostile.csv")
    config = str(write_config(tmp_path, shared_data))
    commands = [["plan", "--config", config, str(path)]]
    if hostile.read:  # publish reads, it does not encode; refused before any broker is asked
        commands.append(["publish", "--config", config, "--release", "r", str(path)])
    for command in commands:
        code, err = _run(capsys, *command)
        assert code == 2, command
        assert len(err.splitlines()) == 1 and repr(str(path)) in err, err
        assert all(s in err for s in hostile.says), err


@pytest.mark.parametrize("name", ["configuration", "hierarchy", "register"])
def test_anonymize_refuses_bytes_that_are_not_utf8_in_any_file_it_reads(
    shared_data: Path,
    tmp_path: Path,
    series: list[Path],
    name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = write_config(tmp_path, shared_data)
    hostile, spoiled, line = hostile_configurations(config, shared_data, tmp_path)[name]
    out = tmp_path / "out"
    code, err = _anonymize(capsys, hostile, out, series[0])
    assert code == 2
    assert len(err.splitlines()) == 1 and repr(str(spoiled)) in err, err
    assert f"line {line}: " in err and "not UTF-8 text; save the file as UTF-8" in err, err
    assert _nothing_written(out)


@pytest.fixture(scope="module")
def published(
    shared_data: Path, tmp_path_factory: pytest.TempPathFactory, series: list[Path]
) -> tuple[Path, Path]:
    """The first snapshot published by ``anonymize``: its configuration and public
    directory."""
    directory = tmp_path_factory.mktemp("published")
    config, out = write_config(directory, shared_data), directory / "out"
    assert main(["anonymize", "--config", str(config), "--out", str(out), str(series[0])]) == 0
    return config, out


@pytest.mark.parametrize(
    "name", ["snapshot", "configuration", "hierarchy", *SERIES_FILES, *PRIVATE_SERIES_FILES]
)
def test_audit_refuses_bytes_that_are_not_utf8_in_any_file_it_reads(
    shared_data: Path,
    tmp_path: Path,
    series: list[Path],
    published: tuple[Path, Path],
    name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, out = published
    if name == "snapshot":
        spoiled = HOSTILE_SNAPSHOTS[0].write(series[1], tmp_path / "hostile.csv")
        args = [str(out), str(series[0]), str(spoiled)]
        says = f"line {SPOILED_LINE}: the bytes b'\\xff' are not UTF-8 text; save the file as"
    elif name in ("configuration", "hierarchy"):
        hostile, spoiled, line = hostile_configurations(config, shared_data, tmp_path)[name]
        args = [str(out), "--config", str(hostile)]
        says = f"line {line}: the bytes b'"
    else:
        spoiled = spoil_series(out, name, tmp_path / "copy")
        args = [str(tmp_path / "copy")]
        says = "not valid JSON" if name.endswith(".json") else "line 1: the bytes b'\\xff'"
    code, err = _run(capsys, "audit", *args)
    assert code == 2
    assert len(err.splitlines()) == 1 and str(spoiled) in err and says in err, err


def test_audit_of_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, "audit", str(tmp_path / "nothing"))
    assert code == 2 and "not a directory" in err
