"""The findings of the adversarial review of issue 26 (items 1-3), as tests of their fixes.

* Finding 2: the horizon is checked before release: a release inside the horizon that would
  withhold anyone (histories spent under other settings) is refused, never published to fail
  the audit afterwards.
* Finding 3: the planner (floats) and the audit (exact) agree on who is withheld at the cap:
  the audit allows the planner's rounding on either side of a plan equal to the cap.

(Finding 1, the set's size telling the withheld rows' values, is fixed by decoys counted from
counts alone: ``test_suppressed_set.py`` permutes the values among the withheld rows and the
decoys and finds every published byte the same.)
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from support.data import wage_panel_config, wage_panel_series

from stream_release.audit import audit_directory
from stream_release.cli.main import main

FIXED_KEY = "5e" * 32

RARE = ["Armed-Forces", "Priv-house-serv", "Protective-serv", "Tech-support", "Farming-fishing"]
"""Adult's five rarest occupations (the series of ``test_audit.py`` that takes decoys)."""


@pytest.fixture(autouse=True)
def _fixed_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SR_HISTORY_KEY", FIXED_KEY)


def _published(out: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("manifest-*.json"))]


def test_no_release_inside_its_horizon_publishes_anyone_past_1_over_l(tmp_path: Path) -> None:
    """README: inside the horizon nobody is withheld for their history and nobody's breach
    passes 1/l. The wage panel is published for two years under k' = horizon = 2, then the
    operator plans it for its length (k' = horizon = 8, as the refusal message advises). The
    publisher must either refuse the change or publish nobody past 1/l inside the horizon:
    never publish a release the audit then fails."""
    snaps = wage_panel_series(tmp_path)
    first, then = tmp_path / "first", tmp_path / "then"
    first.mkdir()
    then.mkdir()
    a = wage_panel_config(first, k_prime=2, horizon=2, protected=["3", "8"])
    b = wage_panel_config(then, k_prime=8, horizon=8, protected=["3", "8"])
    out = tmp_path / "out"
    assert main(["anonymize", "--config", str(a), "--out", str(out), *map(str, snaps[:2])]) == 0
    main(["anonymize", "--config", str(b), "--out", str(out), *map(str, snaps[2:5])])
    for manifest in _published(out):
        if manifest["past_horizon"]:
            continue
        breach = manifest["breach"]
        assert isinstance(breach, dict)
        assert breach["spent_people"] == 0, (manifest["release"], breach)
    assert audit_directory(out).ok


def _write(path: Path, rows: list[tuple[str, int, int, str]]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, delimiter=";")
        writer.writerow(["id", "x", "y", "s"])
        writer.writerows(rows)
    return path


def test_the_audit_and_the_planner_withhold_the_same_rows_at_the_cap(tmp_path: Path) -> None:
    """Geometric, l = 2, alpha = 2, cap 8 (base 4 x max_group_factor 2). Five people are
    published together in a group of five, then of six, each value once: every pair they
    share has P = 4/5 * 5/6 = 2/3 exactly, whose plan alpha * ñ = 2 * 4 is the cap itself. In
    the third release the planner and the audit must agree on who is withheld."""
    config = tmp_path / "config.toml"
    config.write_text(
        '[schema]\nid = "id"\nsensitive = "s"\nqid = ["x", "y"]\n'
        '[privacy]\nl = 2\nstrategy = "geometric"\nalpha = 2\n[output]\nqueries = 50\n'
    )
    base = [("o1", 1, 1, "a"), ("o2", 1, 2, "b"), ("o3", 2, 1, "c"), ("o4", 2, 2, "d")]
    base.append(("o5", 3, 3, "e"))
    snaps = [
        _write(tmp_path / "r1.csv", base),
        _write(tmp_path / "r2.csv", [*base, ("o6", 3, 1, "f")]),
        _write(
            tmp_path / "r3.csv", [*base, *((f"n{i}", 10 + i, 10, v) for i, v in enumerate("fghij"))]
        ),
    ]
    out = tmp_path / "out"
    assert main(["anonymize", "--config", str(config), "--out", str(out), *map(str, snaps)]) == 0
    lines = [json.loads((out / f"release-{k:04d}.jsonl").read_text()) for k in (1, 2)]
    assert [line["size"] for line in lines] == [5, 6]  # the case arises
    report = audit_directory(out, config=config)
    assert report.ok, report.table()
