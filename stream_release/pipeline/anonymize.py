"""Offline ``anonymize``: CSV snapshots published in order as the next releases of a series.

A run of several snapshots (:func:`anonymize_files`) is planned whole before anything is
written: every release is first prepared against an in-memory overlay of the history
(:class:`~stream_release.history.overlay_store.OverlayHistoryStore`), and only when all of
them can be made are the same commits applied. A run that fails writes nothing anywhere: no
file, no history, no key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stream_release.config import Settings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.io.encoding import encode
from stream_release.io.snapshot_csv import read_snapshot
from stream_release.pipeline.publisher import Publisher
from stream_release.pipeline.what_if import what_if


def anonymize_files(
    settings: Settings,
    out_dir: Path,
    snapshots: Sequence[Path],
    history: str | Path | None = None,
    *,
    private_dir: Path | None = None,
    on_release: Callable[[dict[str, Any]], None] | None = None,
    ledger: Path | None = None,
    on_planned: Callable[[int, int, str], None] | None = None,
) -> list[dict[str, Any]]:
    """Publish each CSV snapshot, in order, as the next release; returns the manifests.

    Every snapshot is read, validated and planned (against an in-memory overlay of the
    history) before the first is written, so a bad or infeasible snapshot publishes nothing.
    ``ledger``: the series ledger (default ``[output] ledger``, else ``out_dir.ledger``;
    :meth:`Publisher.open`). ``on_planned(done, total, label)`` after each release is
    planned; ``on_release(manifest)`` after each is written.
    """
    hierarchies = load_hierarchies(settings.schema)
    tables = []
    for path in snapshots:
        raw = read_snapshot(path, settings.schema)
        source = {"file": str(path), "sha256": raw.sha256}
        tables.append((encode(raw, settings.schema, hierarchies), Path(path).stem, source))
        del raw  # the raw columns are not needed once encoded
    publisher = Publisher.open(settings, out_dir, history, private_dir=private_dir, ledger=ledger)
    manifests = []
    try:
        prepared_all = []
        for prepared in what_if(publisher, tables):
            prepared_all.append(prepared)
            if on_planned is not None:
                on_planned(len(prepared_all), len(tables), prepared.label)
        for prepared in prepared_all:
            manifests.append(publisher.apply(prepared))
            if on_release is not None:
                on_release(manifests[-1])
    finally:
        publisher.close()
    return manifests
