"""Edge cases of a release cut on shards (:class:`ShardedCut`) on a real Redis.

Three shards, the Adult series. Each test checks that its case really arose (a cut that only
records what each part was planned with and voted, :class:`RecordingCut`, shows it). Pinned:

* a protected value that one shard's rows never hold while another shard suppresses it: the
  union holds it, the manifest's share and suppressed rows are the union's, the merged
  private record counts it, the lacking shard's suppressed members are linked to it, every
  value of the union meets what every part needed (the floors), and the series passes the
  audit;
* two workers, several parts withholding rows for their history: each part withholds exactly
  the rows the rule picks from their histories, the union meets what every part needed, and
  the series passes the audit (which recomputes the rule and checks every pair linked that is
  not a withheld member's);
* the 8-year wage panel on six shards of about 90 people each, under the setting ``plan``
  proposes for a horizon of 8 on six shards (constant-ratio ``k' = horizon = 8``, the
  occupations rare enough in every part of every year): every year is published, nobody
  withheld, nobody past ``1/l``;
* an empty part (a shard that receives no row of a release, its count in the seal 0) is a part
  all the same: one sequence in every shard and at the release level, group numbers 0..G-1
  over the other parts, a manifest covering them, an empty part manifest; the next releases,
  the shard's rows back, are cut as usual, and the series passes the audit; the merged
  manifest's query errors are those of the parts that have rows.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.data import adult_series, wage_panel_config, wage_panel_series, write_config
from support.sharded_staging import shard_of, shard_settings, stage

from stream_release.audit import audit_directory
from stream_release.devtools.datasets import ADULT_SENSITIVE, Table, read_csv_table
from stream_release.errors import ConfigError
from stream_release.history.redis_client import connect
from stream_release.mechanisms.global_guarantee.mechanism import GuaranteePlan
from stream_release.mechanisms.global_guarantee.plan import SuppressedUnion
from stream_release.pipeline.publisher import Publisher
from stream_release.pipeline.what_if import PlanReport, plan_report
from stream_release.stream.sharded.cut import CutResult, ShardedCut

pytestmark = pytest.mark.integration
KEY = "5e" * 32
"""A fixed pseudonym key: the rows are grouped in keyed order, so each case arises in the same
release every run."""
SHARDS = 3
PARTITIONS = list(range(SHARDS))


# -- staging on shards ---------------------------------------------------------------------


def filtered(snapshot: Path, path: Path, *, shard: int, value: str | None = None) -> Path:
    """``snapshot`` without the rows of ``shard`` (holding ``value``; any value when
    ``None``), written to ``path``."""
    table = read_csv_table(snapshot)
    drop = shard_of(table.columns["id"].tolist(), SHARDS) == shard
    if value is not None:
        drop &= table.columns[ADULT_SENSITIVE] == value
    Table({name: column[~drop] for name, column in table.columns.items()}).write_csv(path)
    return path


def run_until_idle(workers: list[ShardedCut]) -> list[dict[str, Any]]:
    """Step the workers in turn until none can take a step; the manifests they finished
    (a refusal fails the test)."""
    manifests: list[dict[str, Any]] = []
    for _ in range(50):
        results = [worker.step() for worker in workers]
        for result in results:
            assert result.refused == [], result.refused
            manifests.extend(result.manifests)
        if all(r == CutResult([], []) for r in results) and not workers[0].current():
            return manifests
    raise AssertionError("the workers never settled")


# -- what the vote saw ---------------------------------------------------------------------


@dataclass(frozen=True)
class PartRound:
    """One part as planned in one round of the vote: what the vote passed it, what it voted."""

    label: str
    shard: int
    round: int
    floor: dict[str, float]
    suppressed: SuppressedUnion
    """The part's own suppressed rows (counts per value, size)."""
    withheld: int
    """The part's rows withheld for their history."""
    ratios: dict[str, float]
    base: float
    protected: frozenset[str]


