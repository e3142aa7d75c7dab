"""The four release mechanisms side by side on one Adult series: guarantee against utility.

One series of Adult snapshots (:func:`stream_release.devtools.datasets.make_series`, the paper's
churn: ``RELEASES`` random partitions, 20 % of the previous snapshot carried over, 20 % of each
snapshot's occupations redrawn; seed 0) is published offline, through :class:`Publisher`, once
per mode (its own history and files in a temporary directory), then audited with
:func:`audit_directory`:

* ``global-guarantee`` (the baseline): l = 2, constant-ratio k' = 3, as the demo;
* ``sampled-k-anonymity``: k = 20, epsilon = 1 (a column of Li-Qardaji-Su's Table 2), with
  beta = 0.1 and with beta = 0.5, generalized as the README's example;
* ``reconstruction-private-rr``: p = 0.5, epsilon = 0.5, delta = 0.3 (the paper's), the
  occupation hierarchy's 14 leaves as the domain;
* ``dp-sanitised``: epsilon = 1, delta = 0.01 per record, split equally over the 7 QIDs and
  the occupation; per-person budget (3, 0.03). Every Adult QID has an ARX hierarchy, so each
  is randomised over its hierarchy's leaves (the data-independent Adult domain; no numeric
  bounds are needed).

Query workload: for release i, the same ``QUERIES`` count queries for every mode,
``COUNT(*) WHERE A_1 IN R_1 AND A_2 IN R_2 AND A_3 IN R_3 AND occupation = s``, drawn once from
the true snapshot by :func:`stream_release.core.utility.queries.draw_count_queries` (the manifests'
workload, module docstring of :mod:`stream_release.core.utility.queries`; s from every row of the
snapshot,
``rng = default_rng([QUERY_SEED, i])``, queries with a true count of 0 re-drawn). Each mode
answers them from its PUBLISHED group lines only (``release-NNNN.jsonl`` and the manifest; see
:func:`estimate_counts`), and the error of a query is ``|est - act| / act``: the manifests'
definition; every kept query has ``act >= 1``, so this equals ``|est - act| / max(act, 1)``.

Writes ``benchmarks/results/mechanisms.md`` and ``mechanisms.png`` (query error per mode per
release; skipped with a message when matplotlib is missing: ``pip install -e ".[bench]"``).

Usage::

    python benchmarks/mechanisms.py [--releases 5] [--queries 5000] [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.audit import audit_directory
from stream_release.config import Settings, load_settings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.config.mechanisms import section_name
from stream_release.core.table import Attribute, EncodedTable
from stream_release.core.utility.queries import CountQueries, draw_count_queries
from stream_release.devtools.datasets import (
    ADULT_SENSITIVE,
    Table,
    adult_schema,
    make_series,
    read_csv_table,
)
from stream_release.errors import InvalidParameter
from stream_release.io.encoding import encode
from stream_release.io.release_files import ReleasePaths, default_private_dir
from stream_release.io.snapshot import snapshot_from_columns
from stream_release.mechanisms.reconstruction_rr.estimate import reconstruct
from stream_release.pipeline.publisher import Publisher
from stream_release.release_format import GLOBAL_GUARANTEE

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"

SEED = 0
"""Seed of :func:`make_series` (every mode publishes the same snapshots)."""
RELEASES = 5
"""Partitions of :func:`make_series`, all published: about 6,000-7,500 rows per snapshot."""
KEEP = 0.2
CHANGE = 0.2
QUERIES = 5000
QUERY_SEED = 0
"""Release i's queries are drawn with ``default_rng([QUERY_SEED, i])``."""
KEY = "stream-release benchmarks/mechanisms.py: a public, fixed pseudonymisation key"
"""Every mode's pseudonymisation key: fixed, so a run is reproducible (the rows' pseudonym
order, the keyed sample, the sticky RR values and the DP noise all derive from it)."""
RR_CHECKED = 25
"""Queries per release whose RR estimate is recomputed with the package's ``reconstruct``."""
SAMPLED_CHECKED = 200
"""Queries per release whose sampled-k estimate is recomputed from the private assignments."""


# --------------------------------------------------------------------------------------------
# Estimators: count queries answered from published group lines


def label_ranges(attribute: Attribute, levels: Sequence[int] | None = None) -> dict[str, tuple]:
    """Published label -> (first, last) leaf code it covers, for a hierarchy QID.

    A hierarchy node covers a run of consecutive leaf codes (leaves are encoded in depth-first
    order); ``levels`` restricts the labels to those levels (0 = the leaves; default: all).

    Raises
    ------
    ValueError : a QID without a hierarchy, a node whose leaves are not consecutive, or a label
        naming two different leaf sets at the levels considered
    """
    if attribute.kind != "hierarchy" or attribute.levels is None or attribute.labels is None:
        raise ValueError(
            f"QID {attribute.name!r} is {attribute.kind!r}: these estimators read hierarchy "
            "labels only (every Adult QID has an ARX hierarchy)"
        )
    tree = np.asarray(attribute.levels)
    out: dict[str, tuple[int, int]] = {}
    for h in range(tree.shape[1]) if levels is None else levels:
        for node in np.unique(tree[:, h]).tolist():
            leaves = np.flatnonzero(tree[:, h] == node)
            first, last = int(leaves[0]), int(leaves[-1])
            label = attribute.labels[h][node]
            if last - first + 1 != leaves.shape[0]:
                raise ValueError(
                    f"{attribute.name}: the leaves under {label!r} are not consecutive"
                )
            if out.setdefault(label, (first, last)) != (first, last):
                raise ValueError(
                    f"{attribute.name}: label {label!r} names two different sets of leaves"
                )
    return out


