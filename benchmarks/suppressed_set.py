"""What suppression reveals, and what protecting it costs: real series, before and after.

An adversary who knows who is in a snapshot and its value counts sees a release's suppressed
rows as one more group with every QID ``*``. Per release this prints, from the files (the
private assignments and the snapshot's own values):

* the suppressed rows (% of the snapshot), the decoys among them (rows suppressed only to
  dilute the set), the forced rows (their own value needs more than the cap; the unplaced ones
  among them: no group took them), the exhausted ones (at the bound for their own value;
  these three from the private record) and the members the set does not hold to the bound for
  some value (``spent``, the private record's ``exempt_members``);
* the share of protected values among the suppressed rows and among the published ones, and
  the largest share one protected value holds among the suppressed rows: the adversary's
  probability that a suppressed person holds it (it must stay below 1/l);
* the relative error of 5,000 random count queries (Wong et al. 2010, §8): mean, median and 10 %
  trimmed mean (the mean is dominated by queries with tiny true counts).

Series: the churn of Wong et al. 2010, §8 on real data (``make_series``: 20 partitions, 20 %
of a snapshot carried over, 20 % of the values redrawn, seed 0), the first ``--rounds`` releases:

* Adult (occupation; 14 values) with the five rarest occupations protected, constant-ratio
  k' = 4 and geometric alpha = 2 (l = 2), and with every occupation protected, constant-ratio
  k' = 3;
* the same as a panel (``adult-panel``: 80 % of a snapshot carried over instead of 20 %, so
  most people come back wave after wave, as in a survey panel), the same settings;
* Diabetes 130 (diag_1, 3-character ICD-9) with the 10 % rarest codes protected, constant-ratio
  k' = 4 and geometric alpha = 2.

min_group_size = 2 throughout. ``--before REV`` measures the same series with the package of
git revision ``REV`` too (a temporary ``git worktree``, imported through ``PYTHONPATH``), in
the same run: the baseline of the comparison. Its other defaults stay its own.

Usage::

    python benchmarks/suppressed_set.py [--rounds 12] [--before REV] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import trim_mean

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA_DIR = REPO.parent / "shared" / "data"
RESULTS = HERE / "results"
KEY = "suppressed-set-benchmark-key-0123456789abcdef"

ADULT_RARE = (
    "Armed-Forces",
    "Priv-house-serv",
    "Protective-serv",
    "Tech-support",
    "Farming-fishing",
)
SETTINGS: list[tuple[str, str, dict[str, Any]]] = [
    ("adult", "rare, constant-ratio k'=4", {"strategy": "constant-ratio", "k_prime": 4}),
    ("adult", "rare, geometric alpha=2", {"strategy": "geometric", "alpha": 2.0}),
    ("adult", "all, constant-ratio k'=3", {"strategy": "constant-ratio", "k_prime": 3}),
    ("adult-panel", "rare, constant-ratio k'=4", {"strategy": "constant-ratio", "k_prime": 4}),
    ("adult-panel", "rare, geometric alpha=2", {"strategy": "geometric", "alpha": 2.0}),
    ("adult-panel", "all, constant-ratio k'=3", {"strategy": "constant-ratio", "k_prime": 3}),
    ("diabetes", "rare, constant-ratio k'=4", {"strategy": "constant-ratio", "k_prime": 4}),
    ("diabetes", "rare, geometric alpha=2", {"strategy": "geometric", "alpha": 2.0}),
]
"""(data set, label, privacy settings); "rare" protects the data set's rare values."""


