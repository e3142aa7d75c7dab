"""What every kind's manifest states the same way: the snapshot's column names and the
generator of a release's query workload."""

from __future__ import annotations

import numpy as np

from stream_release.config import Settings
from stream_release.core.table import EncodedTable
from stream_release.release_format import SnapshotSchema


def schema_block(settings: Settings, table: EncodedTable) -> SnapshotSchema:
    """The manifest's ``schema``: the id, QID and sensitive column names."""
    return SnapshotSchema(
        id=settings.schema.id, qid=list(table.qid_names), sensitive=settings.schema.sensitive
    )


def query_rng(settings: Settings, sequence: int) -> np.random.Generator:
    """The generator of release ``sequence``'s query workload (``output.query_seed``)."""
    return np.random.default_rng([settings.output.query_seed, sequence])
