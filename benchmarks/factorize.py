"""Factorizing the merged-row keys of the query workload: the hand-written kernel against numpy.

:func:`stream_release.core.utility.query_index.merge_rows` merges rows with identical QIDs
before the count queries are answered: it packs each row's QID codes into one int64 key and
factorizes the keys with :func:`stream_release.core.utility.query_kernels.factorize_keys`
(numba, open addressing), which numbers the distinct keys in order of first appearance and
returns each one's first row. This script times it against library factorizers on the same
keys, in the same run:

* ``np.unique(key, return_inverse=True)``: sorted codes, not a drop-in (the codes' order sets
  the order of the merged rows, and so the order of the anatomy estimate's floating-point
  sums: the figures could change in the last bits);
* ``np.unique(key, return_index=True, return_inverse=True)`` renumbered to first appearance:
  the same output as the kernel (checked);
* ``np.unique`` on the QID rows viewed as one void scalar each (no packed key), renumbered the
  same way (checked), against the kernel plus the packing of the key;
* ``pandas.factorize(key)`` (first-appearance order, like the kernel; checked) when pandas is
  installed.

Keys: Adult's 7 QIDs (ARX hierarchies, as the releases encode them) on ``n`` rows, drawn with
replacement from Adult's 30,162 (the load and scale benchmarks' population: at most Adult's
distinct QID combinations), and, as a harder case, each QID drawn independently from its
marginal (many more distinct keys). Each timing is the median of ``--repeats`` runs after one
warm-up run (the kernel compiled or loaded from numba's cache before any timing).

    python benchmarks/factorize.py [--sizes 100000,1000000] [--repeats 7]

Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
from numpy.typing import NDArray

from stream_release.config import load_settings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.core.utility.query_index import pack_key
from stream_release.core.utility.query_kernels import factorize_keys
from stream_release.devtools.datasets import (
    ADULT_QID,
    ADULT_SENSITIVE,
    adult_schema,
    read_csv_table,
)
from stream_release.io.encoding import encode
from stream_release.io.snapshot import snapshot_from_columns

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO.parent / "shared" / "data"
KEY = "factorize-benchmark-key-0123456789abcdef"

Codes = tuple[NDArray[np.int64], NDArray[np.int64]]
"""Each row's code (n,) and each code's first row (u,), codes in order of first appearance."""


def adult_qid(data_dir: Path) -> NDArray[np.int32]:
    """(30162, 7) int32: Adult's QID codes as a release encodes them."""
    settings = load_settings(None, schema=adult_schema(data_dir), history={"key": KEY})
    raw = read_csv_table(data_dir / "adult.csv").columns
    snapshot = snapshot_from_columns(
        raw["id"], {a: raw[a] for a in ADULT_QID}, raw[ADULT_SENSITIVE]
    )
    table = encode(snapshot, settings.schema, load_hierarchies(settings.schema))
    return table.qid


def packed_key(qid: NDArray[np.int32]) -> NDArray[np.int64]:
    """(n,) int64: each row's codes packed into one key, by ``merge_rows``' own packing."""
    key = pack_key(qid)
    if key is None:  # pragma: no cover - Adult's radixes are small
        raise SystemExit("the QID codes do not fit one int64 key")
    return key


def first_appearance(first: NDArray[np.intp], inverse: NDArray[np.intp]) -> Codes:
    """Sorted-order codes (``np.unique``'s) renumbered in order of first appearance."""
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.shape[0])
    return rank[inverse.reshape(-1)].astype(np.int64), first[order].astype(np.int64)


def kernel(key: NDArray[np.int64]) -> Codes:
    codes, first = factorize_keys(key)
    return codes, first


def unique_sorted(key: NDArray[np.int64]) -> NDArray[np.intp]:
    _, inverse = np.unique(key, return_inverse=True)
    return inverse


def unique_first(key: NDArray[np.int64]) -> Codes:
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first_appearance(first, inverse)


def unique_rows(qid: NDArray[np.int32]) -> Codes:
    rows = np.ascontiguousarray(qid).view(np.dtype((np.void, qid.dtype.itemsize * qid.shape[1])))
    _, first, inverse = np.unique(rows.reshape(-1), return_index=True, return_inverse=True)
    return first_appearance(first, inverse)


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    run()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(label: str, qid: NDArray[np.int32], repeats: int) -> None:
    key = packed_key(qid)
    expected = kernel(key)
    candidates: list[tuple[str, Callable[[], object], Callable[[], Codes] | None]] = [
        ("hand-written kernel (baseline)", lambda: kernel(key), None),
        ("kernel + packing the key", lambda: kernel(packed_key(qid)), None),
        ("np.unique(key, return_inverse) [sorted codes]", lambda: unique_sorted(key), None),
        ("np.unique(key) renumbered", lambda: unique_first(key), lambda: unique_first(key)),
        ("np.unique(void rows) renumbered", lambda: unique_rows(qid), lambda: unique_rows(qid)),
    ]
    try:  # not a dependency: measured when installed
        pd: ModuleType | None = importlib.import_module("pandas")
    except ImportError:
        pd = None
    if pd is not None:

        def pandas_codes() -> Codes:
            codes, _ = pd.factorize(key)
            _, first = np.unique(codes, return_index=True)
            return codes.astype(np.int64), first.astype(np.int64)

        candidates.append(("pandas.factorize(key)", lambda: pd.factorize(key), pandas_codes))
    n_unique = int(expected[1].shape[0])
    print(f"\n{label}: {qid.shape[0]:,} rows, {n_unique:,} distinct keys")
    baseline = None
    for name, run, check in candidates:
        if check is not None:
            codes, first = check()
            same = np.array_equal(codes, expected[0]) and np.array_equal(first, expected[1])
            if not same:
                raise SystemExit(f"{name}: not the kernel's codes")
        seconds = median_seconds(run, repeats)
        baseline = seconds if baseline is None else baseline
        print(f"  {name:<48} {1000 * seconds:9.2f} ms   {seconds / baseline:6.2f}x")
    if pd is None:
        print("  pandas.factorize: pandas is not installed (numpy only)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    args = parser.parse_args()
    adult = adult_qid(args.data_dir)
    rng = np.random.default_rng(0)
    print("median of", args.repeats, "runs after a warm-up; ratio to the hand-written kernel")
    for n in (int(s) for s in args.sizes.split(",")):
        resampled = adult[rng.integers(0, adult.shape[0], n)]
        measure("Adult rows with replacement", resampled, args.repeats)
        independent = np.column_stack(
            [column[rng.integers(0, column.shape[0], n)] for column in adult.T]
        ).astype(np.int32)
        measure("each QID from its marginal", independent, args.repeats)


if __name__ == "__main__":
    main()
