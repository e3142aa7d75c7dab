"""Settings of mode ``dp-sanitised``: the ``[mechanism.dp_sanitised]`` table
(:class:`DPSanitisedSettings`, checked against the schema when the configuration is loaded),
and the parameters its audit recomputes: the kind, the caveat every manifest states, each
attribute's public figures and the fingerprint of the parameters.
Shared by the mechanism (:mod:`stream_release.mechanisms.dp_sanitised.mechanism`) and its audit
(:mod:`stream_release.mechanisms.dp_sanitised.audit`), which import nothing else of each
other.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from stream_release.core.privacy.discrete_laplace import GridLaplace, grid_laplace
from stream_release.core.privacy.dp_budget import BUDGET_RTOL
from stream_release.core.privacy.metric_dp_laplace import laplace_scale_paper, laplace_scale_tight
from stream_release.core.privacy.metric_dp_lower_bounds import (
    error_lower_bound_compact,
    error_lower_bound_finite,
)
from stream_release.core.privacy.metric_dp_rr import rr_expected_error, rr_keep
from stream_release.core.privacy.validation import check_delta, check_epsilon
from stream_release.errors import ConfigError

if TYPE_CHECKING:
    from stream_release.config._sections import ConfiguredSections

__all__ = [
    "CAVEAT",
    "EARLIER_CAVEATS",
    "KIND",
    "SAMPLER",
    "DPSanitisedSettings",
    "SchemaLike",
    "numeric_table",
]

SAMPLER = "grid-laplace-v1"
"""The numeric sampler (:mod:`stream_release.core.privacy.discrete_laplace`): part of every
record's fingerprint, so a record sanitised by another sampler is charged afresh."""

KIND = "dp-sanitised"

_CAVEAT_CLAIM = (
    "Per-record bounds of [HLM14] (1-row mechanism, Eq. 13), not bounds for aggregate counts. "
    "Theorem 6 (numeric) holds for any output space, so it bounds the clamped discrete "
    "Laplace on a grid that numeric attributes use (pure epsilon; a delta share given to one "
    "goes unused). Theorem 7 (categorical, "
    "discrete metric) is proved only for mechanisms whose outputs lie in the domain D, as "
    "randomised response's do; for outputs outside D only (1 - delta)(kappa/2) m / "
    "(m + e^epsilon) holds "
)
CAVEAT = _CAVEAT_CLAIM + "(Theorem 7's proof with radius kappa/2)."
EARLIER_CAVEATS = (_CAVEAT_CLAIM + "(digest section 4).",)
"""The caveat as manifests stated it before (it pointed at a file users do not have): still
accepted by the audit, so that a series published then still passes."""


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


WHERE = "mechanism.dp_sanitised"


class SchemaLike(Protocol):
    """What :class:`DPSanitised` reads of the schema (``config.SchemaSettings`` fits)."""

    @property
    def qid(self) -> tuple[str, ...]: ...

    @property
    def hierarchies(self) -> Mapping[str, Any]: ...

    @property
    def numeric(self) -> tuple[str, ...] | None: ...


