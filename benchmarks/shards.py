"""Shards benchmark: the utility cost of planning each records partition on its own (scale-out).

docs/scale-out.md: with ``P`` partitions of ``topics.records``, every record keyed by the
individual's id, Kafka's default partitioner sends an individual to the same partition in every
release, and each shard plans its own groups against its own individuals' histories. The
guarantee is per individual, so it holds per shard; the cost is utility, since no group mixes
individuals of two shards. This measures that cost on the scale benchmark's series
(``benchmarks/scale.py``: the churn population, constant-ratio k' = 3, l = 2, every occupation
protected, a file-store history).

For each release, the rows are split by the partition of their UTF-8 id under aiokafka's
``DefaultPartitioner`` (Java's: murmur2 of the key, ``& 0x7fffffff``, mod ``P``) and cut by the
service's cut on shards (:class:`~stream_release.stream.sharded.cut.ShardedCut`, one owner of
every shard, on a local Redis: staged per shard, sealed with each partition's count, the
parts agreeing on the union of their suppressed rows as the workers do); ``P = 1`` is one
``Publisher`` with a file-store history. The release's figures are those of the union of the
shards' groups, as
a consumer reads one release made of every part: suppression over all rows, groups, average and
maximum group and NCP over all published rows (computed on the whole release with the union's
assignment), the breach maximum over the shards, and the error of one set of 5,000 count
queries per release (:func:`~stream_release.core.utility.queries.draw_count_queries` on the whole
release with ``default_rng([seed, release])``, the value ``s`` drawn from every row, so every
``P`` of a seed is scored on the same queries), answered from the union's groups with the
package's estimator against the whole release's true counts. The common workload keeps the
queries with at least ``ceil(n / 30,000)`` rows, as in ``scale.py``.

    python benchmarks/shards.py [--size 1000000] [--partitions 1,4] [--seeds 0,1]
                                [--releases 5] [--rows-out ROWS.json]
    python benchmarks/shards.py --rows-in ROWS.json [ROWS.json ...]   # one table from runs

Writes ``results/shards.md``: the figures per release and ``P``, per ``P`` the mean and range
over seeds and releases, and the ratios ``P / P = 1`` of the NCP and the robust query errors
next to the ratios between seeds at ``P = 1`` (the noise to judge them against). Each
``(P, seed)`` series runs in its own child process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from aiokafka.partitioner import DefaultPartitioner
from numpy.typing import NDArray
from scale import (
    DEFAULT_DATA_DIR,
    FIGURE_COLUMNS,
    PRIVACY,
    QUERIES,
    REFERENCE_ROWS,
    RESULTS,
    figure_cells,
    format_row,
    measure_in_child,
    open_series,
    peak_rss_mib,
    private_counts,
    summary,
    table_lines,
)

from stream_release.audit.files import groups_in_order, read_assignments
from stream_release.core.grouping.layout import release_layout
from stream_release.core.table import EncodedTable
from stream_release.core.utility.groups import group_size_stats, ncp
from stream_release.core.utility.queries import draw_count_queries, error_figures
from stream_release.core.utility.query_index import ReleaseCounts
from stream_release.devtools.local_services import (
    free_port,
    managed_process,
    redis_answers,
    redis_argv,
)
from stream_release.history.pseudonym import Pseudonymizer, load_key
from stream_release.history.redis_client import connect
from stream_release.io.encoding import encode
from stream_release.io.release_files import ReleasePaths
from stream_release.io.snapshot import snapshot_from_columns
from stream_release.pipeline.publisher import Publisher
from stream_release.stream.sharded.cut import ShardedCut
from stream_release.stream.staging import staged_row

TARGET = 1.10
"""The issue's bound on ``P = 4`` against ``P = 1``: NCP and query error within +10 %."""
RATIO_FIGURES = ("ncp", "error_median", "error_trimmed", "common_median", "common_trimmed")


def partition_of(ids: NDArray[np.object_], partitions: int) -> NDArray[np.int64]:
    """(n,) the partition of each id (``str``) among ``partitions``: aiokafka's
    ``DefaultPartitioner`` on the id's UTF-8 bytes, as the producer keys each record."""
    every = list(range(partitions))
    choose = DefaultPartitioner()
    keys = (choose(i.encode("utf-8"), every, every) for i in ids.tolist())
    return np.fromiter(keys, dtype=np.int64, count=ids.shape[0])