@dataclass(frozen=True)
class LineIndex:
    """The published group lines of one release as arrays, L lines, d QIDs, V values.

    ``lo``, ``hi`` (L, d) int64: the leaf codes line l's published value of QID j covers (one
    leaf for an exact value); ``size`` (L,) float64; ``counts`` (L, V) float64: the published
    count of each sensitive value of the snapshot's encoding (``table.sensitive_values``;
    published values outside it are never queried and are dropped).
    """

    lo: NDArray[np.int64]
    hi: NDArray[np.int64]
    size: NDArray[np.float64]
    counts: NDArray[np.float64]

    @classmethod
    def of(
        cls,
        lines: Sequence[Mapping[str, Any]],
        table: EncodedTable,
        levels: Mapping[str, Sequence[int]] | None = None,
    ) -> LineIndex:
        """Index ``lines`` against the encoding of ``table`` (its hierarchies give each label's
        leaves; ``levels`` QID -> the levels its labels may come from, default all)."""
        n, d = len(lines), len(table.attributes)
        lo = np.empty((n, d), dtype=np.int64)
        hi = np.empty((n, d), dtype=np.int64)
        for j, attribute in enumerate(table.attributes):
            ranges = label_ranges(attribute, None if levels is None else levels[attribute.name])
            for i, line in enumerate(lines):
                value = line["qid"][attribute.name]
                try:
                    lo[i, j], hi[i, j] = ranges[value]
                except (KeyError, TypeError):
                    raise ValueError(
                        f"line {i}: {attribute.name} = {value!r} is not a label of its hierarchy"
                    ) from None
        column = {v: c for c, v in enumerate(table.sensitive_values)}
        counts = np.zeros((n, len(column)), dtype=np.float64)
        for i, line in enumerate(lines):
            for value, count in line["sensitive"].items():
                if value in column:
                    counts[i, column[value]] = count
        size = np.array([line["size"] for line in lines], dtype=np.float64)
        return cls(lo, hi, size, counts)