class DPSanitisedSettings(BaseModel):
    """The ``[mechanism.dp_sanitised]`` table: parameters of :class:`DPSanitised`.

    ``epsilon``, ``delta``: one record's budget, split over its sanitised attributes
    (Theorem 5 of [HLM14]: the same for the whole release). ``scale``: ``"tight"`` (smallest
    (epsilon, delta)-DP Laplace scale) or ``"paper"`` (Example 5); equal when ``delta = 0``.
    ``epsilon_budget``, ``delta_budget``: a person's lifetime caps over record versions.
    ``bounds``: ``[lo, hi]`` of every numeric QID, fixed without looking at the data.
    ``resolution``: the grid step of a numeric QID's published values (default: 1 for an
    integer interval of 16 to 1024 units, else a 256th of it). ``domains``: the
    category list of every ``set`` QID. ``sanitise_sensitive`` (default yes) with
    ``sensitive_domain`` (its category list). ``weights`` (QID name -> weight, every QID;
    default equal) and ``sensitive_weight``: the budget split.

    Example (TOML)::

        [mechanism]
        kind = "dp-sanitised"
        [mechanism.dp_sanitised]
        epsilon = 2.0
        epsilon_budget = 6.0
        bounds = {age = [17, 90]}
        sensitive_domain = ["Adm-clerical", "Craft-repair", ...]
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    epsilon: float
    delta: float = 0.0
    scale: Literal["tight", "paper"] = "tight"
    epsilon_budget: float
    delta_budget: float = 0.0
    bounds: dict[str, tuple[float, float]] = Field(default_factory=dict)
    resolution: dict[str, float] = Field(default_factory=dict)
    domains: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    sanitise_sensitive: bool = True
    sensitive_domain: tuple[str, ...] | None = None
    weights: dict[str, float] | None = None
    sensitive_weight: float = 1.0

    @model_validator(mode="after")
    def _check(self) -> DPSanitisedSettings:
        eps, dlt = self._check_budget()
        self._check_bounds()
        self._check_resolution()
        self._check_domains()
        self._check_weights(eps, dlt)
        return self

    def _check_budget(self) -> tuple[float, float]:
        """Check one record's ``(epsilon, delta)`` and the lifetime caps above it; returns the
        record's ``(epsilon, delta)``."""
        eps = check_epsilon(self.epsilon, "epsilon")
        dlt = check_delta(self.delta, "delta")
        if dlt >= 1.0:
            raise ValueError(f"delta = {self.delta!r}: must be < 1 (e.g. delta = 0 or 1e-6)")
        cap_e = check_epsilon(self.epsilon_budget, "epsilon_budget")
        cap_d = check_delta(self.delta_budget, "delta_budget")
        if eps > cap_e * (1.0 + BUDGET_RTOL) or dlt > cap_d * (1.0 + BUDGET_RTOL):  # as the ledger
            raise ValueError(
                f"epsilon_budget = {cap_e!r}, delta_budget = {cap_d!r}: below one record's "
                f"(epsilon, delta) = ({eps!r}, {dlt!r}), so no record could be published; set "
                f"epsilon_budget >= epsilon and delta_budget >= delta (e.g. epsilon_budget = "
                f"{3 * eps:g} for three record versions per person)"
            )
        return eps, dlt

    def _check_bounds(self) -> None:
        """Check every numeric QID's ``[lo, hi]``: finite, ordered, of a finite width."""
        for name, (lo, hi) in self.bounds.items():
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise ValueError(
                    f"bounds.{name} = [{lo!r}, {hi!r}]: need finite lo <= hi, fixed without "
                    f"looking at the data (e.g. bounds = {{{name} = [0, 100]}})"
                )
            if not math.isfinite(hi - lo):
                raise ValueError(f"bounds.{name} = [{lo!r}, {hi!r}]: hi - lo overflows")

    def _check_resolution(self) -> None:
        """Check every grid step: of a QID with bounds, a finite number > 0."""
        for name, step in self.resolution.items():
            if name not in self.bounds:
                raise ValueError(
                    f"resolution.{name} = {step!r}: {name!r} has no bounds; a grid step is for "
                    "a numeric QID listed in bounds"
                )
            if not (step > 0.0 and math.isfinite(step)):
                raise ValueError(f"resolution.{name} = {step!r}: must be a finite number > 0")

    def _check_domains(self) -> None:
        """Check the category lists: of QIDs without bounds, and of the sensitive attribute
        when it is sanitised."""
        both = sorted(set(self.bounds) & set(self.domains))
        if both:
            raise ValueError(
                f"bounds and domains both name {both}: a QID is numeric (bounds) or "
                "categorical (domains), not both; remove one"
            )
        for name, values in self.domains.items():
            _check_domain(f"domains.{name}", values)
        if self.sanitise_sensitive:
            if self.sensitive_domain is None:
                raise ValueError(
                    "sensitive_domain = None: the sensitive attribute is sanitised "
                    "(sanitise_sensitive = true) over a fixed list of its categories; list "
                    'every possible value (e.g. sensitive_domain = ["flu", "cold", "hiv"]), '
                    "not only those in the data, or set sanitise_sensitive = false"
                )
            _check_domain("sensitive_domain", self.sensitive_domain)

    def _check_weights(self, eps: float, dlt: float) -> None:
        """Check the weights of the budget split: finite and >= 0, and a share of the record's
        ``(eps, dlt)`` for every numeric QID of a non-zero width."""
        weights = dict(self.weights or {})
        for name, w in [*weights.items(), ("sensitive_weight", self.sensitive_weight)]:
            if not (w >= 0.0 and math.isfinite(w)):
                label = name if name == "sensitive_weight" else f"weights.{name}"
                raise ValueError(f"{label} = {w!r}: must be a finite number >= 0 (e.g. 1)")
        for name, (lo, hi) in self.bounds.items():
            zero = (self.weights is not None and weights.get(name, 1.0) == 0.0) or (
                eps == 0.0 and dlt == 0.0
            )
            if hi > lo and zero:
                raise ValueError(
                    f"weights.{name} = 0 (or epsilon = delta = 0): numeric QID {name!r} with "
                    f"bounds [{lo!r}, {hi!r}] gets no budget and no finite Laplace scale can "
                    "hide it; give it a positive weight"
                )

    def check_settings(self, settings: ConfiguredSections) -> None:
        """Check the table against the rest of the configuration when it is loaded: every QID
        of ``settings.schema`` has a data-independent domain (a numeric QID its bounds, a
        ``set`` QID its domain list, a hierarchy QID nothing here), every name is a QID, and
        ``settings.output.format`` is ``generalized``. Raises ``ValueError`` naming the key,
        the value and the fix."""
        fmt = settings.output.format
        if fmt != "generalized":
            raise ValueError(
                f"{WHERE}: output.format = {fmt!r}, but this mode publishes each sanitised "
                "row's values in the group line; set output.format = 'generalized'"
            )
        try:
            check_schema(self, settings.schema)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None


