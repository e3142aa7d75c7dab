"""The decoys are the first rows of :func:`decoy_order`, as many as :func:`decoy_count` gives
for the counts (review of issue 26): a planner that reordered, skipped or counted rows by their
values (taking decoys only when the withheld rows alone fell short, say) would fail here. Here a
hand-built release has rows withheld for their history, all holding one value."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.tables import encode_columns

import stream_release.mechanisms.global_guarantee.grouping as grouping_module
from stream_release.config import GroupingSettings
from stream_release.core.privacy.linkage import HistoryRows
from stream_release.core.privacy.strategy import make_strategy
from stream_release.mechanisms.global_guarantee.plan import plan_release

STRATEGY = make_strategy("constant-ratio", ell=2, k_prime=3)


def _release(tmp_path: Path) -> tuple[Any, HistoryRows]:
    """Three people at the bound for ``z`` (withheld whatever they hold), all holding ``a``,
    and five QID clusters of five people; two clusters hold one ``a`` each (``a`` and ``z``
    are the protected values)."""
    rows = [(f"w{i}", "a", 9, 9) for i in range(3)]
    others = ["b", "c", "d", "e", "f", "g", "h", "i", "j", "k"]
    for c in range(5):
        for j in range(5):
            value = "a" if (j == 0 and c < 2) else others[(c * 5 + j) % 10]
            rows.append((f"p{c}{j}", value, c, j))
    table = encode_columns(
        tmp_path,
        {"x": [str(r[2]) for r in rows], "y": [str(r[3]) for r in rows]},
        [r[1] for r in rows],
        ids=[r[0] for r in rows],
    )
    indptr = np.array([0, 1, 2, 3, *([3] * 25)], dtype=np.int64)
    history = HistoryRows(
        indptr,
        np.zeros(3, np.int32),  # value 0 of the history's dictionary: "z"
        np.full(3, np.log(0.45)),  # P <= 1 - 1/l: at the bound
        np.ones(3, np.int32),
    )
    return table, history


@pytest.mark.parametrize("seed", range(4))
def test_the_decoys_are_a_prefix_of_the_value_blind_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    table, history = _release(tmp_path)
    seen: dict[str, Any] = {"counts": []}
    order_of, count_of = grouping_module.decoy_order, grouping_module.decoy_count

    def record_order(*args: Any, **kwargs: Any) -> Any:
        seen["order"] = order_of(*args, **kwargs)
        return seen["order"]

    def record_count(*args: Any, **kwargs: Any) -> Any:
        seen["counts"].append((args, kwargs, count_of(*args, **kwargs)))
        return seen["counts"][-1][2]

    monkeypatch.setattr(grouping_module, "decoy_order", record_order)
    monkeypatch.setattr(grouping_module, "decoy_count", record_count)

    def planned(table: Any) -> Any:
        return plan_release(
            table,
            history,
            ("z",),
            STRATEGY,
            protected=("a", "z"),
            min_group_size=2,
            grouping=GroupingSettings(max_group_factor=4.0),
            rng=np.random.default_rng(seed),
        )

    suppressed = planned(table).suppressed_set
    assert suppressed.withheld.size == 3 and suppressed.decoys.size  # the case arises
    [(args, _, taken)] = seen["counts"]  # no unplaced row: one count
    assert args[0] == 3  # counted from the withheld rows' number ...
    taken = min(taken, seen["order"].size)  # no more than the candidates
    assert suppressed.decoys.size == taken
    # ... and they are the first rows of the order, whatever they hold
    np.testing.assert_array_equal(np.sort(seen["order"][:taken]), suppressed.decoys)
    # the withheld rows' values swapped with three others' (the snapshot's totals unchanged):
    # the same count, the same decoys
    moved = table.sensitive.copy()
    others = np.flatnonzero(moved != moved[0])[:3]
    moved[:3], moved[others] = moved[others], moved[:3].copy()
    seen["counts"].clear()
    again = planned(dataclasses.replace(table, sensitive=moved)).suppressed_set
    assert [min(c[2], seen["order"].size) for c in seen["counts"]] == [taken]
    np.testing.assert_array_equal(again.decoys, suppressed.decoys)
