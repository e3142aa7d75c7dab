"""Crash consistency of the mechanism kinds: the worker killed with SIGKILL mid-series.

The procedure and the comparison of ``test_crash_consistency``
(:func:`support.crash_runs.run_series`), for ``kind = "sampled-k-anonymity"`` and
``kind = "reconstruction-private-rr"`` (the tables of :mod:`support.mechanisms`) at the kill
points where a mechanism's release differs from the global guarantee's: before the cut
(``cut_loaded``: the keyed randomness must draw the same release again), with the commit
(release record and the mechanism's state entries) queued but not executed (``commit_queued``),
right after it (``committed``), with the archive half renamed (``finalizing``) and with the
groups half sent (``groups_partial``). Each point is killed at its second occurrence, i.e.
inside the series. The twelve runs (an uninterrupted one and five killed ones per kind) go
three at a time (:data:`PARALLEL_RUNS`). Against an uninterrupted run of the same kind with the
same key:

* every release appears once by ``sequence``, every copy of a message is identical, and the
  deduplicated groups and manifests equal the uninterrupted run's;
* Redis holds the same namespace, the ``:mech:`` state entries included: sampled-k-anonymity's
  series total, reconstruction-private-rr's series parameters, trial ledger (one count per micro
  group) and trial markers, so no trial is counted twice or lost;
* the archive is the same and passes the audit.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

import pytest
from support.crash_runs import PER_RELEASE, RELEASES, Outcome, run_series
from support.data import adult_series
from support.mechanisms import kind_config
from support.services import redis_namespace

from stream_release.faults import POINTS

pytestmark = pytest.mark.integration

KINDS = ("sampled-k-anonymity", "reconstruction-private-rr")
KILL_POINTS = ("cut_loaded", "commit_queued", "committed", "finalizing", "groups_partial")
"""Five of the fourteen (``test_crash_consistency`` runs every one with the global guarantee)."""
PARALLEL_RUNS = 3
"""Runs at a time: a run (~11 s) mostly waits for its workers to start, join the consumer
group and poll, so three share two cores well (the twelve runs take ~55 s, not ~130 s)."""


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> list[Path]:
    """The first three snapshots of the Adult series."""
    directory = tmp_path_factory.mktemp("crash-mechanism-series")
    return adult_series(shared_data, directory, 20, rounds=RELEASES)


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> dict[str, Path]:
    """The Adult configuration of each kind, each in its own directory."""
    return {
        kind: kind_config(tmp_path_factory.mktemp(f"config-{kind}"), shared_data, kind)
        for kind in KINDS
    }


@pytest.fixture(scope="module")
def outcomes(
    configs: dict[str, Path],
    snapshots: list[Path],
    tmp_path_factory: pytest.TempPathFactory,
    kafka_bootstrap: str,
    redis_url: str,
) -> dict[tuple[str, str | None], Future[Outcome]]:
    """Every run of this module, ``PARALLEL_RUNS`` at a time: by ``(kind, None)`` the
    uninterrupted one, by ``(kind, point)`` the one killed at ``point:2``. Each run has its
    own topics, consumer group, Redis namespace and archive; a run's failure is raised by its
    test (``Future.result``)."""
    runs = [(kind, point) for kind in KINDS for point in (None, *KILL_POINTS)]
    directories = {
        run: tmp_path_factory.mktemp(f"{run[0]}-{run[1] or 'uninterrupted'}") for run in runs
    }

    def run(kind: str, point: str | None) -> Outcome:
        with redis_namespace(redis_url) as prefix:
            return run_series(
                configs[kind], snapshots, directories[(kind, point)], kafka_bootstrap,
                redis_url, prefix, kill_at=None if point is None else f"{point}:2",
            )  # fmt: skip

    with ThreadPoolExecutor(PARALLEL_RUNS) as pool:
        futures = {key: pool.submit(run, *key) for key in runs}
        wait(futures.values())
    return futures


def test_the_points_are_release_steps() -> None:
    assert set(KILL_POINTS) <= set(POINTS) and set(KILL_POINTS) <= PER_RELEASE


@pytest.mark.parametrize("point", KILL_POINTS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_mechanism_worker_killed_mid_series_publishes_the_same_series(
    kind: str,
    point: str,
    outcomes: dict[tuple[str, str | None], Future[Outcome]],
) -> None:
    expected = outcomes[(kind, None)].result()
    outcome = outcomes[(kind, point)].result()
    assert sorted(outcome.manifests) == list(range(1, RELEASES + 1))
    assert {m["mechanism"]["kind"] for m in outcome.manifests.values()} == {kind}
    assert outcome.manifests == expected.manifests
    assert outcome.groups == expected.groups
    state = _mechanism_state(outcome)
    assert state, "the series committed no mechanism state"
    assert state == _mechanism_state(expected)
    if kind == "reconstruction-private-rr":
        ledger = {k: int(v) for k, v in state.items() if k.startswith("67")}  # b"g": T_g
        last = expected.manifests[RELEASES]["mechanism"]
        assert ledger and max(ledger.values()) <= last["max_trials"]
        trials = sum(m["mechanism"]["fresh_trials"] for m in expected.manifests.values())
        assert sum(ledger.values()) == trials  # each trial counted once, none lost
        assert sum(k.startswith("74") for k in state) == trials  # b"t": one marker per trial
    assert outcome.redis == expected.redis
    assert outcome.archive == expected.archive


def _mechanism_state(outcome: Outcome) -> dict[str, bytes]:
    """The ``:mech:`` entries of a run's Redis namespace, by hex key."""
    return {
        name.removeprefix(":mech:"): value
        for name, value in outcome.redis.items()
        if name.startswith(":mech:")
    }
