"""Audit of mode ``sampled-k-anonymity`` from its published files alone [LQS12].

Imports no planning code: only the mode's parameters
(:mod:`stream_release.config.mechanisms.sampled_k_anonymity`) and the privacy formulas.

References
----------
.. [LQS12] N. Li, W. Qardaji, D. Su. On Sampling, Anonymization, and Differential Privacy
   (or, K-Anonymization Meets Differential Privacy). ASIACCS 2012 (arXiv:1101.2604).
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

import numpy as np

from stream_release.config.mechanisms.sampled_k_anonymity import (
    _REL_TOL,
    KIND,
    SampledKAnonymitySettings,
    accounting,
)
from stream_release.core.privacy.sampling_dp_budget import compose_basic

__all__ = ["verify_release", "verify_series"]


def verify_release(manifest: Mapping[str, Any], lines: Sequence[Mapping[str, Any]]) -> list[str]:
    """Problems of one ``sampled-k-anonymity`` release, from its published files alone.

    Recomputes :math:`\\delta = d(k, \\beta, \\epsilon)` (Theorem 3.9 of [LQS12]_), the
    Chernoff bound, the floor and the worst cell size from the manifest's ``k, beta,
    epsilon`` and checks the manifest states them; checks that the parameters are valid
    (``epsilon >= -ln(1-beta)``, ``delta < beta``), that every published (generalized QID
    tuple, sensitive value) count is ``>= k``, that counts sum to each line's size, that QID
    cells are distinct, in canonical order, and generalized as the manifest's
    ``generalization`` says (``*`` for the top level of a QID without a hierarchy, a
    ``[lo, hi]`` bin of the stated width), and that ``published`` and ``groups`` match the
    lines. A series of one release must state its own figures as the series' total (later
    releases: :func:`verify_series`).

    Returns
    -------
    list of str, one line per problem; empty when the release passes.
    """
    block = _mapping(manifest.get("mechanism"))
    if block.get("kind") != KIND:
        return [f"mechanism kind is {block.get('kind')!r}, not {KIND!r}"]
    k, beta, epsilon = block.get("k"), block.get("beta"), block.get("epsilon")
    try:
        section = SampledKAnonymitySettings(
            k=k, beta=beta, epsilon=epsilon, **_generalization(block.get("generalization"))
        )
    except (ValueError, TypeError) as exc:
        return [f"manifest parameters are invalid: {' '.join(str(exc).split())}"]
    problems: list[str] = []
    figures = accounting(section.k, section.beta, section.epsilon)
    for key, name in (
        ("delta", "delta"),
        ("log10_delta", "log10_delta"),
        ("delta_chernoff", "delta_chernoff"),
        ("delta_floor", "delta_floor"),
        ("worst_group_size", "argmax_n"),
    ):
        stated, value = block.get(key), figures[name]
        if not _close(stated, value):
            problems.append(f"manifest mechanism.{key} = {stated!r}, recomputed {value!r}")
    if block.get("sensitive_in_cell") is not True:
        problems.append("manifest does not state sensitive_in_cell = true")
    problems += _check_lines(section, manifest, lines)
    series = block.get("series")
    if not isinstance(series, Mapping):
        problems.append("manifest mechanism.series is missing")
    elif manifest.get("sequence") == 1:
        problems += _check_series(series, 1, section.epsilon, float(figures["log_delta"]))
    return problems


def verify_series(
    releases: Sequence[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]],
) -> list[str]:
    """Problems of a series: :func:`verify_release` of each release (each prefixed
    ``release N:``), then its ``series`` total against basic composition of the per-release
    ``(epsilon, delta)`` of releases 1..N ([LQS12]_ §2.7), summed in log space for delta."""
    problems: list[str] = []
    epsilon, log_delta = 0.0, -math.inf
    for count, (manifest, lines) in enumerate(releases, start=1):
        label = f"release {manifest.get('sequence', count)}"
        problems.extend(f"{label}: {p}" for p in verify_release(manifest, lines))
        block = manifest.get("mechanism")
        if not isinstance(block, Mapping) or block.get("kind") != KIND:
            continue
        try:
            own_log = float(
                accounting(int(block["k"]), float(block["beta"]), float(block["epsilon"]))[
                    "log_delta"
                ]
            )
        except (KeyError, TypeError, ValueError):
            continue  # reported by verify_release
        epsilon, _ = compose_basic([(epsilon, 0.0), (float(block["epsilon"]), 0.0)])
        log_delta = float(np.logaddexp(log_delta, own_log))
        series = block.get("series")
        if isinstance(series, Mapping) and count > 1:
            problems.extend(
                f"{label}: {p}" for p in _check_series(series, count, epsilon, log_delta)
            )
    return problems


def _generalization(raw: Any) -> dict[str, dict[str, int]]:
    """``levels`` and ``widths`` from the manifest's ``generalization`` block."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"generalization = {raw!r} is not an object QID -> rule")
    levels, widths = {}, {}
    for name, rule in raw.items():
        if isinstance(rule, Mapping) and set(rule) == {"level"}:
            levels[name] = rule["level"]
        elif isinstance(rule, Mapping) and set(rule) == {"width"}:
            widths[name] = rule["width"]
        else:
            raise ValueError(f"generalization.{name} = {rule!r}: need {{level}} or {{width}}")
    return {"levels": levels, "widths": widths}