def query_errors(
    table: EncodedTable, counts: ReleaseCounts, rng_seed: list[int], min_count: int
) -> NDArray[np.float64]:
    """Relative errors of the workload drawn from the whole release (``s`` from every row), the
    estimates from the release whose indexes ``counts`` holds; stops unless its actual counts
    are the draw's."""
    queries = draw_count_queries(
        table, queries=QUERIES, rng=np.random.default_rng(rng_seed), min_count=min_count
    )
    actual, estimate = counts.answer(queries.attrs, queries.starts, queries.ends, queries.values)
    if not np.array_equal(actual, queries.actual):
        raise SystemExit("the release's actual counts differ from the workload's")
    return np.abs(estimate - actual) / actual


def measure(
    size: int, releases: int, data_dir: Path, seed: int, partitions: int
) -> list[dict[str, Any]]:
    """One series of ``releases`` snapshots of ``size`` rows split over ``partitions`` shards;
    a dict per release, its figures over the union. ``P = 1``: one ``Publisher``. ``P > 1``:
    the service's cut on shards (:class:`~stream_release.stream.sharded.cut.ShardedCut`, one
    owner of every shard, on a local Redis): the parts agree on their suppressed rows' union
    and link them to it, as a release cut by the workers is."""
    if partitions > 1:
        return measure_sharded(size, releases, data_dir, seed, partitions)
    settings, hierarchies, population = open_series(size, data_dir, seed)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = [Path(tmp) / f"shard-{p}" for p in range(partitions)]
        publishers = [Publisher.open(settings, w / "out", w / "history") for w in work]
        try:
            for k in range(1, releases + 1):
                ids, qid, sensitive = population.advance()
                table = encode(snapshot_from_columns(ids, qid, sensitive), settings.schema,
                               hierarchies)  # fmt: skip
                shard = partition_of(ids, partitions)
                assigned_ids: list[str] = []
                assigned: list[NDArray[np.int64]] = []
                manifests, seconds, shard_rows, shard_forced, shard_exhausted = [], [], [], [], []
                for p, publisher in enumerate(publishers):
                    rows = np.flatnonzero(shard == p)
                    part = snapshot_from_columns(
                        ids[rows], {q: v[rows] for q, v in qid.items()}, sensitive[rows]
                    )
                    started = time.perf_counter()
                    manifests.append(
                        publisher.publish(
                            encode(part, settings.schema, hierarchies), label=f"S{k:02d}"
                        )
                    )
                    seconds.append(time.perf_counter() - started)
                    private = work[p] / "out.private"
                    a_ids, a_group, virtual = read_assignments(private / f"assignments-{k:04d}.csv")
                    if virtual.any():
                        raise SystemExit(f"shard {p}, release {k}: virtual members, not measured")
                    offset = sum(int(m["groups"]) for m in manifests[:-1])
                    assigned_ids.extend(a_ids)
                    assigned.append(np.where(a_group >= 0, a_group + offset, -1))
                    forced, exhausted = private_counts(private, k)
                    shard_rows.append(int(rows.shape[0]))
                    shard_forced.append(forced)
                    shard_exhausted.append(exhausted)
                group = groups_in_order(assigned_ids, np.concatenate(assigned), table.ids.tolist())
                out.append(
                    {
                        "size": size,
                        "partitions": partitions,
                        "seed": seed,
                        "release": k,
                        "shard_rows": shard_rows,
                        "forced": sum(shard_forced),
                        "exhausted": sum(shard_exhausted),
                        **union_figures(table, group, manifests, [seed, k]),
                        "breach_max": max(float(m["breach"]["max"]) for m in manifests),
                        "publish_s": sum(seconds),
                        "publish_max_s": max(seconds),
                        "peak_rss_mib": peak_rss_mib(),
                    }
                )
                print(format_row(out[-1], f"P={partitions} seed {seed}"), file=sys.stderr,
                      flush=True)  # fmt: skip
        finally:
            for publisher in publishers:
                publisher.close()
    return out


