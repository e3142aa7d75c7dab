"""Our grouping against ARX on Adult, in the same run, taking turns.

ARX (``../shared/tools/arx``: the ARX Data Anonymization Tool, Apache-2.0, and its harness
``ArxBench.java``, compiled here into a temporary directory) times
``ARXAnonymizer.anonymize`` on Adult with the first 7 QIDs (age, sex, race, marital-status,
education, native-country, workclass, their ARX hierarchies), ``KAnonymity(5)``, 0 %
suppression, its default optimal search and metric, after warm-up runs in its JVM. Ours
times ``plan_release`` (the grouping of one release and its checks, empty history) on the same
rows and QIDs, occupation sensitive, every value protected, constant-ratio l = 2, k' = 3,
``min_group_size`` = 5 (``speed.py``'s setting), the table encoded before the clock starts, warm.

The two take turns, ``--runs`` times: one ARX process (``--warmups`` warm-ups, one timed
run), then, after a pause and one untimed call, one timed call of ours, so both see the same
load and both are warm. Ends with::

    ours / ARX = R (best of 5), M (median), load L

R the ratio of the best times, M of the medians, L the 1-minute load average over the run
(``os.getloadavg``) on ``os.cpu_count()`` cores. Target: R <= 1.

Usage::

    python benchmarks/arx.py [--data-dir ../shared/data] [--runs 5] [--warmups 10]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from speed import DEFAULT_DATA_DIR, adult_settings, encode_table, plan_adult

from stream_release.devtools.datasets import read_csv_table

ARX_DIR = Path(__file__).resolve().parents[2] / "shared" / "tools" / "arx"
QIDS = 7
K = 5
SETTLE_S = 0.5
"""Pause after each ARX process before our timed call (ARX's JVM starts before its clock)."""
RESULT = re.compile(r"RESULT arx_best_ms=([0-9.]+)")


def compile_harness(arx_dir: Path, into: Path) -> None:
    """``ArxBench.java`` compiled against ARX's jars into ``into``."""
    if shutil.which("javac") is None:
        raise SystemExit("javac not found: ARX needs a JDK (Java 17)")
    classpath = f"{arx_dir}/*"
    subprocess.run(
        ["javac", "-cp", classpath, "-d", str(into), str(arx_dir / "ArxBench.java")], check=True
    )


def arx_once(arx_dir: Path, classes: Path, data_dir: Path, warmups: int) -> float:
    """Seconds of one timed ``anonymize`` after ``warmups`` in a fresh JVM."""
    out = subprocess.run(
        [
            "java", "-Xmx2g", "-cp", f"{classes}:{arx_dir}/*", "ArxBench",
            str(data_dir), str(QIDS), str(warmups), "1", str(K),
        ],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    found = RESULT.search(out.stdout)
    if found is None:
        raise SystemExit(f"ArxBench printed no RESULT line:\n{out.stdout}\n{out.stderr}")
    return float(found.group(1)) / 1000.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--arx-dir", type=Path, default=ARX_DIR)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmups", type=int, default=10)
    args = parser.parse_args(argv)
    ours, theirs, loads = measure(args.data_dir, args.arx_dir, args.runs, args.warmups)
    for i, (a, b) in enumerate(zip(theirs, ours, strict=True), start=1):
        print(f"run {i}: ARX {a * 1000:.1f} ms, ours {b * 1000:.1f} ms")
    print(
        f"ARX best {min(theirs) * 1000:.1f} ms, median {statistics.median(theirs) * 1000:.1f} ms; "
        f"ours best {min(ours) * 1000:.1f} ms, median {statistics.median(ours) * 1000:.1f} ms"
    )
    print(line(ours, theirs, loads))
    return 0


def measure(
    data_dir: Path, arx_dir: Path, runs: int, warmups: int
) -> tuple[list[float], list[float], list[float]]:
    """``(ours, ARX, loads)``: seconds of each timed run, taking turns, and the 1-minute load
    average after each pair."""
    settings = adult_settings(data_dir)
    table = encode_table(read_csv_table(data_dir / "adult.csv"), settings)
    for _ in range(5):  # warm: the kernels loaded, one thread and the cores each measured
        plan_adult(table, settings)
    ours: list[float] = []
    theirs: list[float] = []
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="arx-bench-") as tmp:
        compile_harness(arx_dir, Path(tmp))
        for _ in range(runs):
            theirs.append(arx_once(arx_dir, Path(tmp), data_dir, warmups))
            time.sleep(SETTLE_S)  # the JVM's exit done before our clock starts
            plan_adult(table, settings)  # warm again: caches after the JVM's run
            started = time.perf_counter()
            plan_adult(table, settings)
            ours.append(time.perf_counter() - started)
            loads.append(os.getloadavg()[0])
    return ours, theirs, loads


def line(ours: list[float], theirs: list[float], loads: list[float]) -> str:
    """The benchmark's last line: ``ours / ARX = R (best of N), M (median), load L``."""
    best = min(ours) / min(theirs)
    median = statistics.median(ours) / statistics.median(theirs)
    load = statistics.mean(loads)
    return (
        f"ours / ARX = {best:.2f} (best of {len(ours)}), {median:.2f} (median), "
        f"load {load:.2f} on {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    raise SystemExit(main())
