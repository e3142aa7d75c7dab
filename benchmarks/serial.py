"""Paper 003 §8 on real data: serial releases of Adult and Diabetes 130 under every strategy.

Rebuilds the experiment of Wong, Fu, Liu, Wang and Xu (ICDE 2010, §8, Figures 6-9) on the two
real data sets in ``../shared/data`` (README sections 1 and 4):

* **Adult** (30,162 rows): QIDs age, sex, race, marital-status, education, native-country,
  workclass with the ARX hierarchies; sensitive occupation (14 values), every value protected.
* **Diabetes 130** (101,766 encounters): person id ``patient_nbr``; QIDs race, gender, age
  (``?`` kept as a race category); sensitive diag_1 cut before the ``.`` and zero-padded to 3
  characters (rows whose diag_1 is ``?`` dropped); protected = the 10 % least frequent distinct
  codes by global frequency (as in the paper; ties at the cut-off broken by code order).

Series: :func:`stream_release.devtools.datasets.make_series` (the paper's method: 20 random
partitions,
T_i = P_i plus 20 % of T_(i-1), then 20 % of T_i's rows get a sensitive value redrawn from the
global distribution). A patient of Diabetes 130 may have several encounters in one snapshot; an
individual has at most one row per snapshot, so only its first row is kept.

Every (data set, configuration) runs as one series through :class:`Publisher` (file-store
history and release files in a temporary directory) and is then audited with
:func:`audit_directory`. A configuration refused with :class:`GuaranteeUnsatisfiable` is
recorded as infeasible with the package's message. The ``localized`` baseline (l = 2, no history)
is expected to fail the audit.

Writes ``benchmarks/results/serial.md`` and ``serial_<dataset>_<strategy>.png`` (one 2x2 figure
per data set and strategy: query error, average and maximum group size, time per release).

Usage::

    python benchmarks/serial.py [--rounds 20] [--datasets adult,diabetes] [--quick]
                                [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from stream_release.audit import audit_directory
from stream_release.config import load_settings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.core.table import EncodedTable
from stream_release.devtools.datasets import (
    ADULT_QID,
    ADULT_SENSITIVE,
    Table,
    adult_schema,
    make_series,
    read_csv_table,
)
from stream_release.errors import GuaranteeUnsatisfiable
from stream_release.io.encoding import encode
from stream_release.io.snapshot import snapshot_from_columns
from stream_release.pipeline.publisher import Publisher

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"

SEED = 0
"""Seed of :func:`make_series` (both data sets)."""
PARTITIONS = 20
"""The paper's number of partitions; ``--rounds`` publishes the first ``rounds`` snapshots."""
KEEP = 0.2
CHANGE = 0.2
PROTECTED_FRACTION = 0.1

DIABETES_QID = ("race", "gender", "age")
DIABETES_ID = "patient_nbr"
DIABETES_SENSITIVE = "diag_1"


# --------------------------------------------------------------------------------------------
# Configurations


@dataclass(frozen=True)
class Config:
    """One privacy setting of the experiment."""

    strategy: str
    ell: float
    k_prime: int | None = None
    alpha: float | None = None
    register: bool = False
    """Virtual individuals (Wong et al. 2010, §8): the whole data set is the population register."""

    @property
    def label(self) -> str:
        extra = " + register" if self.register else ""
        if self.strategy == "constant-ratio":
            return f"constant-ratio l={self.ell:g} k'={self.k_prime}{extra}"
        if self.strategy == "geometric":
            return f"geometric l={self.ell:g} alpha={self.alpha:g}{extra}"
        return f"{self.strategy} l={self.ell:g} (baseline)"

    @property
    def family(self) -> str:
        return f"{self.strategy}-virtual" if self.register else self.strategy

    def privacy(self, protected: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "strategy": self.strategy,
            "l": self.ell,
            "protected": list(protected),
        }
        if self.k_prime is not None:
            out["k_prime"] = self.k_prime
        if self.alpha is not None:
            out["alpha"] = self.alpha
        if self.strategy == "localized":
            out["acknowledge_localized"] = True  # the baseline, run to show its breaches
        return out


