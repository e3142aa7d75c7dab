"""Safe defaults (issue 10, item 7): no published group below 2 unless asked for, the
manifest records the floor, and a breach reads as one; no silent weakening (issue 26, item 4):
protected values that name nothing are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.data import adult_series, adult_snapshot, write_config

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


MISSPELLED = ["adm-clerical", "Sales "]
"""Issue 26, item 4: Adult's values are ``Adm-clerical`` and ``Sales``."""


def test_anonymize_refuses_protected_values_that_name_nothing(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a hierarchy of the sensitive attribute, the release is checked: exit 2, one
    line naming each value and its closest match, nothing written anywhere."""
    config = write_config(tmp_path, shared_data, protected=MISSPELLED)
    snap = adult_snapshot(shared_data, tmp_path / "t01.csv", 2000)
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["anonymize", "--config", str(config), "--out", str(out), str(snap)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith(
        f"stream-release anonymize: error: release 't01' (snapshot {str(snap)!r}): "
        "privacy.protected names values no row of the release holds"
    )
    assert "'adm-clerical' (closest: 'Adm-clerical'), 'Sales ' (closest: 'Sales')" in err
    assert 'protected = ["Adm-clerical", "Sales"]' in err
    assert not out.exists() and not (tmp_path / "out.private").exists()
    # with the sensitive attribute's hierarchy, the configuration itself is refused
    hierarchy = shared_data / "adult_hierarchy_occupation.csv"
    config.write_text(
        config.read_text().replace(
            "[schema.hierarchies]\n", f'[schema.hierarchies]\noccupation = "{hierarchy}"\n'
        )
    )
    assert main(["anonymize", "--config", str(config), "--out", str(out), str(snap)]) == 2
    err = capsys.readouterr().err
    assert "config privacy.protected names values that are not leaves of the hierarchy" in err
    assert "'adm-clerical' (closest: 'Adm-clerical'), 'Sales ' (closest: 'Sales')" in err
    assert not out.exists()
