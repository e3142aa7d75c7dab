"""Speed of stream_release against its targets, with the baselines measured in the same run.

a. One Adult release (30,162 rows; QIDs age, sex, race, marital-status, education,
   native-country, workclass with the ARX hierarchies; occupation sensitive, all values
   protected; constant-ratio l = 2, k' = 3, min_group_size = 5):

   * our grouping: ``plan_release`` on the already encoded table, empty history, warm (one run
     first to load or compile the numba kernels), best of ``--repeats``; against ARX in the
     same run, taking turns (``benchmarks/arx.py``: target ``ours / ARX <= 1``);
   * our full publish: ``Publisher.publish`` (grouping, utility metrics, files, history commit)
     into a fresh file-store series, warm, best of ``--repeats``;
   * anonypy 0.2.1's Mondrian at k = 5 on the same data, in its own virtualenv
     (``benchmarks/.venv-anonypy``, created and filled with ``pip install anonypy==0.2.1
     pandas`` when missing); only ``Preserver.anonymize_k_anonymity(k=5)`` is timed.

b. A 1,000,000-row release: Adult resampled with replacement (fixed seed, fresh unique ids),
   published twice through a Publisher whose history is in Redis (release 2 = the same
   individuals, so it loads 1M non-empty histories). The breakdown times the calls the real
   ``Publisher.publish`` makes, in its own order: for the duration of the call the package
   functions ``stream_release.pipeline.publisher`` imports are wrapped by timers in that module's
   namespace,
   and the store and pseudonymizer by timing proxies (nothing in the package is modified, and
   the breakdown cannot drift from ``pipeline/publisher.py``). The Redis keys (unique prefix)
   are deleted afterwards.

c. The 20-release Adult series (``make_series``, seed 0) through a Publisher with a file-store
   history, same settings as (a): total wall time and time per release.

Prints every figure next to its target and writes the same text to
``benchmarks/results/speed.md``.

Usage::

    python benchmarks/speed.py [--data-dir ../shared/data] [--redis-url redis://127.0.0.1:6379/0]
                               [--big-rows 1000000] [--repeats 5] [--skip-anonypy]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import inspect
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import redis

from stream_release.audit import audit_directory
from stream_release.config import Settings, load_settings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.core.privacy.linkage import HistoryRows
from stream_release.core.table import EncodedTable
from stream_release.devtools.datasets import (
    ADULT_QID,
    ADULT_SENSITIVE,
    Table,
    adult_schema,
    make_series,
    read_csv_table,
)
from stream_release.history.keys import RedisKeys
from stream_release.io.encoding import encode
from stream_release.io.snapshot import snapshot_from_columns
from stream_release.io.snapshot_csv import read_snapshot
from stream_release.mechanisms.global_guarantee.plan import plan_release
from stream_release.pipeline import publisher as series_module
from stream_release.pipeline.publisher import Publisher

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"
VENV = REPO / "benchmarks" / ".venv-anonypy"
ANONYPY_REQUIREMENTS = ("anonypy==0.2.1", "pandas")

SEED = 0
K_ANONYMITY = 5

TARGET_SPEEDUP = 1000.0
TARGET_BIG_S = 5.0
TARGET_SERIES_S = 2.0

ANONYPY_SCRIPT = r"""
import json, sys, time
from importlib.metadata import version
import pandas as pd
import anonypy

path, k, qid, sensitive = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
df = pd.read_csv(path, sep=";", skipinitialspace=True)
# anonypy splits 'category' columns by value sets and the others at the median (its README):
# every string column becomes a category; age stays numeric.
for column in [*qid, sensitive]:
    if not pd.api.types.is_numeric_dtype(df[column]):
        df[column] = df[column].astype("category")
preserver = anonypy.Preserver(df, qid, sensitive)
started = time.perf_counter()
rows = preserver.anonymize_k_anonymity(k=k)
seconds = time.perf_counter() - started
print(json.dumps({
    "seconds": seconds, "rows_in": len(df), "rows_out": len(rows),
    "anonypy": version("anonypy"), "pandas": pd.__version__,
}))
"""


class Report:
    """Prints each line and keeps it for ``speed.md``."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)


@dataclass
class Target:
    name: str
    value: str
    target: str
    ok: bool


