"""Golden results on the shared Adult data (30,162 rows), the case of issue 2 item 4.

Occupation sensitive (14 values, all protected), l = 2, constant-ratio k' = 3: required ratio
4.85, so the best possible groups have 5 rows. Targets: average group <= 1.3 * ceil(4.85),
suppression <= 1 %, every group valid (the audit), and reproducible output.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from support.data import write_config

from stream_release.audit import audit_directory
from stream_release.config import load_settings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.core.privacy.linkage import HistoryRows
from stream_release.core.utility.report import utility_report
from stream_release.devtools.datasets import read_csv_table
from stream_release.io.encoding import encode
from stream_release.io.snapshot_csv import read_snapshot
from stream_release.mechanisms.global_guarantee.plan import plan_release
from stream_release.pipeline.anonymize import anonymize_files


@pytest.fixture(scope="module")
def adult_release(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("adult")
    snapshot = tmp / "adult.csv"
    read_csv_table(shared_data / "adult.csv").write_csv(snapshot)
    settings = load_settings(write_config(tmp, shared_data))
    [manifest] = anonymize_files(settings, tmp / "out", [snapshot])
    return tmp / "out", manifest


def test_small_groups_and_little_suppression(adult_release: tuple[Path, dict]) -> None:
    _, m = adult_release
    assert m["records_in"] == 30162
    assert m["strategy"]["base_ratio"] == pytest.approx(4.847322, abs=1e-6)
    assert m["utility"]["avg_group_size"] <= 1.3 * math.ceil(4.847322)
    assert m["suppressed"] <= 0.01 * 30162
    assert m["breach"]["max"] <= 0.5


def test_release_passes_the_independent_audit(adult_release: tuple[Path, dict]) -> None:
    out, _ = adult_release
    report = audit_directory(out)
    assert report.ok, report.table()


def test_groups_are_tighter_than_one_big_group(shared_data: Path, tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path, shared_data))
    snapshot = tmp_path / "adult.csv"
    read_csv_table(shared_data / "adult.csv").write_csv(snapshot)
    raw = read_snapshot(snapshot, settings.schema)
    table = encode(raw, settings.schema, load_hierarchies(settings.schema))
    strategy = settings.privacy.make_strategy()
    plan = plan_release(table, HistoryRows.empty(table.n_rows), (), strategy)
    rng = np.random.default_rng(0)
    ours = utility_report(table, plan.group, format="generalized", queries=2000, rng=rng)
    one = utility_report(
        table,
        np.zeros(table.n_rows, dtype=np.int64),
        format="generalized",
        queries=2000,
        rng=np.random.default_rng(0),
    )
    assert ours["ncp"] < 0.5 * one["ncp"]
    assert ours["query_error"] < 0.5 * one["query_error"]
    # deterministic: the same input gives the same groups
    again = plan_release(table, HistoryRows.empty(table.n_rows), (), strategy)
    assert np.array_equal(plan.group, again.group)
