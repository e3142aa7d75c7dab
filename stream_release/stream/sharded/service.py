"""The release service on shards: the worker's service when ``kafka.partitions`` is above 1 or
``redis.cluster`` is set (docs/scale-out.md).

Records are staged in the shard of the partition they were consumed from; seals are recorded
at the release level and in every shard; the cut is :class:`~stream_release.stream.sharded.
cut.ShardedCut`'s, for the shards this worker owns (:meth:`ShardedReleaseService.own`: the
partitions its records consumer is assigned). Publication, the status outbox and ``/health``
read the release-level records, which every worker shares.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from stream_release.config import Settings
from stream_release.errors import (
    ArchiveConflict,
    ConfigError,
    HistoryStoreError,
    SequenceConflict,
    StoreRegressed,
)
from stream_release.history.keys import RedisKeys
from stream_release.history.redis_client import RedisClient
from stream_release.io.release_files import published_sequences
from stream_release.stream.intake import ReleaseRows
from stream_release.stream.service import BaseReleaseService, Outgoing, release_messages
from stream_release.stream.sharded.cut import Shard, ShardedCut
from stream_release.stream.staging import ReleaseStatus, SealOutcome, Staged, StageOutcome

__all__ = ["ShardedReleaseService"]

log = logging.getLogger(__name__)


class ShardedReleaseService(BaseReleaseService):
    """Staging in shards, the cut of the owned ones, and the release-level publication state.

    ``archive`` / ``private_archive``: the series' directories (default: the configured
    ones), shared by every worker of the series (:class:`ShardedCut`).
    """

    def __init__(
        self,
        settings: Settings,
        client: RedisClient,
        archive: Path | None = None,
        private_archive: Path | None = None,
    ) -> None:
        super().__init__(settings, client, archive, private_archive)
        self.cut = ShardedCut(
            settings,
            client,
            (),
            self.archive,
            self.private_archive,
            pseudonymizer=self.pseudonymizer,
            hierarchies=self.hierarchies,
        )
        self.staging = self.cut.board
        self.restore_refusal()

    def own(self, shards: Iterable[int]) -> None:
        """Cut the parts of ``shards`` from now on (and no others)."""
        self.cut.own(shards)

    # -- staging -------------------------------------------------------------------------------

    def _stage(self, label: str, release: ReleaseRows) -> Staged:
        """Each row in the shard of the partition it came from; the outcomes in batch order."""
        by_shard: dict[int, list[int]] = {}
        for index, message in enumerate(release.messages):
            by_shard.setdefault(message.partition, []).append(index)
        outcomes: list[StageOutcome | None] = [None] * len(release.messages)
        complete = False
        for shard, indexes in by_shard.items():
            staged = self._shard(shard).staging.stage(
                label,
                [release.pseudonyms[i] for i in indexes],
                [release.rows[i] for i in indexes],
            )
            complete = complete or staged.complete
            for index, outcome in zip(indexes, staged.outcomes, strict=True):
                outcomes[index] = outcome
        return Staged([o for o in outcomes if o is not None], complete)

    def _note_rejected(self, label: str, coordinates: list[str]) -> None:
        by_shard: dict[int, list[str]] = {}
        for coordinate in coordinates:  # topic:partition:offset
            partition = int(coordinate.rsplit(":", 2)[1])
            by_shard.setdefault(partition, []).append(coordinate)
        for shard, mine in by_shard.items():
            self._shard(shard).staging.note_rejected(label, mine)

    def _seal(self, label: str, counts: list[int]) -> SealOutcome:
        limit = self.settings.service.max_release_rows
        if limit is not None and sum(counts) > limit:
            log.warning(
                "seal of release %r refused: %d ids, more than service.max_release_rows = %d",
                label,
                sum(counts),
                limit,
                extra={"event": "release_too_large", "release": label, "sealed": sum(counts)},
            )
            return SealOutcome.TOO_LARGE
        return self.cut.seal(label, counts)

    def _shard(self, partition: int) -> Shard:
        if not 0 <= partition < self.cut.partitions:
            topic = self.settings.kafka.topics.records
            raise ConfigError(
                f"a record came from partition {partition} of {topic!r}, but kafka.partitions "
                f"= {self.cut.partitions}: the topic has more partitions than the series' shards"
            )
        return self.cut.shards[partition]

    # -- the cut -------------------------------------------------------------------------------

    def cut_ready(self) -> list[dict[str, Any]]:
        """Take every step of the cut this worker can (:meth:`ShardedCut.step`), then file the
        finished releases in the archive. A refusal is logged as the one-namespace service
        logs it (with the release's sealed rows); a store behind its archive or a
        configuration that cannot make the release in flight holds the cut, named by the
        release in flight; a part that another owner is committing at the same moment (a
        rebalance) is left for the next step."""
        self.config_problem = None
        self.store_problem = None
        self.refused = []
        label = self.cut.current().get("label", "")
        rows = self._sealed_rows(label) if label else 0
        try:
            result = self.cut.step()
        except (StoreRegressed, ArchiveConflict) as exc:
            self.hold_for_store(label, rows, exc)
            return []
        except ConfigError as exc:
            self.hold_for_config(label, rows, exc)
            return []
        except SequenceConflict as exc:  # two owners of one shard for a moment
            log.warning(
                "release %r: a shard's part was committed by another worker: %s",
                label,
                exc,
                extra={"event": "cut_retry", "release": label, "error": type(exc).__name__},
            )
            return []
        for notice in result.refused:
            self.log_refusal(notice, self._sealed_rows(notice.release))
        if result.manifests:
            self.refusal_passed()
        try:
            if self.cut.file_finished():
                self.drop_records()  # filed after they were sent: no longer read
        except ArchiveConflict as exc:
            self.hold_for_store(label, rows, exc)
        except (HistoryStoreError, OSError, LookupError) as exc:  # a part's files not in place
            # yet, or a record another worker filed and deleted meanwhile
            log.warning(
                "finished releases not filed yet, next step: %s",
                exc,
                extra={"event": "filing_deferred", "error": type(exc).__name__},
            )
        return result.manifests

    def next_release(self) -> tuple[str, int]:
        label = self.cut.current().get("label", "") or next(iter(self.cut.ready()), "")
        return label, self._sealed_rows(label) if label else 0

    def _sealed_rows(self, label: str) -> int:
        """The ids release ``label``'s seal announced (0 once the seal is gone)."""
        raw = self.staging.sealed_value(label)
        return 0 if raw is None else sum(orjson.loads(raw))

    # -- publication and health ----------------------------------------------------------------

    def last_sequence(self) -> int:
        return self.cut.last_sequence()

    def outgoing(self, sequence: int) -> list[Outgoing]:
        """Every part's group lines, shard 0 first, then the release's manifest."""
        return release_messages(
            self.settings, self.cut.manifest(sequence), self.cut.group_lines(sequence)
        )

    def record_namespaces(self) -> list[RedisKeys]:
        """The release level (merged manifests) and every shard (its parts, with their group
        lines), owned or not."""
        return [self.cut.keys, *(shard.keys for shard in self.cut.shards)]

    def records_needed_from(self) -> int:
        """The last release sent, or the first one not filed in the archive yet when that
        comes before it: filing reads the merged manifest and every part's group lines."""
        filed = published_sequences(self.archive) if self.archive.is_dir() else []
        return min(self.staging.published(), (filed[-1] if filed else 0) + 1)

    def last_state(self) -> tuple[dict[str, Any] | None, int]:
        last = self.cut.last_sequence()
        manifest = self.cut.manifest(last) if last else None
        return manifest, self.staging.published()

    def waiting(self) -> list[ReleaseStatus]:
        """Sealed releases some shard still misses records of: the shards' counts added up
        (``blocked`` when one shard's records received cannot complete its part)."""
        out = []
        for label in self.staging.open_labels():
            if self.staging.sealed_value(label) is None:
                continue
            parts = [shard.staging.status(label) for shard in self.cut.shards]
            if all(part.ready for part in parts):
                continue
            out.append(
                ReleaseStatus(
                    label,
                    sum(part.staged for part in parts),
                    sum(part.sealed or 0 for part in parts),
                    None,
                    sum(part.rejected for part in parts),
                    any(part.blocked for part in parts),
                )
            )
        return out
