"""A series inside and past its horizon (issue 26, item 2) on the 8-year wage panel: the same
545 men every year, most keeping their occupation (``tests/data/README.md``).

Planned for as many releases as it runs (constant-ratio ``k' = horizon = 8``, the occupations
rarer than ``1/n_c`` protected), the panel publishes every year with nobody withheld and nobody
past ``1/l``; planned for 4, it publishes years 5 to 8 all the same, the manifests say they
are past the horizon, and the audit passes both. A configuration that cannot last its horizon
is refused before release 1, and nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.data import wage_panel_config, wage_panel_series
from support.paths import REPO

from stream_release.audit import audit_directory
from stream_release.cli.main import main
from stream_release.devtools.datasets import ADULT_SENSITIVE, bundled_adult, make_series

RARE = ["3", "8"]
"""The occupations held by fewer than 1 in n_c(l = 2, k' = 8) = 12.05 rows in every year."""


def _run(tmp_path: Path, **privacy: object) -> tuple[Path, Path, list[Path], int]:
    config = wage_panel_config(tmp_path, protected=RARE, **privacy)
    snaps = wage_panel_series(tmp_path)
    out = tmp_path / "out"
    code = main(["anonymize", "--config", str(config), "--out", str(out), *map(str, snaps)])
    return config, out, snaps, code


def _manifests(out: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("manifest-*.json"))]


def test_a_panel_planned_for_its_length_publishes_every_year_with_nobody_past_the_bound(
    tmp_path: Path,
) -> None:
    config, out, snaps, code = _run(tmp_path, k_prime=8, horizon=8)
    assert code == 0
    manifests = _manifests(out)
    assert len(manifests) == 8
    for manifest in manifests:
        breach = manifest["breach"]
        assert isinstance(breach, dict)
        assert manifest["past_horizon"] is False
        assert (breach["spent"], breach["spent_people"]) == (0, 0)
        assert manifest["strategy"]["horizon"] == 8  # type: ignore[index]
        record = json.loads((tmp_path / "out.private" / f"private-{manifest['sequence']:04d}.json")
                            .read_text())  # fmt: skip
        assert record["suppressed"]["withheld"] == []
    report = audit_directory(out, config=config, snapshots=snaps)
    assert report.ok, report.table()


def test_past_its_horizon_the_series_goes_on_and_says_so(tmp_path: Path) -> None:
    config, out, snaps, code = _run(tmp_path, k_prime=4, horizon=4)
    assert code == 0
    manifests = _manifests(out)
    assert len(manifests) == 8  # not refused past the horizon
    assert [m["past_horizon"] for m in manifests] == [False] * 4 + [True] * 4
    inside = [m["breach"]["spent_people"] for m in manifests[:4]]  # type: ignore[index]
    assert inside == [0, 0, 0, 0]
    report = audit_directory(out, config=config, snapshots=snaps)
    assert report.ok, report.table()


def test_a_configuration_that_cannot_last_its_horizon_is_refused_before_release_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _, code = _run(tmp_path, k_prime=4, horizon=8)
    assert code == 2
    err = capsys.readouterr().err
    assert "privacy.horizon = 8" in err and "set k_prime = 8" in err
    assert not out.exists() and not (tmp_path / "out.private").exists()


DEPLOY_CONFIG = REPO / "deploy" / "config" / "stream-release.toml"


def test_the_example_configuration_runs_its_year_inside_its_horizon(tmp_path: Path) -> None:
    """``deploy/config/stream-release.toml`` on what it says it is for: a year of monthly
    snapshots of the bundled Adult data with the paper's churn. Its horizon is the year, and
    every release is inside it with nobody withheld and nobody past ``1/l``."""
    snaps = []
    for i, table in enumerate(make_series(bundled_adult(), ADULT_SENSITIVE, 12, seed=0), 1):
        path = tmp_path / f"m{i:02d}.csv"
        table.write_csv(path)
        snaps.append(path)
    out = tmp_path / "out"
    argv = ["anonymize", "--config", str(DEPLOY_CONFIG), "--out", str(out), *map(str, snaps)]
    assert main(argv) == 0
    manifests = _manifests(out)
    assert [m["strategy"]["horizon"] for m in manifests] == [12] * 12  # type: ignore[index]
    for manifest in manifests:
        assert manifest["past_horizon"] is False
        assert manifest["breach"]["spent_people"] == 0  # type: ignore[index]
    assert audit_directory(out, config=DEPLOY_CONFIG, snapshots=snaps).ok
