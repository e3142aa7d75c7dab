"""The manifest of a release cut in parts, one per shard, from the parts' own manifests.

Each shard plans its part against the histories of its own individuals (Wong et al., ICDE
2010, Lemma 4: an individual's breach depends only on the groups it was in, so a part that
meets the bound for each of its individuals meets it for the release). The release's manifest
states the same fields as a release cut whole (docs/contract.md §4), computed from the parts:

* **exact**: ``records_in``, ``published``, ``suppressed``, ``groups``, the group sizes
  (``avg`` = published / groups, ``max``, ``min``), ``suppression``, ``discernibility``
  (``sum |G|^2`` is each part's figure less its suppressed rows times its rows; the
  suppressed rows then cost the release's rows), ``breach.max``, ``breach.spent``,
  ``suppressed_set.rows`` and ``breach_max`` (each part's suppressed members already linked
  to the union);
* **exact from what the parts voted**: ``suppressed_set.share_max`` (the largest share of a
  protected value among the suppressed rows of every shard: an adversary sees them as one
  set, and each part links its suppressed rows to that union before it commits) and
  ``breach.p50`` / ``p99`` (the quantiles of every published individual's breach); without
  those, the largest of the parts' (a quantile of a union is at most the largest of its
  parts' quantiles; a share of a union of sets, at most the largest of their shares);
* **means of the parts**: ``ncp`` weighted by the parts' published rows (each part normalises
  a set QID by the values its own rows hold, so this differs slightly from one shard's figure),
  and the query errors weighted by the parts' queries, each part's queries drawn and answered
  within its own rows (smaller counts than one shard's queries: compare releases of one
  partition count with each other; ``benchmarks/shards.py`` scores the union).

``elapsed_s`` is the longest part's. Anything else a part manifest holds must be equal in
every part (``l``, ``strategy``, ``format``, ``schema``, ``virtual.assumption``), or the merge
refuses: parts of one release come from one configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.mechanisms.global_guarantee.plan import SuppressedUnion

__all__ = ["merge_part_assignments", "merge_part_manifests", "merge_part_private"]

_SAME = ("l", "strategy", "format", "schema")
_SUMS = ("records_in", "published", "suppressed", "groups")
_UTILITY = frozenset(
    {
        "avg_group_size",
        "max_group_size",
        "min_group_size",
        "groups",
        "published",
        "suppressed",
        "suppression",
        "ncp",
        "discernibility",
        "query_error",
        "query_error_median",
        "query_error_trimmed",
        "queries",
        "virtual",
    }
)


def merge_part_manifests(
    label: str,
    sequence: int,
    parts: Sequence[dict[str, Any]],
    union: SuppressedUnion | None = None,
    breach: NDArray[np.float64] | None = None,
) -> dict[str, Any]:
    """The manifest of release ``sequence`` (``label``) from its parts' manifests, shard 0
    first (module docstring); with the ``union`` of the parts' suppressed rows its share is
    exact, and with ``breach``, every published individual's breach over the parts, so are
    the breach quantiles.

    Raises
    ------
    ValueError
        No parts, a part of another release, a field that differs between parts where it
        must not, or a utility figure this merge does not know.
    """
    _check_parts(label, sequence, parts)
    manifest: dict[str, Any] = {"release": label, "sequence": sequence}
    for name in _SUMS:
        manifest[name] = sum(int(part[name]) for part in parts)
    for name in _SAME:
        manifest[name] = parts[0][name]
    manifest["breach"] = _breach([part["breach"] for part in parts], breach)
    protected = (parts[0].get("strategy") or {}).get("protected") or []
    manifest["suppressed_set"] = _suppressed_set(
        [part["suppressed_set"] for part in parts], union, protected
    )
    manifest["utility"] = _utility([part["utility"] for part in parts])
    manifest["elapsed_s"] = max(float(part["elapsed_s"]) for part in parts)
    if "past_horizon" in parts[0]:
        _check_same(parts, "past_horizon", lambda part: part.get("past_horizon"))
        manifest["past_horizon"] = parts[0]["past_horizon"]
    if "virtual" in parts[0]:
        _check_same(parts, "virtual", lambda part: part["virtual"]["assumption"])
        members = sum(int(part["virtual"]["members"]) for part in parts)
        manifest["virtual"] = {"members": members, "assumption": parts[0]["virtual"]["assumption"]}
    return manifest


def _check_parts(label: str, sequence: int, parts: Sequence[dict[str, Any]]) -> None:
    """Refuse no parts, a part of another release, parts that differ in :data:`_SAME` and a
    utility figure :func:`_utility` does not know."""
    if not parts:
        raise ValueError("a release has at least one part")
    for index, part in enumerate(parts):
        if part.get("release") != label or part.get("sequence") != sequence:
            raise ValueError(
                f"part {index} is of release {part.get('release')!r} "
                f"({part.get('sequence')}), not {label!r} ({sequence})"
            )
        for name in _SAME:
            if part.get(name) != parts[0].get(name):
                raise ValueError(f"the parts differ in {name!r}: one configuration per release")
        unknown = set(part.get("utility", {})) - _UTILITY
        if unknown:
            raise ValueError(f"cannot merge the utility figures {sorted(unknown)}")


def _check_same(
    parts: Sequence[dict[str, Any]], name: str, stated: Callable[[dict[str, Any]], Any]
) -> None:
    """Refuse parts whose ``stated`` figure of field ``name`` differs from the first part's."""
    if any(stated(part) != stated(parts[0]) for part in parts):
        raise ValueError(f"the parts differ in {name!r}: one configuration per release")