def configs_for(dataset: str, quick: bool) -> list[Config]:
    """The paper's grid: constant-ratio k' x l, geometric alpha at l = 2, the baseline."""
    if quick:
        constant = [Config("constant-ratio", 2, k_prime=k) for k in (5, 20)]
        constant.append(Config("constant-ratio", 5, k_prime=20))
        geometric = [Config("geometric", 2, alpha=2)]
    else:
        constant = [
            Config("constant-ratio", ell, k_prime=k) for ell in (2, 3, 5) for k in (5, 10, 20)
        ]
        geometric = [Config("geometric", 2, alpha=a) for a in (2, 3, 5)]
    virtual: list[Config] = []
    if dataset == "adult":
        # the only constant-ratio setting Adult's value frequencies allow at l = 2 besides
        # smaller k' (occupation's most frequent value holds ~13.4 % of the rows)
        constant.insert(0, Config("constant-ratio", 2, k_prime=3))
        # paper §8: a register of the population makes the larger settings feasible
        virtual = [Config("constant-ratio", 2, k_prime=k, register=True) for k in (5, 10, 20)]
        virtual.append(Config("geometric", 2, alpha=5, register=True))
    return [*constant, *geometric, *virtual, Config("localized", 2)]


# --------------------------------------------------------------------------------------------
# Data


@dataclass
class Dataset:
    """An encoded series and what the experiment needs to publish it."""

    name: str
    title: str
    schema: dict[str, Any]
    protected: tuple[str, ...]
    snapshots: list[EncodedTable]
    notes: list[str] = field(default_factory=list)
    register: Table | None = None
    """The population register of the virtual-individual runs (id and QID columns)."""


def _encode_series(series: list[Table], schema: dict[str, Any], name: str) -> list[EncodedTable]:
    settings = load_settings(None, schema=schema)
    hierarchies = load_hierarchies(settings.schema)
    tables = []
    for i, snapshot in enumerate(series, start=1):
        cols = snapshot.columns
        raw = snapshot_from_columns(
            cols[schema["id"]],
            {q: cols[q] for q in schema["qid"]},
            cols[schema["sensitive"]],
            source=f"{name}-t{i:02d}",
        )
        tables.append(encode(raw, settings.schema, hierarchies))
    return tables


def _sizes(tables: list[EncodedTable]) -> str:
    sizes = [t.n_rows for t in tables]
    return f"{min(sizes):,}-{max(sizes):,} rows per snapshot (mean {statistics.mean(sizes):,.0f})"


def load_adult(data_dir: Path, rounds: int) -> Dataset:
    table = read_csv_table(data_dir / "adult.csv")  # adds an ``id`` column p-<row>
    schema = adult_schema(data_dir)
    series = make_series(
        table, ADULT_SENSITIVE, max(PARTITIONS, rounds), keep=KEEP, change=CHANGE, seed=SEED
    )[:rounds]
    snapshots = _encode_series(series, schema, "adult")
    values, counts = np.unique(table.columns[ADULT_SENSITIVE], return_counts=True)
    top = int(np.argmax(counts))
    notes = [
        f"{table.n_rows:,} rows; QIDs {', '.join(ADULT_QID)} (ARX hierarchies); sensitive "
        f"{ADULT_SENSITIVE} ({len(values)} values), all protected.",
        f"Most frequent value {values[top]!r} holds {100 * counts[top] / table.n_rows:.2f} % of "
        f"the rows, so no ratio |G|/n(G,s) above ~{table.n_rows / counts[top]:.2f} is possible "
        "(less in a snapshot after the redraws).",
        f"{len(snapshots)} snapshots: {_sizes(snapshots)}.",
    ]
    notes.append(
        "Runs marked `+ register` use the whole table (ids and QIDs, no occupation) as the "
        "population register of virtual individuals (paper §8, `[virtual] registry`)."
    )
    register = Table({c: table.columns[c] for c in ("id", *ADULT_QID)})
    return Dataset("adult", "Adult", schema, (), snapshots, notes, register)


def _icd9_3(value: str) -> str:
    return value.split(".", 1)[0].zfill(3)


