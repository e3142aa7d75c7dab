"""Grouping a large release of real data: nothing left over for the leaves' sake (issue 11)."""

from __future__ import annotations

from pathlib import Path

from stream_release.config import load_settings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.devtools.datasets import (
    ADULT_QID,
    ADULT_SENSITIVE,
    ChurnPopulation,
    adult_schema,
    read_csv_table,
)
from stream_release.io.encoding import encode
from stream_release.io.snapshot import snapshot_from_columns
from stream_release.pipeline.publisher import Publisher


def test_a_300k_row_adult_release_without_history_leaves_no_row_over(
    shared_data: Path, tmp_path: Path
) -> None:
    # constant-ratio k'=3, l=2: base ratio 4.85, groups of 5. Mondrian leaves cut down to a
    # top share of 1/4.85 held more of one value than groups of 5 absorb (1/5), and the excess
    # was suppressed: 239 rows of this release before
    schema = adult_schema(shared_data)
    settings = load_settings(
        None,
        schema=schema,
        privacy={"strategy": "constant-ratio", "l": 2, "k_prime": 3, "min_group_size": 2},
        history={"key": "scale-benchmark-key-0123456789abcdef"},
        output={"queries": 0},
    )
    population = ChurnPopulation(
        read_csv_table(shared_data / "adult.csv"), ADULT_QID, ADULT_SENSITIVE, 300_000, seed=0
    )
    raw = snapshot_from_columns(*population.advance())
    table = encode(raw, settings.schema, load_hierarchies(settings.schema))
    publisher = Publisher.open(settings, tmp_path / "out", tmp_path / "history")
    try:
        manifest = publisher.publish(table, label="S01")
    finally:
        publisher.close()
    assert manifest["suppressed"] == 0
    assert manifest["utility"]["max_group_size"] <= manifest["strategy"]["group_size_cap"]
