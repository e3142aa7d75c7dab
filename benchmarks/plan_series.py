"""The plan's time release after release on a churn series, and a digest of every release's files.

The suppressed set's protection (placing rows, decoys, regrouping) grows with the histories:
on the demo's configuration its plan takes a few seconds in the first releases of a 1M-row
series and tens of seconds from release 6 on. This series shows it, one release after the
other, through ``Publisher`` (file-store history, files in a temporary directory):

* the population of ``benchmarks/load.py`` (Adult rows drawn to ``--rows``, paper §8 churn:
  ``--keep`` of a snapshot carried over, ``--change`` of the values redrawn, seed 0);
* the configuration ``stream-release demo`` writes (``write_demo_config``);
* per release: the wall time of the publication (pseudonyms, plan, render, commit), of the
  plan within it (pseudonyms, the histories' load, ``plan_release``: ``Publisher.plan``), the
  suppressed rows, and the first 12 hex digits of the sha256 of the release's assignments and
  group lines. A change meant to be faster and nothing else must leave every digest as it was:
  run the series before and after it.

``--profile`` runs cProfile over the last release and prints its 40 costliest calls
(cumulative).

Usage::

    python benchmarks/plan_series.py [--rows 300000] [--releases 7] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_DATA_DIR = HERE.parent.parent / "shared" / "data"
KEY = "plan-series-benchmark-key-0123456789abcdef"


def run(
    rows: int,
    releases: int,
    keep: float,
    change: float,
    data_dir: Path,
    profile: bool,
    privacy: dict[str, Any],
) -> None:
    from stream_release.cli.demo import write_demo_config
    from stream_release.config import load_settings
    from stream_release.config.hierarchy import load_hierarchies
    from stream_release.devtools.datasets import (
        ADULT_QID,
        ADULT_SENSITIVE,
        ChurnPopulation,
        read_csv_table,
    )
    from stream_release.errors import GuaranteeUnsatisfiable
    from stream_release.io.encoding import encode
    from stream_release.io.snapshot import snapshot_from_columns
    from stream_release.pipeline.publisher import Publisher
    from stream_release.pipeline.render import render_release

    population = ChurnPopulation(
        read_csv_table(data_dir / "adult.csv"),
        ADULT_QID,
        ADULT_SENSITIVE,
        rows,
        keep=keep,
        change=change,
        seed=0,
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        config = write_demo_config(work, releases)
        settings = load_settings(config, history={"key": KEY}, privacy=privacy)
        hierarchies = load_hierarchies(settings.schema)
        publisher = Publisher.open(settings, work / "out", work / "history")
        print(f"{rows:,} rows, {releases} releases, keep {keep}, change {change}")
        print(f"privacy: {settings.privacy.model_dump(exclude_defaults=True)}")
        print(
            "release | publish s | plan s | suppressed | avg group | median q.err | files (sha256)"
        )
        print("--- | --- | --- | --- | --- | --- | ---")
        profiler = cProfile.Profile()
        for r in range(1, releases + 1):
            table = encode(
                snapshot_from_columns(*population.advance()), settings.schema, hierarchies
            )
            last = r == releases and profile
            started = time.perf_counter()
            if last:
                profiler.enable()
            pseudonyms = publisher.pseudonymizer.pseudonyms(table.ids)
            try:
                release = publisher.next_input(table, label=f"S{r}", pseudonyms=pseudonyms)
                planned = publisher.mechanism.plan(release)
            except GuaranteeUnsatisfiable as exc:
                refused = time.perf_counter() - started
                print(f"{r} | refused after {refused:.2f} s: {str(exc)[:160]}", flush=True)
                break
            plan_s = time.perf_counter() - started
            manifest = publisher.apply(render_release(publisher.mechanism, planned))
            if last:
                profiler.disable()
            publish_s = time.perf_counter() - started
            digest = hashlib.sha256(
                (work / "out.private" / f"assignments-{r:04d}.csv").read_bytes()
                + (work / "out" / f"release-{r:04d}.jsonl").read_bytes()
            ).hexdigest()[:12]
            utility = manifest["utility"]
            print(
                f"{r} | {publish_s:.2f} | {plan_s:.2f} | {manifest['suppressed']} | "
                f"{utility['avg_group_size']:.2f} | {utility['query_error_median']:.4f} | "
                f"{digest}",
                flush=True,
            )
        publisher.close()
    if profile:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--releases", type=int, default=7)
    parser.add_argument("--keep", type=float, default=0.2)
    parser.add_argument("--change", type=float, default=0.2)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--privacy",
        type=json.loads,
        default={},
        help='[privacy] overrides as JSON, e.g. \'{"k_prime": 3, "horizon": null}\'',
    )
    args = parser.parse_args(argv)
    run(args.rows, args.releases, args.keep, args.change, args.data_dir, args.profile, args.privacy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