def load_diabetes(data_dir: Path, rounds: int) -> Dataset:
    full = read_csv_table(data_dir / "diabetes130_diabetic_data.csv.gz", id_column=DIABETES_ID)
    n_all = full.n_rows
    wanted = (DIABETES_ID, *DIABETES_QID, DIABETES_SENSITIVE)
    known = full.columns[DIABETES_SENSITIVE] != "?"
    table = Table({c: full.columns[c][known] for c in wanted})
    diag = np.array([_icd9_3(v) for v in table.columns[DIABETES_SENSITIVE]], dtype=object)
    table = Table({**table.columns, DIABETES_SENSITIVE: diag})

    # protected: the 10 % least frequent distinct codes (global frequency; ties by code)
    values, counts = np.unique(diag, return_counts=True)
    n_protected = round(PROTECTED_FRACTION * len(values))
    order = np.lexsort((values, counts))
    protected = tuple(sorted(str(v) for v in values[order[:n_protected]]))
    cutoff = int(counts[order[n_protected - 1]])
    tied = int(np.count_nonzero(counts == cutoff))
    below = int(np.count_nonzero(counts < cutoff))

    # the codes' domain as a flat hierarchy: a protected code absent from a snapshot is then
    # declared, not taken for a misspelling of a similar code the snapshot holds (README,
    # "Protected values"; 3-character codes differ by one character)
    domain = Path(tempfile.mkdtemp(prefix="sr-serial-diabetes-"))
    atexit.register(shutil.rmtree, domain, ignore_errors=True)
    (domain / "diag_1.csv").write_text("".join(f"{v};*\n" for v in values))
    schema = {
        "id": DIABETES_ID,
        "sensitive": DIABETES_SENSITIVE,
        "qid": list(DIABETES_QID),
        "hierarchies": {DIABETES_SENSITIVE: str(domain / "diag_1.csv")},
    }
    series = make_series(
        table, DIABETES_SENSITIVE, max(PARTITIONS, rounds), keep=KEEP, change=CHANGE, seed=SEED
    )[:rounds]
    deduplicated, dropped = [], 0
    for snapshot in series:
        _, first = np.unique(snapshot.columns[DIABETES_ID], return_index=True)
        first.sort()  # keep each patient's first row (P_i's rows come before carried ones)
        dropped += snapshot.n_rows - first.shape[0]
        deduplicated.append(snapshot.take(first))
    snapshots = _encode_series(deduplicated, schema, "diabetes")
    present = [
        int(np.count_nonzero(np.isin(np.asarray(t.sensitive_values, dtype=object), protected)))
        for t in snapshots
    ]
    notes = [
        f"{n_all:,} encounters, {n_all - table.n_rows} dropped for diag_1 = '?': "
        f"{table.n_rows:,} rows, {len(np.unique(table.columns[DIABETES_ID])):,} patients; "
        f"QIDs {', '.join(DIABETES_QID)} (no hierarchies: set-valued generalization); sensitive "
        f"diag_1 as 3-character ICD-9 codes ({len(values)} distinct; their list is the "
        "sensitive attribute's hierarchy, its declared domain).",
        f"Protected: the {n_protected} least frequent codes (10 % of {len(values)}); each occurs "
        f"at most {cutoff} time(s) in the whole data ({below} codes occur less often, {tied} "
        f"occur exactly {cutoff} time(s): ties at the cut-off broken by code order).",
        f"{dropped:,} rows removed in total so that a patient has one row per snapshot (its "
        "first encounter in the snapshot).",
        f"{len(snapshots)} snapshots: {_sizes(snapshots)}; protected values present per "
        f"snapshot: {min(present)}-{max(present)}. Groups form around the rows holding them; "
        "the other rows need no group (min_group_size = 1), hence average groups near 1.",
    ]
    return Dataset("diabetes", "Diabetes 130", schema, protected, snapshots, notes)


LOADERS = {"adult": load_adult, "diabetes": load_diabetes}


