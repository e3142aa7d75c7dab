"""No cliffs: the time of every release of a series against its first, and ``plan``'s time.

Each series is ``benchmarks/plan_series.py`` in a child process of its own (the population of
``load.py``, Adult rows drawn to ``--rows``; the demo's configuration with ``[privacy]``
overrides), one per setting:

* ``planned``: the demo's own setting for the series (constant-ratio k' = horizon = its
  releases, the occupations rare enough for its ratio protected);
* ``k'=3 all``: constant-ratio k' = 3, every occupation protected, no horizon (the setting of
  issue 27's measurements);
* ``geometric alpha=A``: geometric at A in {1.5, 2, 3, 5}, every occupation protected.

``--keep 1.0`` makes a panel (the same people every release, 20 % of their values redrawn
each time); ``--keep 0.2`` the paper's churn. Per setting: release 1's publish time (each
package's kernels compiled first by a small series of the setting), the slowest later
release and its ratio to release 1 (target: at most 2), the release that was refused if
one was, the rows suppressed over the series, the mean average group size and the median
of the releases' median query errors; with ``--before REV`` the same for a git revision's
package in the same run, and whether every release's files are the same (the digests
``plan_series.py`` prints).

``--plan``: the wall time of ``plan_report`` (``stream-release plan``: every candidate
setting and the proposals) over the first three snapshots of the series, under ``k'=3 all``
(target: at most 30 s on three 10k snapshots).

Usage::

    python benchmarks/cliffs.py [--rows 10000] [--releases 12] [--keep 1.0] [--plan]
                                [--settings planned,k3,1.5,2,3,5] [--before REV]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA_DIR = REPO.parent / "shared" / "data"

ALL_PROTECTED = {"horizon": None, "protected": []}
SETTINGS: dict[str, dict[str, object]] = {
    "planned": {},
    "k3": {"k_prime": 3, **ALL_PROTECTED},
    "1.5": {"strategy": "geometric", "alpha": 1.5, **ALL_PROTECTED},
    "2": {"strategy": "geometric", "alpha": 2.0, **ALL_PROTECTED},
    "3": {"strategy": "geometric", "alpha": 3.0, **ALL_PROTECTED},
    "5": {"strategy": "geometric", "alpha": 5.0, **ALL_PROTECTED},
}
NAMES = {
    "planned": "planned (k'=H, rare)",
    "k3": "k'=3 all",
    **{a: f"geometric alpha={a}" for a in ("1.5", "2", "3", "5")},
}
WARM_ROWS = 1000
"""Rows of the small series each package runs under a setting before it is measured."""
ROW = re.compile(
    r"^(\d+) \| ([0-9.]+) \| ([0-9.]+) \| (\d+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9a-f]{12})$"
)
REFUSED = re.compile(r"^(\d+) \| refused after ([0-9.]+) s")


@dataclass
class Series:
    """One series as ``plan_series.py`` printed it."""

    seconds: list[float] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    suppressed: list[int] = field(default_factory=list)
    group: list[float] = field(default_factory=list)
    error: list[float] = field(default_factory=list)
    refused_at: int | None = None
    refused_s: float = 0.0

    def summary(self) -> str:
        if not self.seconds:
            return f"refused at 1 after {self.refused_s:.2f} s"
        first = self.seconds[0]
        later = self.seconds[1:] + ([self.refused_s] if self.refused_at else [])
        worst = max(later, default=first)
        at = later.index(worst) + 2 if later else 1
        text = f"{first:.2f} s | {worst:.2f} s (release {at}) | {worst / first:.1f}"
        if self.refused_at is not None:
            text += f" | refused at {self.refused_at} after {self.refused_s:.2f} s"
        else:
            text += f" | all {len(self.seconds)} published"
        return (
            f"{text} | {sum(self.suppressed)} | {statistics.mean(self.group):.2f} | "
            f"{statistics.median(self.error):.4f}"
        )


def run_series(
    python_path: Path, rows: int, releases: int, keep: float, privacy: dict[str, object]
) -> Series:
    """``plan_series.py`` with ``python_path``'s package first on the path."""
    env = {**os.environ, "PYTHONPATH": str(python_path)}
    out = subprocess.run(
        [
            sys.executable, str(HERE / "plan_series.py"), "--rows", str(rows),
            "--releases", str(releases), "--keep", str(keep), "--data-dir",
            str(DEFAULT_DATA_DIR), "--privacy", json.dumps(privacy),
        ],
        capture_output=True, text=True, env=env, cwd=python_path, check=False,
    )  # fmt: skip
    series = Series()
    for line in out.stdout.splitlines():
        if m := ROW.match(line):
            series.seconds.append(float(m.group(2)))
            series.suppressed.append(int(m.group(4)))
            series.group.append(float(m.group(5)))
            series.error.append(float(m.group(6)))
            series.digests.append(m.group(7))
        elif m := REFUSED.match(line):
            series.refused_at, series.refused_s = int(m.group(1)), float(m.group(2))
    if not series.seconds and series.refused_at is None:
        raise SystemExit(f"plan_series.py failed:\n{out.stdout}\n{out.stderr}")
    return series


