"""Parameters of mode ``dp-sanitised`` its audit recomputes: the kind, the caveat every
manifest states, each attribute's public figures and the fingerprint of the parameters.
Shared by the mechanism (:mod:`stream_release.mechanisms.dp_sanitised.mechanism`) and its audit
(:mod:`stream_release.mechanisms.dp_sanitised.audit`), which import nothing else of each
other.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from stream_release.core.privacy.discrete_laplace import GridLaplace, grid_laplace
from stream_release.core.privacy.metric_dp import (
    error_lower_bound_compact,
    error_lower_bound_finite,
    laplace_scale_paper,
    laplace_scale_tight,
    rr_expected_error,
    rr_keep,
)

__all__ = ["CAVEAT", "KIND", "SAMPLER", "numeric_table"]

SAMPLER = "grid-laplace-v1"
"""The numeric sampler (:mod:`stream_release.core.privacy.discrete_laplace`): part of every
record's fingerprint, so a record sanitised by another sampler is charged afresh."""

KIND = "dp-sanitised"

CAVEAT = (
    "Per-record bounds of [HLM14] (1-row mechanism, Eq. 13), not bounds for aggregate counts. "
    "Theorem 6 (numeric) holds for any output space, so it bounds the clamped discrete "
    "Laplace on a grid that numeric attributes use (pure epsilon; a delta share given to one "
    "goes unused). Theorem 7 (categorical, "
    "discrete metric) is proved only for mechanisms whose outputs lie in the domain D, as "
    "randomised response's do; for outputs outside D only (1 - delta)(kappa/2) m / "
    "(m + e^epsilon) holds (digest section 4)."
)


def numeric_table(spec: dict[str, Any], epsilon: float) -> GridLaplace:
    """The grid Laplace of a numeric attribute's public parameters (``bounds``, the optional
    ``resolution``, its ``epsilon`` share); made once per parameters."""
    lo, hi = spec["bounds"]
    resolution = spec.get("resolution")
    return _grid(
        float(lo), float(hi), float(epsilon), None if resolution is None else float(resolution)
    )


@functools.lru_cache(maxsize=256)
def _grid(lo: float, hi: float, epsilon: float, resolution: float | None) -> GridLaplace:
    return grid_laplace(lo, hi, epsilon, resolution=resolution)


def _entry(spec: dict[str, Any], epsilon: float, delta: float, scale: str) -> dict[str, Any]:
    """Recomputable public figures of one attribute from its public parameters.

    A numeric attribute: its grid Laplace (``grid_step``, ``steps``, ``q``, the realized
    epsilon, the ``scale`` it amounts to, its exact worst-case expected error) beside the
    continuous Laplace scales of Example 5 of [HLM14] at the same (epsilon, delta)
    (``scale_paper``, ``scale_tight``, for reference) and Theorem 6's lower bound.
    """
    if spec["type"] == "numeric":
        lo, hi = spec["bounds"]
        w = hi - lo
        lb = error_lower_bound_compact(w, epsilon, delta)
        if w == 0:
            return {"sampler": SAMPLER, "grid_step": 0.0, "steps": 0, "q": 0.0,
                    "epsilon_realized": 0.0, "scale": 0.0, "scale_paper": 0.0,
                    "scale_tight": 0.0, "expected_error": 0.0, "lower_bound": lb,
                    "theorem": "6", "ratio": None}  # fmt: skip
        table = numeric_table(spec, epsilon)
        err = table.expected_error()
        return {
            "sampler": SAMPLER,
            "grid_step": table.resolution,
            "steps": table.steps,
            "q": table.q,
            "epsilon_realized": table.epsilon_realized,
            "scale": table.scale,
            "scale_paper": laplace_scale_paper(w, epsilon, delta),
            "scale_tight": laplace_scale_tight(w, epsilon, delta),
            "expected_error": err,
            "lower_bound": lb,
            "theorem": "6",
            "ratio": err / lb if lb > 0 else None,
        }
    k = len(spec["domain"])
    keep, p = rr_keep(k, epsilon, delta)
    err = rr_expected_error(k, epsilon, delta)
    lb = error_lower_bound_finite(k, epsilon, delta, outputs_in_domain=True)
    return {
        "domain_size": k,
        "keep": keep,
        "p_other": p,
        "expected_error": err,
        "lower_bound": lb,
        "theorem": "7",
        "ratio": err / lb if lb > 0 else None,
    }


def _table_digest(spec: dict[str, Any]) -> list[Any] | None:
    """``[steps, q, digest of the thresholds]`` of a numeric attribute's table."""
    bounds = spec.get("bounds")
    if spec["type"] != "numeric" or not bounds or bounds[0] == bounds[1]:
        return None
    table = numeric_table(spec, spec["epsilon"])
    digest = hashlib.blake2b(table.thresholds.tobytes(), digest_size=16).hexdigest()
    return [table.steps, table.q, digest]


def _fingerprint(
    epsilon: float, delta: float, scale: str, specs: Sequence[tuple[str, dict[str, Any]]]
) -> bytes:
    """Digest of everything that determines a record's sanitised value from its uniforms:
    the parameters and, for a numeric attribute, the sampling table itself (its steps, ``q``
    and thresholds), so that a change of the table's construction charges records again."""
    canon = [
        [
            role,
            s["name"],
            s["type"],
            s.get("bounds"),
            s.get("resolution"),
            s.get("domain"),
            s["epsilon"],
            s["delta"],
            _table_digest(s),
        ]
        for role, s in specs
    ]
    text = json.dumps([KIND, SAMPLER, epsilon, delta, scale, canon], separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16, person=b"sr-dp-params").digest()
