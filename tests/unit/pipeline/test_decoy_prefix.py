"""The decoys are the first groups of :func:`decoy_order`, whatever they hold (review of
issue 26): the series of ``test_suppressed_set.py`` never takes a decoy, so a planner that
reordered or skipped groups by their values passed the whole suite. Here a hand-built release
needs decoys, and the groups taken must be exactly a prefix of the order ``decoy_order``
returned, passed on unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.tables import encode_columns

import stream_release.pipeline.plan as plan_module
from stream_release.config import GroupingSettings
from stream_release.core.privacy.strategy import make_strategy
from stream_release.history.types import HistoryRows
from stream_release.pipeline.plan import plan_release

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
    seen: dict[str, Any] = {}
    order_of, protect = plan_module.decoy_order, plan_module.protect_suppressed_set

    def record_order(*args: Any, **kwargs: Any) -> Any:
        seen["order"] = order_of(*args, **kwargs)
        return seen["order"]

    def record_set(*args: Any, **kwargs: Any) -> Any:
        seen["passed"], seen["group"] = args[5], args[3]
        return protect(*args, **kwargs)

    monkeypatch.setattr(plan_module, "decoy_order", record_order)
    monkeypatch.setattr(plan_module, "protect_suppressed_set", record_set)
    plan = plan_release(
        table,
        history,
        ("z",),
        STRATEGY,
        protected=("a", "z"),  # groups differ in what they hold: some hold a protected value
        min_group_size=2,
        grouping=GroupingSettings(max_group_factor=4.0),
        rng=np.random.default_rng(seed),
    )
    suppressed = plan.suppressed_set
    assert suppressed.withheld.size == 3 and suppressed.decoys.size  # the case arises
    order, group = seen["order"], seen["group"]
    np.testing.assert_array_equal(seen["passed"], order)  # passed on as drawn
    taken = set(group[suppressed.decoys].tolist())
    assert taken == set(order[: len(taken)].tolist())  # a prefix, whatever the groups hold
    for g in taken:  # each taken whole
        assert set(np.flatnonzero(group == g).tolist()) <= set(suppressed.decoys.tolist())
