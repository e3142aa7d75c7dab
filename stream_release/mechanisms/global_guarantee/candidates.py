"""The virtual candidates of a release: the people of the population register (``[virtual]
registry``) absent from its snapshot, joined to it (Wong et al. 2010, §8;
:mod:`stream_release.core.grouping.virtual`).

The register is read and pseudonymised once per publisher (:meth:`CandidatePool.read`); each
release then takes the people of the pool its snapshot does not hold
(:meth:`CandidatePool.join_absent`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from stream_release.config import SchemaSettings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.core.grouping.virtual import with_candidates
from stream_release.core.table import EncodedTable
from stream_release.history.pseudonym import Pseudonymizer
from stream_release.history.types import pseudonym_hex
from stream_release.io.registry import Registry, read_registry


@dataclass(frozen=True, eq=False)
class CandidatePool:
    """The population register of virtual individuals, read once per publisher: ``registry``
    with its rows in pseudonym order, and ``pseudonyms`` (r,) S16 their pseudonyms, ascending.
    Each release's candidates are the people of the pool absent from its snapshot."""

    registry: Registry
    pseudonyms: NDArray[np.bytes_]

    @classmethod
    def read(
        cls, path: Path, schema: SchemaSettings, pseudonymizer: Pseudonymizer
    ) -> CandidatePool:
        """Read the register at ``path`` (``[virtual] registry``) and sort it by pseudonym
        (once: every release's pool is then in order)."""
        registry = read_registry(path, schema, load_hierarchies(schema))
        known = pseudonymizer.pseudonyms(registry.table.ids)
        order = np.argsort(known, kind="stable")
        return cls(replace(registry, table=registry.table.take(order)), known[order])

    def join_absent(
        self, table: EncodedTable, pseudonyms: NDArray[np.bytes_], ids_are_pseudonyms: bool
    ) -> tuple[EncodedTable, NDArray[np.bytes_], NDArray[np.bool_]]:
        """``table`` (in pseudonym order) then every person of the register absent from it
        (in pseudonym order), their pseudonyms, and which rows are these candidates.

        ``pseudonyms`` (n,) S16: ``table``'s rows' pseudonyms. The result's pseudonyms are
        (n + c,) S16 and its candidate mask (n + c,) bool, True for the c candidates. The
        candidates' ids are the register's, or their pseudonyms' hex when ``table``'s ids are
        pseudonyms (``ids_are_pseudonyms``: the streaming service).
        """
        known = self.pseudonyms
        absent = np.flatnonzero(~np.isin(known, pseudonyms, assume_unique=True))
        pool = self.registry.table.take(absent)
        if ids_are_pseudonyms:
            hexes = np.empty(absent.shape[0], dtype=object)
            hexes[:] = pseudonym_hex(known[absent])
            pool = replace(pool, ids=hexes)
        combined = with_candidates(table, pool)
        virtual = np.zeros(combined.n_rows, dtype=np.bool_)
        virtual[table.n_rows :] = True
        return combined, np.concatenate([pseudonyms, known[absent]]), virtual