def parse_union(raw: str) -> SuppressedUnion:
    """The union as ``release_vote.lua`` writes it (an empty Lua table is ``{}``)."""
    document = json.loads(raw)
    counts = document["counts"] if isinstance(document["counts"], list) else []
    return SuppressedUnion({str(v): int(c) for v, c in counts}, int(document["size"]))


class RecordingCut(ShardedCut):
    """A :class:`ShardedCut` that keeps each part's planning in each round of the vote
    (:class:`PartRound`) and the union each release was confirmed with; it cuts as the
    service's does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.rounds: list[PartRound] = []
        self.unions: dict[str, SuppressedUnion] = {}
        super().__init__(*args, **kwargs)

    def _plan(self, number: int, publisher: Publisher, current: dict[str, str]) -> GuaranteePlan:
        planned = super()._plan(number, publisher, current)
        protected = self.settings.privacy.protected
        ratios, base = planned.set_needs(protected)
        self.rounds.append(
            PartRound(
                current["label"],
                number,
                int(current.get("round", "0")),
                {str(v): float(r) for v, r in json.loads(current.get("floor", "{}")).items()},
                planned.suppressed(),
                int(planned.plan.suppressed_set.withheld.shape[0]),
                ratios,
                base,
                frozenset(protected or planned.table.sensitive_values),
            )
        )
        return planned

    def _confirm_owned(self, current: dict[str, str]) -> None:
        self.unions[current["label"]] = parse_union(current["union"])
        super()._confirm_owned(current)

    def final_round(self, label: str) -> list[PartRound]:
        """The parts as planned in the last round of release ``label``'s vote (this worker's)."""
        mine = [r for r in self.rounds if r.label == label]
        last = max(r.round for r in mine)
        return sorted((r for r in mine if r.round == last), key=lambda r: r.shard)


def suppressed_ids(cut: ShardedCut, shard: int, sequence: int) -> list[str]:
    """The ids shard ``shard``'s part of release ``sequence`` suppressed (its assignments: on
    shards, an individual's id is its pseudonym in hex)."""
    path = cut.part_paths(shard, sequence).assignments
    with path.open(newline="", encoding="utf-8") as fh:
        return [row["id"] for row in csv.DictReader(fh) if row["group"] == ""]


# -- the cases -----------------------------------------------------------------------------

LACKING_SHARD = 2
LACKED = "Adm-clerical"
LACKING_KEY = "55" * 32
"""The key under which this series has a round of the vote that falls short of a part's need:
the floors are what the next round gets."""


def unmet_needs(parts: list[PartRound]) -> list[tuple[str, int, float, int]]:
    """``(value, count, need, size)`` of each value the union of ``parts`` (one round's votes)
    holds ``count`` times in ``size`` rows although a part needs ``need`` of it (the largest
    ratio any part voted, the base a member not withheld plans for a protected value, or the
    floor it was planned with): Theorem 1 on the union, ``count * need <= size``, fails."""
    counts: dict[str, int] = {}
    for part in parts:
        for value, count in part.suppressed.counts.items():
            counts[value] = counts.get(value, 0) + count
    size = sum(part.suppressed.size for part in parts)
    out = []
    for value, count in sorted(counts.items()):
        need = max(
            [p.floor.get(value, 0.0) for p in parts]
            + [p.ratios.get(value, 0.0) for p in parts]
            + [p.base for p in parts if value in p.protected]
        )
        if count * need > size:
            out.append((value, count, need, size))
    return out