def measure(data_dir: Path, rounds: int) -> list[dict[str, Any]]:
    """Every setting's series with the package on the import path; one dict per release."""
    sys.path.insert(0, str(HERE))
    import serial  # the data loaders of the paper's experiment

    from stream_release.config import load_settings
    from stream_release.core.utility.queries import relative_errors
    from stream_release.errors import GuaranteeUnsatisfiable
    from stream_release.pipeline.publisher import Publisher

    datasets = {name: serial.LOADERS[name](data_dir, rounds) for name in ("adult", "diabetes")}
    datasets["adult-panel"] = _adult_panel(serial, data_dir, rounds)
    out: list[dict[str, Any]] = []
    for name, label, privacy in SETTINGS:
        ds = datasets[name]
        rare = name.startswith("adult") and label.startswith("rare")
        protected = ADULT_RARE if rare else ds.protected
        settings = load_settings(
            None,
            schema=ds.schema,
            privacy={"l": 2, "min_group_size": 2, "protected": list(protected), **privacy},
            history={"key": KEY},
            output={"queries": 0},
        )
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            publisher = Publisher.open(settings, work / "out", work / "history")
            for k, table in enumerate(ds.snapshots, start=1):
                row = {"dataset": name, "setting": label, "release": k, "rows": table.n_rows}
                try:
                    manifest = publisher.publish(table, label=f"t{k:02d}")
                except GuaranteeUnsatisfiable as exc:
                    row["refused"] = str(exc)
                    out.append(row)
                    break
                group = _groups(work / "out", k, table)
                values = np.asarray(table.sensitive_values, dtype=object)[table.sensitive]
                is_protected = (
                    np.isin(values, list(protected))
                    if protected
                    else np.ones(table.n_rows, dtype=bool)
                )
                star = group < 0
                counts = collections.Counter(values[star & is_protected].tolist())
                worst = Fraction(max(counts.values()), int(star.sum())) if counts else Fraction(0)
                errors = relative_errors(
                    table, group, format="generalized", queries=5000,
                    rng=np.random.default_rng([0, k]),
                )  # fmt: skip
                block = manifest.get("suppressed_set") or {}
                record = _private_record(work / "out", k)
                row.update(
                    suppressed=int(star.sum()),
                    decoys=record.get("decoys", block.get("decoys")),
                    forced=_count(
                        record.get(
                            "withheld", record.get("forced", manifest.get("suppressed_by_history"))
                        )
                    ),
                    unplaced=_count(record.get("unplaced")),
                    exhausted=_count(record.get("exhausted", manifest.get("exhausted"))),
                    spent=record.get("exempt_members", block.get("spent")),
                    protected_in_suppressed=_share(is_protected[star]),
                    protected_in_published=_share(is_protected[~star]),
                    worst_share=float(worst),
                    error_mean=float(errors.mean()),
                    error_median=float(np.median(errors)),
                    error_trimmed=float(trim_mean(errors, 0.1)),
                )
                out.append(row)
            publisher.close()
    return out


def _private_record(out: Path, k: int) -> dict[str, Any]:
    """The ``suppressed`` block of release ``k``'s private record (empty before they were
    kept: the revision under ``--before`` may predate them)."""
    path = out.with_name(out.name + ".private") / f"private-{k:04d}.json"
    if not path.exists():
        return {}
    block = json.loads(path.read_text()).get("suppressed")
    return block if isinstance(block, dict) else {}


def _count(value: Any) -> int | None:
    """A count stated as a number, or as the list or map of what it counts."""
    if value is None:
        return None
    return len(value) if isinstance(value, list | dict) else int(value)


def _adult_panel(serial: Any, data_dir: Path, rounds: int) -> Any:
    """Adult as a panel: paper §8's series with 80 % of each snapshot carried over."""
    from stream_release.devtools.datasets import ADULT_SENSITIVE, make_series, read_csv_table

    adult = serial.load_adult(data_dir, 1)
    table = read_csv_table(data_dir / "adult.csv")
    series = make_series(table, ADULT_SENSITIVE, 20, keep=0.8, change=0.2, seed=0)[:rounds]
    snapshots = serial._encode_series(series, adult.schema, "adult-panel")
    return serial.Dataset("adult-panel", "Adult panel", adult.schema, (), snapshots)


def _share(mask: np.ndarray) -> float | None:
    return float(mask.mean()) if mask.size else None


def _groups(out: Path, sequence: int, table: Any) -> np.ndarray:
    """Each row's group from the private assignments (``out.private`` or, in the layout of
    earlier versions, ``out``)."""
    private = out.with_name(out.name + ".private")
    path = (private if private.is_dir() else out) / f"assignments-{sequence:04d}.csv"
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    where = {ident: int(g) if g else -1 for ident, g, *_ in rows}
    return np.array([where[i] for i in table.ids.tolist()], dtype=np.int64)


