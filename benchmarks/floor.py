"""The floor: reading a snapshot, loading histories and one offline release, each beside the
bare operation underneath it, measured in the same run.

* **read**: ``read_snapshot`` of Adult repeated to ``--rows`` rows (``csv_read.py``'s file:
  ``;``, CRLF, an ``id`` column) against pyarrow's CSV reader on one thread
  (``use_threads=False``) reading the same file, every column. Target: at most 2x.
* **history load**: ``--rows`` individuals with 1-3 entries each, committed once through
  ``RedisHistoryStore`` to a Redis (a ``redis-server`` started on a free port, or
  ``--redis-url``); ``RedisHistoryStore.load`` of all of them against a raw pipeline of
  ``MGET`` commands of the same keys in chunks of the store's ``CHUNK`` (redis-py with
  hiredis, the key names built before the clock starts, the replies not decoded). Target: at
  most 2x.
* **offline release**: releases 1 and 2 of ``scale.py``'s churn series at ``--rows`` rows
  (constant-ratio k' = 3, l = 2, every occupation protected) through ``Publisher`` with a file
  history, the wall time of ``publish``. Target: at most 5 s on a quiet machine.

Each pair takes turns, best of ``--repeat``; the 1-minute load average is printed with each
figure (the machine is shared: read the ratios, and the times only with the load).

Usage::

    python benchmarks/floor.py [--rows 1000000] [--repeat 5] [--redis-url URL] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.csv as pa_csv
import redis

from stream_release.core.privacy.linkage import HistoryRows
from stream_release.devtools.local_services import (
    free_port,
    managed_process,
    redis_answers,
    redis_argv,
)
from stream_release.history.redis_store import CHUNK, RedisHistoryStore
from stream_release.io.encoding import encode
from stream_release.io.snapshot import snapshot_from_columns
from stream_release.io.snapshot_csv import read_snapshot
from stream_release.pipeline.publisher import Publisher

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from csv_read import SCHEMA, write_files  # noqa: E402
from scale import open_series  # noqa: E402

DEFAULT_DATA_DIR = HERE.parent.parent / "shared" / "data"
RATIO_TARGET = 2.0
RELEASE_TARGET_S = 5.0
VALUES = 14
"""Distinct values in the histories (Adult's occupations)."""


def load() -> str:
    return f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"


def best_of(repeat: int, pairs: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Each callable's best wall time over ``repeat`` rounds, taking turns within a round."""
    best = dict.fromkeys(pairs, float("inf"))
    for _ in range(repeat):
        for name, call in pairs.items():
            started = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def verdict(ratio: float, target: float) -> str:
    return "met" if ratio <= target else "NOT met"


def bench_read(rows: int, repeat: int, data_dir: Path, where: Path) -> str:
    path = write_files(data_dir, rows, where)[f"adult-{rows // 1000}k"]
    options = pa_csv.ReadOptions(use_threads=False)
    parse = pa_csv.ParseOptions(delimiter=";")
    best = best_of(
        repeat,
        {
            "read_snapshot": lambda: read_snapshot(path, SCHEMA).sha256,
            "pyarrow, 1 thread": lambda: pa_csv.read_csv(
                path, read_options=options, parse_options=parse
            ),
        },
    )
    ratio = best["read_snapshot"] / best["pyarrow, 1 thread"]
    return (
        f"read {rows:,} rows ({path.stat().st_size / 1e6:.0f} MB): read_snapshot "
        f"{best['read_snapshot']:.3f} s, pyarrow on one thread {best['pyarrow, 1 thread']:.3f} s, "
        f"ratio {ratio:.2f} (target <= {RATIO_TARGET:g}: {verdict(ratio, RATIO_TARGET)}), {load()}"
    )


@contextmanager
def redis_url(given: str | None, where: Path) -> Iterator[str]:
    """``given``, or the URL of a ``redis-server`` started for the run."""
    if given:
        yield given
        return
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    with managed_process("redis", redis_argv(port, where), where / "redis.log", where) as server:
        server.wait_until(lambda: redis_answers(url))
        yield url


def histories(n: int, rng: np.random.Generator) -> HistoryRows:
    """``n`` histories of 1-3 entries (distinct ascending values, as the store keeps them)."""
    counts = rng.integers(1, 4, size=n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    first = rng.integers(0, VALUES - 3, size=n)
    step = np.arange(int(indptr[-1]), dtype=np.int64) - np.repeat(indptr[:-1], counts)
    value = (np.repeat(first, counts) + step).astype(np.int32)
    log_p = -rng.random(int(indptr[-1]))
    links = rng.integers(1, 5, size=int(indptr[-1])).astype(np.int32)
    return HistoryRows(indptr, value, log_p, links)


def bench_history(rows: int, repeat: int, url: str) -> str:
    rng = np.random.default_rng(0)
    pseudonyms = rng.bytes(16 * rows)
    ps = np.frombuffer(pseudonyms, dtype="S16")
    store = RedisHistoryStore.from_url(url, f"bench-floor-{os.getpid()}")
    client = redis.Redis.from_url(url)
    try:
        store.commit(1, ps, histories(rows, rng), tuple(f"v{i}" for i in range(VALUES)), b"{}")
        keys = store.keys.individuals(ps)

        def raw() -> None:
            with client.pipeline(transaction=False) as pipe:
                for start in range(0, rows, CHUNK):
                    pipe.execute_command("MGET", *keys[start : start + CHUNK])  # type: ignore[no-untyped-call]
                pipe.execute()

        best = best_of(repeat, {"load": lambda: store.load(ps), "raw MGET": raw})
    finally:
        client.close()
        store.close()
    ratio = best["load"] / best["raw MGET"]
    return (
        f"history load of {rows:,} individuals: RedisHistoryStore.load {best['load']:.3f} s, "
        f"raw pipelined MGET {best['raw MGET']:.3f} s, ratio {ratio:.2f} "
        f"(target <= {RATIO_TARGET:g}: {verdict(ratio, RATIO_TARGET)}), {load()}"
    )


def bench_release(rows: int, data_dir: Path, where: Path) -> list[str]:
    settings, hierarchies, population = open_series(rows, data_dir, seed=0)
    publisher = Publisher.open(settings, where / "out", where / "history")
    lines = []
    try:
        for k in (1, 2):
            table = encode(snapshot_from_columns(*population.advance()), settings.schema,
                           hierarchies)  # fmt: skip
            started = time.perf_counter()
            manifest: dict[str, Any] = publisher.publish(table, label=f"S{k:02d}")
            seconds = time.perf_counter() - started
            met = "met" if seconds <= RELEASE_TARGET_S else "NOT met"
            lines.append(
                f"offline release {k} of {rows:,} rows (Publisher.publish, file history): "
                f"{seconds:.2f} s, {manifest['suppressed']:,} suppressed (target <= "
                f"{RELEASE_TARGET_S:g} s quiet: {met}), {load()}"
            )
    finally:
        publisher.close()
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--skip", default="", help="comma-separated: read,history,release")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    with tempfile.TemporaryDirectory(prefix="sr-floor-") as tmp:
        where = Path(tmp)
        if "read" not in skip:
            print(bench_read(args.rows, args.repeat, args.data_dir, where), flush=True)
        if "history" not in skip:
            with redis_url(args.redis_url, where) as url:
                print(bench_history(args.rows, args.repeat, url), flush=True)
        if "release" not in skip:
            for line in bench_release(args.rows, args.data_dir, where):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
