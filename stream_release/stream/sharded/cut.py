"""One release cut by several workers, each for the shards it owns (docs/scale-out.md).

A shard is a partition of ``topics.records``; its individuals' histories, its staged rows and
its part of every release live under its own hash tag (:meth:`RedisKeys.for_shard`), so each
of its commits is one transaction in one Redis Cluster slot. The release-level records
(:meth:`RedisKeys.for_release`) hold what the shards agree on. One release is in flight at a
time, in four steps that any worker may take and that each take again after a crash:

1. **begin**: once every part of a sealed release is complete (shard ``p`` staged as many ids
   as the seal's ``partitions[p]``), the release becomes the one in flight with the next
   sequence (``release_begin.lua``; the smallest such label first);
2. **vote**: the owner of each shard plans its part against its histories (nothing written)
   and votes its group count, its suppressed rows and what their members need, or the reason
   it cannot be made (``release_vote.lua``); the last vote checks the union of the parts'
   suppressed rows, which an adversary sees as one set, against what every part needs, and
   either starts another round (every part planned again with a floor on its set's ratios)
   or numbers each part's groups after the shards before it; a refused part refuses the
   release;
3. **confirm and commit**: each owner links its suppressed members to the union and checks
   every bound again (``release_confirm.lua``), then, once every part confirmed, renders its
   part with its group numbers and commits it in its shard (histories, part record, label;
   :meth:`Publisher.apply`), or closes its part unpublished when the release is refused, and
   marks its part done; planning is deterministic, so an owner that planned again after a
   crash commits the same part;
4. **finish**: when every part is done, the release record (the manifest merged from the
   parts', :func:`~stream_release.mechanisms.global_guarantee.parts.merge_part_manifests`)
   and the release sequence are committed together (``release_finish.lua``), or the refusal
   goes to the status outbox. Only then is the release complete: :meth:`ShardedCut.outgoing`
   sends each part's group lines, shard 0 first, then the manifest.

A shard's sequence is the release sequence: every release that is not refused has a part in
every shard, an empty one included.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, cast

import numpy as np
import orjson
from pydantic import ValidationError

from stream_release.config import Settings, check_planned
from stream_release.config.hierarchy import Hierarchy, load_hierarchies
from stream_release.errors import (
    NEW_SERIES_CAVEAT,
    ConfigError,
    GuaranteeUnsatisfiable,
    HistoryStoreError,
    SchemaError,
)
from stream_release.faults import kill_point
from stream_release.history.keys import RedisKeys
from stream_release.history.pseudonym import Pseudonymizer, load_key
from stream_release.history.redis_client import RedisClient
from stream_release.history.redis_store import RedisHistoryStore
from stream_release.io.encoding import encode
from stream_release.io.release_files import (
    ReleaseFiles,
    ReleasePaths,
    decode_record,
    encode_record,
    make_private_dir,
    published_sequences,
    write_once,
)
from stream_release.mechanisms.global_guarantee.mechanism import GlobalGuarantee, GuaranteePlan
from stream_release.mechanisms.global_guarantee.parts import (
    merge_part_assignments,
    merge_part_manifests,
    merge_part_private,
)
from stream_release.pipeline.publisher import Publisher
from stream_release.pipeline.render import render_release
from stream_release.release_format import Manifest
from stream_release.stream.messages import ReleaseNotice
from stream_release.stream.notices import shard_refusal_notice
from stream_release.stream.sharded.vote import (
    log_part_refused,
    refusal_of,
    union_refusal,
    vote_union,
)
from stream_release.stream.staging import REFUSED, RedisStaging, SealOutcome

__all__ = ["CutResult", "Shard", "ShardedCut"]

log = logging.getLogger(__name__)


@dataclass
class Shard:
    """One shard's state in Redis, as every worker reaches it."""

    number: int
    keys: RedisKeys
    staging: RedisStaging
    store: RedisHistoryStore


@dataclass
class CutResult:
    """What one :meth:`ShardedCut.step` closed."""

    manifests: list[dict[str, Any]]
    """The manifests of the releases it finished."""
    refused: list[ReleaseNotice]
    """The releases it closed as refused (a part could not be made)."""


