"""The plan of mode ``dp-sanitised`` for one table: which attribute is sanitised how.

Each QID and, when ``sanitise_sensitive`` is set, the sensitive attribute gets its share of the
record's (epsilon, delta) (basic composition, [X], :func:`~stream_release.core.privacy.
dp_budget.split_budget`) and its 1-row mechanism of [HLM14]: the grid Laplace of its configured
bounds (numeric, :mod:`stream_release.core.privacy.discrete_laplace`) or k-ary randomised
response over its data-independent domain (categorical: hierarchy leaves or a configured list).
The plan's fingerprint keys every record's uniforms (:mod:`~stream_release.mechanisms.
dp_sanitised.sanitise`), so changed parameters draw fresh ones and are charged again.

[HLM14]: N. Holohan, D. J. Leith, O. Mason, Differential Privacy in Metric Spaces,
arXiv:1402.6124 (2014); full reference and digest in :mod:`stream_release.core.privacy.metric_dp`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stream_release.config.mechanisms.dp_sanitised import (
    WHERE,
    DPSanitisedSettings,
    _entry,
    _fingerprint,
    check_hierarchy,
    check_names,
    check_numeric,
    no_domain,
    numeric_table,
)
from stream_release.core.privacy.discrete_laplace import GridLaplace
from stream_release.core.privacy.dp_budget import split_budget
from stream_release.core.table import EncodedTable
from stream_release.errors import ConfigError, SchemaError

__all__ = ["SanitisedAttribute", "TablePlan", "make_plan", "table_signature"]


@dataclass(frozen=True)
class SanitisedAttribute:
    """One sanitised attribute: its mechanism and the public entry of the manifest."""

    name: str
    numeric: bool
    epsilon: float
    delta: float
    entry: dict[str, Any]
    table: GridLaplace | None = None
    labels: tuple[str, ...] = ()
    keep: float = 1.0


@dataclass(frozen=True)
class TablePlan:
    """The mechanism of every attribute of tables with one signature (names, kinds, leaves)."""

    qid: tuple[SanitisedAttribute, ...]
    sensitive: SanitisedAttribute | None
    fingerprint: bytes

    @property
    def sanitised(self) -> tuple[SanitisedAttribute, ...]:
        return self.qid if self.sensitive is None else (*self.qid, self.sensitive)


def table_signature(table: EncodedTable) -> tuple[Any, ...]:
    """What the plan of ``table`` depends on: each attribute's name, kind and, for a hierarchy
    attribute, its leaves; tables with one signature share one plan."""
    return tuple(
        (a.name, a.kind, tuple(a.domain.tolist()) if a.kind == "hierarchy" else None)
        for a in table.attributes
    )


def make_plan(s: DPSanitisedSettings, table: EncodedTable) -> TablePlan:
    """The plan for ``table``'s attributes, checked against the settings ``s``.

    Raises
    ------
    ConfigError
        A QID without a data-independent domain in the settings, a setting naming an unknown
        QID, every attribute with weight 0.
    SchemaError
        A QID encoded as numeric that the settings list as categorical, or the reverse.
    """
    check_names(s, table.qid_names)
    specs: list[tuple[str, dict[str, Any]]] = []
    for attribute in table.attributes:
        name = attribute.name
        spec: dict[str, Any]
        if attribute.kind == "numeric":
            if name in s.domains:  # detected from the data (schema.numeric unset)
                raise SchemaError(
                    f"QID {name!r}: every value of this snapshot is a number, so it was "
                    f"encoded as numeric, but {WHERE}.domains lists its categories; "
                    f"declare schema.numeric (without {name!r}) so it stays categorical"
                )
            check_numeric(s, name)
            spec = {
                "type": "numeric",
                "bounds": list(s.bounds[name]),
                "resolution": s.resolution.get(name),
            }
        elif attribute.kind == "hierarchy":
            check_hierarchy(s, name)
            leaves = [str(v) for v in attribute.domain.tolist()]
            spec = {"type": "categorical", "domain": leaves, "source": "hierarchy"}
        else:
            if name in s.bounds:  # detected from the data (schema.numeric unset)
                raise SchemaError(
                    f"QID {name!r}: a value of this snapshot is not a number, but "
                    f"{WHERE}.bounds gives it bounds; fix the value, or declare "
                    f"schema.numeric = [{name!r}, ...] so bad values are rejected on input"
                )
            if name not in s.domains:
                raise ConfigError(no_domain(name))
            spec = {"type": "categorical", "domain": list(s.domains[name])}
            spec["source"] = "configured"
        spec["weight"] = (s.weights or {}).get(name, 1.0)
        specs.append(("qid", {"name": name, **spec}))
    if s.sanitise_sensitive:
        spec = {"name": "sensitive", "type": "categorical"}
        spec.update(domain=list(s.sensitive_domain or ()), source="configured")
        specs.append(("sensitive", {**spec, "weight": s.sensitive_weight}))
    weights = [spec["weight"] for _, spec in specs]
    if not any(w > 0 for w in weights):
        raise ConfigError(
            f"{WHERE}.weights: every attribute has weight 0; give at least one a positive weight"
        )
    split = split_budget(s.epsilon, s.delta, weights)
    for (_, spec), e_j, d_j in zip(
        specs, split.epsilon.tolist(), split.delta.tolist(), strict=True
    ):
        spec.update(epsilon=e_j, delta=d_j)
    attrs = [_sanitised_attribute(spec, s) for _, spec in specs]
    sensitive = attrs.pop() if s.sanitise_sensitive else None
    return TablePlan(tuple(attrs), sensitive, _fingerprint(s.epsilon, s.delta, s.scale, specs))


def _sanitised_attribute(spec: dict[str, Any], s: DPSanitisedSettings) -> SanitisedAttribute:
    fig = _entry(spec, spec["epsilon"], spec["delta"], s.scale)
    if spec["type"] == "numeric":
        resolution = s.resolution.get(spec["name"])
        head = {"type": "numeric", "bounds": spec["bounds"], "resolution": resolution}
    else:
        head = {"type": "categorical", "domain": spec["domain"], "source": spec["source"]}
    entry = {**head, **{k: spec[k] for k in ("weight", "epsilon", "delta")}, **fig}
    if spec["type"] == "numeric":
        return SanitisedAttribute(
            spec["name"], True, spec["epsilon"], spec["delta"], entry,
            table=numeric_table(spec, spec["epsilon"]),
        )  # fmt: skip
    return SanitisedAttribute(
        spec["name"], False, spec["epsilon"], spec["delta"], entry,
        labels=tuple(spec["domain"]), keep=fig["keep"],
    )  # fmt: skip
