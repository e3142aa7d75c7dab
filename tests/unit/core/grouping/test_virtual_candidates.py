"""Virtual candidates: one encoding with the snapshot, and groups trimmed to what they need."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.tables import encode_columns

from stream_release.core.grouping.merge import GroupValidity
from stream_release.core.grouping.requirements import Requirements
from stream_release.core.grouping.virtual import (
    NO_VALUE,
    no_value_code,
    trim_virtual,
    with_candidates,
)
from stream_release.core.privacy.linkage import HistoryRows
from stream_release.core.privacy.strategy import make_strategy
from stream_release.errors import GuaranteeUnsatisfiable, SchemaError
from stream_release.mechanisms.global_guarantee.plan import plan_release


def _decoded(table, row: int) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    for j, attribute in enumerate(table.attributes):
        out.append(str(attribute.domain[table.qid[row, j]]))
    return out


def test_candidates_share_one_encoding_with_the_snapshot(tmp_path: Path) -> None:
    snapshot = encode_columns(
        tmp_path,
        {"age": ["30", "41"], "education": ["Bachelors", "9th"], "city": ["Paris", "Nice"]},
        ["flu", "hiv"],
    )
    pool = encode_columns(
        tmp_path,
        {
            "age": ["25", "41", "50"],
            "education": ["Masters"] * 3,
            "city": ["Lyon", "Nice", "Ajaccio"],
        },
        ["-", "-", "-"],
        ids=["r1", "r2", "r3"],
    )
    combined = with_candidates(snapshot, pool)
    assert combined.sensitive_values == (NO_VALUE, "flu", "hiv")
    assert no_value_code(combined) == 0 and no_value_code(snapshot) is None
    assert combined.sensitive.tolist() == [1, 2, 0, 0, 0]
    assert combined.ids.tolist() == ["p0", "p1", "r1", "r2", "r3"]
    for row, table, own in [(0, snapshot, 0), (1, snapshot, 1), (2, pool, 0), (4, pool, 2)]:
        assert _decoded(combined, row) == _decoded(table, own)
    ages = combined.attributes[0].domain.tolist()
    assert ages == sorted(ages) == [25.0, 30.0, 41.0, 50.0]  # order-preserving codes


def test_an_attribute_read_as_another_kind_is_refused_by_name(tmp_path: Path) -> None:
    snapshot = encode_columns(tmp_path, {"age": ["30", "41"]}, ["flu", "hiv"])
    pool = encode_columns(tmp_path, {"age": ["young", "old"]}, ["-", "-"], ids=["r1", "r2"])
    with pytest.raises(SchemaError, match="attribute 'age' is numeric in the snapshot but set"):
        with_candidates(snapshot, pool)


def test_trim_keeps_the_nearest_virtual_members_a_group_needs(tmp_path: Path) -> None:
    # one real row (age 30, flu) with five candidates: the base ratio 3 needs a group of 3
    ages = ["30", "31", "29", "60", "70", "45", "80"]
    real = encode_columns(tmp_path, {"age": ages[:1]}, ["flu"])
    pool = encode_columns(tmp_path, {"age": ages[1:]}, ["-"] * 6, ids=list("uvwxyz"))
    table = with_candidates(real, pool)
    virtual = np.arange(table.n_rows) >= 1
    protected = np.array([False, True])  # NO_VALUE, flu
    req = Requirements.uniform(3.0, table.n_rows)
    valid = GroupValidity(table.sensitive, protected, req, 2).valid
    group = np.array([0, 0, 0, 0, 0, 1, 1], dtype=np.int64)  # group 1: virtual members only
    out = trim_virtual(
        group, virtual, table, valid, min_group_size=2, base_ratio=3.0, protected=protected
    )
    assert out.tolist() == [0, 0, 0, -1, -1, -1, -1]  # ages 31 and 29 kept; group 1 dropped


def test_a_plan_with_candidates_publishes_what_it_could_not_without(tmp_path: Path) -> None:
    values = ["flu", "flu", "hiv", "flu"]
    snapshot = encode_columns(tmp_path, {"age": ["30", "31", "32", "33"]}, values)
    strategy = make_strategy("constant-ratio", ell=2, k_prime=2)  # ratio 3.41: flu is 3 of 4
    with pytest.raises(GuaranteeUnsatisfiable, match="infeasible"):
        plan_release(snapshot, HistoryRows.empty(4), (), strategy, min_group_size=2)
    pool = encode_columns(
        tmp_path, {"age": [str(a) for a in range(20, 44)]}, ["-"] * 24,
        ids=[f"r{i}" for i in range(24)],
    )  # fmt: skip
    table = with_candidates(snapshot, pool)
    virtual = np.arange(table.n_rows) >= 4
    plan = plan_release(
        table, HistoryRows.empty(table.n_rows), (), strategy, min_group_size=2, virtual=virtual
    )
    assert plan.suppressed == 0 and plan.published_real == 4 and plan.records_in == 4
    assert NO_VALUE not in plan.values  # the store's dictionary never holds it
    c = plan.contents
    held = np.bincount(c.pair_group, weights=c.pair_count, minlength=c.n_groups)
    assert np.array_equal(c.size, held.astype(np.int64) + c.virtual)
    assert np.all(c.virtual >= 1)
    # every flu group keeps the ratio; the virtual members are linked and committed
    for g in range(c.n_groups):
        flu = c.pair_count[(c.pair_group == g) & (c.pair_value == 1)].sum()
        assert c.size[g] >= flu * strategy.base_ratio
    members = np.flatnonzero(virtual & (plan.group >= 0))
    assert np.array_equal(plan.committed, np.concatenate([np.arange(4), members]))
    assert plan.history.n_individuals == plan.committed.shape[0]
    assert np.all(np.diff(plan.history.indptr)[4:] >= 1)  # each linked to its group's values