def test_a_protected_value_one_shard_lacks_entirely_is_the_unions_all_the_same(
    shared_data: Path, tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Shard 2's rows never hold ``Adm-clerical`` (its rows holding it are left out of every
    snapshot); shards 0 and 1 suppress some. Every release: the union holds what every part
    suppressed in the last round of the vote, the manifest states its rows and its largest
    protected share, every value of the union meets the largest ratio any part needed of it
    (a round whose union did not was planned again with those needs as floors), and shard 2's
    suppressed members, whose part has no row of the value, are linked to it; the merged
    private records count it and the series passes the audit."""
    config = write_config(tmp_path, shared_data)  # every value protected
    settings = shard_settings(config, LACKING_KEY, redis_prefix, SHARDS)
    archive, private = tmp_path / "archive", tmp_path / "private"
    cut = RecordingCut(settings, connect(redis_url), PARTITIONS, archive, private)
    lacking = cut.shards[LACKING_SHARD].store
    snaps = [
        filtered(snap, tmp_path / f"x-{snap.name}", shard=LACKING_SHARD, value=LACKED)
        for snap in adult_series(shared_data, tmp_path, 20, rounds=6)
    ]
    unions: list[SuppressedUnion] = []
    arose, floored = 0, 0
    for k, snap in enumerate(snaps, start=1):
        table = read_csv_table(snap)
        mine = shard_of(table.columns["id"].tolist(), SHARDS) == LACKING_SHARD
        assert mine.any() and LACKED not in set(table.columns[ADULT_SENSITIVE][mine].tolist())
        stage(cut, settings, snap, snap.stem)
        [manifest] = run_until_idle([cut])
        union = cut.unions[snap.stem]
        unions.append(union)
        parts = cut.part_manifests(k)
        block = manifest["suppressed_set"]
        assert block["rows"] == manifest["suppressed"] == union.size
        assert union.size == sum(p["suppressed_set"]["rows"] for p in parts)
        shares = [c / union.size for c in union.counts.values()]
        assert block["share_max"] == max(shares, default=0.0) < 0.5
        final = cut.final_round(snap.stem)
        assert [r.shard for r in final] == PARTITIONS
        assert sum(r.suppressed.size for r in final) == union.size
        assert unmet_needs(final) == [], snap.stem  # the floors held
        for n in range(final[0].round):  # an earlier round short of a need alone
            before = [r for r in cut.rounds if r.label == snap.stem and r.round == n]
            floored += bool(unmet_needs(before))
        assert LACKED not in final[LACKING_SHARD].suppressed.counts
        ids = suppressed_ids(cut, LACKING_SHARD, k)
        if LACKED not in union.counts or not ids:
            continue
        arose += 1
        # shard 2's suppressed members are linked to the union's LACKED rows: each one's
        # history for it holds this release's factor (and any earlier one's)
        assert block["share_max"] >= union.counts[LACKED] / union.size
        history = lacking.load(np.array([bytes.fromhex(i) for i in ids], dtype="S16"))
        gid = lacking.values().index(LACKED)
        factor = math.log1p(-union.counts[LACKED] / union.size)
        for i in range(len(ids)):
            start, stop = int(history.indptr[i]), int(history.indptr[i + 1])
            values = history.value[start:stop].tolist()
            entries = dict(zip(values, history.log_p[start:stop].tolist(), strict=True))
            assert entries.get(gid, 0.0) <= factor + 1e-12, (snap.stem, ids[i])
    assert arose, f"no release had {LACKED!r} suppressed while shard 2 suppressed rows"
    # (a round that fell short is planned again with floors: test_suppressed_union.py makes it
    # arise on hand-built parts; here it counts those rounds, if any, for the record)
    del floored

    cut.file_finished()
    for k, union in enumerate(unions, start=1):
        record = json.loads((private / f"private-{k:04d}.json").read_text())
        assert record["suppressed"]["sensitive"] == union.counts
        assert record["suppressed"]["rows"] == union.size
    report = audit_directory(archive, private=private, config=config, snapshots=snaps)
    assert report.ok and len(report.releases) == len(snaps), report.table()
    # plan, cutting the snapshots as the partitioner does and encoding each part as its owner
    # does (shard 2's part without the value), finds what the worker found: every release
    planned = plan_report(config, snaps, settings_overrides={"kafka": {"partitions": SHARDS}})
    configured = planned.settings[0]
    assert configured.refused is None and len(configured.releases) == len(snaps)


def test_parts_withhold_their_rows_for_their_history_and_the_union_holds_every_need(
    shared_data: Path, tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Worker A owns shards 0 and 1, worker B shard 2; every occupation protected, k' = 3, so
    from release 4 on parts withhold rows for their history (whatever they hold) and their sets
    take decoys. Every release: both workers confirm it with the same union, which meets what
    every part needed in the last round; the merged private record lists the withheld rows of
    every part, and the series passes the audit (which recomputes who the rule withholds and
    checks every pair linked that is not a withheld member's)."""
    config = write_config(tmp_path, shared_data)
    settings = shard_settings(config, KEY, redis_prefix, SHARDS)
    client = connect(redis_url)
    archive, private = tmp_path / "archive", tmp_path / "private"
    a = RecordingCut(settings, client, [0, 1], archive, private)
    b = RecordingCut(settings, client, [2], archive, private)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=6)
    withheld_in = 0
    for snap in snaps:
        stage(a, settings, snap, snap.stem)
        [manifest] = run_until_idle([a, b])
        assert manifest["release"] == snap.stem
        union = a.unions[snap.stem]
        assert b.unions[snap.stem] == union
        final = sorted(a.final_round(snap.stem) + b.final_round(snap.stem), key=lambda r: r.shard)
        assert [r.shard for r in final] == PARTITIONS
        assert unmet_needs(final) == [], snap.stem
        withheld_in = max(withheld_in, sum(r.withheld > 0 for r in final))
    assert withheld_in >= 2, "no release had rows withheld in two parts: the test shows nothing"

    a.file_finished()
    for k in range(1, len(snaps) + 1):
        record = json.loads((private / f"private-{k:04d}.json").read_text())["suppressed"]
        assert len(record["withheld"]) == sum(
            r.withheld for r in a.final_round(snaps[k - 1].stem) + b.final_round(snaps[k - 1].stem)
        )
    report = audit_directory(archive, private=private, config=config, snapshots=snaps)
    assert report.ok and len(report.releases) == len(snaps), report.table()