PLAN_SCRIPT = r"""
import json, sys, tempfile, time
from pathlib import Path
import numpy as np
from stream_release.cli.demo import write_demo_config
from stream_release.devtools.datasets import (
    ADULT_QID, ADULT_SENSITIVE, ChurnPopulation, Table, read_csv_table,
)
from stream_release.pipeline.what_if import plan_report

rows, keep, data = int(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3])
privacy = json.loads(sys.argv[4])
population = ChurnPopulation(read_csv_table(data / "adult.csv"), ADULT_QID, ADULT_SENSITIVE,
                             rows, keep=keep, change=0.2, seed=0)
with tempfile.TemporaryDirectory() as tmp:
    work = Path(tmp)
    config = write_demo_config(work, 3)
    snapshots = []
    for r in range(1, 4):
        ids, qid, sensitive = population.advance()
        path = work / f"s{r}.csv"
        columns = {"id": list(ids), **{q: list(v) for q, v in qid.items()},
                   ADULT_SENSITIVE: list(sensitive)}
        Table({k: np.asarray(v, dtype=object) for k, v in columns.items()}).write_csv(path)
        snapshots.append(path)
    started = time.perf_counter()
    report = plan_report(config, snapshots, settings_overrides={"privacy": privacy}, advise=True)
    seconds = time.perf_counter() - started
    feasible = sum(1 for p in report.settings if p.feasible)
    print(json.dumps({"seconds": seconds, "settings": len(report.settings) + len(report.proposals),
                      "feasible": feasible}))
"""


def run_plan(python_path: Path, rows: int, keep: float, privacy: dict[str, object]) -> str:
    env = {**os.environ, "PYTHONPATH": str(python_path)}
    out = subprocess.run(
        [sys.executable, "-c", PLAN_SCRIPT, str(rows), str(keep), str(DEFAULT_DATA_DIR),
         json.dumps(privacy)],
        capture_output=True, text=True, env=env, cwd=python_path, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"plan failed:\n{out.stdout}\n{out.stderr}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return (
        f"{result['seconds']:.1f} s ({result['settings']} settings run or listed, "
        f"{result['feasible']} feasible)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--releases", type=int, default=12)
    parser.add_argument("--keep", type=float, default=1.0)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--plan", action="store_true")
    parser.add_argument("--before", help="a git revision measured in the same run")
    args = parser.parse_args(argv)
    chosen = args.settings.split(",")
    with tempfile.TemporaryDirectory(prefix="cliffs-before-") as tmp:
        trees = [("now", REPO)]
        if args.before:
            before = Path(tmp) / "tree"
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "add", "--detach", str(before), args.before],
                check=True, capture_output=True,
            )  # fmt: skip
            trees.insert(0, (args.before, before))
        try:
            report(args, chosen, trees)
        finally:
            if args.before:
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)],
                    check=False, capture_output=True,
                )  # fmt: skip
    return 0


def compare(before: list[str], now: list[str]) -> str:
    """``same`` when every release's files are, else the first release that differs."""
    for i, (a, b) in enumerate(zip(before, now, strict=False)):
        if a != b:
            return f"differ from release {i + 1}"
    return (
        "same"
        if len(before) == len(now)
        else f"differ from release {min(len(before), len(now)) + 1}"
    )


def report(args: argparse.Namespace, chosen: list[str], trees: list[tuple[str, Path]]) -> None:
    kind = "panel" if args.keep >= 1.0 else f"churn (keep {args.keep})"
    print(
        f"{args.rows:,} rows, {args.releases} releases, {kind}; load "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    print(
        "setting | package | release 1 | slowest later | ratio | outcome | suppressed "
        "(all releases) | avg group | median q.err (median of releases) | files"
    )
    print("--- | --- | --- | --- | --- | --- | --- | --- | --- | ---")
    for name in chosen:
        runs = []
        for label, tree in trees:
            # warm: the kernels this setting reaches compiled into the cache (a series in a
            # process of its own loads them at its first use, release 2's on a panel)
            run_series(tree, WARM_ROWS, 2, args.keep, SETTINGS[name])
            started = time.perf_counter()
            series = run_series(tree, args.rows, args.releases, args.keep, SETTINGS[name])
            runs.append((label, series, time.perf_counter() - started))
        for label, series, _ in runs:
            same = ""
            if len(runs) == 2 and label == "now":
                same = compare(runs[0][1].digests, series.digests)
            print(f"{NAMES[name]} | {label} | {series.summary()} | {same}", flush=True)
    if args.plan:
        for label, tree in trees:
            print(
                f"plan over 3 snapshots ({NAMES['k3']}), {label}: "
                f"{run_plan(tree, args.rows, args.keep, SETTINGS['k3'])}",
                flush=True,
            )


if __name__ == "__main__":
    raise SystemExit(main())
