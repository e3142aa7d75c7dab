"""Scale benchmark: one series of releases per snapshot size, through ``Publisher`` (issue 11).

The load benchmark's population (:class:`stream_release.devtools.datasets.ChurnPopulation`: Adult
rows
drawn with replacement, Wong et al. 2010, §8's churn: each release keeps 20 % of the previous one's
individuals, 20 % of those with a value drawn again, and adds new ones) at each size, published
as one series under constant-ratio k' = 3, l = 2 (the demo's setting, every occupation
protected, ``min_group_size`` 2) with a file-store history. Per release it prints
suppression, forced and exhausted individuals (from the private record), average and
maximum group, NCP, the relative error of 5,000 count queries (mean, median, 10 % trimmed
mean: the mean is dominated by queries with tiny true counts; and the median and trimmed mean
on the common workload of :data:`REFERENCE_ROWS`, the one every size is compared on), the time of
``Publisher.publish`` and the peak RSS of the process measuring that size (each size runs in
its own child process).

    python benchmarks/scale.py [--sizes 30000,100000,300000,1000000,3000000] [--seeds 0]
                               [--releases 5] [--rows-out ROWS.json]
    python benchmarks/scale.py --rows-in ROWS.json [ROWS.json ...]   # one table from runs

Writes ``results/scale.md`` and ``results/scale.png`` (suppression, largest group, NCP and
median query error on the common workload per release, one line per size; the first seed),
and per size the mean and range over every seed and release (``--seeds``: the spread between
seeds is the noise a difference between sizes is judged against).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from stream_release.audit.files import groups_in_order, read_assignments
from stream_release.config import Settings, load_settings
from stream_release.config.hierarchy import Hierarchy, load_hierarchies
from stream_release.core.utility.queries import error_figures, relative_errors
from stream_release.devtools.datasets import (
    ADULT_QID,
    ADULT_SENSITIVE,
    ChurnPopulation,
    adult_schema,
    read_csv_table,
)
from stream_release.io.encoding import encode
from stream_release.io.snapshot import snapshot_from_columns
from stream_release.pipeline.publisher import Publisher

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_DATA_DIR = REPO.parent / "shared" / "data"
SIZES = (30_000, 100_000, 300_000, 1_000_000, 3_000_000)
"""30k: Adult's own size, the reference for item 3 (NCP and error no worse at scale)."""
REFERENCE_ROWS = 30_000
"""The common workload keeps queries with at least ``ceil(n / REFERENCE_ROWS)`` rows: the
queries a 30k-row snapshot of the same population keeps (at least 1 row there). With the
plain workload (at least 1 row), a larger snapshot also keeps queries on regions a 30k
snapshot leaves empty (3-6.5 % of them at 1M), whose errors are the largest."""
QUERIES = 5000
KEY = "scale-benchmark-key-0123456789abcdef"
PRIVACY = {"strategy": "constant-ratio", "l": 2, "k_prime": 3, "min_group_size": 2}


def open_series(
    size: int, data_dir: Path, seed: int
) -> tuple[Settings, dict[str, Hierarchy], ChurnPopulation]:
    """The settings every series is published with (:data:`PRIVACY`, no query in the
    manifest), their hierarchies and the churn population of ``size`` rows drawn with
    ``seed``."""
    schema = adult_schema(data_dir)
    settings = load_settings(
        None, schema=schema, privacy=PRIVACY, history={"key": KEY}, output={"queries": 0}
    )
    population = ChurnPopulation(
        read_csv_table(data_dir / "adult.csv"), ADULT_QID, ADULT_SENSITIVE, size, seed=seed
    )
    return settings, load_hierarchies(settings.schema), population


