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