def measure_sharded(
    size: int, releases: int, data_dir: Path, seed: int, partitions: int
) -> list[dict[str, Any]]:
    """:func:`measure` through :class:`ShardedCut`: each release's rows staged in the shard of
    their partition (pseudonymised as the worker does), sealed with each partition's count,
    cut; the union of the parts read back from the merged assignments."""
    settings, hierarchies, population = open_series(size, data_dir, seed)
    settings = settings.model_copy(
        update={"kafka": settings.kafka.model_copy(update={"partitions": partitions})}
    )
    key = load_key(settings.history, default_dir=None)
    pseudonymizer = Pseudonymizer(key)
    schema = settings.schema
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        port = free_port()
        url = f"redis://127.0.0.1:{port}/0"
        with managed_process("redis", redis_argv(port, work), work / "redis.log", work) as redis:
            redis.wait_until(lambda: redis_answers(url))
            cut = ShardedCut(settings, connect(url), range(partitions), work / "out",
                             work / "out.private")  # fmt: skip
            for k in range(1, releases + 1):
                ids, qid, sensitive = population.advance()
                raw = snapshot_from_columns(ids, qid, sensitive)
                table = encode(raw, schema, hierarchies)
                shard = partition_of(ids, partitions)
                digests = pseudonymizer.digests(ids.tolist())
                columns = [qid[name].tolist() for name in schema.qid]
                rows = [
                    staged_row([str(c) for c in values], str(s))
                    for s, *values in zip(sensitive.tolist(), *columns, strict=True)
                ]
                label = f"S{k:02d}"
                started = time.perf_counter()
                for p in range(partitions):
                    mine = np.flatnonzero(shard == p).tolist()
                    cut.shards[p].staging.stage(
                        label, [digests[i] for i in mine], [rows[i] for i in mine]
                    )
                staged_s = time.perf_counter() - started
                counts = np.bincount(shard, minlength=partitions).tolist()
                cut.seal(label, counts)
                started = time.perf_counter()
                result = cut.step()
                cut.file_finished()
                cut_s = time.perf_counter() - started
                if len(result.manifests) != 1:
                    raise SystemExit(f"release {k} not published: {result.refused}")
                manifest = result.manifests[0]
                paths = ReleasePaths(work / "out", k, work / "out.private")
                a_ids, a_group, virtual = read_assignments(paths.assignments)
                if virtual.any():
                    raise SystemExit(f"release {k}: virtual members, not measured")
                hexes = [d.hex() for d in digests]
                group = groups_in_order(a_ids, a_group, hexes)
                record = orjson.loads(paths.private_record.read_bytes())["suppressed"]
                out.append(
                    {
                        "size": size,
                        "partitions": partitions,
                        "seed": seed,
                        "release": k,
                        "shard_rows": counts,
                        "forced": len(record.get("withheld", record.get("forced", []))),
                        "exhausted": len(record.get("unplaced", record.get("exhausted", {}))),
                        **union_figures(table, group, cut.part_manifests(k), [seed, k]),
                        "breach_max": float(manifest["breach"]["max"]),
                        "publish_s": cut_s,
                        "publish_max_s": cut_s,
                        "staging_s": staged_s,
                        "peak_rss_mib": peak_rss_mib(),
                    }
                )
                print(format_row(out[-1], f"P={partitions} seed {seed} (cut on shards)"),
                      file=sys.stderr, flush=True)  # fmt: skip
    return out


