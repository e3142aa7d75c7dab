"""Run the command line many times on the test suite's hostile files: every run must exit 2.

Issue 26, item 8 ("bad bytes never crash"): one run in four of ``stream-release anonymize`` on
a CSV with a byte that is not UTF-8 ended in ``terminate called without an active exception``
(SIGABRT, exit 134) instead of its one-line error. The crash came after the error was
printed, while the interpreter shut down, and only now and then, so one run proves nothing
either way; this script runs the command line ``--runs`` times (200 by default), each in a
fresh process as a user would, and counts the exit codes.

The runs cycle through (command, hostile file) pairs built from :mod:`support.hostile_files`,
the definitions ``tests/offline/test_bad_input.py`` uses:

- ``anonymize`` of a valid snapshot then each of ``HOSTILE_SNAPSHOTS``; ``plan`` of each;
  ``publish`` of each that reading refuses (no broker is needed: nothing is sent);
- ``anonymize`` under each of ``HOSTILE_SETTINGS`` (the infeasible one runs the grouping's
  parallel kernel before it is refused);
- bytes that are not UTF-8 in the configuration, a hierarchy and the population register
  (``hostile_configurations``: ``anonymize``), and in a snapshot, the configuration, a
  hierarchy and each public and private file of a published series (``spoil_series``:
  ``audit``).

A run passes when it exits 2 with one line on stderr and, for ``anonymize``, leaves neither
``--out`` nor its private directory behind. The script prints one row per pair (runs, exit
codes, failures) and the totals, shows the stderr of the first run of each unexpected kind,
and exits 1 if any run failed.

Where it lives: not in ``benchmarks/`` (it measures no speed, against no baseline), and not a
test (a loop over a rare outcome, minutes long; the suite holds the deterministic test of the
crash's cause, in ``tests/unit/io/test_snapshot_csv.py``). It sits in ``tests/`` next to the
``support`` package whose hostile files it runs, under a name pytest does not collect
(``test_*.py``), and it imports ``support`` as the tests do (``tests/`` is its own directory,
hence first on ``sys.path``).

Usage, from the repository root with the package installed::

    python tests/bad_input_runs.py [--runs 200] [--data-dir ../shared/data] [--only TEXT]

Measured (2 cores shared with other work), 200 runs each:

============================================  ======  ======  =======
run                                           exit 2  exit 1  SIGABRT
============================================  ======  ======  =======
all pairs, before (3125909's package)            184      15        1
``--only 'anonymize not-utf8'``, before          197       0        3
all pairs, after (a7d2692 and 95481c5)           200       0        0
``--only 'anonymize not-utf8'``, after           200       0        0
============================================  ======  ======  =======

Before, the aborts came after the one error line (``anonymize`` of a snapshot with bytes that
are not UTF-8 in the id, and after a blank line); the exit-1 runs were tracebacks on bytes that
are not UTF-8 in the configuration (``anonymize``, ``audit``), a hierarchy read by ``audit
--config``, and a series' ``release-0001.jsonl`` and ``assignments-0001.csv`` (``audit``).

The data directory defaults to ``$SR_TEST_DATA``, else ``../shared/data`` beside the
repository, as for the tests. About 3 s per run on 2 cores (each run imports the package).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from support.data import adult_series, write_config
from support.hostile_files import (
    HOSTILE_SETTINGS,
    HOSTILE_SNAPSHOTS,
    PRIVATE_SERIES_FILES,
    SERIES_FILES,
    hostile_configurations,
    spoil_series,
)

REPOSITORY = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300.0
"""A run that takes longer is killed and counted as a failure (exit code ``timeout``)."""


@dataclass
class Pair:
    """A command line and the output directories it must not leave behind."""

    name: str
    argv: list[str]
    outputs: tuple[Path, ...] = ()
    codes: Counter[str] = field(default_factory=Counter)
    failed: int = 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="runs in all (200)")
    parser.add_argument("--data-dir", type=Path, default=None, help="the shared data sets")
    parser.add_argument(
        "--only",
        default="",
        help="run only the pairs whose name holds this text (e.g. 'anonymize not-utf8')",
    )
    args = parser.parse_args(argv)
    data = args.data_dir or Path(
        os.environ.get("SR_TEST_DATA") or REPOSITORY.parent / "shared" / "data"
    )
    if not (data / "adult.csv").is_file():
        parser.error(f"the shared data sets are not at {data}: give --data-dir")
    with tempfile.TemporaryDirectory(prefix="bad-input-runs-") as tmp:
        pairs = [p for p in _pairs(data, Path(tmp)) if args.only in p.name]
        if not pairs:
            parser.error(f"no pair's name holds {args.only!r}")
        started = time.perf_counter()
        shown: set[str] = set()
        for i in range(args.runs):
            pair = pairs[i % len(pairs)]
            code, stderr = _run(pair.argv)
            wrote = [str(p) for p in pair.outputs if p.exists()]
            ok = code == "2" and len(stderr.splitlines()) == 1 and not wrote
            pair.codes[code] += 1
            if not ok:
                pair.failed += 1
                kind = f"{pair.name} exit {code}"
                if kind not in shown:
                    shown.add(kind)
                    print(f"run {i + 1}, {kind}, left {wrote or 'nothing'}; stderr:")
                    lines = stderr.splitlines()[-6:] or ["(empty)"]
                    print("    " + "\n    ".join(lines), flush=True)
            for p in pair.outputs:
                shutil.rmtree(p, ignore_errors=True)
        elapsed = time.perf_counter() - started
    print(_table(pairs, args.runs, elapsed))
    return 1 if any(p.failed for p in pairs) else 0


def _run(argv: list[str]) -> tuple[str, str]:
    """Exit code (the signal's name for a process killed by one, as ``SIGABRT``: a shell
    prints 134; ``timeout``) and stderr of the command line ``argv``."""
    command = [sys.executable, "-m", "stream_release.cli.main", *argv]
    try:
        done = subprocess.run(command, capture_output=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        return "timeout", (exc.stderr or b"").decode(errors="replace")
    code = done.returncode
    return (
        signal.Signals(-code).name if code < 0 else str(code),
        done.stderr.decode(errors="replace").strip(),
    )


def _pairs(data: Path, tmp: Path) -> list[Pair]:
    """Every (command, hostile file) pair, their files written in ``tmp``."""
    series = adult_series(data, tmp, 20, rounds=2)
    config = write_config(tmp, data)
    hostile = tmp / "hostile"
    hostile.mkdir()
    pairs = []
    for case in HOSTILE_SNAPSHOTS:
        path = case.write(series[1], hostile / f"{case.name}.csv")
        out = tmp / f"out-{case.name}"
        anonymize = ["anonymize", "--config", str(config), "--out", str(out)]
        pairs.append(
            Pair(f"anonymize {case.name}", [*anonymize, str(series[0]), str(path)], _both(out))
        )
        pairs.append(Pair(f"plan {case.name}", ["plan", "--config", str(config), str(path)]))
        if case.read:
            publish = ["publish", "--config", str(config), "--release", "r", str(path)]
            pairs.append(Pair(f"publish {case.name}", publish))
    for setting in HOSTILE_SETTINGS:
        directory = tmp / f"setting-{setting.name}"
        directory.mkdir()
        out = tmp / f"out-{setting.name}"
        hostile_config = write_config(directory, data, **setting.privacy)
        argv = ["anonymize", "--config", str(hostile_config), "--out", str(out), str(series[0])]
        pairs.append(Pair(f"anonymize {setting.name}", argv, _both(out)))

    # bytes that are not UTF-8 in the other files anonymize reads
    configurations = hostile_configurations(config, data, hostile)
    for name, (path, _, _) in configurations.items():
        out = tmp / f"out-{name}"
        argv = ["anonymize", "--config", str(path), "--out", str(out), str(series[0])]
        pairs.append(Pair(f"anonymize {name} not-utf8", argv, _both(out)))

    # and in the files audit reads: a published series, then one bad file at a time
    published = tmp / "published"
    valid = ["anonymize", "--config", str(config), "--out", str(published), str(series[0])]
    code, stderr = _run(valid)
    if code != "0":
        raise SystemExit(f"publishing the valid series failed ({code}): {stderr}")
    not_utf8 = hostile / f"{HOSTILE_SNAPSHOTS[0].name}.csv"
    audit = ["audit", str(published)]
    pairs.append(Pair("audit snapshot not-utf8", [*audit, str(series[0]), str(not_utf8)]))
    for name in ("configuration", "hierarchy"):
        path = configurations[name][0]
        pairs.append(Pair(f"audit {name} not-utf8", [*audit, "--config", str(path)]))
    for name in (*SERIES_FILES, *PRIVATE_SERIES_FILES):
        copy = tmp / f"spoiled-{name}"
        spoil_series(published, name, copy)
        pairs.append(Pair(f"audit {name} not-utf8", ["audit", str(copy)]))
    return pairs


def _both(out: Path) -> tuple[Path, Path]:
    """``out`` and its private directory (``out.private``)."""
    return out, out.with_name(out.name + ".private")


def _table(pairs: list[Pair], runs: int, elapsed: float) -> str:
    codes = sorted({c for p in pairs for c in p.codes}, key=lambda c: (not c.isdigit(), c))
    width = max(len(p.name) for p in pairs)
    head = (
        f"{'command and hostile file':<{width}}  {'runs':>4}  "
        + "  ".join(f"{'exit ' + c:>8}" for c in codes)
        + f"  {'failed':>6}"
    )
    rows = [head, "-" * len(head)]
    for p in pairs:
        rows.append(
            f"{p.name:<{width}}  {sum(p.codes.values()):>4}  "
            + "  ".join(f"{p.codes[c]:>8}" for c in codes)
            + f"  {p.failed:>6}"
        )
    total: Counter[str] = sum((p.codes for p in pairs), Counter())
    failed = sum(p.failed for p in pairs)
    rows.append("-" * len(head))
    rows.append(
        f"{'all':<{width}}  {runs:>4}  "
        + "  ".join(f"{total[c]:>8}" for c in codes)
        + f"  {failed:>6}"
    )
    rows.append(
        f"{runs} runs of {len(pairs)} pairs in {elapsed:.0f} s: "
        + ", ".join(f"exit {c}: {total[c]}" for c in codes)
        + f"; {failed} failed (exit code other than 2, more than one line on stderr, or "
        "files left behind)"
    )
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
