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
from typing import Any

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
    digest = _fingerprint(eps, dlt, scale, [(role, spec) for role, spec in specs]).hex()
    if block.get("parameters_digest") != digest:
        problems.append(
            f"mechanism.parameters_digest = {block.get('parameters_digest')!r}, but the "
            f"published parameters give {digest!r}"
        )
    if block.get("caveat") not in (CAVEAT, *EARLIER_CAVEATS):
        problems.append("mechanism.caveat: missing or altered (Theorem 7 needs outputs in D)")
    refused = block.get("refused_budget")
    if isinstance(refused, bool) or not isinstance(refused, int) or refused < 0:
        problems.append(f"mechanism.refused_budget = {refused!r}: must be an integer >= 0")
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
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            out.append(f"sensitive[{value!r}] = {count!r}, not an integer >= 1")
            continue
        if domain is not None and value not in domain:
            out.append(f"sensitive value {value!r} is not in mechanism.sensitive.domain")
        totals[value] = totals.get(value, 0) + count
        counted += count
    return counted, out


def _check_lines(
    manifest: Mapping[str, Any],
    block: Mapping[str, Any],
    specs: list[tuple[str, dict[str, Any]]],
    lines: Sequence[Mapping[str, Any]],
) -> list[str]:
    problems: list[str] = []
    qid_specs = {s["name"]: s for role, s in specs if role == "qid"}
    domains = {n: set(s["domain"]) for n, s in qid_specs.items() if s["type"] == "categorical"}
    sens_spec = next((s for role, s in specs if role == "sensitive"), None)
    sens_domain = None if sens_spec is None else set(sens_spec["domain"])
    totals: dict[str, int] = {}
    seen_rows: set[str] = set()
    seen_groups: set[str] = set()
    published = 0
    bad = 0

    def report(text: str) -> None:
        nonlocal bad
        bad += 1
        if bad <= _MAX_LINE_PROBLEMS:
            problems.append(text)

    for i, line in enumerate(lines):
        where = f"line {i + 1}"
        if not isinstance(line, Mapping):
            report(f"{where}: not an object")
            continue
        for field in ("release", "sequence"):
            if field in manifest and field in line and line[field] != manifest[field]:
                report(f"{where}: {field} = {line[field]!r}, the manifest's is {manifest[field]!r}")
        group = repr(line.get("group", i))
        if group in seen_groups:
            report(f"{where}: group {group} appears twice")
        seen_groups.add(group)
        size = line.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            report(f"{where}: size = {size!r}, not an integer >= 1")
            size = 0
        published += size
        qid = line.get("qid")
        if not isinstance(qid, Mapping) or set(qid) != set(qid_specs):
            found = sorted(qid) if isinstance(qid, Mapping) else qid
            report(f"{where}: qid has {found!r}, need exactly {sorted(qid_specs)}")
            continue
        for text in _qid_problems(qid, qid_specs, domains):
            report(f"{where}: {text}")
        row = json.dumps([qid[name] for name in qid_specs])
        if row in seen_rows:
            report(f"{where}: the sanitised row {row} is already another line's (not aggregated)")
        seen_rows.add(row)
        sens = line.get("sensitive")
        if not isinstance(sens, Mapping):
            report(f"{where}: sensitive is not an object of value counts")
            continue
        counted, texts = _count_sensitive(sens, sens_domain, totals)
        for text in texts:
            report(f"{where}: {text}")
        if counted != size:
            report(f"{where}: the sensitive counts sum to {counted}, size is {size}")
    if bad > _MAX_LINE_PROBLEMS:
        problems.append(f"... and {bad - _MAX_LINE_PROBLEMS} more line problems")
    for where, value in (("mechanism.published", block.get("published")),
                         ("manifest.published", manifest.get("published", published))):  # fmt: skip
        if value != published:
            problems.append(f"{where} = {value!r}, but the lines hold {published}")
    problems += _check_counts(block.get("counts"), sens_spec, totals, published)
    return problems


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