def union_figures(
    table: EncodedTable, group: NDArray[np.int64], parts: list[dict[str, Any]], seed: list[int]
) -> dict[str, Any]:
    """The figures of a release made of ``parts`` (their manifests, shard 0 first) read as one:
    ``group`` (n,) the union's group of every row of ``table``; sizes, suppression and NCP of
    the union (checked against the parts' manifests), the error of the release's queries
    (``seed``: the query workload's) answered from the union's groups."""
    layout = release_layout(table, group, bounds=True)
    stats = group_size_stats(layout)
    union_ncp = ncp(table, layout)
    check_union(stats, parts, union_ncp)
    counts = ReleaseCounts(table, layout, "generalized")
    errors = query_errors(table, counts, seed, 1)
    common = query_errors(table, counts, seed, -(-table.n_rows // REFERENCE_ROWS))
    mean, median, trimmed = error_figures(errors)
    return {
        "rows": table.n_rows,
        "shard_suppressed": [int(m["suppressed"]) for m in parts],
        "suppressed": int(stats["suppressed"]),
        "suppression": float(stats["suppression"]),
        "groups": int(stats["groups"]),
        "avg_group": float(stats["avg_group_size"]),
        "max_group": int(stats["max_group_size"]),
        "ncp": union_ncp,
        "error_mean": mean,
        "error_median": median,
        "error_trimmed": trimmed,
        "common_median": error_figures(common)[1],
        "common_trimmed": error_figures(common)[2],
    }


def check_union(stats: dict[str, int | float], manifests: list[dict[str, Any]], nc: float) -> None:
    """Stop unless the union's groups, published rows and NCP are those the shards' manifests
    add up to (the NCP: their published-weighted mean, exact here since every Adult QID has a
    hierarchy, whose penalty does not depend on the rows present)."""
    published = [int(m["utility"]["published"]) for m in manifests]
    weighted = sum(float(m["utility"]["ncp"]) * int(m["utility"]["published"]) for m in manifests)
    expected = (sum(int(m["groups"]) for m in manifests), sum(published))
    if (stats["groups"], stats["published"]) != expected or not np.isclose(
        nc, weighted / max(sum(published), 1), rtol=1e-9, atol=0.0
    ):
        raise SystemExit(
            f"the union ({stats['groups']} groups, {stats['published']} published, NCP {nc}) is "
            f"not the shards' ({expected[0]} groups, {expected[1]} published, NCP "
            f"{weighted / max(sum(published), 1)})"
        )


Pair = tuple[dict[str, Any], dict[str, Any]]
"""One release of a series and the same release of the series it is compared with."""


def ratio_cells(label: str, release: str, pairs: list[Pair]) -> list[str]:
    """The ratio of the means of each of :data:`RATIO_FIGURES` over ``pairs``."""
    means = (np.mean([a[f] for a, _ in pairs]) / np.mean([b[f] for _, b in pairs])
             for f in RATIO_FIGURES)  # fmt: skip
    return [label, release, *(f"{m:.3f}" for m in means)]


def spread_cells(label: str, pairs: list[Pair]) -> list[str]:
    """Over ``pairs``: their number, then per figure the ratio of the means and the per-release
    ratios' standard deviation and range."""
    cells = [label, str(len(pairs))]
    for f in RATIO_FIGURES:
        each = np.array([a[f] / b[f] for a, b in pairs])
        pooled = np.mean([a[f] for a, _ in pairs]) / np.mean([b[f] for _, b in pairs])
        sd = f" ± {each.std(ddof=1):.3f}" if each.size > 1 else ""
        cells.append(f"{pooled:.3f}{sd} [{each.min():.3f}, {each.max():.3f}]")
    return cells


def ratio_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The ratios ``P / P = 1`` of each seed, per release and of the means over releases, the
    same ratios between seeds at ``P = 1`` (each seed against the first: the noise), and per
    comparison over every seed and release their mean, standard deviation and range."""
    by = {(r["partitions"], r["seed"], r["release"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows if r["partitions"] == 1})

    def pairs(num: tuple[int, int], den: tuple[int, int]) -> list[Pair]:
        releases = sorted({k for p, s, k in by if (p, s) == num})
        return [(by[(*num, k)], by[(*den, k)]) for k in releases if (*den, k) in by]

    compared: list[tuple[str, list[tuple[str, list[Pair]]]]] = []
    for p in sorted({r["partitions"] for r in rows} - {1}):
        series = [(f"P={p} / P=1, seed {s}", pairs((p, s), (1, s)))
                  for s in sorted({r["seed"] for r in rows if r["partitions"] == p})]  # fmt: skip
        compared.append((f"P={p} / P=1", series))
    noise = [(f"P=1 seed {s} / seed {seeds[0]}", pairs((1, s), (1, seeds[0]))) for s in seeds[1:]]
    if noise:
        compared.append((f"P=1 seeds / seed {seeds[0]} (noise)", noise))
    cells: list[list[str]] = []
    spread: list[list[str]] = []
    for name, series in compared:
        for label, mine in series:
            cells += [ratio_cells(label, str(a["release"]), [(a, b)]) for a, b in mine]
            if mine:
                cells.append([f"**{c}**" for c in ratio_cells(label, "mean", mine)])
        every = [pair for _, mine in series for pair in mine]
        if every:
            spread.append(spread_cells(name, every))
    figures = ["NCP", "error median", "error trimmed", "common median", "common trimmed"]
    return [
        "",
        f"Ratios (target: NCP and query error at most {TARGET:.2f} × those of P = 1; the mean "
        "row is the ratio of the means over releases; P and P = 1 of one seed share the "
        "population and the queries, two seeds share neither: their ratios at P = 1 are the "
        "noise).",
        "",
        *table_lines(["compared", "release", *figures], cells),
        "",
        "Over every seed and release: the ratio of the means ± the standard deviation of the "
        "per-release ratios [their min, max].",
        "",
        *table_lines(["compared", "pairs", *figures], spread),
    ]


SERIES_COLUMNS = ("P", "seed", "release", "shard rows", "suppressed per shard")


def markdown(rows: list[dict[str, Any]], argv: list[str]) -> str:
    cells = [
        [str(r["partitions"]), str(r["seed"]), str(r["release"]),
         f"{min(r['shard_rows']):,}–{max(r['shard_rows']):,}",
         " / ".join(f"{s:,}" for s in r["shard_suppressed"]),
         *figure_cells(r), f"{r['publish_max_s']:.1f}"]
        for r in rows
    ]  # fmt: skip
    sizes = sorted({r["size"] for r in rows})
    lines = [
        "# Shards benchmark",
        "",
        f"`python benchmarks/shards.py {' '.join(argv)}`".replace(" `", "`"),
        "",
        f"Releases of {', '.join(f'{n:,}' for n in sizes)} rows (the scale benchmark's series, "
        f"settings {PRIVACY}, every occupation protected) split over P shards by the Kafka "
        "default partitioner on the UTF-8 id; P = 1 published by one `Publisher`, P > 1 cut "
        "by the service's cut on shards (`ShardedCut` owning every shard, on a local Redis: "
        "the parts agree on the union of their suppressed rows and link them to it), the "
        "figures those of the union of the shards' groups. Query error: "
        f"the same {QUERIES:,} count queries for every P of a seed, drawn from the whole release "
        "(`s` from every row), mean / median / 10 % trimmed mean; common: the queries with at "
        f"least n / {REFERENCE_ROWS:,} rows. Publish s: P = 1 `Publisher.publish`, P > 1 "
        "the cut's steps after the rows are staged (every part planned, linked, committed and "
        "filed in one process). RSS: peak of "
        f"the child process measuring that series (every shard's publisher). CPUs: "
        f"{os.cpu_count()}.",
        "",
        *table_lines([*SERIES_COLUMNS, *FIGURE_COLUMNS, "slowest shard s"], cells),
    ]
    series = sorted({(r["partitions"], r["seed"], r["series_s"]) for r in rows if "series_s" in r})
    lines += [
        "",
        "Wall time of each series (child process: encoding, splitting, publishing every shard, "
        "the figures): " + ", ".join(f"P={p} seed {s} {t / 60:.1f} min" for p, s, t in series),
    ]
    return "\n".join(lines + summary(rows, "partitions", "P", "P") + ratio_lines(rows)) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--partitions", default="1,4", help="numbers of shards, e.g. 1,2,4,8")
    parser.add_argument("--seeds", default="0,1", help="population and query seeds, e.g. 0,1")
    parser.add_argument("--releases", type=int, default=5)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--out", type=Path, default=RESULTS / "shards.md")
    parser.add_argument("--rows-out", type=Path, help="also write the measured rows (JSON)")
    parser.add_argument(
        "--rows-in", type=Path, nargs="+", help="measure nothing: the rows of earlier runs"
    )
    parser.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    partitions = [int(p) for p in args.partitions.split(",")]
    if any(p < 1 for p in partitions):
        parser.error(f"--partitions {args.partitions}: each must be >= 1")
    if args.measure_only:
        rows = measure(args.size, args.releases, args.data_dir.resolve(), seeds[0], partitions[0])
        print(json.dumps(rows))
        return 0
    rows = []
    for path in args.rows_in or []:
        rows.extend(json.loads(path.read_text()))
    for p in [] if args.rows_in else partitions:
        for seed in seeds:
            started = time.perf_counter()
            child = ["--measure-only", "--size", str(args.size), "--partitions", str(p),
                     "--seeds", str(seed), "--releases", str(args.releases),
                     "--data-dir", str(args.data_dir)]  # fmt: skip
            series = measure_in_child(__file__, child)
            elapsed = time.perf_counter() - started
            print(f"P={p} seed {seed}: {elapsed:.0f} s", file=sys.stderr)
            rows.extend({**r, "series_s": elapsed} for r in series)
    if args.rows_out:
        args.rows_out.write_text(json.dumps(rows))
    rows.sort(key=lambda r: (r["partitions"], r["seed"], r["release"]))
    args.out.write_text(markdown(rows, argv))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