def _breach(parts: list[dict[str, Any]], breach: NDArray[np.float64] | None) -> dict[str, Any]:
    out = {
        "bound": parts[0]["bound"],
        "max": max(float(p["max"]) for p in parts),
        "p50": max(float(p["p50"]) for p in parts),
        "p99": max(float(p["p99"]) for p in parts),
        "spent": sum(int(p["spent"]) for p in parts),
        "spent_people": sum(int(p.get("spent_people", 0)) for p in parts),
    }
    if breach is not None:  # exact, as ReleasePlan.breach_summary computes them
        out["p50"] = float(np.quantile(breach, 0.5)) if breach.size else 0.0
        out["p99"] = float(np.quantile(breach, 0.99)) if breach.size else 0.0
    return out


def _suppressed_set(
    parts: list[dict[str, Any]], union: SuppressedUnion | None, protected: list[str]
) -> dict[str, Any]:
    share = max(float(p["share_max"]) for p in parts)
    if union is not None:  # exact: the largest share of a protected value in the union
        wanted = set(protected)
        share = max(
            (c / union.size for v, c in union.counts.items() if not wanted or v in wanted),
            default=0.0,
        )
    return {
        "rows": sum(int(p["rows"]) for p in parts),
        "share_max": share,
        "share_bound": parts[0]["share_bound"],
        "breach_max": max(float(p["breach_max"]) for p in parts),
    }


def _utility(parts: list[dict[str, Any]]) -> dict[str, Any]:
    groups = sum(int(p["groups"]) for p in parts)
    published = sum(int(p["published"]) for p in parts)
    suppressed = sum(int(p["suppressed"]) for p in parts)
    rows = published + suppressed
    squares = sum(
        float(p["discernibility"]) - float(p["suppressed"]) * (p["published"] + p["suppressed"])
        for p in parts
    )
    grouped = [p for p in parts if p["groups"]]
    out: dict[str, Any] = {
        "avg_group_size": published / groups if groups else 0.0,
        "max_group_size": max((int(p["max_group_size"]) for p in grouped), default=0),
        "min_group_size": min((int(p["min_group_size"]) for p in grouped), default=0),
        "groups": groups,
        "published": published,
        "suppressed": suppressed,
        "suppression": suppressed / rows if rows else 0.0,
        "ncp": _weighted(parts, "ncp", "published"),
        "discernibility": squares + float(suppressed) * float(rows),
    }
    for name in ("query_error", "query_error_median", "query_error_trimmed"):
        out[name] = _weighted([p for p in parts if p[name] is not None], name, "queries")
    out["queries"] = sum(int(p["queries"]) for p in parts)
    if out["queries"] == 0:
        for name in ("query_error", "query_error_median", "query_error_trimmed"):
            out[name] = None
    if "virtual" in parts[0]:
        out["virtual"] = sum(int(p["virtual"]) for p in parts)
    return out


def _weighted(parts: list[dict[str, Any]], name: str, weight: str) -> float:
    total = sum(float(p[weight]) for p in parts)
    if total == 0:
        return 0.0
    return sum(float(p[name]) * float(p[weight]) for p in parts) / total


def merge_part_assignments(parts: Sequence[bytes]) -> bytes:
    """``assignments-NNNN.csv`` of a release from its parts' (their group numbers already
    those of the release): the first part's header, then every part's rows, shard 0 first."""
    if not parts:
        raise ValueError("a release has at least one part")
    header = parts[0].partition(b"\n")[0].rstrip(b"\r")
    rows = []
    for index, data in enumerate(parts):
        head, _, body = data.partition(b"\n")
        if head.rstrip(b"\r") != header:  # never quoted: the line may hold ids
            raise ValueError(f"part {index}'s assignments have another header than part 0's")
        rows.append(body)
    return header + b"\r\n" + b"".join(rows)


def merge_part_private(
    label: str, sequence: int, parts: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The private record of a release (``private-NNNN.json``) from its parts': the suppressed
    set's rows, values, decoys and exempt members summed, the withheld and unplaced
    individuals of every part (each individual is in one shard)."""
    if not parts:
        raise ValueError("a release has at least one part")
    record: dict[str, Any] = {"release": label, "sequence": sequence}
    registries = {part["registry"] for part in parts if "registry" in part}
    if len(registries) > 1:
        raise ValueError("the parts name different registries: one configuration per release")
    if registries:
        record["registry"] = registries.pop()
    sensitive: dict[str, int] = {}
    for part in parts:
        for value, count in part["suppressed"]["sensitive"].items():
            sensitive[value] = sensitive.get(value, 0) + int(count)
    record["suppressed"] = {
        "rows": sum(int(part["suppressed"]["rows"]) for part in parts),
        "sensitive": sensitive,
        "decoys": sum(int(part["suppressed"]["decoys"]) for part in parts),
        "withheld": [i for part in parts for i in part["suppressed"]["withheld"]],
        "unplaced": [i for part in parts for i in part["suppressed"]["unplaced"]],
        "exempt_members": sum(int(part["suppressed"]["exempt_members"]) for part in parts),
    }
    return record
