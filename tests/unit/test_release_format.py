"""The format of a release's files (:mod:`stream_release.release_format`): a parsed manifest
refuses what no renderer writes (a number that is not finite, a field stated as ``null``), and a
manifest keeps the ``null`` the format states (no horizon) when it is published again."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pydantic import ValidationError
from support.manifests import guarantee_manifest

from stream_release.release_format import GuaranteeManifest, Manifest

GOOD = guarantee_manifest(1).document()


def _with(**fields: Any) -> dict[str, Any]:
    document = json.loads(json.dumps(GOOD))
    for dotted, value in fields.items():
        *path, last = dotted.split("__")
        target = document
        for key in path:
            target = target[key]
        target[last] = value
    return document


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"breach__p50": math.nan}, "finite number"),
        ({"breach__max": math.inf}, "finite number"),
        ({"l": math.inf}, "finite number"),
        ({"strategy__k_prime": None}, "k_prime is null"),
        ({"strategy__min_group_size": None}, "min_group_size is null"),
        ({"virtual": None}, "virtual is null"),
        ({"suppressed_set": None}, "suppressed_set is null"),
    ],
)
def test_a_parsed_manifest_refuses_what_no_renderer_writes(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        Manifest.parse(_with(**fields))


def test_no_horizon_is_stated_and_kept() -> None:
    document = _with(strategy__horizon=None)
    parsed = Manifest.parse(document)
    assert isinstance(parsed, GuaranteeManifest)
    assert parsed.document()["strategy"]["horizon"] is None
    assert "horizon" not in Manifest.parse(GOOD).document()["strategy"]  # never stated: left out


def test_a_manifest_is_published_as_it_was_given() -> None:
    assert Manifest.parse(GOOD).document() == GOOD
    assert list(Manifest.parse(GOOD).document()) == list(GOOD)


def test_a_guarantee_release_reads_as_one_line_with_its_breach_and_people_past_it() -> None:
    utility = {
        "avg_group_size": 3.0,
        "max_group_size": 3,
        "query_error": 1.02,
        "query_error_median": 0.38,
        "query_error_trimmed": 0.7,
    }
    line = guarantee_manifest(2, utility=utility).summary()
    assert line == (
        "release    2 r2: 3 published, 0 suppressed, 1 groups (avg 3.00, max 3), "
        "breach max 0.4000 <= 0.5000, 0 people past 1/l, "
        "query error median 0.380 trimmed 0.700 mean 1.020"
    )
    spent = guarantee_manifest(
        5,
        breach={"bound": 0.5, "max": 1.0, "p50": 0.4, "p99": 0.9, "spent": 7, "spent_people": 3},
        strategy={"name": "localized", "l": 2.0, "base_ratio": 2.0, "horizon": 4},
        past_horizon=True,
    ).summary()
    assert "BREACH: breach max 1.0000 > 0.5000" in spent
    assert "3 people past 1/l (7 pairs), past the horizon of 4" in spent
    assert spent.endswith("query error none (no query)")


def test_a_companion_release_reads_as_one_line_with_its_guarantee() -> None:
    document = {
        "release": "t1",
        "sequence": 1,
        "published": 950,
        "groups": 120,
        "mechanism": {
            "kind": "dp-sanitised",
            "epsilon": 1.0,
            "delta": 1e-6,
            "series": {"epsilon": 3.0, "delta": 3e-6},
        },
        "utility": {"avg_group_size": 7.916, "max_group_size": 15},
    }
    manifest = Manifest.parse(document)
    assert manifest.summary() == (
        "release    1 t1: 950 published, 120 groups (avg 7.92, max 15), dp-sanitised: "
        "epsilon 1, delta 1e-06 (series: epsilon 3, delta 3e-06)"
    )
    assert manifest.logged() == {
        "sequence": 1,
        "published": 950,
        "groups": 120,
        "mechanism": "dp-sanitised",
    }
    assert "suppressed" not in manifest.logged()  # not a figure the mechanism publishes