def measure_revision(revision: str, data_dir: Path, rounds: int) -> list[dict[str, Any]]:
    """:func:`measure` with the package of git ``revision`` (a temporary worktree)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), revision],
            check=True,
            capture_output=True,
        )
        try:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            done = subprocess.run(
                [sys.executable, __file__, "--measure-only", "--rounds", str(rounds),
                 "--data-dir", str(data_dir)],
                env=env, check=True, capture_output=True, text=True,
            )  # fmt: skip
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )
    return list(json.loads(done.stdout))


def table(rows: list[dict[str, Any]], title: str) -> list[str]:
    head = (
        "| data set | setting | rel | rows | suppressed | decoys | forced (unplaced) | exhausted "
        "| spent | protected in suppressed / published | worst share in suppressed | error mean "
        "/ median / trimmed |"
    )
    lines = [f"### {title}", "", head, "|" + "---|" * 12]
    for r in rows:
        if "refused" in r:
            lines.append(
                f"| {r['dataset']} | {r['setting']} | {r['release']} | {r['rows']:,} | refused: "
                f"{r['refused'][:90]} |  |  |  |  |  |  |  |"
            )
            continue
        pct = 100 * r["suppressed"] / r["rows"]
        shares = " / ".join(
            "-" if x is None else f"{100 * x:.0f} %"
            for x in (r["protected_in_suppressed"], r["protected_in_published"])
        )
        dash = "-"
        forced = dash if r["forced"] is None else str(r["forced"])
        if r["unplaced"] is not None:
            forced += f" ({r['unplaced']})"
        lines.append(
            f"| {r['dataset']} | {r['setting']} | {r['release']} | {r['rows']:,} | "
            f"{r['suppressed']} ({pct:.2f} %) | {dash if r['decoys'] is None else r['decoys']} | "
            f"{forced} | {dash if r['exhausted'] is None else r['exhausted']} | "
            f"{dash if r['spent'] is None else r['spent']} | {shares} | {r['worst_share']:.3f} | "
            f"{r['error_mean']:.3f} / {r['error_median']:.3f} / {r['error_trimmed']:.3f} |"
        )
    return [*lines, ""]


def summary(rows: list[dict[str, Any]], title: str) -> list[str]:
    """Per setting: releases, worst share over the series, mean suppression, mean errors."""
    lines = [
        f"### {title}: per setting",
        "",
        "| data set | setting | releases | worst share in suppressed (max) | suppressed (mean) | "
        "decoys (total) | unplaced (total) | error mean / median / trimmed (means) |",
        "|" + "---|" * 8,
    ]
    keyed: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for r in rows:
        keyed[(r["dataset"], r["setting"])].append(r)
    for (name, label), runs in keyed.items():
        done = [r for r in runs if "refused" not in r]
        refused = len(runs) - len(done)
        supp = statistics.mean(100 * r["suppressed"] / r["rows"] for r in done) if done else 0.0
        decoys = sum(r["decoys"] or 0 for r in done)
        unplaced = (
            "-" if all(r.get("unplaced") is None for r in done)
            else str(sum(r.get("unplaced") or 0 for r in done))
        )  # fmt: skip
        worst = max((r["worst_share"] for r in done), default=0.0)
        keys = ("error_mean", "error_median", "error_trimmed")
        means = [statistics.mean(r[k] for r in done) for k in keys] if done else [0.0] * 3
        lines.append(
            f"| {name} | {label} | {len(done)}{' + refused' if refused else ''} | {worst:.3f} | "
            f"{supp:.2f} % | {decoys} | {unplaced} | {means[0]:.3f} / {means[1]:.3f} / "
            f"{means[2]:.3f} |"
        )
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--before", default=None, help="git revision to measure as baseline")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--out", type=Path, default=RESULTS / "suppressed_set.md")
    parser.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure_only:
        print(json.dumps(measure(args.data_dir, args.rounds)))
        return 0
    after = measure(args.data_dir, args.rounds)
    lines = [
        "# The suppressed set: what it reveals and what protecting it costs",
        "",
        f"`python benchmarks/suppressed_set.py --rounds {args.rounds}"
        + (f" --before {args.before}`" if args.before else "`"),
        "",
    ]
    if args.before:
        before = measure_revision(args.before, args.data_dir, args.rounds)
        lines += summary(before, f"before ({args.before})")
    lines += summary(after, "after (this tree)")
    if args.before:
        lines += table(before, f"before ({args.before}), per release")
    lines += table(after, "after (this tree), per release")
    text = "\n".join(lines)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
