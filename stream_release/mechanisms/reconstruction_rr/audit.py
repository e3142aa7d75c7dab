"""Audit of mode ``reconstruction-private-rr`` from its published files alone [WHF12].

:func:`verify_release` audits one release (the caps of Theorems 5.13 and 5.11, the group
lines' counts) and :func:`verify_series` the never-decreasing ledger across releases; both are
named by the mode's registration in :data:`stream_release.mechanisms.MECHANISMS`. The
mechanism itself is :mod:`stream_release.mechanisms.reconstruction_rr.mechanism`.

References
----------
.. [WHF12] K. Wang, C. Han, A. W.-C. Fu. Randomization Resilient To Sensitive
   Reconstruction. arXiv:1202.3179, 2012.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

from stream_release.config.mechanisms.reconstruction_rr import (
    KIND,
    ReconstructionRRSettings,
    _block,
    _canonical,
    _field,
)

__all__ = ["verify_release", "verify_series"]

_REL_TOL = 1e-9


def verify_release(manifest: Mapping[str, Any], lines: Sequence[Mapping[str, Any]]) -> list[str]:
    """Problems of one ``reconstruction-private-rr`` release, from its published files alone.

    Recomputes both caps of Theorems 5.13 and 5.11 (at ``f = 1``) from the manifest's
    ``p, epsilon, delta, bound, domain`` with :mod:`stream_release.core.privacy.reconstruction` and
    checks that the manifest states them, that every group line's ``trials`` and
    ``trials_total`` are within ``floor(cap)``, that its counts are consistent (sensitive
    counts are non-negative integers over the domain summing to ``size``, ``trials <= size``,
    ``trials <= trials_total``, ``weight = size / trials``), that micro groups are distinct, and
    that the manifest's totals match the lines.

    Parameters
    ----------
    manifest : the manifest (its ``mechanism`` block is used when present) or the block itself
    lines : the group lines of ``release-NNNN.jsonl``; this mode's fields (``trials``,
        ``trials_total``, ``weight``) at top level or under ``extra``

    Returns
    -------
    list of str, one line per problem; empty when the release passes.
    """
    block = _block(manifest)
    if block.get("kind") != KIND:
        return [f"mechanism kind is {block.get('kind')!r}, not {KIND!r}"]
    try:
        settings = ReconstructionRRSettings(
            p=block.get("p"),
            epsilon=block.get("epsilon"),
            delta=block.get("delta"),
            bound=block.get("bound"),
            domain=tuple(block.get("domain") or ()),
        )
    except (ValueError, TypeError) as exc:
        return [f"manifest parameters are invalid: {exc}"]
    return _check_caps(block, settings) + _check_lines(manifest, block, settings, lines)


def _check_lines(
    manifest: Mapping[str, Any],
    block: Mapping[str, Any],
    settings: ReconstructionRRSettings,
    lines: Sequence[Mapping[str, Any]],
) -> list[str]:
    """The group lines, each on its own and against the others (group numbers, micro groups),
    then the manifest's totals against those of the lines; returns the problems."""
    problems: list[str] = []
    domain = set(settings.domain)
    seen_groups: set[Any] = set()
    seen_qids: set[bytes] = set()
    qid_names: tuple[str, ...] | None = None
    total_trials = total_size = largest = largest_total = 0
    for index, line in enumerate(lines):
        where = f"line {index + 1} (group {line.get('group')!r})"
        if line.get("group") in seen_groups:
            problems.append(f"{where}: group number repeated")
        seen_groups.add(line.get("group"))
        for key in ("sequence", "release"):
            if key in line and key in manifest and line[key] != manifest[key]:
                problems.append(f"{where}: {key} = {line[key]!r}, manifest says {manifest[key]!r}")
        qid_names = _check_qid(where, line.get("qid"), qid_names, seen_qids, problems)
        counted = _check_trials(where, line, settings, domain, problems)
        if counted is None:
            continue
        size, trials, trials_total = counted
        total_trials += trials
        total_size += size
        largest = max(largest, trials)
        largest_total = max(largest_total, trials_total)
    if seen_groups and seen_groups != set(range(len(lines))):
        problems.append(f"group numbers are not 0..{len(lines) - 1}")
    for key, value in (
        ("groups", len(lines)),
        ("trials", total_trials),
        ("largest_trials", largest),
        ("largest_trials_total", largest_total),
        ("rows_published", total_size),
    ):
        if block.get(key) != value:
            problems.append(f"manifest {key} = {block.get(key)!r}, the lines give {value}")
    return problems