def covered(
    index: LineIndex, queries: CountQueries, chunk: int = 256
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``(O, S)``, (q,) each: for every query, with ``share_l`` the fraction of line l's
    published QID box inside the query's ranges (``prod_t |V_t(l) ∩ R_t| / |V_t(l)|``, values
    spread uniformly inside a generalized cell; 0 or 1 for exact QIDs),
    ``O = sum_l share_l * count_l(s)`` and ``S = sum_l share_l * size_l``."""
    q = len(queries)
    published = np.zeros(q, dtype=np.float64)
    rows = np.zeros(q, dtype=np.float64)
    width = (index.hi - index.lo + 1).astype(np.float64)
    for first in range(0, q, chunk):
        part = slice(first, min(first + chunk, q))
        share = np.ones((index.size.shape[0], part.stop - part.start), dtype=np.float64)
        for t in range(queries.attrs.shape[1]):
            j = queries.attrs[part, t]
            inside = np.minimum(queries.ends[part, t], index.hi[:, j]) - np.maximum(
                queries.starts[part, t], index.lo[:, j]
            )
            share *= np.maximum(inside + 1, 0) / width[:, j]
        published[part] = np.einsum("lq,lq->q", share, index.counts[:, queries.values[part]])
        rows[part] = index.size @ share
    return published, rows


def estimate_generalized(published: NDArray[np.float64], beta: float = 1.0) -> NDArray[np.float64]:
    """Generalized cells (``global-guarantee``; ``sampled-k-anonymity`` with ``beta``): the
    published count spread uniformly over each cell, scaled by ``1 / beta`` for a Bernoulli
    sample of rate ``beta`` (unbiased for the sampled rows that were published; suppressed
    cells count 0)."""
    return published / beta


def estimate_rr(
    published: NDArray[np.float64], rows: NDArray[np.float64], p: float, m: int
) -> NDArray[np.float64]:
    """``reconstruction-private-rr``: Lemma 1 of Wang-Han-Fu over the matching micro groups,
    ``(O* - |S| (1 - p) / m) / p``: :func:`~stream_release.mechanisms.reconstruction_rr.estimate.
    reconstruct` for many queries at once (a line's counts are already scaled to its size by
    its ``weight``)."""
    return (published - rows * (1.0 - p) / m) / p


def estimate_dp(
    published: NDArray[np.float64], rows: NDArray[np.float64], keep: float, p_other: float
) -> NDArray[np.float64]:
    """``dp-sanitised``: the QIDs taken as published (sanitised), the sensitive value de-biased
    through randomised response's keep / other probabilities over the matching rows,
    ``(C_s - n p_other) / (keep - p_other)`` (:func:`~stream_release.core.privacy.metric_dp_rr.
    rr_debiased_counts` on the matching rows)."""
    return (published - rows * p_other) / (keep - p_other)


def estimate_counts(
    lines: Sequence[Mapping[str, Any]],
    manifest: Mapping[str, Any],
    table: EncodedTable,
    queries: CountQueries,
) -> NDArray[np.float64]:
    """Estimated count of every query from one release's published lines and manifest.

    ``table`` only gives the encoding the queries are written in (hierarchy leaves and
    sensitive codes), never a count. Dispatches on the manifest's ``mechanism.kind`` (none:
    the global guarantee) to :func:`estimate_generalized`, :func:`estimate_rr` or
    :func:`estimate_dp`.
    """
    block = manifest.get("mechanism") or {"kind": GLOBAL_GUARANTEE}
    kind = block["kind"]
    levels = None
    if kind == "sampled-k-anonymity":
        levels = {name: [rule["level"]] for name, rule in block["generalization"].items()}
    elif kind in ("reconstruction-private-rr", "dp-sanitised"):
        levels = {a.name: [0] for a in table.attributes}  # exact (or sanitised) leaves
    if not lines:
        return np.zeros(len(queries), dtype=np.float64)
    published, rows = covered(LineIndex.of(lines, table, levels), queries)
    if kind == GLOBAL_GUARANTEE:
        return estimate_generalized(published)
    if kind == "sampled-k-anonymity":
        return estimate_generalized(published, float(block["beta"]))
    if kind == "reconstruction-private-rr":
        return estimate_rr(published, rows, float(block["p"]), int(block["m"]))
    if kind == "dp-sanitised":
        sensitive = block["sensitive"]
        if not sensitive.get("sanitised", True):
            return published
        return estimate_dp(published, rows, float(sensitive["keep"]), float(sensitive["p_other"]))
    raise ValueError(f"mechanism kind {kind!r}: no estimator")


def relative_error(estimate: NDArray[np.float64], actual: NDArray[np.float64]) -> NDArray:
    """``|est - act| / max(act, 1)`` (= the manifests' ``|est - act| / act``: act >= 1)."""
    return np.abs(estimate - actual) / np.maximum(actual, 1.0)


# --------------------------------------------------------------------------------------------
# Modes


@dataclass(frozen=True)
class Mode:
    """One mechanism configuration of the comparison."""

    key: str
    label: str
    kind: str
    section: dict[str, Any] | None = None

    def settings(self, schema: dict[str, Any], queries: int = QUERIES) -> Settings:
        mechanism: dict[str, Any] = {"kind": self.kind}
        if self.section is not None:
            mechanism[section_name(self.kind)] = self.section
        return load_settings(
            None,
            schema=schema,
            privacy={"l": 2, "strategy": "constant-ratio", "k_prime": 3, "protected": []},
            output={"queries": queries, "query_seed": QUERY_SEED},
            history={"key": KEY},
            mechanism=mechanism,
        )


SAMPLED_LEVELS = {
    "age": 3,
    "sex": 0,
    "race": 1,
    "marital-status": 2,
    "education": 3,
    "native-country": 2,
    "workclass": 2,
}
"""The README's example generalization (age in 20-year bands, sex exact, the rest ``*``)."""


def modes(data_dir: Path) -> list[Mode]:
    occupations = list(label_leaves(data_dir / "adult_hierarchy_occupation.csv"))
    sampled = {"k": 20, "epsilon": 1.0, "levels": SAMPLED_LEVELS}
    return [
        Mode("global", "global-guarantee l=2, k'=3 (baseline)", GLOBAL_GUARANTEE),
        Mode(
            "sampled-0.1",
            "sampled-k-anonymity k=20, beta=0.1, eps=1",
            "sampled-k-anonymity",
            {**sampled, "beta": 0.1},
        ),
        Mode(
            "sampled-0.5",
            "sampled-k-anonymity k=20, beta=0.5, eps=1",
            "sampled-k-anonymity",
            {**sampled, "beta": 0.5},
        ),
        Mode(
            "rr",
            "reconstruction-private-rr p=0.5, eps=0.5, delta=0.3",
            "reconstruction-private-rr",
            {
                "p": 0.5,
                "epsilon": 0.5,
                "delta": 0.3,
                "domain_hierarchy": str(data_dir / "adult_hierarchy_occupation.csv"),
            },
        ),
        Mode(
            "dp",
            "dp-sanitised eps=1, delta=0.01 per record",
            "dp-sanitised",
            {
                "epsilon": 1.0,
                "delta": 0.01,
                "epsilon_budget": 3.0,
                "delta_budget": 0.03,
                "sensitive_domain": occupations,
            },
        ),
    ]


def label_leaves(path: Path) -> tuple[str, ...]:
    """The leaves of an ARX hierarchy file, in file order."""
    rows = csv.reader(path.read_text(encoding="utf-8").splitlines(), delimiter=";")
    return tuple(row[0] for row in rows if row)


# --------------------------------------------------------------------------------------------
# Data


def load_series(data_dir: Path, releases: int) -> tuple[dict[str, Any], list[EncodedTable]]:
    """The schema and the encoded snapshots of the Adult series."""
    table = read_csv_table(data_dir / "adult.csv")  # adds an ``id`` column p-<row>
    schema = adult_schema(data_dir)
    series = make_series(table, ADULT_SENSITIVE, releases, keep=KEEP, change=CHANGE, seed=SEED)
    return schema, encode_series(series, schema)


def encode_series(series: list[Table], schema: dict[str, Any]) -> list[EncodedTable]:
    settings = load_settings(None, schema=schema)
    hierarchies = load_hierarchies(settings.schema)
    tables = []
    for i, snapshot in enumerate(series, start=1):
        cols = snapshot.columns
        raw = snapshot_from_columns(
            cols["id"],
            {q: cols[q] for q in schema["qid"]},
            cols[schema["sensitive"]],
            source=f"adult-t{i:02d}",
        )
        tables.append(encode(raw, settings.schema, hierarchies))
    return tables


def package_fingerprint() -> str:
    """SHA-256 (first 12 hex digits) of the package's Python sources: which code was run."""
    digest = hashlib.sha256()
    for path in sorted((REPO / "stream_release").rglob("*.py")):
        digest.update(path.relative_to(REPO).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


# --------------------------------------------------------------------------------------------
# Running a mode


@dataclass
class Release:
    sequence: int
    rows: int
    published: int
    groups: int
    max_group: int
    errors: NDArray[np.float64]
    wall_s: float
    manifest: dict[str, Any]

    @property
    def mean_error(self) -> float:
        return float(self.errors.mean())

    @property
    def median_error(self) -> float:
        return float(np.median(self.errors))

    @property
    def not_published(self) -> float:
        """Rows of the snapshot not in any published line, in %."""
        return 100 * (self.rows - self.published) / self.rows

    @property
    def answered_zero(self) -> float:
        """Queries whose error is exactly 1 (an estimate of 0: no published line matches), in %."""
        return 100 * float(np.mean(self.errors == 1.0))


@dataclass
class Run:
    mode: Mode
    releases: list[Release] = field(default_factory=list)
    audit_ok: bool = False
    audit_problem: str = ""
    audit_breach_max: float = math.nan
    checks: list[str] = field(default_factory=list)

    @property
    def errors(self) -> NDArray[np.float64]:
        return np.concatenate([r.errors for r in self.releases])

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.releases)

    @property
    def published(self) -> int:
        return sum(r.published for r in self.releases)

    @property
    def wall_s(self) -> float:
        return statistics.fmean(r.wall_s for r in self.releases)


def read_release(out: Path, sequence: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    manifest = json.loads((out / f"manifest-{sequence:04d}.json").read_text(encoding="utf-8"))
    text = (out / f"release-{sequence:04d}.jsonl").read_text(encoding="utf-8")
    return manifest, [json.loads(line) for line in text.splitlines() if line]


def publish_series(
    settings: Settings, snapshots: list[EncodedTable], work: Path
) -> tuple[Path, list[float]]:
    """Publish every snapshot as one series; the release directory and each publish's wall
    time."""
    out = work / "releases"
    walls = []
    publisher = Publisher.open(settings, out, work / "history")
    try:
        for i, table in enumerate(snapshots, start=1):
            t0 = time.perf_counter()
            publisher.publish(table, label=f"adult-t{i:02d}")
            walls.append(time.perf_counter() - t0)
    finally:
        publisher.close()
    return out, walls


def warm_up(modes_: list[Mode], schema: dict[str, Any], table: EncodedTable, work: Path) -> None:
    """Publish one snapshot per mode, unrecorded: compiled kernels and caches are loaded
    before any timed release."""
    for i, mode in enumerate(modes_):
        publish_series(mode.settings(schema), [table], work / f"warm-{i}")


def run_mode(
    mode: Mode,
    schema: dict[str, Any],
    snapshots: list[EncodedTable],
    queries: list[CountQueries],
    work: Path,
) -> Run:
    """Publish the series under ``mode``, answer each release's ``queries`` from its lines,
    cross-check the estimators and audit the files."""
    settings = mode.settings(schema, len(queries[0]))
    out, walls = publish_series(settings, snapshots, work)
    run = Run(mode)
    for i, (table, workload, wall) in enumerate(zip(snapshots, queries, walls, strict=True), 1):
        manifest, lines = read_release(out, i)
        estimate = estimate_counts(lines, manifest, table, workload)
        sizes = [line["size"] for line in lines]
        run.releases.append(
            Release(
                sequence=i,
                rows=table.n_rows,
                published=int(sum(sizes)),
                groups=len(lines),
                max_group=max(sizes, default=0),
                errors=relative_error(estimate, workload.actual),
                wall_s=wall,
                manifest=manifest,
            )
        )
        run.checks += cross_check(mode, settings, out, i, manifest, lines, table, workload)
    report = audit_directory(out)
    run.audit_ok = report.ok
    run.audit_breach_max = max((r.breach_max for r in report.releases), default=math.nan)
    run.audit_problem = next((p for r in report.releases for p in r.problems), "")
    return run


# --------------------------------------------------------------------------------------------
# Cross-checks of the estimators against the package, on the real releases


def cross_check(
    mode: Mode,
    settings: Settings,
    out: Path,
    sequence: int,
    manifest: dict[str, Any],
    lines: list[dict[str, Any]],
    table: EncodedTable,
    workload: CountQueries,
) -> list[str]:
    """Recompute figures the package states or computes itself; raise on a mismatch.

    * global-guarantee: the manifest's own ``utility.query_error`` (drawn from the published
      rows, answered by :mod:`stream_release.core.utility.queries` from the private assignment)
      from the published lines with :func:`estimate_counts` on the same queries;
    * sampled-k-anonymity: the first :data:`SAMPLED_CHECKED` estimates row by row from the
      private assignments (:func:`sampled_from_assignments`);
    * reconstruction-private-rr: the first :data:`RR_CHECKED` estimates with the package's
      :func:`~stream_release.mechanisms.reconstruction_rr.estimate.reconstruct`, query by query;
    * dp-sanitised: the manifest's de-biased ``counts`` of the whole release.
    """
    kind = mode.kind
    if kind == GLOBAL_GUARANTEE:
        ordered, group = assignment_order(out, sequence, table)
        rows = np.flatnonzero(group >= 0)
        rng = np.random.default_rng([settings.output.query_seed, sequence])
        same = draw_count_queries(ordered, queries=settings.output.queries, rng=rng, rows=rows)
        ours = float(
            relative_error(estimate_counts(lines, manifest, ordered, same), same.actual).mean()
        )
        stated = float(manifest["utility"]["query_error"])
        if not math.isclose(ours, stated, rel_tol=1e-9):
            raise AssertionError(f"release {sequence}: query error {ours!r} != manifest {stated!r}")
        return [f"release {sequence}: manifest query_error {stated:.6f}, from the lines {ours:.6f}"]
    if kind == "sampled-k-anonymity":
        head = _head(workload, SAMPLED_CHECKED)
        ours = estimate_counts(lines, manifest, table, head)
        theirs = sampled_from_assignments(out, sequence, table, manifest, head)
        worst = float(np.max(np.abs(ours - theirs), initial=0.0))
        if not np.allclose(ours, theirs, rtol=1e-9, atol=1e-9):
            raise AssertionError(f"release {sequence}: lines and assignments disagree ({worst})")
        return [
            f"release {sequence}: {len(head)} estimates = those from the private assignments' "
            f"rows (max |diff| {worst:.1e})"
        ]
    if kind == "reconstruction-private-rr":
        head = _head(workload, RR_CHECKED)
        ours = estimate_counts(lines, manifest, table, head)
        worst = 0.0
        for i in range(len(head)):
            allowed = {
                table.attributes[j].name: set(table.attributes[j].domain[a : b + 1].tolist())
                for j, a, b in zip(head.attrs[i], head.starts[i], head.ends[i], strict=True)
            }
            value = table.sensitive_values[head.values[i]]
            try:
                theirs = reconstruct(
                    lines,
                    manifest,
                    value,
                    where=lambda qid, allowed=allowed: all(
                        qid[name] in ok for name, ok in allowed.items()
                    ),
                ).estimate
            except InvalidParameter:  # no group matches: |S| = 0
                theirs = 0.0
            worst = max(worst, abs(theirs - ours[i]))
            if not math.isclose(theirs, ours[i], rel_tol=1e-9, abs_tol=1e-9):
                raise AssertionError(f"release {sequence}, query {i}: {ours[i]!r} != {theirs!r}")
        return [
            f"release {sequence}: {len(head)} estimates = reconstruct's (max |diff| {worst:.1e})"
        ]
    if kind == "dp-sanitised":
        stated = manifest["mechanism"]["counts"]["estimate"]
        index = LineIndex.of(lines, table, {a.name: [0] for a in table.attributes})
        block = manifest["mechanism"]["sensitive"]
        ours = estimate_dp(
            index.counts.sum(axis=0), index.size.sum(), block["keep"], block["p_other"]
        )
        for c, value in enumerate(table.sensitive_values):
            if not math.isclose(ours[c], stated[value], rel_tol=1e-9, abs_tol=1e-6):
                raise AssertionError(
                    f"release {sequence}, {value}: {ours[c]!r} != {stated[value]!r}"
                )
        return [f"release {sequence}: whole-release de-biased counts = manifest counts"]
    return []


def _head(queries: CountQueries, n: int) -> CountQueries:
    """The first ``n`` queries."""
    return CountQueries(
        queries.attrs[:n],
        queries.starts[:n],
        queries.ends[:n],
        queries.values[:n],
        queries.actual[:n],
    )


def sampled_from_assignments(
    out: Path,
    sequence: int,
    table: EncodedTable,
    manifest: Mapping[str, Any],
    queries: CountQueries,
) -> NDArray[np.float64]:
    """The sampled-k-anonymity estimate computed row by row from the private assignments (every
    published row counts ``prod_t |V_t ∩ R_t| / |V_t| / beta``, ``V_t`` the leaves under its
    value's ancestor at the configured level): an independent route to what
    :func:`estimate_counts` reads from the group lines."""
    block = manifest["mechanism"]
    ordered, group = assignment_order(out, sequence, table)
    rows = np.flatnonzero(group >= 0)
    lo = np.empty((rows.shape[0], len(table.attributes)), dtype=np.int64)
    hi = np.empty_like(lo)
    for j, attribute in enumerate(ordered.attributes):
        level = block["generalization"][attribute.name]["level"]
        tree = np.asarray(attribute.levels)
        node = tree[ordered.qid[rows, j], level]
        for k, n in enumerate(node.tolist()):
            leaves = np.flatnonzero(tree[:, level] == n)
            lo[k, j], hi[k, j] = leaves[0], leaves[-1]
    estimate = np.zeros(len(queries), dtype=np.float64)
    sensitive = ordered.sensitive[rows]
    for i in range(len(queries)):
        share = (sensitive == queries.values[i]).astype(np.float64)
        for j, a, b in zip(queries.attrs[i], queries.starts[i], queries.ends[i], strict=True):
            inside = np.minimum(b, hi[:, j]) - np.maximum(a, lo[:, j]) + 1
            share *= np.maximum(inside, 0) / (hi[:, j] - lo[:, j] + 1)
        estimate[i] = share.sum() / block["beta"]
    return estimate


def assignment_order(
    out: Path, sequence: int, table: EncodedTable
) -> tuple[EncodedTable, NDArray[np.int64]]:
    """``table`` in the order the publisher released it (rows sorted by pseudonym, as in the
    private assignments) and each row's group there."""
    paths = ReleasePaths(out, sequence, default_private_dir(out))
    text = paths.assignments.read_text(encoding="utf-8")
    rows = list(csv.reader(text.splitlines()))[1:]
    where = {v: i for i, v in enumerate(table.ids.tolist())}
    order = np.array([where[r[0]] for r in rows], dtype=np.int64)
    group = np.array([int(r[1]) if r[1] else -1 for r in rows], dtype=np.int64)
    return table.take(order), group


# --------------------------------------------------------------------------------------------
# Reporting


def guarantee(run: Run) -> tuple[str, str]:
    """(per release, over the series) as stated by the manifests."""
    last = run.releases[-1].manifest
    block = last.get("mechanism")
    if block is None:
        bound = last["breach"]["bound"]
        worst = max(r.manifest["breach"]["max"] for r in run.releases)
        return (
            f"P(link o to s) <= 1/l = {bound:g}; max breach {worst:.3f}",
            f"same bound over every release (audit recomputes max {run.audit_breach_max:.3f})",
        )
    kind = block["kind"]
    if kind == "sampled-k-anonymity":
        series = block["series"]
        return (
            f"({block['epsilon']:g}, {block['delta']:.3g})-DP",
            f"({series['epsilon']:g}, {series['delta']:.3g})-DP, basic composition",
        )
    if kind == "reconstruction-private-rr":
        cap = block["cap"][block["bound"]]
        return (
            f"({block['epsilon']:g}, {block['delta']:g})-reconstruction-private; cap s_g = "
            f"{cap:.2f}",
            f"<= {block['max_trials']} trials per micro group ever (sticky values, ledger)",
        )
    if kind == "dp-sanitised":
        budget = block["budget"]
        refused = sum(r.manifest["mechanism"]["refused_budget"] for r in run.releases)
        return (
            f"({block['epsilon']:g}, {block['delta']:g})-DP per record",
            f"per person <= ({budget['epsilon_budget']:g}, {budget['delta_budget']:g}); "
            f"{refused} refused",
        )
    return kind, ""


def not_published(run: Run) -> str:
    share = 100 * (run.rows - run.published) / run.rows
    block = run.releases[0].manifest.get("mechanism")
    if block is not None and block["kind"] == "sampled-k-anonymity":
        suppressed = 100 * (1 - run.published / (block["beta"] * run.rows))
        sample = f"sample {100 * block['beta']:g} %"
        return f"{share:.1f} % ({sample}; ~{suppressed:.0f} % of it suppressed)"
    return f"{share:.2f} %"


def ratio(x: float, base: float) -> str:
    return "–" if base == 0 or math.isnan(base) else f"{x / base:.2f}×"


def summary_table(runs: list[Run]) -> list[str]:
    base = runs[0]
    head = (
        "| mode | guarantee per release | over the series | avg group | max group | not published "
        "| mean error | median error | s/release | audit |"
    )
    lines = [head, "|" + "---|" * 10]
    for run in runs:
        per, series = guarantee(run)
        errors = run.errors
        mean, median = float(errors.mean()), float(np.median(errors))
        groups = sum(r.groups for r in run.releases)
        avg = run.published / groups if groups else 0.0
        audit = "PASS" if run.audit_ok else f"**FAIL** ({run.audit_problem})"
        lines.append(
            f"| {run.mode.label} | {per} | {series} | {avg:.2f} "
            f"| {max(r.max_group for r in run.releases)} | {not_published(run)} "
            f"| {mean:.3f} ({ratio(mean, float(base.errors.mean()))}) "
            f"| {median:.3f} ({ratio(median, float(np.median(base.errors)))}) "
            f"| {run.wall_s:.3f} ({ratio(run.wall_s, base.wall_s)}) | {audit} |"
        )
    return lines


def per_release_table(runs: list[Run], attr: str, title: str, spec: str = ".3f") -> list[str]:
    n = len(runs[0].releases)
    lines = [
        f"| {title} | " + " | ".join(f"release {i}" for i in range(1, n + 1)) + " |",
        "|" + "---|" * (n + 1),
    ]
    for run in runs:
        cells = " | ".join(format(getattr(r, attr), spec) for r in run.releases)
        lines.append(f"| {run.mode.label} | {cells} |")
    return lines


def notes(runs: list[Run]) -> list[str]:
    """What the figures of this run say, with the numbers behind it."""
    by = {run.mode.key: run for run in runs}
    base = float(by["global"].errors.mean())
    out = ["Reading the table:", ""]
    rr = by.get("rr")
    if rr is not None:
        block = rr.releases[-1].manifest["mechanism"]
        out.append(
            f"- reconstruction-private-rr keeps every QID exact and only perturbs the occupation "
            f"(p = {block['p']:g}), so its mean error is {float(rr.errors.mean()) / base:.2f}× the "
            "baseline's; what it gives up is rows: a micro group that has spent its "
            f"{block['max_trials']} trials and has none of them present is suppressed "
            f"(rows not published: {', '.join(f'{r.not_published:.1f} %' for r in rr.releases)} "
            "by release)."
        )
    for key in ("sampled-0.1", "sampled-0.5"):
        run = by.get(key)
        if run is None:
            continue
        zero = float(np.mean(run.errors == 1.0)) * 100
        out.append(
            f"- {run.mode.label}: {100 * run.published / run.rows:.1f} % of the rows are "
            f"published, in {sum(r.groups for r in run.releases) / len(run.releases):.0f} cells "
            f"per release on average; {zero:.0f} % of the queries match no published cell "
            "(estimate 0, error 1), and the cells generalize race, marital-status, education, "
            "native-country and workclass to `*`, so spreading a cell uniformly over them "
            "over-estimates rare values by large factors."
        )
    dp = by.get("dp")
    if dp is not None:
        block = dp.releases[-1].manifest["mechanism"]
        sens = block["sensitive"]
        keeps = ", ".join(f"{name} {entry['keep']:.3f}" for name, entry in block["qid"].items())
        out.append(
            f"- dp-sanitised splits epsilon = {block['epsilon']:g} over "
            f"{len(block['qid']) + 1} attributes (epsilon {sens['epsilon']:g} each): the "
            f"occupation is kept with probability {sens['keep']:.4f} against {sens['p_other']:.4f} "
            f"for each other value, so de-biasing multiplies noise by 1/(keep - p_other) = "
            f"{1 / (sens['keep'] - sens['p_other']):.0f}; the QIDs are kept with probability "
            f"{keeps}, i.e. published nearly uniformly at random, and queries on them count "
            "mostly other people's rows."
        )
    return out


def plot(runs: list[Run], path: Path, queries: int) -> Path | None:
    """Mean and median query error per mode per release (log scale); None without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print(
            f"matplotlib is not installed: skipping the plot {path} "
            '(install it with pip install -e ".[bench]")'
        )
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    styles = ["o-", "s--", "s-", "^-", "x-"]
    for ax, attr, title in zip(
        axes,
        ("mean_error", "median_error"),
        ("(a) mean relative error", "(b) median relative error"),
        strict=True,
    ):
        for run, style in zip(runs, styles, strict=False):
            x = [r.sequence for r in run.releases]
            y = [getattr(r, attr) for r in run.releases]
            ax.plot(x, y, style, markersize=4, linewidth=1.3, label=run.mode.label)
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("release")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(f"|est - act| / act over {queries:,} count queries")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.suptitle("Adult series: the four mechanisms on the same count queries", fontsize=12)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", type=int, default=RELEASES, help="snapshots (5)")
    parser.add_argument("--queries", type=int, default=QUERIES, help="queries per release")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    args = parser.parse_args(argv)
    if args.releases < 1 or args.queries < 1:
        parser.error("--releases and --queries must be >= 1")
    queries = args.queries

    started = time.perf_counter()
    fingerprint = package_fingerprint()
    args.out.mkdir(parents=True, exist_ok=True)
    schema, snapshots = load_series(args.data_dir, args.releases)
    sizes = [t.n_rows for t in snapshots]
    print(
        f"Adult series: {len(snapshots)} snapshots of {min(sizes):,}-{max(sizes):,} rows "
        f"(make_series(n={args.releases}, keep={KEEP}, change={CHANGE}, seed={SEED}))"
    )
    workloads = [
        draw_count_queries(t, queries=queries, rng=np.random.default_rng([QUERY_SEED, i]))
        for i, t in enumerate(snapshots, start=1)
    ]
    configured = modes(args.data_dir)
    runs = []
    with tempfile.TemporaryDirectory(prefix="sr-mechanisms-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning from the package would void the figures
        warm_up(configured, schema, snapshots[0], Path(tmp) / "warm-up")
        for i, mode in enumerate(configured):
            t0 = time.perf_counter()
            run = run_mode(mode, schema, snapshots, workloads, Path(tmp) / f"run-{i}")
            runs.append(run)
            print(
                f"  {mode.label:<52} mean error {float(run.errors.mean()):9.3f}, audit "
                f"{'PASS' if run.audit_ok else 'FAIL'} ({time.perf_counter() - t0:.1f} s)"
            )

    table = summary_table(runs)
    print()
    print("\n".join(table))
    image = plot(runs, args.out / "mechanisms.png", queries)
    elapsed = time.perf_counter() - started
    report = [
        "# The four mechanisms on one Adult series",
        "",
        f"Generated by `python benchmarks/mechanisms.py"
        f"{'' if args.releases == RELEASES else f' --releases {args.releases}'}"
        f"{'' if queries == QUERIES else f' --queries {queries}'}` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {platform.python_implementation()} "
        f"{platform.python_version()}, {os.cpu_count()} CPU(s); package sources sha256 "
        f"{fingerprint}; {elapsed:.0f} s in all.",
        "",
        f"Series: `make_series(adult, occupation, {args.releases}, keep={KEEP}, change={CHANGE}, "
        f"seed={SEED})`, {len(snapshots)} snapshots of {min(sizes):,}-{max(sizes):,} rows "
        f"({sum(sizes):,} in all), published offline through `Publisher` by every mode "
        "(own history and files in a temporary directory), then audited with "
        "`audit_directory`. QIDs age, sex, race, marital-status, education, native-country, "
        "workclass (ARX hierarchies); sensitive occupation (14 values).",
        "",
        f"Queries: per release the same {queries:,} count queries for every mode, "
        "`COUNT(*) WHERE A_1 IN R_1 AND A_2 IN R_2 AND A_3 IN R_3 AND occupation = s`, drawn "
        "once from the true snapshot by `queries.draw_count_queries` (the manifests' workload; "
        f"s from every row; `default_rng([{QUERY_SEED}, release])`; true count >= 1). Each mode "
        "answers them from its published group lines only: generalized cells spread "
        "uniformly (sampled-k-anonymity also scaled by 1/beta), RR by Lemma 1 "
        "`(O* - |S|(1-p)/m)/p` over the matching micro groups, DP with the sanitised QIDs as "
        "published and the occupation de-biased `(C_s - n p_other)/(keep - p_other)`. "
        "Error = |est - act| / act (= / max(act, 1)). Ratios in parentheses: against the "
        "global-guarantee baseline of the same run. s/release: wall time of "
        "`Publisher.publish` (the global guarantee's includes its manifest's utility report "
        f"with {queries:,} queries; the DP modes state no input figures).",
        "",
        *table,
        "",
        *per_release_table(runs, "mean_error", "mean error"),
        "",
        *per_release_table(runs, "median_error", "median error"),
        "",
        *per_release_table(runs, "not_published", "rows not published (%)", ".2f"),
        "",
        *per_release_table(runs, "answered_zero", "queries estimated 0 (%)", ".1f"),
        "",
        *notes(runs),
        "",
        "Estimator checks (each raises on a mismatch):",
        "",
        *[f"- {run.mode.label}: {check}" for run in runs for check in run.checks],
        "",
    ]
    if image is not None:
        report += [f"![query error per mode and release]({image.name})", ""]
    if package_fingerprint() != fingerprint:
        warning = (
            "WARNING: the package sources changed during this run; results may mix two versions."
        )
        print(warning)
        report += [warning, ""]
    (args.out / "mechanisms.md").write_text("\n".join(report), encoding="utf-8")
    print(f"\ntotal wall time {elapsed:.1f} s; wrote {args.out / 'mechanisms.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