def _check_domain(field: str, values: Sequence[str]) -> None:
    if len(values) == 0:
        raise ValueError(f"{field} = []: list every category of the attribute (at least one)")
    seen: set[str] = set()
    for v in values:
        if v in seen:
            raise ValueError(f"{field}: {v!r} listed twice; list each category once")
        seen.add(v)


def check_schema(s: DPSanitisedSettings, schema: SchemaLike) -> None:
    """Every QID of ``schema`` has a data-independent domain; raises ConfigError."""
    qid = tuple(schema.qid)
    numeric = None if schema.numeric is None else set(schema.numeric)
    check_names(s, qid)
    for name in qid:
        if name in schema.hierarchies:
            check_hierarchy(s, name)
        elif numeric is not None and name in numeric:
            check_numeric(s, name)
        elif name not in s.bounds and name not in s.domains:
            raise ConfigError(no_domain(name))


def check_names(s: DPSanitisedSettings, qid: Sequence[str]) -> None:
    known = set(qid)
    for field, names in (
        ("bounds", s.bounds),
        ("domains", s.domains),
        ("weights", s.weights or {}),
    ):
        unknown = sorted(set(names) - known)
        if unknown:
            raise ConfigError(
                f"{WHERE}.{field} names {unknown}, which are not QIDs (schema.qid = "
                f"{list(qid)}); fix the names or remove them"
            )
    if s.weights is not None:
        missing = [q for q in qid if q not in s.weights]
        if missing:
            raise ConfigError(
                f"{WHERE}.weights has no weight for {missing}: give every QID a weight (and "
                "sensitive_weight for the sensitive attribute), or drop weights for an equal split"
            )


def check_numeric(s: DPSanitisedSettings, name: str) -> None:
    if name in s.domains:
        raise ConfigError(
            f"{WHERE}.domains.{name}: QID {name!r} is numeric; give {WHERE}.bounds.{name} "
            "= [lo, hi] instead, or make it categorical by leaving it out of schema.numeric"
        )
    if name not in s.bounds:
        raise ConfigError(no_bounds(name))


def check_hierarchy(s: DPSanitisedSettings, name: str) -> None:
    if name in s.bounds or name in s.domains:
        where = "bounds" if name in s.bounds else "domains"
        raise ConfigError(
            f"{WHERE}.{where}.{name}: QID {name!r} has a hierarchy, so it is published as one "
            f"of the hierarchy's leaves; remove {where}.{name} or its hierarchy"
        )


def no_bounds(name: str) -> str:
    return (
        f"{WHERE}.bounds has no entry for numeric QID {name!r}: Laplace sanitisation needs "
        f"bounds fixed without looking at the data; add bounds = {{{name} = [lo, hi]}} "
        f"(e.g. {name} = [0, 100]) to [{WHERE}]; values outside are clipped, never dropped"
    )


def no_domain(name: str) -> str:
    return (
        f"{WHERE}: QID {name!r} has no data-independent domain: give {WHERE}.bounds.{name} "
        f"= [lo, hi] if it is numeric, a hierarchy (schema.hierarchies.{name}), or list every "
        f"category in {WHERE}.domains.{name} (the categories present in the data would reveal "
        "who is in it)"
    )