def package_fingerprint() -> str:
    """SHA-256 (first 12 hex digits) of the package's Python sources: which code was run."""
    digest = hashlib.sha256()
    for path in sorted((REPO / "stream_release").rglob("*.py")):
        digest.update(path.relative_to(REPO).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


# --------------------------------------------------------------------------------------------
# Running a series


@dataclass
class Round:
    sequence: int
    records: int
    published: int
    suppressed: int
    groups: int
    query_error: float
    error_median: float
    error_trimmed: float
    virtual: int
    avg_group: float
    max_group: int
    suppression: float
    ncp: float
    breach_max: float
    elapsed_s: float
    wall_s: float

    @classmethod
    def of(cls, m: dict[str, Any], wall: float) -> Round:
        u = m["utility"]
        qe = u.get("query_error")
        return cls(
            sequence=int(m["sequence"]),
            records=int(m["records_in"]),
            published=int(m["published"]),
            suppressed=int(m["suppressed"]),
            groups=int(m["groups"]),
            query_error=float("nan") if qe is None else float(qe),
            error_median=_number(u.get("query_error_median")),
            error_trimmed=_number(u.get("query_error_trimmed")),
            virtual=int((m.get("virtual") or {}).get("members", 0)),
            avg_group=float(u["avg_group_size"]),
            max_group=int(u["max_group_size"]),
            suppression=float(u["suppression"]),
            ncp=float(u["ncp"]),
            breach_max=float(m["breach"]["max"]),
            elapsed_s=float(m["elapsed_s"]),
            wall_s=wall,
        )


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


@dataclass
class Run:
    config: Config
    rounds: list[Round] = field(default_factory=list)
    infeasible: str | None = None
    failed_round: int | None = None
    audit_ok: bool | None = None
    audit_breach_max: float = float("nan")
    audit_first_breach: int | None = None
    audit_problem: str = ""
    runtime_warnings: list[str] = field(default_factory=list)
    series_wall_s: float = 0.0

    def mean(self, name: str) -> float:
        xs = [getattr(r, name) for r in self.rounds]
        xs = [x for x in xs if not math.isnan(x)]
        return statistics.fmean(xs) if xs else float("nan")


def run_series(ds: Dataset, config: Config, work: Path) -> Run:
    """Publish the data set's snapshots as one series under ``config`` and audit the files."""
    overrides: dict[str, Any] = {"privacy": config.privacy(ds.protected)}
    if config.register:
        assert ds.register is not None
        work.mkdir(parents=True, exist_ok=True)
        ds.register.write_csv(work / "register.csv")
        overrides["virtual"] = {"registry": str(work / "register.csv")}
    settings = load_settings(None, schema=ds.schema, **overrides)
    out = work / "releases"
    run = Run(config)
    started = time.perf_counter()
    publisher = Publisher.open(settings, out, work / "history")
    try:
        for i, table in enumerate(ds.snapshots, start=1):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                t0 = time.perf_counter()
                try:
                    manifest = publisher.publish(table, label=f"{ds.name}-t{i:02d}")
                except GuaranteeUnsatisfiable as exc:
                    run.infeasible = str(exc)
                    run.failed_round = i
                    break
                wall = time.perf_counter() - t0
            run.runtime_warnings.extend(
                f"{w.category.__name__} at {Path(w.filename).name}:{w.lineno}: {w.message}"
                for w in caught
            )
            run.rounds.append(Round.of(manifest, wall))
    finally:
        publisher.close()
    run.series_wall_s = time.perf_counter() - started
    if run.rounds:
        report = audit_directory(out)
        run.audit_ok = report.ok
        run.audit_breach_max = max(r.breach_max for r in report.releases)
        for r in report.releases:
            if not r.ok:
                run.audit_first_breach = r.sequence
                run.audit_problem = r.problems[0]
                break
    return run


def warm_up(ds: Dataset, work: Path) -> None:
    """Publish one snapshot once, unrecorded, so numba's compiled kernels are loaded before
    round 1 of the first recorded series (otherwise its time includes loading the JIT cache)."""
    settings = load_settings(
        None, schema=ds.schema, privacy=Config("localized", 2).privacy(ds.protected)
    )
    publisher = Publisher.open(settings, work / "releases", work / "history")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            publisher.publish(ds.snapshots[0], label="warm-up")
    finally:
        publisher.close()


# --------------------------------------------------------------------------------------------
# Reporting


def _fmt(x: float, spec: str) -> str:
    return "–" if math.isnan(x) else format(x, spec)


def markdown_table(runs: list[Run]) -> list[str]:
    head = (
        "| config | feasible | rounds | query error mean / median / trimmed | avg group "
        "| max group | virtual members | suppression | NCP | breach max (mean / worst) "
        "| plan s/release | wall s/release | audit |"
    )
    lines = [head, "|" + "---|" * 13]
    for run in runs:
        feasible = "yes" if run.infeasible is None else f"**no** (round {run.failed_round})"
        if not run.rounds:
            lines.append(f"| {run.config.label} | {feasible} | 0 |" + " – |" * 10)
            continue
        worst = max(r.breach_max for r in run.rounds)
        audit = "PASS" if run.audit_ok else f"**FAIL** (max {run.audit_breach_max:.4f})"
        lines.append(
            f"| {run.config.label} | {feasible} | {len(run.rounds)} "
            f"| {_fmt(run.mean('query_error'), '.4f')} / {_fmt(run.mean('error_median'), '.4f')}"
            f" / {_fmt(run.mean('error_trimmed'), '.4f')} | {run.mean('avg_group'):.2f} "
            f"| {run.mean('max_group'):.1f} | {run.mean('virtual'):.0f} "
            f"| {100 * run.mean('suppression'):.2f} % "
            f"| {run.mean('ncp'):.4f} | {run.mean('breach_max'):.4f} / {worst:.4f} "
            f"| {run.mean('elapsed_s'):.4f} | {run.mean('wall_s'):.4f} | {audit} |"
        )
    return lines


def dataset_section(ds: Dataset, runs: list[Run], plots: list[Path]) -> list[str]:
    lines = [f"## {ds.title}", ""]
    lines += [f"- {note}" for note in ds.notes]
    lines += ["", *markdown_table(runs), ""]
    infeasible = [r for r in runs if r.infeasible is not None]
    if infeasible:
        lines += ["Infeasible settings (the package's `GuaranteeUnsatisfiable` message):", ""]
        lines += [f"- {r.config.label}, round {r.failed_round}: {r.infeasible}" for r in infeasible]
        lines.append("")
    for run in runs:
        if run.config.strategy == "localized" and run.rounds:
            verdict = "PASS" if run.audit_ok else "FAIL"
            lines.append(
                f"Localized baseline (l = {run.config.ell:g}, no history): audit {verdict}; "
                f"max breach reached {run.audit_breach_max:.4f} "
                f"{'>' if run.audit_breach_max > 1 / run.config.ell else '<='} "
                f"1/l = {1 / run.config.ell:.4f}"
                + (
                    f", first breach in release {run.audit_first_breach} ({run.audit_problem})"
                    if run.audit_first_breach is not None
                    else ""
                )
                + "."
            )
            lines.append("")
    warned = [r for r in runs if r.runtime_warnings]
    if warned:
        distinct = sorted({w for r in warned for w in r.runtime_warnings})
        lines.append(
            f"Warnings emitted by the package during {len(warned)} of these series "
            f"({sum(len(r.runtime_warnings) for r in warned)} in all): "
            + "; ".join(f"`{w}`" for w in distinct)
        )
        lines.append("")
    if plots:
        lines += [f"![{p.stem}]({p.name})" for p in plots]
        lines.append("")
    return lines


_ELL_COLOURS = {2.0: "tab:blue", 3.0: "tab:orange", 5.0: "tab:green"}
_K_STYLES = {3: "-.", 5: ":", 10: "--", 20: "-"}
_ALPHA_COLOURS = {2.0: "tab:blue", 3.0: "tab:orange", 5.0: "tab:green"}


def _style(config: Config) -> dict[str, Any]:
    if config.strategy == "constant-ratio":
        return {
            "color": _ELL_COLOURS.get(config.ell, "tab:purple"),
            "linestyle": _K_STYLES.get(config.k_prime or 0, "-"),
            "marker": "o",
        }
    if config.strategy == "geometric":
        return {
            "color": _ALPHA_COLOURS.get(config.alpha or 0.0, "tab:purple"),
            "linestyle": "-",
            "marker": "s",
        }
    return {"color": "0.45", "linestyle": "--", "marker": "x"}


def plot_family(ds: Dataset, family: str, runs: list[Run], path: Path) -> Path:
    """One 2x2 figure like the paper's Figures 6-9: error, avg size, max size, time vs round."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    shown = [r for r in runs if r.rounds and r.config.family in (family, "localized")]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    panels = [
        ("query_error", "(a) average relative query error"),
        ("avg_group", "(b) average group size"),
        ("max_group", "(c) maximum group size"),
        ("wall_s", "(d) time per release (s, publish wall time)"),
    ]
    for ax, (attr, title) in zip(axes.flat, panels, strict=True):
        for run in shown:
            x = [r.sequence for r in run.rounds]
            y = [getattr(r, attr) for r in run.rounds]
            ax.plot(x, y, markersize=3, linewidth=1.3, label=run.config.label, **_style(run.config))
        ax.set_title(title, fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("round (release)")
    missing = [
        r.config.label for r in runs if r.config.family == family and r.infeasible is not None
    ]
    note = textwrap.wrap(f"infeasible (not plotted): {', '.join(missing)}", 170) if missing else []
    fig.suptitle(f"{ds.title}: {family} strategy vs. the localized baseline", fontsize=12)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    legend_y = 0.005 + 0.018 * len(note)
    fig.legend(
        handles,
        labels,
        loc="lower center",
        bbox_to_anchor=(0.5, legend_y),
        ncol=min(4, max(1, len(labels))),
        fontsize=8,
    )
    if note:
        fig.text(0.5, 0.005, "\n".join(note), ha="center", va="bottom", fontsize=7)
    rows = math.ceil(len(labels) / 4)
    fig.tight_layout(rect=(0, legend_y + 0.035 + 0.03 * rows, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="releases per series (20)")
    parser.add_argument(
        "--datasets", default="adult,diabetes", help="comma-separated: adult, diabetes"
    )
    parser.add_argument("--quick", action="store_true", help="a few configurations only")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    unknown = [n for n in names if n not in LOADERS]
    if unknown or args.rounds < 1:
        parser.error(f"unknown data set(s) {unknown}" if unknown else "--rounds must be >= 1")

    started = time.perf_counter()
    fingerprint = package_fingerprint()
    args.out.mkdir(parents=True, exist_ok=True)
    report = [
        "# Serial publishing on real data (Wong et al. 2010, §8)",
        "",
        f"Generated by `python benchmarks/serial.py{' --quick' if args.quick else ''}"
        f"{'' if args.rounds == 20 else f' --rounds {args.rounds}'}` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {platform.python_implementation()} "
        f"{platform.python_version()}, {os.cpu_count()} CPU(s); package sources sha256 "
        f"{fingerprint}.",
        "",
        f"Series: `make_series(table, sensitive, {PARTITIONS}, keep={KEEP}, change={CHANGE}, "
        f"seed={SEED})`, first {args.rounds} snapshots. Each configuration is one series through "
        "`Publisher` (file-store history, release files in a temporary directory), audited "
        "afterwards with `audit_directory`. Columns are means over the published rounds; "
        "`plan s/release` is the manifest's `elapsed_s` (pseudonymise + history load + "
        "grouping + check), `wall s/release` the whole `Publisher.publish` call (plus utility "
        "metrics with 5,000 queries, files, history commit). min_group_size = 2 (the default). "
        "One unrecorded warm-up release per data set loads the compiled kernels first.",
        "",
    ]
    for name in names:
        t0 = time.perf_counter()
        ds = LOADERS[name](args.data_dir, args.rounds)
        print(f"== {ds.title}: loaded and encoded in {time.perf_counter() - t0:.1f} s")
        for note in ds.notes:
            print(f"   {note}")
        with tempfile.TemporaryDirectory(prefix=f"sr-serial-{name}-") as tmp:
            warm_up(ds, Path(tmp) / "warm-up")
            runs = []
            for i, config in enumerate(configs_for(name, args.quick)):
                run = run_series(ds, config, Path(tmp) / f"run-{i:02d}")
                runs.append(run)
                status = (
                    f"infeasible at round {run.failed_round}"
                    if run.infeasible is not None
                    else f"{len(run.rounds)} rounds"
                )
                audit = (
                    "" if run.audit_ok is None else f", audit {'PASS' if run.audit_ok else 'FAIL'}"
                )
                print(f"   {config.label:<34} {status}{audit} ({run.series_wall_s:.1f} s)")
        plots = []
        families = ("constant-ratio", "geometric", "constant-ratio-virtual", "geometric-virtual")
        for family in families:
            if any(r.config.family == family for r in runs):
                path = args.out / f"serial_{name}_{family}.png"
                plots.append(plot_family(ds, family, runs, path))
        section = dataset_section(ds, runs, plots)
        print()
        print("\n".join(section))
        report += section
    elapsed = time.perf_counter() - started
    report += [f"Total wall time of this run: {elapsed:.1f} s.", ""]
    if package_fingerprint() != fingerprint:
        warning = (
            f"WARNING: the package sources changed during this run ({fingerprint} -> "
            f"{package_fingerprint()}): the results may mix two versions."
        )
        print(warning)
        report += [warning, ""]
    (args.out / "serial.md").write_text("\n".join(report), encoding="utf-8")
    print(f"total wall time {elapsed:.1f} s; wrote {args.out / 'serial.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
