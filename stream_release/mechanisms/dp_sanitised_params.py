"""Parameters of mode ``dp-sanitised`` its audit recomputes: the kind, the caveat every
manifest states, each attribute's public figures and the fingerprint of the parameters.
Shared by the mechanism (:mod:`stream_release.mechanisms.dp_sanitised`) and its audit
(:mod:`stream_release.mechanisms.dp_sanitised_audit`), which import nothing else of each
other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from stream_release.privacy.metric_dp import (
    error_lower_bound_compact,
    error_lower_bound_finite,
    laplace_expected_error,
    laplace_scale_paper,
    laplace_scale_tight,
    rr_expected_error,
    rr_keep,
)

__all__ = ["CAVEAT", "KIND"]

KIND = "dp-sanitised"

CAVEAT = (
    "Per-record bounds of [HLM14] (1-row mechanism, Eq. 13), not bounds for aggregate counts. "
    "Theorem 6 (numeric) holds for real-valued outputs too (balls taken in the output space), "
    "so it bounds the clamped and the unclamped Laplace alike. Theorem 7 (categorical, "
    "discrete metric) is proved only for mechanisms whose outputs lie in the domain D, as "
    "randomised response's do; for outputs outside D only (1 - delta)(kappa/2) m / "
    "(m + e^epsilon) holds (digest section 4)."
)


def _entry(spec: dict[str, Any], epsilon: float, delta: float, scale: str) -> dict[str, Any]:
    """Recomputable public figures of one attribute from its public parameters."""
    if spec["type"] == "numeric":
        lo, hi = spec["bounds"]
        w = hi - lo
        b_paper = laplace_scale_paper(w, epsilon, delta)
        b_tight = laplace_scale_tight(w, epsilon, delta)
        b = b_tight if scale == "tight" else b_paper
        err = laplace_expected_error(w, epsilon, delta, scale=scale, clamped=True)  # type: ignore[arg-type]
        lb = error_lower_bound_compact(w, epsilon, delta)
        return {
            "scale": b,
            "scale_paper": b_paper,
            "scale_tight": b_tight,
            "expected_error": err,
            "expected_error_unclamped": b,
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


def _fingerprint(
    epsilon: float, delta: float, scale: str, specs: Sequence[tuple[str, dict[str, Any]]]
) -> bytes:
    """Digest of everything that determines a record's sanitised value from its uniforms."""
    canon = [
        [role, s["name"], s["type"], s.get("bounds"), s.get("domain"), s["epsilon"], s["delta"]]
        for role, s in specs
    ]
    text = json.dumps([KIND, epsilon, delta, scale, canon], separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16, person=b"sr-dp-params").digest()