EMPTY_SHARD = {1: 2, 3: 0}
"""Release -> the shard that receives none of its rows: release 1 none in shard 2, release 3
none in shard 0 (the first part: the others' groups are numbered from 0 all the same)."""


def empty_part_series(data: Path, directory: Path) -> list[Path]:
    return [
        filtered(snap, directory / f"e-{snap.name}", shard=EMPTY_SHARD[k])
        if k in EMPTY_SHARD
        else snap
        for k, snap in enumerate(adult_series(data, directory, 20, rounds=3), start=1)
    ]


def test_an_empty_part_is_a_part_of_one_release_and_the_series_goes_on(
    shared_data: Path, tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Three releases, 1 and 3 with an empty part, 2 with rows in every shard; worker A owns
    shards 0 and 1, worker B shard 2 (so B's only part of release 1 is empty). Every release
    is one release, the empty shard commits its part (its sequence moves with the release's),
    and the merged series passes the audit."""
    config = write_config(tmp_path, shared_data)
    settings = shard_settings(config, KEY, redis_prefix, SHARDS)
    client = connect(redis_url)
    archive, private = tmp_path / "archive", tmp_path / "private"
    a = ShardedCut(settings, client, [0, 1], archive, private)
    b = ShardedCut(settings, client, [2], archive, private)
    snaps = empty_part_series(shared_data, tmp_path)
    for k, snap in enumerate(snaps, start=1):
        counts = stage(a, settings, snap, snap.stem)
        empty = EMPTY_SHARD.get(k)
        assert [p for p in PARTITIONS if counts[p] == 0] == ([] if empty is None else [empty])
        [manifest] = run_until_idle([a, b])
        assert a.last_sequence() == b.last_sequence() == k
        assert [shard.store.last_sequence() for shard in a.shards] == [k] * SHARDS
        assert manifest == a.manifest(k)
        assert (manifest["release"], manifest["sequence"]) == (snap.stem, k)
        assert manifest["records_in"] == sum(counts)

        parts = a.part_manifests(k)
        assert [p["records_in"] for p in parts] == counts
        assert [(p["release"], p["sequence"]) for p in parts] == [(snap.stem, k)] * SHARDS
        lines = [json.loads(line) for line in a.group_lines(k).splitlines()]
        assert [line["group"] for line in lines] == list(range(len(lines)))
        assert {(line["release"], line["sequence"]) for line in lines} == {(snap.stem, k)}
        assert manifest["groups"] == len(lines) == sum(p["groups"] for p in parts)
        assert manifest["published"] == sum(line["size"] for line in lines)
        assert manifest["published"] + manifest["suppressed"] == sum(counts)
        sizes = [line["size"] for line in lines]
        utility = manifest["utility"]
        assert (utility["min_group_size"], utility["max_group_size"]) == (min(sizes), max(sizes))
        assert utility["published"] == manifest["published"]
        assert manifest["breach"]["max"] <= manifest["breach"]["bound"] == 0.5
        if empty is not None:
            part = parts[empty]
            assert (part["published"], part["suppressed"], part["groups"]) == (0, 0, 0)
            assert part["suppressed_set"]["rows"] == 0

    a.file_finished()
    b.file_finished()  # a second writer of the same files: the same bytes, each file once
    report = audit_directory(archive, private=private, config=config, snapshots=snaps)
    assert report.ok and len(report.releases) == len(snaps), report.table()
    for k in EMPTY_SHARD:
        assert json.loads((archive / f"manifest-{k:04d}.json").read_text()) == a.manifest(k)


def test_an_empty_part_adds_no_query_to_the_releases_utility(
    shared_data: Path, tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """The release's query errors are the parts' weighted by the queries each drew within its
    own rows (``parts.py``): a part without rows draws none, so the release's figures are those
    of the parts with rows."""
    config = write_config(tmp_path, shared_data)
    settings = shard_settings(config, KEY, redis_prefix, SHARDS)
    cut = ShardedCut(settings, connect(redis_url), PARTITIONS, tmp_path / "a", tmp_path / "p")
    snap = empty_part_series(shared_data, tmp_path)[0]
    counts = stage(cut, settings, snap, snap.stem)
    assert counts[EMPTY_SHARD[1]] == 0
    [manifest] = run_until_idle([cut])
    rows = [p["utility"] for p, n in zip(cut.part_manifests(1), counts, strict=True) if n]
    utility = manifest["utility"]
    queries = sum(int(p["queries"]) for p in rows)
    assert queries > 0
    assert utility["queries"] == queries, "the empty part's queries are counted"
    for name in ("query_error", "query_error_median", "query_error_trimmed"):
        mean = sum(float(p[name]) * int(p["queries"]) for p in rows) / queries
        assert utility[name] == pytest.approx(mean), name


def plan_on_six_shards(config: Path, snaps: list[Path]) -> PlanReport:
    """``stream-release plan --horizon 8`` of ``config`` on six shards over ``snaps``."""
    six = {"kafka": {"partitions": 6}}
    return plan_report(config, snaps, settings_overrides=six, advise=True, horizon=8)


def test_a_panel_on_six_shards_is_refused_by_plan_where_the_worker_refuses_it(
    tmp_path: Path, redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The wage panel (545 men, 8 years) on six shards protecting '3' and '8' at ``k' = 8``:
    '3' (5.3 % of the rows, 1 in 12.05 allowed) is too frequent in one part of 1983. ``plan``
    cuts the snapshots as the partitioner does and plans each shard's parts as a series of its
    own: it refuses the setting at release 4 on the shard where the worker refuses it, prints
    no digest for it, and the worker, given a digest of other settings, refuses to start."""
    snaps = wage_panel_series(tmp_path)
    config = wage_panel_config(tmp_path, protected=["3", "8"], k_prime=8, horizon=8)
    report = plan_on_six_shards(config, snaps)
    configured = report.settings[0]
    assert configured.name.endswith("(configured)")
    assert len(configured.releases) == 3 and configured.digest is None
    assert configured.refused is not None and configured.refused.startswith(
        "shard 4 of 6, its part: "
    )
    assert "'3'" in configured.refused
    [proposal] = [p for p in report.proposals if p.privacy.get("protected") == ["8"]]
    assert proposal.digest is not None
    settings = shard_settings(config, KEY, redis_prefix, 6)
    with pytest.raises(ConfigError, match=r"privacy\.planned is not set"):
        ShardedCut(settings, connect(redis_url), range(6), tmp_path / "a", tmp_path / "p")
    stale = shard_settings(config, KEY, redis_prefix, 6, privacy={"planned": proposal.digest})
    with pytest.raises(ConfigError, match="printed for other settings"):
        ShardedCut(stale, connect(redis_url), range(6), tmp_path / "a", tmp_path / "p")
    # the worker, started all the same (no horizon: nothing promised), refuses where plan did
    unplanned = shard_settings(config, KEY, redis_prefix, 6, privacy={"horizon": None})
    cut = ShardedCut(unplanned, connect(redis_url), range(6), tmp_path / "a", tmp_path / "p")
    for k, snap in enumerate(snaps[:4], start=1):
        stage(cut, unplanned, snap, snap.stem)
        result = cut.step()
        if k < 4:
            assert [m["sequence"] for m in result.manifests] == [k]
    assert [n.release for n in result.refused] == [snaps[3].stem] and not result.manifests
    assert {shard.store.last_sequence() for shard in cut.shards} == {3}
    assert "shard 4's part cannot be made" in caplog.text


def test_a_panel_on_six_shards_publishes_every_release_of_the_planned_horizon(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """The wage panel on six shards under ``plan``'s proposal for a horizon of 8 on six
    shards (the snapshots cut as the partitioner cuts them): it protects only occupation '8'
    ('3', rare enough in the whole release, is not in some part of some year), and its digest
    in ``[privacy] planned`` lets the worker start; every release is published, inside the
    horizon, nobody withheld and nobody past ``1/l``, and the series passes the audit."""
    snaps = wage_panel_series(tmp_path)
    config = wage_panel_config(tmp_path, k_prime=8, horizon=8)
    report = plan_on_six_shards(config, snaps)
    proposal = report.proposals[0]
    assert proposal.privacy["protected"] == ["8"] and proposal.feasible
    assert len(proposal.releases) == len(snaps) and proposal.digest is not None
    config = wage_panel_config(
        tmp_path, protected=["8"], k_prime=8, horizon=8, planned=proposal.digest
    )
    settings = shard_settings(config, KEY, redis_prefix, 6)
    archive, private = tmp_path / "archive", tmp_path / "private"
    cut = ShardedCut(settings, connect(redis_url), range(6), archive, private)
    for k, snap in enumerate(snaps, start=1):
        counts = stage(cut, settings, snap, snap.stem)
        assert min(counts) >= 60  # small parts: the case arises
        [manifest] = run_until_idle([cut])
        assert manifest["sequence"] == k and manifest["past_horizon"] is False
        assert (manifest["breach"]["spent"], manifest["breach"]["spent_people"]) == (0, 0)
        assert manifest["suppressed"] == proposal.releases[k - 1].suppressed == 0
    cut.file_finished()
    for k in range(1, len(snaps) + 1):
        record = json.loads((private / f"private-{k:04d}.json").read_text())["suppressed"]
        assert record["withheld"] == []
    report = audit_directory(archive, private=private, config=config, snapshots=snaps)
    assert report.ok and len(report.releases) == len(snaps), report.table()
