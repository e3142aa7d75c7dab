"""Memory and time of the offline release as a user runs it: one ``stream-release anonymize``
process per release of the churn series, at each size (issue 27, item 3).

The series is ``scale.py``'s (its population, seed and privacy: constant-ratio k' = 3, l = 2,
every occupation protected, ``min_group_size`` 2), written as one CSV file per release
before any clock starts. Each release is then published by its own ``stream-release
anonymize --config C --out DIR FILE`` process, continuing the series in ``DIR`` (its file
history under ``DIR.private/history``). Per release it prints the wall time of that process
(start-up, reading the file, the release, the commit and the files it writes) and its peak
resident set size (``ru_maxrss`` from ``wait4``), as MiB and as GiB per million rows.

Target (item 3): peak RSS <= 1 GiB per million rows in every release.

    python benchmarks/memory.py [--sizes 1000000,3000000] [--releases 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scale import DEFAULT_DATA_DIR, open_series  # noqa: E402

from stream_release.cli.demo import write_demo_config  # noqa: E402
from stream_release.devtools.datasets import ADULT_QID, ADULT_SENSITIVE  # noqa: E402

PRIVACY_TOML = """\
[privacy]
l = 2
strategy = "constant-ratio"
k_prime = 3
min_group_size = 2
"""
"""``scale.py``'s :data:`~scale.PRIVACY` (every value protected by default)."""


def write_config(where: Path) -> Path:
    """The demo's configuration (schema and bundled hierarchies) with ``scale.py``'s privacy
    and no query workload in the manifest."""
    path = write_demo_config(where)
    text = path.read_text()
    head, _, rest = text.partition("[privacy]")
    _, _, output = rest.partition("[output]")
    path.write_text(f"{head}{PRIVACY_TOML}[output]{output}queries = 0\n")
    return path


def write_snapshots(size: int, releases: int, seed: int, data_dir: Path, where: Path) -> list[Path]:
    """The series' snapshots as ``;``-separated CSV files."""
    _, _, population = open_series(size, data_dir, seed)
    files = []
    for k in range(1, releases + 1):
        ids, qid, sensitive = population.advance()
        columns = {"id": ids.astype(str), **{q: qid[q].astype(str) for q in ADULT_QID}}
        columns[ADULT_SENSITIVE] = sensitive.astype(str)
        path = where / f"snapshot-{size}-{k:02d}.csv"
        pa_csv.write_csv(
            pa.table(columns),
            path,
            pa_csv.WriteOptions(delimiter=";", quoting_style="none"),
        )
        files.append(path)
    return files


def write_in_child(size: int, releases: int, seed: int, data_dir: Path, where: Path) -> list[Path]:
    """:func:`write_snapshots` in a child process. The population takes a GiB at a million
    rows, and a process started from one that large inherits its resident pages until it
    execs: ``ru_maxrss`` would report them as the release's."""
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "from memory import write_snapshots; "
        "write_snapshots(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), "
        "Path(sys.argv[5]), Path(sys.argv[6]))"
    )
    args = [str(HERE), str(size), str(releases), str(seed), str(data_dir), str(where)]
    subprocess.run([sys.executable, "-c", code, *args], check=True)
    return [where / f"snapshot-{size}-{k:02d}.csv" for k in range(1, releases + 1)]


def run(argv: list[str]) -> tuple[float, float]:
    """``(seconds, peak RSS MiB)`` of one process (``ru_maxrss`` counts from the fork: this
    process must stay small)."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited with {proc.returncode}")
    return seconds, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,3000000")
    parser.add_argument("--releases", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    args = parser.parse_args(argv)
    exe = [sys.executable, "-m", "stream_release.cli.main"]
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        config = write_config(work)
        for size in (int(s) for s in args.sizes.split(",")):
            files = write_in_child(size, args.releases, args.seed, args.data_dir, work)
            out = work / f"out-{size}"
            for k, path in enumerate(files, start=1):
                cmd = [*exe, "anonymize", "--config", str(config), "--out", str(out), str(path)]
                seconds, rss = run(cmd)
                per_million = rss / 1024 / (size / 1e6)
                worst = max(worst, per_million)
                load = os.getloadavg()[0]
                print(
                    f"{size:>9,} R{k}  {seconds:6.1f} s  peak RSS {rss:7,.0f} MiB  "
                    f"{per_million:.2f} GiB per million rows  load {load:.1f}",
                    flush=True,
                )
                path.unlink()
    verdict = "PASS" if worst <= 1.0 else "FAIL"
    print(f"worst: {worst:.2f} GiB per million rows (target <= 1: {verdict})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
