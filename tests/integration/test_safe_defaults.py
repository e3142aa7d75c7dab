"""Safe defaults (issue 10, item 7): no published group below 2 unless asked for, the
manifest records the floor, and a breach reads as one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.data import adult_series, write_config

from stream_release.cli.main import main
from stream_release.errors import PrivacyLeakWarning

RARE = ["Armed-Forces", "Priv-house-serv", "Protective-serv", "Tech-support"]


def _sizes(out: Path, k: int) -> list[int]:
    text = (out / f"release-{k:04d}.jsonl").read_text()
    return [json.loads(line)["size"] for line in text.splitlines()]


def test_with_some_values_protected_no_group_is_a_singleton_by_default(
    shared_data: Path, tmp_path: Path
) -> None:
    config = write_config(tmp_path, shared_data, protected=RARE)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=2)
    out = tmp_path / "out"
    assert main(["anonymize", "--config", str(config), "--out", str(out), *map(str, snaps)]) == 0
    for k in (1, 2):
        assert min(_sizes(out, k)) >= 2
        manifest = json.loads((out / f"manifest-{k:04d}.json").read_text())
        assert manifest["strategy"]["min_group_size"] == 2
        assert manifest["utility"]["min_group_size"] >= 2


def test_a_floor_of_1_must_be_asked_for_and_is_recorded(shared_data: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path, shared_data, protected=RARE, min_group_size=1)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=1)
    out = tmp_path / "out"
    assert main(["anonymize", "--config", str(config), "--out", str(out), str(snaps[0])]) == 0
    manifest = json.loads((out / "manifest-0001.json").read_text())
    assert manifest["strategy"]["min_group_size"] == 1
    assert min(_sizes(out, 1)) == 1  # what the default now prevents


def test_the_localized_baseline_prints_its_breach_as_one(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, shared_data, strategy="localized", acknowledge_localized=True)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=4)
    out = tmp_path / "out"
    argv = ["anonymize", "--config", str(config), "--out", str(out), *map(str, snaps)]
    with pytest.warns(PrivacyLeakWarning):
        assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "breach max 0.5000 <= 0.5000" in lines[0]  # one release alone: exactly 1/l
    breaches = [line for line in lines if "BREACH: breach max" in line]
    assert breaches and all(" > 0.5000" in line for line in breaches)
    assert not any("<= 0.5000" in line and "BREACH" in line for line in lines)
