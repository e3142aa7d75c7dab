"""The count-query estimators of ``benchmarks/mechanisms.py`` on tiny hand-made releases.

The benchmark compares the four mechanisms by the error of the same count queries answered
from each mode's published lines; these tests pin every estimator against a hand computation
and against the package's own figures (the global guarantee's manifest ``query_error``, RR's
``reconstruct``, DP's ``rr_debiased_counts``), so the comparison cannot silently compute
nonsense.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from support.paths import REPO
from support.tables import EDUCATION_HIERARCHY

from stream_release.config import SchemaSettings, load_settings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.core.privacy.metric_dp_rr import rr_debiased_counts, rr_keep
from stream_release.core.table import EncodedTable
from stream_release.core.utility.queries import CountQueries, draw_count_queries
from stream_release.io.encoding import encode
from stream_release.io.snapshot import snapshot_from_columns
from stream_release.mechanisms.reconstruction_rr.estimate import reconstruct
from stream_release.pipeline.publisher import Publisher

BENCHMARK = REPO / "benchmarks" / "mechanisms.py"

AGE_HIERARCHY = "".join(
    f"{a};{20 + 4 * ((a - 20) // 4)}-{23 + 4 * ((a - 20) // 4)};*\n" for a in range(20, 28)
)
"""Ages 20..27 in two bands, 20-23 and 24-27."""

VALUES = ["cold", "flu", "hiv", "acne"]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmark_mechanisms", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


def schema(tmp_path: Path) -> dict[str, object]:
    (tmp_path / "age.csv").write_text(AGE_HIERARCHY, encoding="utf-8")
    (tmp_path / "education.csv").write_text(EDUCATION_HIERARCHY, encoding="utf-8")
    return {
        "id": "id",
        "sensitive": "s",
        "qid": ["age", "education"],
        "hierarchies": {
            "age": str(tmp_path / "age.csv"),
            "education": str(tmp_path / "education.csv"),
        },
    }


def encode_rows(tmp_path: Path, rows: list[tuple[str, str, str]]) -> EncodedTable:
    """Encode (age, education, s) rows with both hierarchies."""
    settings = SchemaSettings(**schema(tmp_path))  # type: ignore[arg-type]
    ages, schools, values = (list(c) for c in zip(*rows, strict=True))
    raw = snapshot_from_columns(
        [f"p{i}" for i in range(len(rows))], {"age": ages, "education": schools}, values
    )
    return encode(raw, settings, load_hierarchies(settings))


@pytest.fixture
def table(tmp_path: Path) -> EncodedTable:
    return encode_rows(
        tmp_path,
        [
            ("20", "Bachelors", "flu"),
            ("21", "Bachelors", "flu"),
            ("22", "Some-college", "cold"),
            ("25", "Masters", "flu"),
            ("27", "9th", "hiv"),
        ],
    )


def code(table: EncodedTable, attribute: str, label: str) -> int:
    j = table.qid_names.index(attribute)
    return int(np.flatnonzero(table.attributes[j].domain == label)[0])


def query(table: EncodedTable, ranges: dict[str, tuple[str, str]], value: str) -> CountQueries:
    """One query: attribute -> (first leaf, last leaf) and ``s = value``; actual count 1."""
    attrs = [table.qid_names.index(a) for a in ranges]
    starts = [code(table, a, lo) for a, (lo, _) in ranges.items()]
    ends = [code(table, a, hi) for a, (_, hi) in ranges.items()]
    return CountQueries(
        np.array([attrs], dtype=np.int64),
        np.array([starts], dtype=np.int64),
        np.array([ends], dtype=np.int64),
        np.array([table.sensitive_values.index(value)], dtype=np.int64),
        np.ones(1),
    )


def leaves(table: EncodedTable, attribute: str, first: int, last: int) -> set[str]:
    domain = table.attributes[table.qid_names.index(attribute)].domain
    return {str(v) for v in domain[first : last + 1].tolist()}


# -- reading published labels ---------------------------------------------------------------


def test_label_ranges_cover_the_leaves_under_each_label(
    bench: ModuleType, table: EncodedTable
) -> None:
    education = table.attributes[table.qid_names.index("education")]
    ranges = bench.label_ranges(education)
    assert leaves(table, "education", *ranges["Undergraduate"]) == {"Bachelors", "Some-college"}
    assert leaves(table, "education", *ranges["Higher education"]) == {
        "Bachelors",
        "Some-college",
        "Masters",
        "Doctorate",
    }
    assert leaves(table, "education", *ranges["*"]) == set(education.domain.tolist())
    assert ranges["9th"][0] == ranges["9th"][1]
    only_leaves = bench.label_ranges(education, [0])
    assert "Undergraduate" not in only_leaves and len(only_leaves) == education.size
    age = bench.label_ranges(table.attributes[table.qid_names.index("age")])
    assert leaves(table, "age", *age["24-27"]) == {"24", "25", "26", "27"}


def test_a_label_outside_the_hierarchy_is_an_error(bench: ModuleType, table: EncodedTable) -> None:
    line = {"size": 1, "qid": {"age": "20-23", "education": "College"}, "sensitive": {"flu": 1}}
    with pytest.raises(ValueError, match="education = 'College' is not a label"):
        bench.LineIndex.of([line], table)
    exact = {"size": 1, "qid": {"age": "20-23", "education": "9th"}, "sensitive": {"flu": 1}}
    with pytest.raises(ValueError, match="age = '20-23'"):  # RR and DP publish leaves only
        bench.LineIndex.of([exact], table, {"age": [0], "education": [0]})


# -- one estimator per kind, by hand ----------------------------------------------------------


GENERALIZED = [
    {
        "size": 4,
        "qid": {"age": "20-23", "education": "Undergraduate"},
        "sensitive": {"flu": 3, "cold": 1},
    },
    {"size": 2, "qid": {"age": "24-27", "education": "*"}, "sensitive": {"flu": 1, "hiv": 1}},
]


def test_generalized_lines_spread_uniformly(bench: ModuleType, table: EncodedTable) -> None:
    q = query(table, {"age": ("20", "21"), "education": ("Bachelors", "Bachelors")}, "flu")
    # line 0: 3 flu x (2 of 4 ages) x (1 of 2 schools); line 1: no age in range
    est = bench.estimate_counts(GENERALIZED, {"sequence": 1}, table, q)
    assert est.tolist() == pytest.approx([3 * 2 / 4 * 1 / 2])
    q = query(table, {"age": ("23", "24")}, "flu")
    # 3 x 1/4 from line 0, 1 x 1/4 from line 1 (education unconstrained)
    assert bench.estimate_counts(GENERALIZED, {}, table, q).tolist() == pytest.approx([1.0])
    q = query(table, {"education": ("9th", "9th")}, "hiv")
    assert bench.estimate_counts(GENERALIZED, {}, table, q).tolist() == pytest.approx([1 / 7])


def test_sampled_lines_are_scaled_by_one_over_beta(bench: ModuleType, table: EncodedTable) -> None:
    manifest = {
        "mechanism": {
            "kind": "sampled-k-anonymity",
            "beta": 0.25,
            "generalization": {"age": {"level": 1}, "education": {"level": 1}},
        }
    }
    lines = GENERALIZED[:1]
    q = query(table, {"age": ("20", "21"), "education": ("Bachelors", "Bachelors")}, "flu")
    assert bench.estimate_counts(lines, manifest, table, q).tolist() == pytest.approx([3.0])
    with pytest.raises(ValueError, match="not a label"):  # '*' is level 2, not the configured 1
        bench.estimate_counts(GENERALIZED, manifest, table, q)


def test_rr_is_lemma_1_over_the_matching_micro_groups(
    bench: ModuleType, table: EncodedTable
) -> None:
    block = {"kind": "reconstruction-private-rr", "p": 0.5, "m": 4, "domain": VALUES}
    lines = [
        {
            "size": 6,
            "qid": {"age": "20", "education": "Bachelors"},
            "sensitive": {"flu": 4, "cold": 2},
            "trials": 3,
        },
        {
            "size": 3,
            "qid": {"age": "21", "education": "Masters"},
            "sensitive": {"flu": 1, "acne": 2},
            "trials": 3,
        },
        {
            "size": 5,
            "qid": {"age": "25", "education": "Bachelors"},
            "sensitive": {"flu": 5},
            "trials": 5,
        },
    ]
    q = query(table, {"age": ("20", "22"), "education": ("Bachelors", "Masters")}, "flu")
    assert leaves(table, "education", int(q.starts[0, 1]), int(q.ends[0, 1])) >= {
        "Bachelors",
        "Masters",
    }
    est = bench.estimate_counts(lines, {"mechanism": block}, table, q)
    # lines 0 and 1 match: O* = 5, |S| = 9, (5 - 9 * 0.5 / 4) / 0.5
    assert est.tolist() == pytest.approx([(5 - 9 * 0.5 / 4) / 0.5])
    ranges = {
        "age": {"20", "21", "22"},
        "education": leaves(table, "education", int(q.starts[0, 1]), int(q.ends[0, 1])),
    }
    theirs = reconstruct(
        lines,
        {"mechanism": block},
        "flu",
        where=lambda qid: all(qid[a] in ok for a, ok in ranges.items()),
    )
    assert est[0] == pytest.approx(theirs.estimate, rel=1e-12)


def test_dp_debiases_the_sensitive_value_of_the_matching_rows(
    bench: ModuleType, table: EncodedTable
) -> None:
    epsilon, delta = 1.5, 0.01
    keep, p_other = rr_keep(len(VALUES), epsilon, delta)
    block = {
        "kind": "dp-sanitised",
        "sensitive": {
            "sanitised": True,
            "epsilon": epsilon,
            "delta": delta,
            "keep": keep,
            "p_other": p_other,
        },
    }
    lines = [
        {
            "size": 2,
            "qid": {"age": "20", "education": "Bachelors"},
            "sensitive": {"flu": 1, "cold": 1},
        },
        {"size": 1, "qid": {"age": "21", "education": "Some-college"}, "sensitive": {"flu": 1}},
        {"size": 3, "qid": {"age": "27", "education": "Bachelors"}, "sensitive": {"flu": 3}},
    ]
    q = query(table, {"age": ("20", "21")}, "flu")
    est = bench.estimate_counts(lines, {"mechanism": block}, table, q)
    assert est.tolist() == pytest.approx([(2 - 3 * p_other) / (keep - p_other)])
    # = rr_debiased_counts of the matching rows' sanitised codes (flu, cold, flu)
    codes = [VALUES.index(v) for v in ("flu", "cold", "flu")]
    reference = rr_debiased_counts(codes, len(VALUES), epsilon, delta).estimate[VALUES.index("flu")]
    assert est[0] == pytest.approx(reference, rel=1e-12)
    plain = {"kind": "dp-sanitised", "sensitive": {"sanitised": False}}
    assert bench.estimate_counts(lines, {"mechanism": plain}, table, q).tolist() == [2.0]


def test_no_line_estimates_zero_and_the_error_is_relative(
    bench: ModuleType, table: EncodedTable
) -> None:
    q = query(table, {"age": ("20", "21")}, "flu")
    assert bench.estimate_counts([], {}, table, q).tolist() == [0.0]
    errors = bench.relative_error(np.array([0.0, 3.0, 2.0]), np.array([4.0, 2.0, 0.0]))
    assert errors.tolist() == [1.0, 0.5, 2.0]  # act 0 never occurs in a workload: / max(act, 1)


# -- against the package: a real global-guarantee release -------------------------------------


def test_the_manifests_query_error_is_recomputed_from_the_published_lines(
    bench: ModuleType, tmp_path: Path
) -> None:
    rng = np.random.default_rng(3)
    schools = [line.split(";")[0] for line in EDUCATION_HIERARCHY.splitlines()]
    rows = [
        (str(a), schools[e], f"v{s}")
        for a, e, s in zip(
            rng.integers(20, 28, 160),
            rng.integers(0, 7, 160),
            rng.integers(0, 10, 160),
            strict=True,
        )
    ]
    table = encode_rows(tmp_path, rows)
    settings = load_settings(
        None,
        schema=schema(tmp_path),
        privacy={"l": 2, "strategy": "constant-ratio", "k_prime": 3},
        output={"queries": 400, "query_seed": 7},
        history={"key": "a fixed key of the unit test"},
    )
    out = tmp_path / "out"
    publisher = Publisher.open(settings, out, tmp_path / "history")
    try:
        manifest = publisher.publish(table, label="t1")
    finally:
        publisher.close()
    assert manifest["published"] > 100
    lines = [json.loads(x) for x in (out / "release-0001.jsonl").read_text().splitlines()]
    ordered, group = bench.assignment_order(out, 1, table)
    same = draw_count_queries(
        ordered, queries=400, rng=np.random.default_rng([7, 1]), rows=np.flatnonzero(group >= 0)
    )
    ours = bench.relative_error(bench.estimate_counts(lines, manifest, ordered, same), same.actual)
    assert ours.shape == (manifest["utility"]["queries"],)
    assert float(ours.mean()) == pytest.approx(manifest["utility"]["query_error"], rel=1e-9)
