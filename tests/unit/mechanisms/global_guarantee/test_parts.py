"""The manifest of a release cut in parts, from the parts' manifests."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from stream_release.core.utility.groups import discernibility, group_size_stats
from stream_release.mechanisms.global_guarantee.parts import merge_part_manifests


def part(group: np.ndarray, *, ncp: float, errors: tuple[float, float, float], queries: int,
         breach: tuple[float, float, float], share: float) -> dict[str, Any]:  # fmt: skip
    """A part manifest whose size figures are computed from ``group`` (row -> group, -1
    suppressed), as render does."""
    stats = group_size_stats(group)
    utility: dict[str, Any] = dict(stats)
    utility["ncp"] = ncp
    utility["discernibility"] = discernibility(group, group.shape[0])
    utility["query_error"], utility["query_error_median"], utility["query_error_trimmed"] = errors
    utility["queries"] = queries
    return {
        "release": "r",
        "sequence": 4,
        "records_in": int(group.shape[0]),
        "published": int(stats["published"]),
        "suppressed": int(stats["suppressed"]),
        "groups": int(stats["groups"]),
        "l": 2,
        "strategy": {"name": "constant-ratio"},
        "format": "generalized",
        "schema": {"id": "id"},
        "breach": {"bound": 0.5, "max": breach[0], "p50": breach[1], "p99": breach[2], "spent": 1},
        "suppressed_set": {
            "rows": int(stats["suppressed"]),
            "share_max": share,
            "share_bound": 0.5,
            "breach_max": 0.25,
        },
        "utility": utility,
        "elapsed_s": 0.5,
    }


A = np.array([0, 0, 0, 1, 1, 1, 1, -1, -1])
B = np.array([0, 0, 0, 0, 0, 1, 1, 1, -1, 2, 2, 2])


def test_counts_and_sizes_are_those_of_the_union() -> None:
    first = part(A, ncp=0.2, errors=(1.0, 0.5, 0.8), queries=100, breach=(0.4, 0.1, 0.3), share=0.5)
    second = part(
        B, ncp=0.4, errors=(2.0, 1.0, 1.4), queries=300, breach=(0.3, 0.2, 0.25), share=0.0
    )
    merged = merge_part_manifests("r", 4, [first, second])
    union = np.concatenate([A, np.where(B >= 0, B + 2, B)])  # B's groups after A's
    exact = group_size_stats(union)
    for name, value in exact.items():
        assert merged["utility"][name] == pytest.approx(value), name
    assert merged["utility"]["discernibility"] == pytest.approx(discernibility(union, union.size))
    assert (merged["records_in"], merged["published"], merged["suppressed"], merged["groups"]) == (
        21, 18, 3, 5,
    )  # fmt: skip
    # NCP weighted by published rows (7 and 11), query errors by queries (100 and 300)
    assert merged["utility"]["ncp"] == pytest.approx((0.2 * 7 + 0.4 * 11) / 18)
    assert merged["utility"]["query_error_median"] == pytest.approx((0.5 * 100 + 1.0 * 300) / 400)
    assert merged["utility"]["queries"] == 400
    # quantiles and shares: the largest part's, never below the union's
    assert merged["breach"] == {
        "bound": 0.5, "max": 0.4, "p50": 0.2, "p99": 0.3, "spent": 2, "spent_people": 0
    }  # fmt: skip
    assert merged["suppressed_set"]["share_max"] == 0.5
    assert merged["suppressed_set"]["rows"] == 3 and "decoys" not in merged["suppressed_set"]


def test_parts_of_another_release_or_configuration_are_refused() -> None:
    first = part(A, ncp=0.2, errors=(1.0, 0.5, 0.8), queries=100, breach=(0.4, 0.1, 0.3), share=0.5)
    other = copy.deepcopy(first)
    other["l"] = 3
    with pytest.raises(ValueError, match="differ in 'l'"):
        merge_part_manifests("r", 4, [first, other])
    with pytest.raises(ValueError, match="not 'r' \\(5\\)"):
        merge_part_manifests("r", 5, [first])
    odd = copy.deepcopy(first)
    odd["utility"]["new_figure"] = 1.0
    with pytest.raises(ValueError, match="new_figure"):
        merge_part_manifests("r", 4, [odd])
    with pytest.raises(ValueError, match="at least one part"):
        merge_part_manifests("r", 4, [])
