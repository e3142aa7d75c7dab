"""The audit of a release of another ``[mechanism] kind``: its own verification of the
published files, found by kind in :data:`VERIFIERS` (the verification modules import no
planning code: only their kind's parameters and the privacy formulas).
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Lines = Sequence[Mapping[str, Any]]
SeriesVerifier = Callable[[Sequence[tuple[Mapping[str, Any], Lines]]], list[str]]

VERIFIERS: dict[str, str] = {
    "sampled-k-anonymity": "stream_release.mechanisms.sampled_k_anonymity.audit",
    "reconstruction-private-rr": "stream_release.mechanisms.reconstruction_rr.audit",
    "dp-sanitised": "stream_release.mechanisms.dp_sanitised.audit",
}
"""kind -> the module whose ``verify_series(releases)`` audits a series of that kind."""

_RELEASE_PREFIX = re.compile(r"^release (\d+): ")


def verify_mechanism(
    kind: str, releases: list[tuple[Any, dict[str, Any], list[dict[str, Any]]]]
) -> None:
    """Run the kind's verification over its releases ``(result, manifest, lines)``; append
    each problem to the release it names (``release N: ...``), else to the last one."""
    name = VERIFIERS.get(kind)
    if name is None:
        for result, _, _ in releases:
            result.problems.append(
                f"cannot verify: mechanism.kind = {kind!r} is not a kind this version knows"
            )
        return
    verify: SeriesVerifier = importlib.import_module(name).verify_series
    by_sequence = {result.sequence: result for result, _, _ in releases}
    for problem in verify([(manifest, lines) for _, manifest, lines in releases]):
        match = _RELEASE_PREFIX.match(problem)
        owner = by_sequence.get(int(match.group(1))) if match else None
        if owner is None:
            owner = releases[-1][0]
        owner.problems.append(problem[match.end() :] if match else problem)


def guarantee_summary(manifest: Mapping[str, Any]) -> str:
    """A kind's guarantee in a few words, e.g. ``epsilon 1, delta 4.07e-14 (series ...)``."""
    block = manifest.get("mechanism") or {}
    if not isinstance(block, Mapping):
        return ""
    epsilon, delta = block.get("epsilon"), block.get("delta")
    if not isinstance(epsilon, int | float) or not isinstance(delta, int | float):
        return ""
    text = f"epsilon {epsilon:g}, delta {delta:.3g}"
    total = block.get("series")
    if isinstance(total, Mapping) and isinstance(total.get("epsilon"), int | float):
        text += f" (series {total['epsilon']:g}, {total.get('delta', math.nan):.3g})"
    return text