def _check_trials(
    where: str,
    line: Mapping[str, Any],
    settings: ReconstructionRRSettings,
    domain: set[str],
    problems: list[str],
) -> tuple[int, int, int] | None:
    """A line's ``size``, ``trials``, ``trials_total``, ``weight`` and sensitive counts, each
    problem appended to ``problems``.

    Returns
    -------
    ``(size, trials, trials_total)`` to add to the manifest's totals, ``trials_total`` as 0 when
    it is invalid or above the cap; None when ``size`` or ``trials`` is unusable (nothing
    further is checked).
    """
    cap = settings.max_trials
    size, trials, trials_total = (_field(line, k) for k in ("size", "trials", "trials_total"))
    weight = _field(line, "weight")
    if not (_is_int(size) and size >= 1):
        problems.append(f"{where}: size = {size!r}, need an integer >= 1")
        return None
    if not (_is_int(trials) and 1 <= trials <= size):
        problems.append(f"{where}: trials = {trials!r}, need an integer in [1, size = {size}]")
        return None
    if trials > cap:
        problems.append(
            f"{where}: trials = {trials} above the cap floor(s) = {cap} ({settings.bound}, "
            f"p = {settings.p}, epsilon = {settings.epsilon}, delta = {settings.delta}, "
            f"m = {settings.m})"
        )
    counted_total = 0
    if not (_is_int(trials_total) and trials <= trials_total):
        problems.append(
            f"{where}: trials_total = {trials_total!r}, need an integer >= trials = {trials}"
        )
    elif trials_total > cap:
        problems.append(
            f"{where}: trials_total = {trials_total} above the cap floor(s) = {cap} "
            f"({settings.bound}): the series published more trials than allowed"
        )
    else:
        counted_total = trials_total
    if not (_is_number(weight) and math.isclose(weight, size / trials, rel_tol=_REL_TOL)):
        problems.append(f"{where}: weight = {weight!r}, need size / trials = {size / trials!r}")
    problems.extend(_check_counts(where, line.get("sensitive"), size, domain))
    return size, trials, counted_total


def _check_caps(block: Mapping[str, Any], settings: ReconstructionRRSettings) -> list[str]:
    """The manifest's ``m``, ``cap`` and ``max_trials`` against those recomputed from its
    parameters (Theorems 5.13 and 5.11 of [WHF12] at ``f = 1``)."""
    problems = []
    if block.get("m") != settings.m:
        problems.append(f"manifest m = {block.get('m')!r} but its domain has {settings.m} values")
    cap_block = block.get("cap")
    stated = cap_block if isinstance(cap_block, Mapping) else {}
    for bound, value in settings.caps.items():
        got = stated.get(bound)
        if not _is_number(got) or not math.isclose(got, value, rel_tol=_REL_TOL):
            problems.append(
                f"manifest cap.{bound} = {got!r}, recomputed {value!r} from p, epsilon, delta, m"
            )
    if block.get("max_trials") != settings.max_trials:
        problems.append(
            f"manifest max_trials = {block.get('max_trials')!r}, recomputed "
            f"floor(cap.{settings.bound}) = {settings.max_trials}"
        )
    return problems


def _check_qid(
    where: str,
    qid: object,
    names_so_far: tuple[str, ...] | None,
    seen: set[bytes],
    problems: list[str],
) -> tuple[str, ...] | None:
    """A line's exact QIDs: present, the same attributes as the lines before (``names_so_far``)
    and a micro group not published before (``seen``); returns the attributes to compare the
    next lines with."""
    if not isinstance(qid, Mapping):
        problems.append(f"{where}: qid missing; a micro group publishes its exact QIDs")
        return names_so_far
    names = tuple(qid)
    if names_so_far is not None and names != names_so_far:
        problems.append(f"{where}: qid attributes {list(names)}, others {list(names_so_far)}")
    canonical = _canonical(qid)
    if canonical in seen:
        problems.append(f"{where}: micro group {dict(qid)} published twice")
    seen.add(canonical)
    return names if names_so_far is None else names_so_far


def verify_series(
    releases: Iterable[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]],
) -> list[str]:
    """Problems of a series: :func:`verify_release` of each release, then serial rule 2.

    A micro group (same exact QIDs) may never publish a smaller ``trials_total`` than in an
    earlier release, and every release must keep the first one's parameters.

    Parameters
    ----------
    releases : ``(manifest, lines)`` per release, in sequence order
    """
    problems: list[str] = []
    last: dict[bytes, tuple[int, Any]] = {}
    first_params: dict[str, Any] | None = None
    for manifest, lines in releases:
        label = f"release {manifest.get('sequence', '?')}"
        problems.extend(f"{label}: {p}" for p in verify_release(manifest, lines))
        block = _block(manifest)
        params = {k: block.get(k) for k in ("p", "epsilon", "delta", "bound", "domain")}
        if first_params is None:
            first_params = params
        elif params != first_params:
            problems.append(f"{label}: parameters {params} differ from the series' {first_params}")
        for line in lines:
            qid, total = line.get("qid"), _field(line, "trials_total")
            if not isinstance(qid, Mapping) or not _is_int(total):
                continue
            key = _canonical(qid)
            if key in last and total < last[key][0]:
                problems.append(
                    f"{label}: micro group {dict(qid)} has trials_total = {total}, down from "
                    f"{last[key][0]} in release {last[key][1]}; the ledger must never decrease"
                )
            last[key] = (total, manifest.get("sequence"))
    return problems


def _check_counts(where: str, sensitive: Any, size: int, domain: set[str]) -> list[str]:
    if not isinstance(sensitive, Mapping):
        return [f"{where}: sensitive = {sensitive!r}, need an object value -> count"]
    problems = []
    outside = sorted(set(sensitive) - domain)
    if outside:
        problems.append(f"{where}: sensitive values {outside} are not in the manifest's domain")
    counts = list(sensitive.values())
    if not all(_is_int(c) and c >= 0 for c in counts):
        problems.append(f"{where}: sensitive counts {counts} must be integers >= 0")
    elif sum(counts) != size:
        problems.append(f"{where}: sensitive counts sum to {sum(counts)}, size is {size}")
    return problems


def _is_int(x: object) -> TypeGuard[int]:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_number(x: object) -> TypeGuard[float]:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))
