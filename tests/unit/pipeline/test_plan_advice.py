"""The planner's diagnosis: linkages a strategy allows (Wong et al. 2010, §6) and values that
stay."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from support.tables import encode_columns

from stream_release.config import load_settings
from stream_release.pipeline.diagnosis import diagnose, proposals


def test_diagnosis_counts_rows_past_the_linkages_allowed(tmp_path: Path) -> None:
    # a, b keep flu; c alternates; d appears once. k' = 2: from release 3 on a keeper of flu
    # holds it for the third time
    releases = [
        {"a": "flu", "b": "flu", "c": "hiv"},
        {"a": "flu", "b": "flu", "c": "flu", "d": "hiv"},
        {"a": "flu", "b": "cold", "c": "hiv"},
        {"a": "flu", "b": "flu", "c": "flu"},
    ]
    tables = [
        encode_columns(
            tmp_path, {"age": [str(30 + i) for i in range(len(r))]}, list(r.values()), list(r)
        )
        for r in releases
    ]
    settings = load_settings(
        None,
        schema={"id": "id", "sensitive": "s", "qid": ["age"]},
        privacy={"strategy": "constant-ratio", "l": 2, "k_prime": 2},
    )
    found = diagnose(settings, tables)
    assert found.allowed == 2
    # release 3: a holds flu a third time; release 4: a (4th) and b (3rd); c's flu is its 2nd
    assert found.stuck == (0.0, 0.0, 1 / 3, 2 / 3)
    flu = next(p for p in found.profiles if p.value == "flu")
    # holders of flu who reappear: a,b (1->2), a,b,c (2->3), a (3->4): kept 1+1+0 + 1 ...
    assert flu.kept == 4 / 6
    assert flu.largest == 3
    assert found.smallest == 3
    assert np.isclose(found.kept, 4 / 9)  # 2 of 3, 1 of 3 (d leaves), 1 of 3
    offered = proposals(settings, found, horizon=4)
    assert offered == []  # k' = 4 needs ratio 6.29: no value is that rare in 3 rows


def test_the_proposal_protects_the_values_rare_enough(tmp_path: Path) -> None:
    values = ["rare"] + ["common"] * 39
    table = encode_columns(tmp_path, {"age": [str(i) for i in range(40)]}, values)
    settings = load_settings(
        None,
        schema={"id": "id", "sensitive": "s", "qid": ["age"]},
        privacy={"strategy": "constant-ratio", "l": 2, "k_prime": 2},
    )
    found = diagnose(settings, [table, table])
    ((name, overrides),) = proposals(settings, found, horizon=8)  # n_c(8) = 12.0: 40/12 = 3.3
    assert name == "proposal: constant-ratio l=2 k'=8, protecting only 'rare'"
    assert overrides["protected"] == ["rare"] and overrides["k_prime"] == 8
