"""The files and the commit of a planned release, for every ``[mechanism] kind`` the same way:
the third stage of a release (:class:`~stream_release.mechanisms.base.ReleaseInput` -> a
mechanism's plan -> :class:`RenderedRelease` -> :meth:`Publisher.apply
<stream_release.pipeline.publisher.Publisher.apply>`).

The mechanism states its content (:meth:`ReleaseMechanism.render
<stream_release.mechanisms.base.ReleaseMechanism.render>`); this module adds what every
release has: the private assignments file, the private record (the release, its sequence,
where the snapshot came from) and the release record kept with the history. The assignments
file and the record are assembled on threads beside the mechanism's render (their kernels and
zlib release the GIL).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from stream_release.io.release_files import ReleaseFiles, assignments_csv, encode_record
from stream_release.mechanisms.base import (
    PlannedRelease,
    ReleaseCommit,
    ReleaseMechanism,
)

__all__ = ["RenderedRelease", "private_record", "render_release"]


@dataclass(frozen=True, eq=False)
class RenderedRelease:
    """A release rendered and not yet written: its files, its commit and its record (the
    manifest then the group lines, compressed: what the history keeps of it). ``cut_label``:
    commit the label with the release and clear its staging (the service)."""

    sequence: int
    label: str
    files: ReleaseFiles
    commit: ReleaseCommit
    record: bytes
    cut_label: bool = False

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest as published (its JSON object)."""
        return self.files.manifest.document()


def render_release(
    mechanism: ReleaseMechanism[Any], planned: PlannedRelease, *, first_group: int = 0
) -> RenderedRelease:
    """The files and the commit of ``planned`` (a plan of ``mechanism``); its groups are
    numbered from ``first_group`` (a shard's part: the groups of the shards before it come
    first)."""
    inputs = planned.inputs
    assignment = mechanism.assignment(planned)
    numbers = assignment.group
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="render") as pool:
        assignments = pool.submit(
            assignments_csv,
            assignment.ids,
            np.where(numbers >= 0, numbers + first_group, numbers),
            virtual=assignment.virtual,
        )
        content = mechanism.render(planned, first_group=first_group)
        record = pool.submit(encode_record, content.lines, content.manifest.document())
        private = {
            **private_record(inputs.label, inputs.sequence, inputs.source),
            **content.private,
        }
        files = ReleaseFiles(content.lines, content.manifest, assignments.result(), private)
        return RenderedRelease(
            sequence=inputs.sequence,
            label=inputs.label,
            files=files,
            commit=content.commit,
            record=record.result(),
            cut_label=inputs.cut_label,
        )


def private_record(label: str, sequence: int, source: dict[str, Any] | None) -> dict[str, Any]:
    """The private record of a release (``private-NNNN.json``): what the audit needs and no
    reader of the public files may see."""
    record: dict[str, Any] = {"release": label, "sequence": sequence}
    if source is not None:
        record["source"] = source
    return record