def _check_series(
    series: Mapping[str, Any], releases: int, epsilon: float, log_delta: float
) -> list[str]:
    problems = []
    if series.get("releases") != releases:
        problems.append(f"series.releases = {series.get('releases')!r}, expected {releases}")
    if not _close(series.get("epsilon"), epsilon):
        problems.append(
            f"series.epsilon = {series.get('epsilon')!r} but basic composition gives {epsilon!r}"
        )
    log10 = log_delta / math.log(10.0)
    if not _close(series.get("log10_delta"), log10):
        problems.append(
            f"series.log10_delta = {series.get('log10_delta')!r} but basic composition gives "
            f"{log10!r}"
        )
    if not _close(series.get("delta"), math.exp(log_delta)):
        problems.append(
            f"series.delta = {series.get('delta')!r} but basic composition gives "
            f"{math.exp(log_delta)!r}"
        )
    return problems


def _check_lines(
    section: SampledKAnonymitySettings,
    manifest: Mapping[str, Any],
    lines: Sequence[Mapping[str, Any]],
) -> list[str]:
    """The group lines (their counts and QID cells) and the manifest's ``published`` and
    ``groups`` against them; returns the problems."""
    problems: list[str] = []
    schema = _mapping(manifest.get("schema"))
    qids = list(schema.get("qid") or section.rules())
    if set(qids) != set(section.rules()):
        problems.append(f"schema.qid {qids} differ from the generalization's QIDs")
    seen: set[str] = set()
    published = 0
    for g, line in enumerate(lines):
        where = f"group {g}"
        counts = line.get("sensitive")
        size = line.get("size")
        if not isinstance(counts, Mapping) or not _is_int(size):
            problems.append(f"{where}: size or sensitive missing or malformed")
            continue
        problems += _check_counts(where, counts, size, section.k)
        published += int(size)
        problems += _check_cell(section, where, line.get("qid"), qids, seen)
    for key, value in (("published", published), ("groups", len(lines))):
        if key in manifest and manifest[key] != value:
            problems.append(f"manifest {key} = {manifest[key]!r} but the lines give {value}")
    return problems


def _check_counts(where: str, counts: Mapping[str, Any], size: int, k: int) -> list[str]:
    """A line's sensitive counts: each at least ``k`` and summing to its ``size``; returns the
    problems."""
    problems = []
    small = {v: c for v, c in counts.items() if not _is_int(c) or c < k}
    if small:
        value, count = next(iter(small.items()))
        problems.append(
            f"{where}: sensitive value {value!r} is published {count!r} times, below k = {k} "
            f"({len(small)} such values)"
        )
    if sum(c for c in counts.values() if _is_int(c)) != size:
        problems.append(f"{where}: size {size} but its sensitive counts sum differently")
    return problems


def _check_cell(
    section: SampledKAnonymitySettings, where: str, qid: Any, qids: list[str], seen: set[str]
) -> list[str]:
    """A line's QID cell: the QIDs ``qids`` in order, a cell no line before published (``seen``,
    to which it is added), its first value off the stated generalization; returns the
    problems."""
    if not isinstance(qid, Mapping) or list(qid) != qids:
        return [f"{where}: qid {qid!r} does not list the QIDs {qids} in order"]
    problems = []
    key = json.dumps(qid, sort_keys=True)
    if key in seen:
        problems.append(f"{where}: the QID cell {dict(qid)} appears on two lines")
    seen.add(key)
    for name, value in qid.items():
        problem = _check_value(section, name, value)
        if problem:
            problems.append(f"{where}: {problem}")
            break
    return problems


def _check_value(section: SampledKAnonymitySettings, name: str, value: Any) -> str | None:
    """Why a published QID value does not fit the stated generalization (None if it fits)."""
    width = section.widths.get(name)
    if width is not None:
        ok = (
            isinstance(value, list)
            and len(value) == 2
            and all(_is_int(v) for v in value)
            and value[0] % width == 0
            and value[1] - value[0] == width - 1
        )
        return None if ok else f"{name} = {value!r} is not a bin [lo, lo + {width - 1}]"
    if isinstance(value, list):
        return f"{name} = {value!r}: a level publishes one value or label, not a list"
    return None


def _close(stated: Any, value: float | int | bool) -> bool:
    if isinstance(stated, bool) or not isinstance(stated, numbers.Real):
        return False
    if math.isinf(value) or math.isinf(stated):
        return stated == value
    return math.isclose(float(stated), float(value), rel_tol=_REL_TOL, abs_tol=0.0) or (
        value == 0 and stated == 0
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
