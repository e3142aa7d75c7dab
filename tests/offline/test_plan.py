"""``stream-release plan``: a what-if series per candidate setting, nothing written."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import pytest
from support.data import (
    adult_register,
    adult_series,
    wage_panel_config,
    wage_panel_series,
    write_config,
)

from stream_release.cli.main import main
from stream_release.config import load_settings
from stream_release.errors import ConfigError
from stream_release.pipeline.what_if import (
    PlannedSetting,
    WhatIfRelease,
    candidates,
    plan_report,
    plan_series,
)


def test_plan_reports_every_candidate_and_writes_nothing(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshots = adult_series(shared_data, tmp_path, 20, rounds=3)
    config = write_config(tmp_path, shared_data)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["plan", "--config", str(config), *map(str, snapshots)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no history, no releases
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "planned for a horizon of 3 releases"  # as many as the snapshots
    assert lines[1] == "constant-ratio l=2 k'=3 (configured): feasible (lasts 3 releases)"
    assert out.count("release    3 t03: suppressed") >= 1
    # a setting that does not last the horizon is listed, not run
    assert "constant-ratio l=2 k'=2: lasts 2 of the 3 releases planned: not run" in out
    # k'=5 asks more than Adult's most frequent occupation allows: the refusal names the
    # largest feasible setting
    assert "constant-ratio l=2 k'=5: refused at 1 (lasts 5 releases)" in out
    assert "largest feasible setting: k_prime = 4 at l = 2" in out
    assert any(line.startswith("least suppression among the feasible settings: ") for line in lines)
    assert any(line.startswith("diagnosis: ") for line in lines)
    # a new history's what-if series has a fixed key: the same plan on every run
    assert main(["plan", "--config", str(config), *map(str, snapshots)]) == 0
    assert capsys.readouterr().out == out


def test_plan_continues_a_history_without_writing_to_it(shared_data: Path, tmp_path: Path) -> None:
    snapshots = adult_series(shared_data, tmp_path, 20, rounds=3)
    config = write_config(tmp_path, shared_data)
    out = tmp_path / "out"
    assert main(["anonymize", "--config", str(config), "--out", str(out), str(snapshots[0])]) == 0
    history = tmp_path / "out.private" / "history"
    stamp = sorted((p.name, p.stat().st_mtime_ns) for p in history.rglob("*"))
    planned = plan_series(config, snapshots[1:], history=history)
    assert planned[0].releases[0].sequence == 2  # it follows the published release
    assert sorted((p.name, p.stat().st_mtime_ns) for p in history.rglob("*")) == stamp


def _release(sequence: int, withheld: tuple[str, ...]) -> WhatIfRelease:
    return WhatIfRelease(sequence, f"t{sequence}", 100, 1, withheld, 5.0, 6, 1.0, 0.5, 0.7)


def test_the_forecast_extends_the_later_releases_rate() -> None:
    planned = PlannedSetting("s", {})
    planned.releases = [
        _release(1, ()),
        _release(2, ("a",)),
        _release(3, ("a", "b", "c")),  # 2 new
        _release(4, ("c", "d", "e", "f")),  # 3 new
    ]
    assert planned.withheld_so_far() == 6
    # later half: releases 3 and 4, 2.5 new per release; 16 more releases to 20
    assert planned.forecast(20) == 6 + 40
    assert PlannedSetting("t", {}).forecast(20) is None


def test_plan_names_values_kept_year_after_year_and_proposes_what_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 8-year wage panel with every occupation protected: the only settings its
    frequencies allow (k' = 2, alpha <= 2) exhaust the people who keep their occupation from
    release 3 on. The planner says so and proposes a setting that publishes all 8 years."""
    snapshots = wage_panel_series(tmp_path)
    config = wage_panel_config(tmp_path)
    assert main(["plan", "--config", str(config), *map(str, snapshots)]) == 0
    out = capsys.readouterr().out
    assert "planned for a horizon of 8 releases" in out
    assert "constant-ratio l=2 k'=2 (configured): refused at 3 (lasts 2 releases)" in out
    assert "constant-ratio l=2 k'=5: lasts 5 of the 8 releases planned: not run" in out
    assert "no candidate setting publishes every snapshot" in out
    assert "diagnosis: 58 % of the rows whose individual is in the next snapshot still hold" in out
    assert "value '5': 21.4 % of the rows, kept by 67 % of its holders" in out
    assert "allows an individual 2 linkages to a value" in out
    assert "not the transient values Wong et al. 2010 assumes" in out
    proposal = "proposal: constant-ratio l=2 k'=8, protecting only '3', '8': feasible"
    assert proposal in out
    after = out[out.index(proposal) :]
    assert after.count("suppressed 0 (0.00 %)") == 8  # every year, nothing suppressed
    assert "a population register ([virtual] registry" in out


def test_plan_on_shards_reads_no_history_and_offers_no_register(
    shared_data: Path, tmp_path: Path
) -> None:
    """A series on shards keeps each shard's histories under its own tag and cannot run a
    register (the worker refuses both): ``plan --history`` on shards is refused with the fix,
    and the candidates on shards are run without the register."""
    snapshots = adult_series(shared_data, tmp_path, 20, rounds=2)
    config = write_config(tmp_path, shared_data)
    shards = {"kafka": {"partitions": 3}}
    with pytest.raises(ConfigError, match=r"plan --history with kafka\.partitions = 3"):
        plan_report(config, snapshots, history=tmp_path / "h", settings_overrides=shards)
    register = adult_register(shared_data, tmp_path / "register.csv")
    settings = load_settings(config, virtual={"registry": register})
    assert any(name.endswith("+ register") for name, _ in candidates(settings))
    on_shards = load_settings(config, virtual={"registry": register}, **shards)
    offered = candidates(on_shards)
    assert offered and not any(name.endswith("+ register") for name, _ in offered)
    assert all(privacy["virtual"] == {"registry": None} for _, privacy in offered)


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_long_commands_show_progress_on_a_terminal_only(
    shared_data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``anonymize``, ``plan`` and ``audit`` draw a bar on stderr when it is a terminal (per
    release planned or audited, per setting run: its count and its last label), and write
    nothing to it otherwise (a pipe, a file, ``TERM=dumb``)."""
    snapshots = adult_series(shared_data, tmp_path, 20, rounds=2)
    config = write_config(tmp_path, shared_data)
    out = tmp_path / "out"
    anonymize = ["anonymize", "--config", str(config), "--out", str(out), *map(str, snapshots)]
    plan = ["plan", "--config", str(config), *map(str, snapshots)]
    audit = ["audit", str(out)]
    assert main(anonymize) == 0 and main(plan) == 0 and main(audit) == 0
    assert capsys.readouterr().err == ""  # pytest's capture is not a terminal

    monkeypatch.setenv("TERM", "xterm")
    shutil.rmtree(out)
    shutil.rmtree(tmp_path / "out.private")
    (tmp_path / "out.ledger").unlink()
    for argv, bar, last in (
        (anonymize, "planning", "2/2"),
        (plan, "plan", "setting"),
        (audit, "audit", "2/2"),
    ):
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert main(argv) == 0
        drawn = terminal.getvalue()
        assert drawn.startswith(f"\r{bar}") and last in drawn, (argv[0], drawn)
        assert snapshots[-1].stem in drawn or argv is plan, (argv[0], drawn)
    monkeypatch.setenv("TERM", "dumb")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(audit) == 0
    assert terminal.getvalue() == ""
