"""The int-encoded snapshot every algorithm works on (STYLE.md rule 10: encode once).

Codes are order-preserving so that a contiguous code range is a QID-local set:

* ``numeric``: ``domain`` holds the distinct values present, ascending (float64); a group is
  published as ``[lo, hi]``.
* ``hierarchy``: ``domain`` holds *every leaf of the configured hierarchy* in depth-first order
  (siblings adjacent, the file's order kept among siblings), so the leaves under any node form
  one contiguous code range and the lowest common ancestor of a set of codes is the lowest
  common ancestor of its minimum and maximum. ``levels[c, h]`` is the id of leaf ``c``'s
  ancestor at level ``h`` (``h = 0`` the leaf itself, the last level ``*``); ``labels[h][id]``
  is that ancestor's label.
* ``set``: ``domain`` holds the distinct values present, sorted; a group is published as the
  list of its values (or the value itself when there is one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

AttributeKind = Literal["numeric", "hierarchy", "set"]


@dataclass(frozen=True, eq=False)
class Attribute:
    """One quasi-identifier's encoding."""

    name: str
    kind: AttributeKind
    domain: NDArray[np.generic]
    """(c,) decoded value of every code, in code order."""
    levels: NDArray[np.int32] | None = None
    """hierarchy only: (c, height) ancestor id of each leaf per level; column 0 = the code."""
    labels: tuple[tuple[str, ...], ...] | None = None
    """hierarchy only: ``labels[h][ancestor id]``."""

    @property
    def size(self) -> int:
        """Number of codes (hierarchy: leaves of the whole hierarchy)."""
        return int(self.domain.shape[0])


@dataclass(frozen=True, eq=False)
class EncodedTable:
    """A snapshot after validation and encoding.

    ``ids`` (n,) object (str); ``qid`` (n, d) int32 codes, column j for ``attributes[j]``;
    ``sensitive`` (n,) int32 codes into ``sensitive_values`` (sorted, distinct, all present).
    """

    ids: NDArray[np.object_]
    qid: NDArray[np.int32]
    sensitive: NDArray[np.int32]
    sensitive_values: tuple[str, ...]
    attributes: tuple[Attribute, ...]

    @property
    def n_rows(self) -> int:
        return int(self.qid.shape[0])

    @property
    def qid_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    def take(self, rows: NDArray[np.integer]) -> EncodedTable:
        """The table restricted to / reordered by ``rows`` (same encoding)."""
        return EncodedTable(
            self.ids[rows],
            self.qid[rows],
            self.sensitive[rows],
            self.sensitive_values,
            self.attributes,
        )