class ShardedCut:
    """The cut of releases on ``settings.kafka.partitions`` shards by one worker owning
    ``owned`` of them.

    Parameters
    ----------
    settings : the configuration (``kafka.partitions``: the shards; the global guarantee)
    client : a client of the Redis server or cluster (replies not decoded)
    owned : the shards this worker plans and commits
    archive, private_archive : the public and private directories of the release series (the
        merged files of each release, as one worker would write them); the private one also
        holds each shard's part files (:meth:`part_paths`), so every worker of the series
        shares both (one volume)
    pseudonymizer, hierarchies : the service's own, loaded once (default: loaded here)
    """

    def __init__(
        self,
        settings: Settings,
        client: RedisClient,
        owned: Iterable[int],
        archive: Path,
        private_archive: Path,
        *,
        pseudonymizer: Pseudonymizer | None = None,
        hierarchies: dict[str, Hierarchy] | None = None,
    ) -> None:
        # a horizon on shards is planned on data first: refused here, before any release
        check_planned(
            settings.privacy, settings.grouping, settings.schema, settings.kafka.partitions
        )
        self.settings = settings
        self.partitions = settings.kafka.partitions
        prefix = settings.history.prefix
        schema = settings.schema
        limit = settings.service.max_release_rows
        self.client = client
        self.archive = Path(archive)
        self.private_archive = Path(private_archive)
        self.keys = RedisKeys.for_release(prefix)
        self.board = RedisStaging(client, self.keys, schema)
        self.shards = []
        for number in range(self.partitions):
            keys = RedisKeys.for_shard(prefix, number)
            staging = RedisStaging(client, keys, schema, max_rows=limit)
            self.shards.append(Shard(number, keys, staging, RedisHistoryStore(client, keys)))
        self.pseudonymizer = pseudonymizer or Pseudonymizer(
            load_key(settings.history, default_dir=None)
        )
        self.hierarchies = hierarchies if hierarchies is not None else load_hierarchies(schema)
        self.publishers: dict[int, Publisher] = {}
        self.planned: dict[int, GuaranteePlan] = {}
        self.planned_round: dict[int, int] = {}
        """The round each kept plan was made in (a plan of another round is made again)."""
        if settings.virtual.registry is not None:
            raise ConfigError(
                "virtual.registry cannot run on shards yet (kafka.partitions > 1 or "
                "redis.cluster): a shard would join people of the register who belong to other "
                "shards; use kafka.partitions = 1 with a register"
            )
        lua = resources.files("stream_release.history").joinpath("lua")
        self._begin = client.register_script(lua.joinpath("release_begin.lua").read_text())
        self._vote = client.register_script(lua.joinpath("release_vote.lua").read_text())
        self._confirm = client.register_script(lua.joinpath("release_confirm.lua").read_text())
        self._part_done = client.register_script(lua.joinpath("release_part_done.lua").read_text())
        self._finish = client.register_script(lua.joinpath("release_finish.lua").read_text())
        self._check_series()
        self.own(owned)

    def _check_series(self) -> None:
        """Record the series' partition count at its first start, and refuse another one
        later, or a prefix that holds a one-namespace series: either would put individuals in
        shards without their histories.

        Raises
        ------
        ConfigError
            The series was started with another ``kafka.partitions``, or under this prefix
            without shards.
        """
        prefix = self.settings.history.prefix
        plain = RedisKeys(prefix)
        if self.client.exists(plain.sequence):
            raise ConfigError(
                f"history.prefix = {prefix!r} holds a series cut without shards "
                "(kafka.partitions = 1, redis.cluster = false): its histories are not a "
                "shard's; continue it without shards, or start this one under another prefix"
            )
        self.client.set(self.keys.partitions, self.partitions, nx=True)
        recorded = int(cast("bytes", self.client.get(self.keys.partitions)))
        if recorded != self.partitions:
            raise ConfigError(
                f"kafka.partitions = {self.partitions}, but the series under history.prefix = "
                f"{prefix!r} was started with {recorded}: each individual's history is in the "
                f"shard of its partition; set kafka.partitions = {recorded}, or start a new "
                f"series under another prefix: {NEW_SERIES_CAVEAT}"
            )

    def own(self, owned: Iterable[int]) -> None:
        """Plan and commit the parts of ``owned`` from now on (the partitions of
        ``topics.records`` the worker's consumer group assigned it); a shard taken on finishes
        a release its previous owner left committed but not filed (:meth:`Publisher.recover`)."""
        wanted = set(owned)
        bad = sorted(n for n in wanted if not 0 <= n < self.partitions)
        if bad:
            raise ValueError(f"shards {bad} outside 0..{self.partitions - 1}")
        for number in set(self.publishers) - wanted:
            del self.publishers[number]
            self.planned.pop(number, None)
        for number in sorted(wanted - set(self.publishers)):
            paths = self.part_paths(number, 0)
            publisher = Publisher(
                self.settings,
                paths.directory,
                self.shards[number].store,
                self.pseudonymizer,
                private_dir=paths.private_dir,
            )
            # a part staged but not committed may be another owner's, in flight: kept
            publisher.recover(keep_staged=True)
            self.publishers[number] = publisher

    @property
    def owned(self) -> frozenset[int]:
        """The shards this worker plans and commits."""
        return frozenset(self.publishers)

    def part_paths(self, shard: int, sequence: int) -> ReleasePaths:
        """Where shard ``shard``'s part of release ``sequence`` is filed: ``shard-<p>/`` and
        ``shard-<p>.private/`` in the private archive (never published: each is a series of its
        own; the audit checks the merged series: a part's files keep its own suppressed rows
        while its members are linked to the union of every part's)."""
        directory = self.private_archive / f"shard-{shard}"
        return ReleasePaths(directory, sequence, directory.with_name(f"shard-{shard}.private"))

    # -- seals and readiness -------------------------------------------------------------------

    def seal(self, label: str, counts: list[int]) -> SealOutcome:
        """Record the seal of ``label``: the release-level seal (each partition's ids), then
        each shard's part seal. Idempotent; a conflicting or late seal changes nothing."""
        if len(counts) != self.partitions:
            raise ValueError(f"{len(counts)} partition counts for {self.partitions} shards")
        outcome = self.board.seal_value(label, orjson.dumps(counts).decode())
        if outcome in (SealOutcome.SEALED, SealOutcome.REDELIVERED):
            for shard, count in zip(self.shards, counts, strict=True):
                shard.staging.seal(label, count)
        return outcome

    def ready(self) -> list[str]:
        """Sealed releases whose every part is complete, by label."""
        out = []
        for label in self.board.open_labels():
            if self.board.sealed_value(label) is None:
                continue
            if all(shard.staging.status(label).ready for shard in self.shards):
                out.append(label)
        return out

    # -- the release in flight -----------------------------------------------------------------

    def current(self) -> dict[str, str]:
        """The release in flight (label, sequence, outcome, offsets, refusal), or ``{}``."""
        raw = self.client.hgetall(self.keys.current)
        return {k.decode(): v.decode() for k, v in cast("dict[bytes, bytes]", raw).items()}

    def step(self) -> CutResult:
        """Take every step this worker can now (module docstring); returns the manifests of
        the releases this call finished and the refusals it closed. The archive files of the
        finished releases are written by :meth:`file_finished`."""
        result = CutResult([], [])
        while True:
            current = self.current()
            if not current:
                ready = self.ready()
                if not ready:
                    break
                keys = [self.keys.current, self.keys.labels, self.keys.sequence]
                if self._begin(keys=keys, args=[ready[0]]) is None:
                    break
                continue
            if "outcome" not in current:
                if "union" not in current:
                    self._vote_owned(current)
                    now = self.current()
                    progressed = "union" in now or "outcome" in now
                    progressed = progressed or now.get("round") != current.get("round")
                else:
                    self._confirm_owned(current)
                    progressed = "outcome" in self.current()
                if not progressed:
                    break  # waiting for other workers' votes or confirmations
                continue
            self._commit_owned(current)
            done, manifest = self._finish_if_done(current)
            if done is None:
                break  # waiting for other workers' parts
            if done:  # this call closed the release
                if manifest is not None:
                    result.manifests.append(manifest)
                else:
                    result.refused.append(refusal_of(current))
        return result

    def file_finished(self) -> list[int]:
        """Write the archive files of every finished release that has none yet (the merged
        public files, the merged private ones), from the release record and the parts' files:
        what a finisher did not write before a crash is written by the next call, and workers
        writing the same release at once write the same bytes, each file once
        (:func:`~stream_release.io.release_files.write_once`). Returns the sequences filed."""
        last = self.last_sequence()
        done = published_sequences(self.archive) if self.archive.is_dir() else []
        first = (done[-1] if done else 0) + 1
        if first > last:
            return []
        # the records below records:from were deleted by a worker that saw them filed: this
        # worker's listing of the shared archive may lag behind it
        kept = self.client.get(self.keys.records_from)
        filed = list(range(max(first, int(cast("bytes", kept)) if kept else 1), last + 1))
        for sequence in filed:
            self._file(sequence)
        return filed

    def _file(self, sequence: int) -> None:
        manifest = self.manifest(sequence)
        label = str(manifest["release"])
        parts = [self.part_paths(shard.number, sequence) for shard in self.shards]
        if not all(p.manifest.exists() for p in parts):
            raise HistoryStoreError(
                f"release {sequence}: a shard's part files are not in place yet (its owner "
                "committed it and has not renamed them): filed at a later step"
            )
        try:
            parsed = Manifest.parse(manifest)
        except ValidationError as exc:
            raise HistoryStoreError(
                f"release {sequence}: the manifest its parts merged into is not of this "
                f"version's format ({exc.errors()[0]['msg']}); file it with the version of "
                "stream-release that cut it"
            ) from exc
        files = ReleaseFiles(
            self.group_lines(sequence),
            parsed,
            merge_part_assignments([p.assignments.read_bytes() for p in parts]),
            merge_part_private(
                label, sequence, [orjson.loads(p.private_record.read_bytes()) for p in parts]
            ),
        )
        paths = ReleasePaths(self.archive, sequence, self.private_archive)
        make_private_dir(self.private_archive)
        for path, data in files.contents(paths).items():  # the manifest last
            write_once(path, data)

    def _vote_owned(self, current: dict[str, str]) -> None:
        label, round_ = current["label"], int(current.get("round", "0"))
        votes = self.client.hkeys(self.keys.votes(label))
        voted = {int(v) for v in cast("list[bytes]", votes)}
        refusal = orjson.dumps({"refused": union_refusal(label).model_dump(mode="json")})
        for number, publisher in self.publishers.items():
            if number in voted:
                continue
            vote: dict[str, Any]
            try:
                planned = self._plan(number, publisher, current)
            except (GuaranteeUnsatisfiable, SchemaError) as exc:
                vote = {"refused": shard_refusal_notice(label, exc).model_dump(mode="json")}
                log_part_refused(label, number, exc)
            else:
                self.planned[number] = planned
                self.planned_round[number] = round_
                vote = self._vote_of(planned)
            keys = [self.keys.current, self.keys.votes(label)]
            args: list[str | int | bytes] = [
                label, number, orjson.dumps(vote), self.partitions, round_, ROUNDS, refusal,
            ]  # fmt: skip
            if int(self._vote(keys=keys, args=args)) in (-2, 2):
                self.planned.clear()  # another round: every part plans again
                self.planned_round.clear()
                return

    def _vote_of(self, planned: GuaranteePlan) -> dict[str, Any]:
        """A planned part's vote: its group count, its suppressed rows (multiset), what their
        members need (:meth:`~stream_release.pipeline.publisher.GuaranteePlan.set_needs`),
        and a digest of its groups, so that a part planned again after a crash can be checked
        to be the same part."""
        own = planned.suppressed()
        ratios, base = planned.set_needs(self.settings.privacy.protected)
        digest = hashlib.sha256(np.ascontiguousarray(planned.plan.group).tobytes()).hexdigest()
        vote: dict[str, Any] = {
            "groups": planned.groups,
            "suppressed": {"size": own.size, "counts": own.counts},
            "ratio": ratios,
            "base": base,
            "plan": digest,
        }
        if self.settings.privacy.protected:
            vote["protected"] = sorted(self.settings.privacy.protected)
        return vote

    def _confirm_owned(self, current: dict[str, str]) -> None:
        """Link each owned part's suppressed rows to the union of every part's, check every
        bound again, and confirm (or refuse) the part."""
        label = current["label"]
        confirmed = self.client.hkeys(self.keys.confirms(label))
        done = {int(v) for v in cast("list[bytes]", confirmed)}
        union = vote_union(current["union"])
        for number, publisher in self.publishers.items():
            if number in done:
                continue
            confirm: dict[str, Any]
            try:
                planned = self._planned(number, publisher, current)
                self.planned[number] = GlobalGuarantee.on_shards(publisher.mechanism).relink(
                    planned, union
                )
            except GuaranteeUnsatisfiable as exc:
                confirm = {"refused": shard_refusal_notice(label, exc).model_dump(mode="json")}
                log_part_refused(label, number, exc)
            except ValueError as exc:  # the union does not hold this part's rows: refuse
                unsatisfiable = GuaranteeUnsatisfiable(str(exc))
                confirm = {
                    "refused": shard_refusal_notice(label, unsatisfiable).model_dump(mode="json")
                }
                log_part_refused(label, number, exc)
            else:
                breach = np.sort(self.planned[number].plan.breach).astype("<f8").tobytes()
                self.client.hset(self.keys.breaches(label), str(number), breach)
                confirm = {"ok": True}
            self._confirm(
                keys=[self.keys.current, self.keys.confirms(label)],
                args=[label, number, orjson.dumps(confirm), self.partitions],
            )

    def _planned(self, number: int, publisher: Publisher, current: dict[str, str]) -> GuaranteePlan:
        """The owned part ``number`` as planned for the vote: kept from the vote, or planned
        again (after a crash or a move) and checked against the vote it must equal."""
        label, round_ = current["label"], int(current.get("round", "0"))
        planned = self.planned.get(number)
        kept = planned is not None and planned.label == label
        if planned is not None and kept and self.planned_round.get(number) == round_:
            return planned
        planned = self._plan(number, publisher, current)
        raw = self.client.hget(self.keys.votes(label), str(number))
        vote = None if raw is None else orjson.loads(cast("bytes", raw))
        if vote is None or orjson.loads(orjson.dumps(self._vote_of(planned))) != vote:
            raise HistoryStoreError(
                f"shard {number}'s part of release {label!r} planned again differs from the "
                "part it voted (the configuration or the version changed mid-release?); "
                "restart every worker with the configuration the release was voted under"
            )
        return planned

    def _plan(self, number: int, publisher: Publisher, current: dict[str, str]) -> GuaranteePlan:
        """Plan shard ``number``'s part of the release in flight, in its round (``floor``:
        the least ratio every part's suppressed set must hold)."""
        shard, label, sequence = self.shards[number], current["label"], int(current["sequence"])
        floor = {str(v): float(r) for v, r in orjson.loads(current.get("floor", "{}")).items()}
        pseudonyms, raw = shard.staging.load(label)
        kill_point("cut_loaded")
        table = encode(raw, self.settings.schema, self.hierarchies)
        del raw
        release = publisher.next_input(table, label=label, pseudonyms=pseudonyms, cut_label=True)
        planned = GlobalGuarantee.on_shards(publisher.mechanism).plan(
            release, set_floor=floor or None
        )
        kill_point("planned")
        if planned.sequence != sequence:
            raise HistoryStoreError(
                f"shard {shard.number} is at release {planned.sequence - 1} but release "
                f"{label!r} is to be {sequence}: the shard's history is not the release "
                "series' (restore it from the backup taken with the others)"
            )
        return planned

    def _commit_owned(self, current: dict[str, str]) -> None:
        label, sequence = current["label"], int(current["sequence"])
        for number, publisher in self.publishers.items():
            shard = self.shards[number]
            done = shard.staging.committed(label)
            if done is None:
                if current["outcome"] == "ok":
                    mechanism = GlobalGuarantee.on_shards(publisher.mechanism)
                    planned = self._planned(number, publisher, current)
                    planned = mechanism.relink(planned, vote_union(current["union"]))
                    offsets = orjson.loads(current["offsets"])
                    first_group = int(offsets[number])
                    publisher.apply(render_release(mechanism, planned, first_group=first_group))
                else:
                    shard.staging.refuse(label, None)
                self.planned.pop(number, None)
            elif done not in (sequence, REFUSED):
                raise HistoryStoreError(
                    f"shard {number} committed release {label!r} as {done}, not {sequence}"
                )
            self._part_done(keys=[self.keys.current, self.keys.parts(label)], args=[label, number])

    def _finish_if_done(self, current: dict[str, str]) -> tuple[bool | None, dict[str, Any] | None]:
        """``(None, None)`` while a part is not done; else whether this call closed the
        release and, when it did and the release is published, its merged manifest."""
        label, sequence = current["label"], int(current["sequence"])
        if self.client.scard(self.keys.parts(label)) < self.partitions:
            if self.current().get("label") == label:
                return None, None
            return False, None  # another worker closed it meanwhile
        manifest: dict[str, Any] | None = None
        if current["outcome"] == "ok":
            raw = cast("dict[bytes, bytes]", self.client.hgetall(self.keys.breaches(label)))
            missing = [n for n in range(self.partitions) if str(n).encode() not in raw]
            if missing:
                raise HistoryStoreError(
                    f"release {label!r}: shards {missing} confirmed without their breach "
                    "probabilities: the release record cannot state its quantiles"
                )
            breach = np.concatenate(
                [np.frombuffer(raw[str(n).encode()], "<f8") for n in range(self.partitions)]
            )
            manifest = merge_part_manifests(
                label,
                sequence,
                self.part_manifests(sequence),
                vote_union(current["union"]),
                breach,
            )
            payload = encode_record(b"", manifest)
        else:
            payload = orjson.dumps(refusal_of(current).model_dump(mode="json"))
        keys = [
            self.keys.current,
            self.keys.parts(label),
            self.keys.labels,
            self.keys.sequence,
            self.keys.record(sequence),
            self.keys.open_labels,
            self.keys.votes(label),
            self.keys.stage_seal(label),
            self.keys.status_outbox,
            self.keys.confirms(label),
            self.keys.breaches(label),
        ]
        closed = int(self._finish(keys=keys, args=[label, self.partitions, payload]))
        if closed == -1:
            return None, None
        return closed == 1, manifest if closed == 1 else None

    # -- publication ---------------------------------------------------------------------------

    def part_manifests(self, sequence: int) -> list[dict[str, Any]]:
        """The manifest of each shard's part of release ``sequence``, shard 0 first."""
        return [decode_record(self._part(shard, sequence))[0] for shard in self.shards]

    def _part(self, shard: Shard, sequence: int) -> bytes:
        record = shard.store.record(sequence)
        if record is None:
            raise HistoryStoreError(f"shard {shard.number} has no part of release {sequence}")
        return record

    def last_sequence(self) -> int:
        """The last finished release (0 before the first)."""
        raw = self.client.get(self.keys.sequence)
        return 0 if raw is None else int(cast("bytes", raw))

    def manifest(self, sequence: int) -> dict[str, Any]:
        """The manifest of finished release ``sequence``."""
        raw = self.client.get(self.keys.record(sequence))
        if raw is None:
            raise LookupError(f"release {sequence} is not finished")
        return decode_record(cast("bytes", raw))[0]

    def group_lines(self, sequence: int) -> bytes:
        """Every group line of finished release ``sequence``: each part's, shard 0 first."""
        self.manifest(sequence)  # finished: every part is committed
        return b"".join(decode_record(self._part(shard, sequence))[1] for shard in self.shards)


ROUNDS = 6
"""Rounds of planning a release in flight may take before it is refused: each round plans
every part again with a higher floor on its suppressed set's ratios (release_vote.lua)."""
