"""The files of one release against each other, for every kind: group numbers, sizes, counts.

Each group's ``size`` is its sensitive counts plus its ``virtual`` members, its listed members
(anatomy) and its assigned ids; no id twice; the virtual members assigned to a group; the
manifest's ``groups``, ``records_in``, ``published`` and ``suppressed`` and its ``virtual``
block. A shard's part numbers its groups from ``first_group``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray


def from_first_group(
    manifest: dict[str, Any],
    lines: list[dict[str, Any]],
    assigned: NDArray[np.int64],
    problems: list[str],
) -> NDArray[np.int64]:
    """A shard's part of a release numbers its groups from ``first_group`` (its manifest, which
    is never published; 0 when absent): the lines' and the assignments' numbers less it, so
    every check reads groups 0..G-1. A number below it cannot be a group of the part and
    becomes one past the last (reported by the structure check)."""
    first = manifest.get("first_group", 0)
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        problems.append(f"first_group = {first!r} is not a group number")
        return assigned
    if not first:
        return assigned
    for line in lines:
        line["group"] = int(line["group"]) - first
    shifted = np.where(assigned >= 0, assigned - first, assigned)
    shifted[(assigned >= 0) & (shifted < 0)] = len(lines)
    return shifted


def check_structure(
    manifest: dict[str, Any],
    lines: list[dict[str, Any]],
    ids: list[str],
    assigned: NDArray[np.int64],
    virtual: NDArray[np.bool_],
    min_size: int,
    problems: list[str],
) -> NDArray[np.bool_]:
    """The files against each other; returns which assigned ids are published. A group's
    ``size`` is its sensitive counts plus its ``virtual`` members (none without the field),
    each listed in the assignments with ``virtual`` 1 and a group."""
    n_groups = len(lines)
    sizes = np.array([int(line["size"]) for line in lines], dtype=np.int64)
    if [int(line["group"]) for line in lines] != list(range(n_groups)):
        problems.append("group ids are not 0..G-1 in order")
    stated = _check_sizes(lines, sizes, min_size, problems)
    published = assigned >= 0
    if np.any(assigned >= n_groups):
        problems.append(f"an id is assigned to group {int(assigned.max())}, which does not exist")
        published &= assigned < n_groups
    figures: dict[str, int] = {"groups": n_groups}
    if ids:
        _check_assignments(ids, assigned, published, virtual, sizes, stated, problems)
        figures.update(
            records_in=int(np.count_nonzero(~virtual)),
            published=int(np.count_nonzero(published & ~virtual)),
            suppressed=int(np.count_nonzero(~published & ~virtual)),
        )
    else:
        figures["published"] = int(sizes.sum() - stated.sum())
    _check_virtual_block(manifest, int(stated.sum()), problems)
    for key, value in figures.items():
        if key in manifest and manifest[key] != value:
            problems.append(f"manifest {key} = {manifest[key]} but the files give {value}")
    return published


def _check_sizes(
    lines: list[dict[str, Any]], sizes: NDArray[np.int64], min_size: int, problems: list[str]
) -> NDArray[np.int64]:
    """Each group's ``size`` against its sensitive counts, its virtual members, its listed
    members and ``min_size``; returns each group's virtual members (0 for a malformed count)."""
    stated = np.zeros(len(lines), dtype=np.int64)
    for g, line in enumerate(lines):
        fake = line.get("virtual", 0)
        if not isinstance(fake, int) or isinstance(fake, bool) or fake < 0:
            problems.append(f"group {g}: virtual = {fake!r} is not a count")
            fake = 0
        stated[g] = fake
        total = sum(int(c) for c in line["sensitive"].values())
        if total + fake != sizes[g]:
            problems.append(
                f"group {g}: size {sizes[g]} but its sensitive counts sum to {total} and it "
                f"has {fake} virtual members"
            )
        if "members" in line and len(line["members"]) != sizes[g]:
            problems.append(f"group {g}: size {sizes[g]} but {len(line['members'])} members listed")
        if sizes[g] < min_size:
            problems.append(f"group {g}: size {sizes[g]} below min_group_size {min_size}")
    return stated


def _check_assignments(
    ids: list[str],
    assigned: NDArray[np.int64],
    published: NDArray[np.bool_],
    virtual: NDArray[np.bool_],
    sizes: NDArray[np.int64],
    stated: NDArray[np.int64],
    problems: list[str],
) -> None:
    """The assigned ids against the groups: each group's ``sizes`` and ``stated`` virtual
    members, no id twice, every virtual member in a group (``published``)."""
    n_groups = sizes.shape[0]
    per_group = np.bincount(assigned[published], minlength=n_groups)[:n_groups]
    bad = np.flatnonzero(per_group != sizes)
    if bad.size:
        g = int(bad[0])
        problems.append(
            f"group {g}: size {sizes[g]} but {per_group[g]} ids assigned ({bad.size} groups differ)"
        )
    if len(set(ids)) != len(ids):
        problems.append("an id appears twice in the assignments")
    if np.any(virtual & ~published):
        problems.append("a virtual member is assigned to no group (it is never suppressed)")
    per_group = np.bincount(assigned[published & virtual], minlength=n_groups)[:n_groups]
    if np.any(per_group != stated):
        g = int(np.flatnonzero(per_group != stated)[0])
        problems.append(
            f"group {g}: {stated[g]} virtual members stated but {per_group[g]} assigned"
        )


def _check_virtual_block(manifest: dict[str, Any], stated: int, problems: list[str]) -> None:
    """The manifest's ``virtual`` block against the groups' virtual members."""
    if "virtual" not in manifest:
        if stated:
            problems.append("groups state virtual members but the manifest has no virtual block")
        return
    block = manifest["virtual"]  # an object: the manifest was parsed (release_format)
    if block.get("members") != stated:
        problems.append(
            f"manifest virtual.members = {block.get('members')!r} but the groups state {stated}"
        )
    assumption = block.get("assumption")
    if not isinstance(assumption, str) or "cannot tell who is" not in assumption:
        problems.append(
            "manifest virtual.assumption does not state that the guarantee needs an adversary "
            "who cannot tell who is in a snapshot"
        )
    utility = manifest.get("utility") or {}
    if "virtual" in utility and utility["virtual"] != stated:
        problems.append(
            f"manifest utility.virtual = {utility['virtual']!r} but the groups state {stated}"
        )