@dataclass
class Results:
    targets: list[Target] = field(default_factory=list)

    def check(self, name: str, value: str, target: str, ok: bool) -> str:
        self.targets.append(Target(name, value, target, ok))
        return "PASS" if ok else "FAIL"


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f} ms"


def package_fingerprint() -> str:
    """SHA-256 (first 12 hex digits) of the package's Python sources: which code was timed."""
    digest = hashlib.sha256()
    for path in sorted((REPO / "stream_release").rglob("*.py")):
        digest.update(path.relative_to(REPO).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


# --------------------------------------------------------------------------------------------
# Settings and data


def adult_settings(data_dir: Path, **extra: dict[str, Any]) -> Settings:
    """The Adult configuration: constant-ratio l = 2, k' = 3, min_group_size = 5."""
    schema = adult_schema(data_dir)
    privacy = {"strategy": "constant-ratio", "l": 2, "k_prime": 3, "min_group_size": K_ANONYMITY}
    return load_settings(None, schema=schema, privacy=privacy, **extra)


def encode_table(table: Table, settings: Settings) -> EncodedTable:
    schema = settings.schema
    raw = snapshot_from_columns(
        table.columns[schema.id],
        {q: table.columns[q] for q in schema.qid},
        table.columns[schema.sensitive],
    )
    return encode(raw, schema, load_hierarchies(schema))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


# --------------------------------------------------------------------------------------------
# a. one Adult release vs anonypy


def plan_adult(table: EncodedTable, settings: Settings) -> Any:
    privacy = settings.privacy
    return plan_release(
        table,
        HistoryRows.empty(table.n_rows),
        (),
        privacy.make_strategy(),
        protected=privacy.protected,
        min_group_size=privacy.min_group_size,
        grouping=settings.grouping,
    )


def publish_once(table: EncodedTable, settings: Settings) -> tuple[float, dict[str, Any]]:
    """Time one ``Publisher.publish`` into a fresh series (file-store history)."""
    with tempfile.TemporaryDirectory(prefix="sr-speed-") as tmp:
        publisher = Publisher.open(settings, Path(tmp) / "releases", Path(tmp) / "history")
        try:
            return timed(lambda: publisher.publish(table, label="adult"))
        finally:
            publisher.close()


def ensure_anonypy(say: Report) -> Path:
    """The virtualenv's python, with anonypy 0.2.1 and pandas installed."""
    python = VENV / "bin" / "python"
    if not python.exists():
        say(f"  creating {VENV.relative_to(REPO)} ...")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    probe = subprocess.run(
        [str(python), "-c", "import anonypy, pandas"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        say(f"  pip install {' '.join(ANONYPY_REQUIREMENTS)} into the virtualenv ...")
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *ANONYPY_REQUIREMENTS],
            check=True,
        )
    return python


def run_anonypy(python: Path, csv_path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [
            str(python),
            "-c",
            ANONYPY_SCRIPT,
            str(csv_path),
            str(K_ANONYMITY),
            json.dumps(list(ADULT_QID)),
            ADULT_SENSITIVE,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def bench_adult_release(
    say: Report, results: Results, data_dir: Path, repeats: int, skip_anonypy: bool
) -> None:
    say("a. One Adult release (constant-ratio l = 2, k' = 3, min_group_size = 5)")
    settings = adult_settings(data_dir)
    seconds, table = timed(lambda: encode_table(read_csv_table(data_dir / "adult.csv"), settings))
    say(f"  read + encode {table.n_rows:,} rows: {_ms(seconds)} (excluded)")

    cold, plan = timed(lambda: plan_adult(table, settings))
    runs = [timed(lambda: plan_adult(table, settings))[0] for _ in range(repeats)]
    best = min(runs)
    sizes = plan.contents.size
    say(
        f"  grouping result: {plan.contents.n_groups:,} groups, avg size "
        f"{sizes.mean():.2f}, max {int(sizes.max())}, {plan.suppressed} suppressed, breach max "
        f"{plan.breach_summary()['max']:.4f}"
    )
    say(f"  first call (kernel load/compile): {_ms(cold)}")
    say(
        f"  our grouping (plan_release, warm, best of {repeats}): {_ms(best)} "
        f"(median {_ms(statistics.median(runs))})"
    )
    # ARX in this run, taking turns with ours (benchmarks/arx.py), not a constant
    from arx import ARX_DIR, line, measure

    ours, theirs, loads = measure(data_dir, ARX_DIR, repeats, 10)
    ratio = min(ours) / min(theirs)
    verdict = results.check("Adult grouping / ARX (best)", f"{ratio:.2f}", "<= 1", ratio <= 1.0)
    say(
        f"  ARX anonymize, KAnonymity(5), taking turns: best {_ms(min(theirs))} (median "
        f"{_ms(statistics.median(theirs))}); ours in the same turns best {_ms(min(ours))}"
    )
    say(f"  {line(ours, theirs, loads)}   target <= 1   {verdict}")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        publish_once(table, settings)  # warm: metrics kernels
        publishes = [publish_once(table, settings) for _ in range(repeats)]
    best_publish = min(t for t, _ in publishes)
    manifest = publishes[0][1]
    say(
        f"  our full publish (Publisher.publish incl. metrics + files, warm, best of {repeats}): "
        f"{_ms(best_publish)} (median {_ms(statistics.median(t for t, _ in publishes))}; "
        f"manifest elapsed_s {manifest['elapsed_s']:.4f} s, query error "
        f"{manifest['utility']['query_error']:.4f}, NCP {manifest['utility']['ncp']:.4f})"
    )

    if skip_anonypy:
        say("  anonypy: skipped (--skip-anonypy)")
        return
    python = ensure_anonypy(say)
    info = run_anonypy(python, data_dir / "adult.csv")
    anonypy_s = float(info["seconds"])
    say(
        f"  anonypy {info['anonypy']} Mondrian k = {K_ANONYMITY} (pandas {info['pandas']}, "
        f"own venv): {anonypy_s:.2f} s on {info['rows_in']:,} rows "
        f"({info['rows_out']:,} output rows)"
    )
    speedup = anonypy_s / best
    verdict = results.check(
        "speed-up vs anonypy (grouping)",
        f"{speedup:,.0f}x",
        f">= {TARGET_SPEEDUP:,.0f}x",
        speedup >= TARGET_SPEEDUP,
    )
    say(
        f"  speed-up, our grouping vs anonypy: {speedup:,.0f}x   target >= "
        f"{TARGET_SPEEDUP:,.0f}x   {verdict}"
    )
    say(
        f"  speed-up, our full publish vs anonypy's anonymization alone: "
        f"{anonypy_s / best_publish:,.0f}x (informative)"
    )


# --------------------------------------------------------------------------------------------
# b. a 1M-row release with Redis


STEP_CATEGORIES = {
    "pseudonymizer.pseudonyms": "pseudonymize ids (keyed BLAKE2b)",
    "store.last_sequence": "history load (sequence, MGET histories, values)",
    "store.load": "history load (sequence, MGET histories, values)",
    "store.values": "history load (sequence, MGET histories, values)",
    "plan_release": "plan (grouping + breach check)",
    "render_release": "render (metrics + generalize + encode JSONL)",
    "stage_release": "file staging (write 3 files, fsync)",
    "encode_record": "release record (JSON + zlib)",
    "store.commit": "Redis commit (WATCH/MULTI/MSET/EXEC)",
    "finalize_release": "finalize (rename files)",
}
"""Breakdown line of each call ``Publisher.publish`` makes; others get a line of their own."""


class StepClock:
    """Accumulated wall time per wrapped callable, in order of first call."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

        return timed_call

    def breakdown(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, seconds in self.seconds.items():
            label = STEP_CATEGORIES.get(name, name)
            out[label] = out.get(label, 0.0) + seconds
        return out


class _Timed:
    """Proxy whose method calls are timed by a :class:`StepClock` under ``<role>.<method>``."""

    def __init__(self, target: Any, clock: StepClock, role: str) -> None:
        self._target, self._clock, self._role = target, clock, role

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if callable(value):
            return self._clock.wrap(f"{self._role}.{attr}", value)
        return value


@contextlib.contextmanager
def instrumented(publisher: Publisher, clock: StepClock) -> Iterator[Publisher]:
    """``publisher`` with every step of ``Publisher.publish`` timed, the package untouched.

    For the duration of the block, the package functions that ``stream_release.pipeline.publisher``
    imports (``plan_release``, ``render_release``, ``stage_release``, ...) are replaced in
    that module's namespace by timing wrappers, and the store and the pseudonymizer by timing
    proxies. The real ``Publisher.publish`` then runs its own calls in its own order, so the
    breakdown cannot drift from the code it measures.
    """
    originals = {
        name: obj
        for name, obj in vars(series_module).items()
        if inspect.isfunction(obj)
        and obj.__module__.startswith("stream_release.")
        and obj.__module__ != series_module.__name__
    }
    for name, obj in originals.items():
        setattr(series_module, name, clock.wrap(name, obj))
    try:
        yield Publisher(  # the same series, as a fresh publisher (no state carried over)
            publisher.settings,
            publisher.out_dir,
            _Timed(publisher.store, clock, "store"),
            _Timed(publisher.pseudonymizer, clock, "pseudonymizer"),
            private_dir=publisher.private_dir,
            new_key=publisher.new_key,
        )
    finally:
        for name, obj in originals.items():
            setattr(series_module, name, obj)


def publish_in_steps(
    publisher: Publisher, table: EncodedTable, label: str
) -> tuple[dict[str, Any], dict[str, float], float]:
    """One ``Publisher.publish`` with its breakdown: (manifest, seconds per step, total)."""
    clock = StepClock()
    with instrumented(publisher, clock) as timed_publisher:
        total, manifest = timed(lambda: timed_publisher.publish(table, label=label))
    return manifest, clock.breakdown(), total


def delete_prefix(url: str, prefix: str) -> int:
    """SCAN MATCH ``prefix:*`` + UNLINK; returns the number of keys removed."""
    client = redis.Redis.from_url(url)
    removed = 0
    try:
        for _ in range(3):  # a second pass catches keys SCAN may have missed while deleting
            batch: list[bytes] = []
            for key in client.scan_iter(match=RedisKeys(prefix).match, count=10_000):
                batch.append(key)
                if len(batch) >= 10_000:
                    removed += client.unlink(*batch)
                    batch = []
            if batch:
                removed += client.unlink(*batch)
            if not any(True for _ in client.scan_iter(match=RedisKeys(prefix).match, count=1000)):
                break
    finally:
        client.close()
    return removed


def bench_big_release(say: Report, results: Results, data_dir: Path, url: str, n_rows: int) -> None:
    say(f"b. A {n_rows:,}-row release with the history in Redis ({url})")
    prefix = f"bench-speed-{uuid.uuid4().hex[:16]}"
    settings = adult_settings(data_dir, history={"key": secrets.token_hex(32), "prefix": prefix})
    adult = read_csv_table(data_dir / "adult.csv")
    rng = np.random.default_rng(SEED)
    big = adult.take(rng.integers(0, adult.n_rows, size=n_rows))
    ids = np.array([f"u{i:07d}" for i in range(n_rows)], dtype=object)
    big = Table({**big.columns, "id": ids})
    with tempfile.TemporaryDirectory(prefix="sr-speed-big-") as tmp:
        work = Path(tmp)
        csv_path = work / "adult-1m.csv"
        prep, _ = timed(lambda: big.write_csv(csv_path))
        say(f"  resampled Adult (seed {SEED}, fresh ids) written as CSV in {prep:.2f} s (prep)")
        read_s, table = timed(
            lambda: encode(
                read_snapshot(csv_path, settings.schema),
                settings.schema,
                load_hierarchies(settings.schema),
            )
        )
        say(f"  read/encode (read_snapshot + encode): {read_s:.2f} s (excluded from the target)")
        publisher = Publisher.open(settings, work / "releases", url)
        runs = []
        try:
            for release in (1, 2):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    entries = 0
                    if release > 1:  # what release 2 loads: the histories release 1 committed
                        pseudonyms = publisher.pseudonymizer.pseudonyms(table.ids)
                        entries = publisher.store.load(pseudonyms).n_entries
                    manifest, steps, total = publish_in_steps(
                        publisher, table, f"adult-1m-{release}"
                    )
                runs.append((manifest, steps, total, entries))
        finally:
            publisher.close()
            removed = delete_prefix(url, prefix)
    labels = list(dict.fromkeys(label for _, steps, _, _ in runs for label in steps))
    say(f"  {'step of Publisher.publish':<54} {'release 1':>10} {'release 2':>10}")
    for label in labels:
        cells = " ".join(f"{steps.get(label, 0.0):>9.3f}s" for _, steps, _, _ in runs)
        say(f"  {label:<54} {cells}")
    other = " ".join(f"{total - sum(steps.values()):>9.3f}s" for _, steps, total, _ in runs)
    say(f"  {'other (the glue in publish itself)':<54} {other}")
    totals = " ".join(f"{total:>9.3f}s" for _, _, total, _ in runs)
    say(f"  {'total (excl. read/encode)':<54} {totals}")
    for release, (manifest, _, total, entries) in enumerate(runs, start=1):
        u = manifest["utility"]
        say(
            f"  release {release}: {entries:,} history entries loaded; "
            f"{manifest['published']:,} published, {manifest['suppressed']:,} suppressed, "
            f"{manifest['groups']:,} groups (avg {u['avg_group_size']:.2f}, max "
            f"{u['max_group_size']}), breach max {manifest['breach']['max']:.4f}, manifest "
            f"elapsed_s {manifest['elapsed_s']:.2f} s"
        )
        verdict = results.check(
            f"{n_rows:,}-row release {release} (Redis)",
            f"{total:.2f} s",
            f"< {TARGET_BIG_S:g} s",
            total < TARGET_BIG_S,
        )
        say(f"  release {release} total: {total:.2f} s   target < {TARGET_BIG_S:g} s   {verdict}")
    say(f"  Redis cleanup: {removed:,} keys under prefix {prefix}:* deleted")


# --------------------------------------------------------------------------------------------
# c. the 20-release Adult series


def bench_series(say: Report, results: Results, data_dir: Path, releases: int = 20) -> None:
    say(f"c. The {releases}-release Adult series (file-store history, same settings as a)")
    settings = adult_settings(data_dir)
    prep, tables = timed(
        lambda: [
            encode_table(s, settings)
            for s in make_series(
                read_csv_table(data_dir / "adult.csv"), ADULT_SENSITIVE, releases, seed=SEED
            )
        ]
    )
    say(f"  make_series + encode: {prep:.2f} s (excluded)")
    per_release = []
    with tempfile.TemporaryDirectory(prefix="sr-speed-series-") as tmp:
        out = Path(tmp) / "releases"
        started = time.perf_counter()
        publisher = Publisher.open(settings, out, Path(tmp) / "history")
        try:
            for i, table in enumerate(tables, start=1):
                per_release.append(timed(lambda t=table, i=i: publisher.publish(t, label=f"t{i}")))
        finally:
            publisher.close()
        total = time.perf_counter() - started
        ok = audit_directory(out).ok
    walls = [t for t, _ in per_release]
    plans = [m["elapsed_s"] for _, m in per_release]
    say(
        f"  per release: mean {_ms(statistics.fmean(walls))}, median "
        f"{_ms(statistics.median(walls))}, max {_ms(max(walls))} (of which plan, manifest "
        "elapsed_s: mean "
        f"{_ms(statistics.fmean(plans))}); audit {'PASS' if ok else 'FAIL'}"
    )
    verdict = results.check(
        f"{releases}-release Adult series",
        f"{total:.2f} s",
        f"< {TARGET_SERIES_S:g} s",
        total < TARGET_SERIES_S,
    )
    say(
        f"  total (open + {releases} publishes + close): {total:.2f} s   target < "
        f"{TARGET_SERIES_S:g} s   {verdict}"
    )


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--big-rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-anonypy", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    say = Report()
    results = Results()
    fingerprint = package_fingerprint()
    say(
        f"stream_release speed benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; "
        f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} "
        f"CPU(s), load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"package sources sha256 {fingerprint}"
    )
    say()
    bench_adult_release(say, results, args.data_dir, args.repeats, args.skip_anonypy)
    say()
    bench_big_release(say, results, args.data_dir, args.redis_url, args.big_rows)
    say()
    bench_series(say, results, args.data_dir)
    say()
    say("Targets")
    for t in results.targets:
        say(f"  {t.name:<36} {t.value:>12}   target {t.target:<10} {'PASS' if t.ok else 'FAIL'}")
    say(f"wall time of this run: {time.perf_counter() - started:.1f} s")
    if package_fingerprint() != fingerprint:
        say(
            f"WARNING: the package sources changed during this run ({fingerprint} -> "
            f"{package_fingerprint()}): the figures may mix two versions"
        )

    args.out.mkdir(parents=True, exist_ok=True)
    text = "\n".join(["# Speed benchmark", "", "`python benchmarks/speed.py`", "", "```text"])
    text += "\n" + "\n".join(say.lines) + "\n```\n"
    (args.out / "speed.md").write_text(text, encoding="utf-8")
    print(f"wrote {args.out / 'speed.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
