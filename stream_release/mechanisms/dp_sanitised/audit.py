r"""Audit of mode ``dp-sanitised`` from its published files alone (Holohan, Leith and Mason
2014, [HLM14]).

:func:`verify_release` ``(manifest, lines)`` is the verifier named by the mode's registration
in :data:`stream_release.mechanisms.MECHANISMS`; the mechanism itself is
:mod:`stream_release.mechanisms.dp_sanitised.mechanism`.

References
----------
.. [HLM14] N. Holohan, D. J. Leith, O. Mason. Differential Privacy in Metric Spaces: Numerical,
   Categorical and Functional Data Under the One Roof. arXiv:1402.6124 (2014).
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np

from stream_release.config.mechanisms.dp_sanitised import (
    CAVEAT,
    EARLIER_CAVEATS,
    KIND,
    _entry,
    _fingerprint,
    numeric_table,
)
from stream_release.core.privacy.dp_budget import BUDGET_RTOL, split_budget
from stream_release.core.privacy.metric_dp_rr import rr_debiased_counts
from stream_release.core.privacy.validation import check_delta, check_epsilon
from stream_release.errors import InvalidParameter

__all__ = ["verify_release", "verify_series"]

_RTOL = 1e-9
_MAX_LINE_PROBLEMS = 20


def verify_release(manifest: Mapping[str, Any], lines: Sequence[Mapping[str, Any]]) -> list[str]:
    r"""Audit one ``dp-sanitised`` release from its manifest and group lines alone.

    Recomputes from the published parameters (per-record epsilon, delta, scale rule, weights,
    bounds, domains): the budget split and its basic composition, every Laplace scale
    (Example 5 and the tight rule), randomised-response probabilities (Example 6), expected
    errors and Theorem 6/7 lower bounds, the parameters digest; checks every numeric value
    inside its bounds (and on its grid), every category inside its domain, every line's
    sensitive counts summing to its size, no two lines with the same sanitised row, and the
    dashboard counts against the lines (:func:`~stream_release.core.privacy.metric_dp_rr.
    rr_debiased_counts` of the published sanitised values).

    Parameters
    ----------
    manifest : the release's manifest (its ``mechanism`` block is read), or the block itself
    lines : the release's group lines

    Returns
    -------
    list of str, one line per problem found; empty when the release is consistent.
    """
    block = manifest.get("mechanism", manifest) if isinstance(manifest, Mapping) else None
    if not isinstance(block, Mapping) or block.get("kind") != KIND:
        kind = block.get("kind") if isinstance(block, Mapping) else None
        return [f"manifest: mechanism.kind = {kind!r}, not {KIND!r}"]
    try:
        specs, eps, dlt, scale = _published_specs(block)
    except (KeyError, TypeError, ValueError) as exc:
        return [f"manifest: mechanism block unreadable ({exc}); cannot audit"]
    try:
        split = split_budget(eps, dlt, [s["weight"] for _, s in specs])
    except InvalidParameter as exc:
        return [f"manifest: the weights cannot split the budget ({exc})"]
    for (_, spec), e_j, d_j in zip(
        specs, split.epsilon.tolist(), split.delta.tolist(), strict=True
    ):
        spec.update(epsilon=e_j, delta=d_j)
    problems = _check_parameters(block, specs, eps, dlt, scale)
    problems += _check_lines(manifest, block, specs, lines)
    return problems


def _published_specs(
    block: Mapping[str, Any],
) -> tuple[list[tuple[str, dict[str, Any]]], float, float, str]:
    eps = check_epsilon(block["epsilon"], "mechanism.epsilon")
    dlt = check_delta(block["delta"], "mechanism.delta")
    if dlt >= 1.0:
        raise ValueError(f"mechanism.delta = {dlt!r} >= 1")
    scale = block["scale"]
    if scale not in ("tight", "paper"):
        raise ValueError(f"mechanism.scale = {scale!r}, not 'tight' or 'paper'")
    specs: list[tuple[str, dict[str, Any]]] = []
    qid = block["qid"]
    if not isinstance(qid, Mapping) or not qid:
        raise ValueError("mechanism.qid must map every QID name to its entry")
    for name, entry in qid.items():
        specs.append(("qid", {**_spec(f"mechanism.qid.{name}", entry), "name": name}))
    sens = block["sensitive"]
    if not isinstance(sens, Mapping):
        raise ValueError("mechanism.sensitive must be an object")
    if sens.get("sanitised"):
        spec = _spec("mechanism.sensitive", sens)
        if spec["type"] != "categorical":
            raise ValueError("mechanism.sensitive: type must be 'categorical'")
        specs.append(("sensitive", {**spec, "name": "sensitive"}))
    return specs, eps, dlt, scale


def _spec(where: str, entry: object) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where} must be an object")
    weight = entry["weight"]
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
        raise ValueError(f"{where}.weight = {weight!r} is not a number")
    if entry["type"] == "numeric":
        lo, hi = entry["bounds"]
        if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in (lo, hi)):
            raise ValueError(f"{where}.bounds = {entry['bounds']!r}: not two numbers")
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise ValueError(f"{where}.bounds = {entry['bounds']!r}: need finite lo <= hi")
        step = entry.get("resolution")
        if step is not None and not (isinstance(step, numbers.Real) and float(step) > 0):
            raise ValueError(f"{where}.resolution = {step!r}: not a number > 0")
        return {"type": "numeric", "bounds": [lo, hi], "resolution": step, "weight": weight}
    if entry["type"] == "categorical":
        domain = entry["domain"]
        if (
            not isinstance(domain, list)
            or not domain
            or not all(isinstance(v, str) for v in domain)
            or len(set(domain)) != len(domain)
        ):
            raise ValueError(f"{where}.domain: need a non-empty list of distinct strings")
        return {"type": "categorical", "domain": domain, "weight": weight}
    raise ValueError(f"{where}.type = {entry['type']!r}, not 'numeric' or 'categorical'")


def _close(a: object, b: object) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if not (isinstance(a, numbers.Real) and isinstance(b, numbers.Real)):
        return False
    return math.isclose(float(a), float(b), rel_tol=_RTOL, abs_tol=1e-12)


def _check_parameters(
    block: Mapping[str, Any],
    specs: list[tuple[str, dict[str, Any]]],
    eps: float,
    dlt: float,
    scale: str,
) -> list[str]:
    """The block's recomputable figures: each attribute's, the composition, the budget caps,
    the parameters digest, the caveat and ``refused_budget``; returns the problems."""
    problems = _check_attributes(block, specs, scale)
    problems += _check_budget(block, specs, eps, dlt)
    digest = _fingerprint(eps, dlt, scale, [(role, spec) for role, spec in specs]).hex()
    if block.get("parameters_digest") != digest:
        problems.append(
            f"mechanism.parameters_digest = {block.get('parameters_digest')!r}, but the "
            f"published parameters give {digest!r}"
        )
    if block.get("caveat") not in (CAVEAT, *EARLIER_CAVEATS):
        problems.append("mechanism.caveat: missing or altered (Theorem 7 needs outputs in D)")
    refused = block.get("refused_budget")
    if not _is_int_at_least(refused, 0):
        problems.append(f"mechanism.refused_budget = {refused!r}: must be an integer >= 0")
    return problems


def _check_attributes(
    block: Mapping[str, Any], specs: list[tuple[str, dict[str, Any]]], scale: str
) -> list[str]:
    """Every attribute's published figures (its share of the budget, its Laplace scales or
    randomised-response probabilities, errors and bounds) against those its parameters give;
    returns the problems."""
    problems: list[str] = []
    for role, spec in specs:
        e_j, d_j = spec["epsilon"], spec["delta"]
        where = f"mechanism.qid.{spec['name']}" if role == "qid" else "mechanism.sensitive"
        entry = block["qid"][spec["name"]] if role == "qid" else block["sensitive"]
        try:
            expected = {"epsilon": e_j, "delta": d_j, **_entry(spec, e_j, d_j, scale)}
        except InvalidParameter as exc:
            problems.append(f"{where}: no valid mechanism for these parameters ({exc})")
            continue
        for key, value in expected.items():
            if not _close(entry.get(key), value):
                problems.append(
                    f"{where}.{key} = {entry.get(key)!r}, but the published parameters give "
                    f"{value!r}"
                )
    return problems


def _check_budget(
    block: Mapping[str, Any], specs: list[tuple[str, dict[str, Any]]], eps: float, dlt: float
) -> list[str]:
    """The block's ``composition`` (the attributes' shares compose to one record's
    ``(eps, dlt)``) and ``budget`` (caps at least that); returns the problems."""
    problems = []
    comp = block.get("composition", {})
    if not (
        _close(comp.get("epsilon"), eps)
        and _close(comp.get("delta"), dlt)
        and _close(math.fsum(s["epsilon"] for _, s in specs), eps)
    ):
        problems.append(
            f"mechanism.composition = {comp!r}: the attributes' shares must compose (basic "
            f"composition) to the record's (epsilon, delta) = ({eps!r}, {dlt!r})"
        )
    budget = block.get("budget", {})
    cap_e, cap_d = budget.get("epsilon_budget"), budget.get("delta_budget")
    if not (
        isinstance(cap_e, numbers.Real)
        and isinstance(cap_d, numbers.Real)
        and eps <= float(cap_e) * (1 + BUDGET_RTOL)
        and dlt <= float(cap_d) * (1 + BUDGET_RTOL)
    ):
        problems.append(
            f"mechanism.budget = {budget!r}: caps must be numbers >= one record's "
            f"(epsilon, delta) = ({eps!r}, {dlt!r})"
        )
    return problems


def _qid_problems(
    qid: Mapping[str, Any], specs: Mapping[str, dict[str, Any]], domains: Mapping[str, set[Any]]
) -> list[str]:
    """What is wrong with a line's sanitised QID values: a categorical one outside its domain,
    a numeric one off its grid or bounds."""
    out = []
    for name, value in qid.items():
        if name in domains:
            ok = isinstance(value, str) and value in domains[name]
            problem = "" if ok else "is not in its domain"
        else:
            problem = _value_problem(specs[name], value)
        if problem:
            out.append(f"qid.{name} = {value!r} {problem}")
    return out


def _count_sensitive(
    sens: Mapping[str, Any], domain: set[Any] | None, totals: dict[str, int]
) -> tuple[int, list[str]]:
    """A line's sensitive counts added to ``totals``: the rows they count, and what is wrong
    with them (a count not an integer >= 1, a value outside the domain)."""
    counted, out = 0, []
    for value, count in sens.items():
        if not _is_int_at_least(count, 1):
            out.append(f"sensitive[{value!r}] = {count!r}, not an integer >= 1")
            continue
        if domain is not None and value not in domain:
            out.append(f"sensitive value {value!r} is not in mechanism.sensitive.domain")
        totals[value] = totals.get(value, 0) + count
        counted += count
    return counted, out


@dataclass(frozen=True)
class _Layout:
    """What every group line must hold, from the published specs: the QIDs (name -> spec, in
    the block's order), the domain of each categorical QID, and the sanitised sensitive
    attribute's spec and domain (None when it is published as is)."""

    qid: dict[str, dict[str, Any]]
    domains: dict[str, set[Any]]
    sensitive: dict[str, Any] | None
    sensitive_domain: set[Any] | None

    @classmethod
    def of(cls, specs: list[tuple[str, dict[str, Any]]]) -> _Layout:
        """The layout the published ``specs`` give."""
        qid = {s["name"]: s for role, s in specs if role == "qid"}
        sens = next((s for role, s in specs if role == "sensitive"), None)
        return cls(
            qid=qid,
            domains={n: set(s["domain"]) for n, s in qid.items() if s["type"] == "categorical"},
            sensitive=sens,
            sensitive_domain=None if sens is None else set(sens["domain"]),
        )


@dataclass
class _Tally:
    """What the group lines read so far hold: their group numbers, their sanitised rows, the
    rows they publish and the count of each sensitive value."""

    groups: set[str] = field(default_factory=set)
    rows: set[str] = field(default_factory=set)
    published: int = 0
    totals: dict[str, int] = field(default_factory=dict)


def _check_lines(
    manifest: Mapping[str, Any],
    block: Mapping[str, Any],
    specs: list[tuple[str, dict[str, Any]]],
    lines: Sequence[Mapping[str, Any]],
) -> list[str]:
    """The group lines (the first :data:`_MAX_LINE_PROBLEMS` of their problems, then how many
    more), then the published row count and the dashboard counts against them; returns the
    problems."""
    problems: list[str] = []
    layout = _Layout.of(specs)
    tally = _Tally()
    bad = 0
    for i, line in enumerate(lines):
        texts = [f"line {i + 1}: {t}" for t in _line_problems(i, line, manifest, layout, tally)]
        problems += texts[: max(_MAX_LINE_PROBLEMS - bad, 0)]
        bad += len(texts)
    if bad > _MAX_LINE_PROBLEMS:
        problems.append(f"... and {bad - _MAX_LINE_PROBLEMS} more line problems")
    published = tally.published
    for where, value in (("mechanism.published", block.get("published")),
                         ("manifest.published", manifest.get("published", published))):  # fmt: skip
        if value != published:
            problems.append(f"{where} = {value!r}, but the lines hold {published}")
    problems += _check_counts(block.get("counts"), layout.sensitive, tally.totals, published)
    return problems


def _line_problems(
    index: int, line: object, manifest: Mapping[str, Any], layout: _Layout, tally: _Tally
) -> list[str]:
    """What is wrong with the ``index``-th group line (texts without the line's number); adds
    what it holds to ``tally``."""
    if not isinstance(line, Mapping):
        return ["not an object"]
    out = _label_problems(index, line, manifest, tally.groups)
    size = line.get("size")
    if not _is_int_at_least(size, 1):
        out.append(f"size = {size!r}, not an integer >= 1")
        size = 0
    tally.published += size
    qid = line.get("qid")
    if not isinstance(qid, Mapping) or set(qid) != set(layout.qid):
        found = sorted(qid) if isinstance(qid, Mapping) else qid
        out.append(f"qid has {found!r}, need exactly {sorted(layout.qid)}")
        return out
    out += _qid_problems(qid, layout.qid, layout.domains)
    row = json.dumps([qid[name] for name in layout.qid])
    if row in tally.rows:
        out.append(f"the sanitised row {row} is already another line's (not aggregated)")
    tally.rows.add(row)
    sens = line.get("sensitive")
    if not isinstance(sens, Mapping):
        out.append("sensitive is not an object of value counts")
        return out
    counted, texts = _count_sensitive(sens, layout.sensitive_domain, tally.totals)
    out += texts
    if counted != size:
        out.append(f"the sensitive counts sum to {counted}, size is {size}")
    return out


def _label_problems(
    index: int, line: Mapping[str, Any], manifest: Mapping[str, Any], groups: set[str]
) -> list[str]:
    """What is wrong with a line's labels: its ``release`` or ``sequence`` not the manifest's,
    its group number (by default its ``index``) already in ``groups``, to which it is added."""
    out = [
        f"{key} = {line[key]!r}, the manifest's is {manifest[key]!r}"
        for key in ("release", "sequence")
        if key in manifest and key in line and line[key] != manifest[key]
    ]
    group = repr(line.get("group", index))
    if group in groups:
        out.append(f"group {group} appears twice")
    groups.add(group)
    return out


def _is_int_at_least(value: object, low: int) -> TypeGuard[int]:
    """Whether ``value`` is an integer (not a bool) ``>= low``."""
    return not isinstance(value, bool) and isinstance(value, int) and value >= low


def _value_problem(spec: dict[str, Any], value: object) -> str:
    """What is wrong with a numeric QID's published value ("" if nothing)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return "is not a number"
    lo, hi = spec["bounds"]
    v = float(value)
    if not (math.isfinite(v) and lo <= v <= hi):
        return f"is outside its bounds [{lo!r}, {hi!r}]"
    if hi == lo:
        return ""
    table = numeric_table(spec, spec["epsilon"])
    j = table.grid_index(np.array([v]))
    if v != float(table.value(j)[0]):
        return f"is not a point lo + k * {table.resolution!r} of its grid"
    return ""


def _check_counts(
    counts: object, sens_spec: dict[str, Any] | None, totals: dict[str, int], n: int
) -> list[str]:
    if not isinstance(counts, Mapping):
        return ["mechanism.counts: missing"]
    problems: list[str] = []
    if counts.get("n") != n:
        problems.append(f"mechanism.counts.n = {counts.get('n')!r}, but the lines hold {n}")
    estimate, variance = counts.get("estimate"), counts.get("variance")
    if not isinstance(estimate, Mapping) or not isinstance(variance, Mapping):
        return [*problems, "mechanism.counts: estimate and variance must be objects"]
    if sens_spec is None:
        labels = list(estimate)
        if set(totals) - set(labels):
            problems.append(
                f"mechanism.counts: no estimate for {sorted(set(totals) - set(labels))}"
            )
        want_e = [float(totals.get(v, 0)) for v in labels]
        want_v = [0.0] * len(labels)
    else:
        labels = list(sens_spec["domain"])
        codes = np.repeat(np.arange(len(labels)), [totals.get(v, 0) for v in labels])
        e_s, d_s = sens_spec["epsilon"], sens_spec["delta"]
        if len(labels) < 2 or (e_s == 0.0 and d_s == 0.0):
            want_e = np.bincount(codes, minlength=len(labels)).astype(float).tolist()
            want_v = [0.0] * len(labels)
        else:
            est = rr_debiased_counts(codes, len(labels), e_s, d_s)
            want_e, want_v = est.estimate.tolist(), est.variance.tolist()
    if list(estimate) != labels or list(variance) != labels:
        problems.append(f"mechanism.counts: categories {list(estimate)}, need {labels}")
        return problems
    for label, e, v in zip(labels, want_e, want_v, strict=True):
        if not (_close(estimate[label], e) and _close(variance[label], v)):
            problems.append(
                f"mechanism.counts[{label!r}] = ({estimate[label]!r}, {variance[label]!r}), but "
                f"the lines give (estimate, variance) = ({e!r}, {v!r})"
            )
    return problems


def verify_series(
    releases: Sequence[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]],
) -> list[str]:
    """:func:`verify_release` of every release of a series, each problem prefixed
    ``release N:`` (the per-person ledger is private: nothing is checked across releases)."""
    problems: list[str] = []
    for count, (manifest, lines) in enumerate(releases, start=1):
        label = f"release {manifest.get('sequence', count)}"
        problems.extend(f"{label}: {p}" for p in verify_release(manifest, lines))
    return problems
