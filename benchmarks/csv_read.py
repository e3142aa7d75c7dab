"""Reading a CSV snapshot: pyarrow's reader against the compiled tokenizer it replaced.

``read_snapshot`` reads a file without quotes with pyarrow's CSV reader and factorizes each
column with ``dictionary_encode``. Until issue 13 it used a numba tokenizer and an
open-addressing string factorizer of its own; this script loads that ``read_snapshot`` from git
revision ``--before`` (the module ``stream_release/io/snapshot.py`` there, imported from a
temporary file) and times both on the same files, in the same process, alternating, best of
``--repeat`` (other processes share the machine's cores; the load average is printed). Both
must give the same snapshot (ids, values, codes, first rows, line numbers, ``sha256``); the
script stops if they do not.

Files (``;``, CRLF, an ``id`` column prepended, as the Adult tests write them):

* ``adult``: the ARX Adult extract (30,162 rows);
* ``adult-<rows/1000>k``: Adult's rows repeated to ``--rows`` rows (1,000,000 by default),
  ids distinct.

Usage::

    python benchmarks/csv_read.py [--rows 1000000] [--repeat 7] [--before REV] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

from stream_release.config import SchemaSettings
from stream_release.io.snapshot import RawSnapshot
from stream_release.io.snapshot_csv import read_snapshot

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA_DIR = REPO.parent / "shared" / "data"
RESULTS = HERE / "results"
BEFORE = "24b6043"
"""The last revision whose ``read_snapshot`` is the compiled tokenizer."""

QID = ("sex", "age", "race", "marital-status", "education", "native-country", "workclass")
SCHEMA = SchemaSettings(id="id", sensitive="occupation", qid=QID)

Reader = Callable[[Path, SchemaSettings], RawSnapshot]


def load_before(rev: str, where: Path) -> ModuleType:
    """The module ``stream_release/io/snapshot.py`` of git revision ``rev``, imported."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:stream_release/io/snapshot.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = where / "snapshot_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("snapshot_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def write_files(data_dir: Path, rows: int, where: Path) -> dict[str, Path]:
    """The benchmark's CSV files (see the module docstring), by name."""
    lines = (data_dir / "adult.csv").read_bytes().split(b"\r\n")
    header, body = lines[0], [line for line in lines[1:] if line]
    files = {"adult": where / "adult.csv", f"adult-{rows // 1000}k": where / "adult_big.csv"}
    for path, n in zip(files.values(), (len(body), rows), strict=True):
        with path.open("wb") as out:
            out.write(b"id;" + header + b"\r\n")
            for i in range(n):
                out.write(b"p%d;%s\r\n" % (i, body[i % len(body)]))
    return files


def check_same(a: RawSnapshot, b: RawSnapshot) -> None:
    """Stop the run (SystemExit) unless the two snapshots are identical (not ``assert``:
    ``python -O`` would drop the check and the results file would still say they agree)."""
    pairs = [(a.sensitive_column, b.sensitive_column)]
    pairs += [(a.qid_columns[name], b.qid_columns[name]) for name in QID]
    same = (
        a.sha256 == b.sha256
        and np.array_equal(a.lines, b.lines)
        and a.ids.tolist() == b.ids.tolist()
        and a.sensitive.tolist() == b.sensitive.tolist()
        and all(
            x.values == y.values
            and np.array_equal(x.codes, y.codes)
            and np.array_equal(x.first, y.first)
            for x, y in pairs
        )
        and all(a.qid[name].tolist() == b.qid[name].tolist() for name in QID)
    )
    if not same:
        raise SystemExit(f"the two readers gave different snapshots of {a.source!r}")


def best_times(readers: dict[str, Reader], path: Path, repeat: int) -> dict[str, float]:
    """Best wall time (s) of each reader on ``path``, the readers taking turns."""
    best = dict.fromkeys(readers, float("inf"))
    for _ in range(repeat):
        for name, read in readers.items():
            started = time.perf_counter()
            read(path, SCHEMA)
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--before", default=BEFORE, help="git revision of the baseline")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    report = [
        "# Reading a CSV snapshot: pyarrow against the compiled tokenizer",
        "",
        f"`python benchmarks/csv_read.py --rows {args.rows} --repeat {args.repeat}`: "
        f"best of {args.repeat}, the two readers taking turns; baseline `read_snapshot` of "
        f"revision {args.before}. Load average (1, 5, 15 min) at the start: "
        + ", ".join(f"{x:.2f}" for x in os.getloadavg())
        + f"; {os.cpu_count()} cores.",
        "",
        "| file | rows | MB | compiled tokenizer (s) | pyarrow (s) | tokenizer / pyarrow |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        before = load_before(args.before, where)
        files = write_files(args.data_dir, args.rows, where)
        readers: dict[str, Reader] = {"before": before.read_snapshot, "pyarrow": read_snapshot}
        for name, path in files.items():
            check_same(readers["before"](path, SCHEMA), readers["pyarrow"](path, SCHEMA))
            best = best_times(readers, path, args.repeat)
            n_rows = sum(1 for _ in path.open("rb")) - 1
            report.append(
                f"| {name} | {n_rows:,} | {path.stat().st_size / 1e6:.1f} "
                f"| {best['before']:.3f} | {best['pyarrow']:.3f} "
                f"| {best['before'] / best['pyarrow']:.2f} |"
            )
    report += [
        "",
        "Load average at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + ".",
        "Both readers gave the same snapshot on every file (ids, values, codes, first rows, "
        "line numbers, sha256).",
    ]
    text = "\n".join(report) + "\n"
    print(text, end="")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "csv_read.md").write_text(text)


if __name__ == "__main__":
    main()