def private_counts(private: Path, release: int) -> tuple[int, int]:
    """``(withheld, unplaced)`` individuals of release ``release`` (1-based) from its private
    record in the directory ``private`` (a record written before the rows withheld for their
    history were chosen without reading a value: its ``forced`` and ``exhausted``)."""
    record = (
        json.loads((private / f"private-{release:04d}.json").read_text()).get("suppressed") or {}
    )
    if "withheld" in record:
        return len(record["withheld"]), len(record.get("unplaced", []))
    return len(record.get("forced", [])), len(record.get("exhausted", {}))


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(size: int, releases: int, data_dir: Path, seed: int = 0) -> list[dict[str, Any]]:
    """One series of ``releases`` snapshots of ``size`` rows (population and queries drawn
    with ``seed``); a dict per release."""
    settings, hierarchies, population = open_series(size, data_dir, seed)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        publisher = Publisher.open(settings, work / "out", work / "history")
        try:
            for k in range(1, releases + 1):
                table = encode(snapshot_from_columns(*population.advance()), settings.schema,
                               hierarchies)  # fmt: skip
                started = time.perf_counter()
                manifest = publisher.publish(table, label=f"S{k:02d}")
                seconds = time.perf_counter() - started
                ids, group, _ = read_assignments(work / "out.private" / f"assignments-{k:04d}.csv")
                group = groups_in_order(ids, group, table.ids.tolist())
                errors = relative_errors(
                    table, group, format="generalized", queries=QUERIES,
                    rng=np.random.default_rng([seed, k]),
                )  # fmt: skip
                common = relative_errors(
                    table, group, format="generalized", queries=QUERIES,
                    rng=np.random.default_rng([seed, k]),
                    min_count=-(-table.n_rows // REFERENCE_ROWS),
                )  # fmt: skip
                forced, exhausted = private_counts(work / "out.private", k)
                u = manifest["utility"]
                out.append(
                    {
                        "size": size,
                        "seed": seed,
                        "release": k,
                        "rows": table.n_rows,
                        "suppressed": int(manifest["suppressed"]),
                        "suppression": float(u["suppression"]),
                        "forced": forced,
                        "exhausted": exhausted,
                        "groups": int(manifest["groups"]),
                        "avg_group": float(u["avg_group_size"]),
                        "max_group": int(u["max_group_size"]),
                        "ncp": float(u["ncp"]),
                        **dict(
                            zip(
                                ("error_mean", "error_median", "error_trimmed"),
                                error_figures(errors),
                                strict=True,
                            )
                        ),
                        **dict(
                            zip(
                                ("common_median", "common_trimmed"),
                                error_figures(common)[1:],
                                strict=True,
                            )
                        ),
                        "breach_max": float(manifest["breach"]["max"]),
                        "publish_s": seconds,
                        "peak_rss_mib": peak_rss_mib(),
                    }
                )
                print(format_row(out[-1]), file=sys.stderr, flush=True)
        finally:
            publisher.close()
    return out


def format_row(r: dict[str, Any], prefix: str | None = None) -> str:
    """One release's figures on one line, after ``prefix`` (default: the size)."""
    head = f"{r['size']:>9,}" if prefix is None else prefix
    return (
        f"{head} R{r['release']}  supp {100 * r['suppression']:6.2f} %  "
        f"forced {r['forced']:>6,}  exhausted {r['exhausted']:>6,}  avg {r['avg_group']:.2f}  "
        f"max {r['max_group']:>5,}  NCP {r['ncp']:.3f}  error {r['error_mean']:.3f} / "
        f"{r['error_median']:.3f} / {r['error_trimmed']:.3f}  common {r['common_median']:.3f} / "
        f"{r['common_trimmed']:.3f}  {r['publish_s']:6.1f} s  "
        f"RSS {r['peak_rss_mib']:,.0f} MiB"
    )


FIGURE_COLUMNS = (
    "suppression",
    "forced",
    "exhausted",
    "groups",
    "avg group",
    "max group",
    "NCP",
    "error mean / median / trimmed",
    "common median / trimmed",
    "breach max",
    "publish s",
    "peak RSS MiB",
)
"""The columns of :func:`figure_cells`, in order."""


def figure_cells(r: dict[str, Any]) -> list[str]:
    """A release's figures as the cells of a markdown table (:data:`FIGURE_COLUMNS`)."""
    return [
        f"{100 * r['suppression']:.2f} %",
        f"{r['forced']:,}",
        f"{r['exhausted']:,}",
        f"{r['groups']:,}",
        f"{r['avg_group']:.2f}",
        f"{r['max_group']:,}",
        f"{r['ncp']:.3f}",
        f"{r['error_mean']:.3f} / {r['error_median']:.3f} / {r['error_trimmed']:.3f}",
        f"{r['common_median']:.3f} / {r['common_trimmed']:.3f}",
        f"{r['breach_max']:.4f}",
        f"{r['publish_s']:.1f}",
        f"{r['peak_rss_mib']:,.0f}",
    ]


def table_lines(header: list[str], cells: list[list[str]]) -> list[str]:
    """A markdown table: its header line, the rule and one line per row of ``cells``."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in cells),
    ]


def markdown(rows: list[dict[str, Any]], argv: list[str]) -> str:
    lines = [
        "# Scale benchmark",
        "",
        f"`python benchmarks/scale.py {' '.join(argv)}`".replace(" `", "`"),
        "",
        f"Settings: {PRIVACY}, every occupation protected, `[grouping]` defaults "
        "(`max_group_factor` 2: no group past 10 rows); error: 5,000 count queries "
        "per release, mean / median / 10 % trimmed mean. RSS: peak of the child process "
        f"measuring that size. CPUs: {os.cpu_count()}.",
        "",
        *table_lines(
            ["rows", "seed", "release", *FIGURE_COLUMNS],
            [[f"{r['size']:,}", str(r["seed"]), str(r["release"]), *figure_cells(r)] for r in rows],
        ),
    ]
    return "\n".join(lines + summary(rows)) + "\n"


SUMMARY_FIGURES = ("ncp", "error_median", "error_trimmed", "common_median", "common_trimmed")
"""The figures :func:`summary` gives the mean and range of: the NCP and the robust errors."""


def summary(
    rows: list[dict[str, Any]], by: str = "size", name: str = "rows", noun: str = "size"
) -> list[str]:
    """Per value of ``by`` (a ``noun``, in a column named ``name``), over every seed and
    release: the mean and range of the NCP and of the robust error figures. The spread between
    seeds at one value is the noise the values' difference is judged against."""
    cells = []
    for value in sorted({r[by] for r in rows}):
        mine = [r for r in rows if r[by] == value]
        row = [f"{value:,}", str(len({r["seed"] for r in mine}))]
        for key in SUMMARY_FIGURES:
            v = np.array([r[key] for r in mine])
            row.append(f"{v.mean():.3f} [{v.min():.3f}, {v.max():.3f}]")
        cells.append(row)
    header = [name, "series", "NCP", "error median", "error trimmed"]
    return [
        "",
        f"Per {noun}, over every seed and release: mean [min, max].",
        "",
        *table_lines([*header, "common median", "common trimmed"], cells),
    ]


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Four panels per release, one line per size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("suppression", "suppressed rows (%)", 100.0),
        ("max_group", "largest group (rows)", 1.0),
        ("ncp", "NCP", 1.0),
        ("common_median", "median query error (common workload)", 1.0),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    for ax, (key, label, scale) in zip(axes.flat, panels, strict=True):
        for size in sorted({r["size"] for r in rows}):
            mine = [r for r in rows if r["size"] == size]
            ax.plot(
                [r["release"] for r in mine],
                [r[key] * scale for r in mine],
                marker="o",
                label=f"{size:,} rows",
            )
        ax.set_xlabel("release")
        ax.set_ylabel(label)
        ax.set_xticks(sorted({r["release"] for r in rows}))
    axes.flat[0].legend()
    fig.suptitle("scale: constant-ratio k' = 3, l = 2, every occupation protected")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def measure_in_child(script: str, args: list[str]) -> list[dict[str, Any]]:
    """The rows (JSON on its stdout) of ``python script *args``, run in a child process of its
    own: the peak RSS it reports is that of one series."""
    child = subprocess.run(
        [sys.executable, script, *args], check=True, stdout=subprocess.PIPE, text=True
    )
    rows: list[dict[str, Any]] = json.loads(child.stdout)
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--seeds", default="0", help="population and query seeds, e.g. 0,1,2")
    parser.add_argument("--releases", type=int, default=5)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--out", type=Path, default=RESULTS / "scale.md")
    parser.add_argument("--rows-out", type=Path, help="also write the measured rows (JSON)")
    parser.add_argument(
        "--rows-in", type=Path, nargs="+", help="measure nothing: the rows of earlier runs"
    )
    parser.add_argument("--measure-only", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.measure_only:
        data_dir = args.data_dir.resolve()
        print(json.dumps(measure(args.measure_only, args.releases, data_dir, seeds[0])))
        return 0
    rows: list[dict[str, Any]] = []
    for path in args.rows_in or []:
        rows.extend(json.loads(path.read_text()))
    for size in [] if args.rows_in else (int(s) for s in args.sizes.split(",")):
        for seed in seeds:
            child = ["--measure-only", str(size), "--seeds", str(seed), "--releases",
                     str(args.releases), "--data-dir", str(args.data_dir)]  # fmt: skip
            rows.extend(measure_in_child(__file__, child))
    if args.rows_out:
        args.rows_out.write_text(json.dumps(rows))
    seeds = sorted({r["seed"] for r in rows}) if args.rows_in else seeds
    rows.sort(key=lambda r: (r["size"], r["seed"], r["release"]))
    png = args.out.with_suffix(".png")
    plot([r for r in rows if r["seed"] == seeds[0]], png)
    args.out.write_text(markdown(rows, argv) + f"\n![scale]({png.name})\n")
    print(f"wrote {args.out} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
