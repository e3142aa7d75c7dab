"""Small valid manifests of the format (:mod:`stream_release.release_format`), for the tests
that need a release's files without planning one."""

from __future__ import annotations

from typing import Any

from stream_release.release_format import GuaranteeManifest, Manifest


def guarantee_manifest(sequence: int = 1, **fields: Any) -> GuaranteeManifest:
    """The manifest of a one-group release of 3 rows under the global guarantee (l = 2),
    with ``fields`` replaced."""
    document: dict[str, Any] = {
        "release": f"r{sequence}",
        "sequence": sequence,
        "records_in": 3,
        "published": 3,
        "suppressed": 0,
        "groups": 1,
        "l": 2.0,
        "strategy": {"name": "constant-ratio", "l": 2.0, "k_prime": 3, "base_ratio": 4.85},
        "breach": {"bound": 0.5, "max": 0.4, "p50": 0.4, "p99": 0.4},
        "utility": {},
        "elapsed_s": 0.0,
        **fields,
    }
    manifest = Manifest.parse(document)
    assert isinstance(manifest, GuaranteeManifest)
    return manifest
