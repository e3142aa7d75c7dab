"""Crash consistency: the worker killed with SIGKILL at each step of the release path.

For every kill point of :mod:`stream_release.faults` (15 steps, from staging to marking a
release published), one run on its own topics, Redis prefix and archive:

1. three snapshots of the Adult series are sent (records, then a seal each);
2. the worker starts with ``STREAM_RELEASE_KILL_AT=<point>[:n]`` and must die by SIGKILL there
   (which also proves the point is on the path the series takes);
3. it is started again, without the variable, and must publish the rest.

Then, against one uninterrupted run of the same series with the same key:

* every release appears by ``sequence`` (1, 2, 3), every copy of a manifest or group message
  of one sequence is identical (a release sent twice is sent with the same content: consumers
  dedupe by sequence), and the deduplicated groups and manifests equal the uninterrupted
  run's (``elapsed_s``, a timing, aside);
* what Redis holds equals the uninterrupted run's: the history of every individual, the value
  dictionary, the release records, labels, sequence and published marker, no staging left;
* the archive equals the uninterrupted run's and passes the audit, against the series ledger
  beside it too, which records each release once, in order (killed at ``committed``, before
  the release's line, the restart records it from its files; at ``ledgered``, after it,
  the restart only finishes the files).

The worker sends each release in one Kafka transaction. Killed inside it (``groups_partial``,
``groups_sent``), the release's group lines are on the broker but invisible to a
``read_committed`` consumer; the restarted worker aborts that transaction and sends the
release again, so a ``read_committed`` consumer sees each of its groups exactly once.
Everything above is read as such a consumer reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.crash_runs import PER_RELEASE, RELEASES, Outcome, run_series
from support.data import adult_series, write_config
from support.services import redis_namespace

from stream_release.faults import POINTS

pytestmark = pytest.mark.integration

IN_TRANSACTION = {"groups_partial", "groups_sent"}
"""Kill points between the start of a release's transaction and its commit."""


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> tuple[Path, list[Path]]:
    """The configuration and the first three snapshots of the Adult series."""
    directory = tmp_path_factory.mktemp("crash-series")
    config = write_config(directory, shared_data)
    return config, adult_series(shared_data, directory, 20, rounds=RELEASES)


@pytest.fixture(scope="module")
def uninterrupted(
    series: tuple[Path, list[Path]],
    tmp_path_factory: pytest.TempPathFactory,
    kafka_bootstrap: str,
    redis_url: str,
) -> Outcome:
    """The outcome of the series on a worker nobody kills."""
    config, snaps = series
    with redis_namespace(redis_url) as prefix:
        return run_series(
            config, snaps, tmp_path_factory.mktemp("uninterrupted"), kafka_bootstrap, redis_url,
            prefix, kill_at=None,
        )  # fmt: skip


def test_every_step_of_the_release_path_has_a_kill_point() -> None:
    assert len(POINTS) >= 10
    assert set(POINTS) > PER_RELEASE


@pytest.mark.parametrize("point", list(POINTS))
def test_a_worker_killed_at_each_step_publishes_the_same_series(
    point: str,
    series: tuple[Path, list[Path]],
    uninterrupted: Outcome,
    tmp_path: Path,
    kafka_bootstrap: str,
    redis_url: str,
    redis_prefix: str,
) -> None:
    config, snaps = series
    kill_at = f"{point}:2" if point in PER_RELEASE else point
    outcome = run_series(config, snaps, tmp_path, kafka_bootstrap, redis_url, redis_prefix, kill_at)
    assert sorted(outcome.manifests) == list(range(1, RELEASES + 1))
    assert outcome.manifests == uninterrupted.manifests
    assert outcome.groups == uninterrupted.groups
    assert outcome.redis == uninterrupted.redis
    assert outcome.archive == uninterrupted.archive
    if point in IN_TRANSACTION:  # killed while release 2 was being sent
        committed, written = outcome.at_kill
        assert 2 in written and 2 not in committed  # the open transaction is invisible
        assert outcome.copies == 0  # and it was aborted: no group of it seen twice
