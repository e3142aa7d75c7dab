"""Mode ``reconstruction-private-rr`` (paper 002, [WHF12]): mechanisms/reconstruction_rr/.

[WHF12] Wang, Han, Fu. Randomization Resilient To Sensitive Reconstruction. arXiv:1202.3179.
Digest: /work/shared/research/seed-reconstruction-privacy.md (§3, §5).

State is threaded through a dict-backed ``load_state`` as the publisher would commit it. Every
stochastic check compares against a tolerance derived from the variance (about 5 standard
errors), so it fails when the code is wrong and essentially never by chance.
"""

from __future__ import annotations

import copy
import doctest
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError
from support.tables import encode_columns, keyed_pseudonyms

from stream_release.config import SchemaSettings
from stream_release.core.privacy.reconstruction_estimate import count_variance
from stream_release.core.table import Attribute, EncodedTable
from stream_release.devtools.datasets import (
    ADULT_QID,
    ADULT_SENSITIVE,
    Table,
    make_series,
    read_csv_table,
)
from stream_release.errors import ConfigError, InvalidParameter, SchemaError
from stream_release.io.encoding import encode
from stream_release.io.snapshot import snapshot_from_columns
from stream_release.mechanisms.base import MechanismRelease, ReleaseRandomness
from stream_release.mechanisms.reconstruction_rr import estimate as reconstruction_rr_estimate
from stream_release.mechanisms.reconstruction_rr.audit import verify_release, verify_series
from stream_release.mechanisms.reconstruction_rr.estimate import reconstruct
from stream_release.mechanisms.reconstruction_rr.mechanism import (
    KIND,
    ReconstructionRR,
    ReconstructionRRSettings,
)

KEY = b"k" * 32
DOMAIN = ("a", "b", "c", "d", "e")
BASE = {"p": 0.5, "epsilon": 0.5, "delta": 0.3}


# --- builders --------------------------------------------------------------------------------


class DictState:
    """The publisher's committed state, in memory."""

    def __init__(self) -> None:
        self.entries: dict[bytes, bytes] = {}

    def load(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [self.entries.get(k) for k in keys]

    def commit(self, state: dict[bytes, bytes]) -> None:
        self.entries.update(state)


def make_table(rows: Sequence[tuple[str, tuple[int, ...], str]]) -> EncodedTable:
    """``rows`` of (id, QID codes, sensitive value); QIDs ``q0, q1, ...`` numeric 0, 1, ..."""
    ids = np.array([r[0] for r in rows], dtype=object)
    qid = np.array([r[1] for r in rows], dtype=np.int32).reshape(len(rows), -1)
    values, codes = np.unique(np.array([r[2] for r in rows]), return_inverse=True)
    attributes = tuple(
        Attribute(f"q{j}", "numeric", np.arange(int(qid[:, j].max()) + 1, dtype=np.float64))
        for j in range(qid.shape[1])
    )
    return EncodedTable(ids, qid, codes.astype(np.int32), tuple(str(v) for v in values), attributes)


def publish(
    mechanism: ReconstructionRR,
    table: EncodedTable,
    state: DictState,
    sequence: int,
    key: bytes = KEY,
) -> tuple[MechanismRelease, dict[str, Any], list[dict[str, Any]]]:
    """One release as the publisher cuts it: rows sorted by pseudonym, state committed."""
    ps = keyed_pseudonyms(table.ids.tolist(), key)
    order = np.argsort(ps, kind="stable")
    release = mechanism.release(
        table.take(order),
        ps[order],
        sequence=sequence,
        randomness=ReleaseRandomness.derive(key, KIND, sequence),
        load_state=state.load,
    )
    state.commit(release.state)
    manifest = {"release": f"r{sequence}", "sequence": sequence, "mechanism": release.guarantee}
    lines = [
        {
            "release": f"r{sequence}",
            "sequence": sequence,
            "group": g,
            "size": int(release.sizes[g]),
            "qid": release.qids[g],
            "sensitive": release.sensitive[g],
            **release.extra[g],
        }
        for g in range(release.sizes.shape[0])
    ]
    return release, manifest, lines


def mechanism(**overrides: Any) -> ReconstructionRR:
    return ReconstructionRR(ReconstructionRRSettings(**{**BASE, "domain": DOMAIN, **overrides}))


def by_qid(lines: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(line["qid"].values()): line for line in lines}


def population(sizes: dict[tuple[int, int], dict[str, int]]) -> list[tuple[str, tuple, str]]:
    """Rows ``(id, qid, value)`` with ``sizes[qid][value]`` rows each, ids ``p-0, p-1, ...``."""
    rows: list[tuple[tuple[int, int], str]] = []
    for qid, counts in sizes.items():
        for value, count in counts.items():
            rows += [(qid, value)] * count
    return [(f"p-{i}", q, v) for i, (q, v) in enumerate(rows)]


# --- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"p": 0.0}, r"p = 0\.0: must lie strictly between 0 and 1"),
        ({"p": 1.5}, r"p = 1\.5"),
        ({"delta": 1.0}, r"delta = 1\.0: must lie strictly between 0 and 1"),
        ({"epsilon": -1.0}, r"epsilon = -1\.0: must be a finite number > 0"),
        ({"epsilon": 1.5}, r"epsilon = 1\.5: Corollary 4\.10 needs epsilon <= .* = 1\.2 "),
        ({"domain": ("a",)}, r"domain = \['a'\]: list the full sensitive domain, at least 2"),
        ({"domain": ("a", "b", "a")}, r"values \['a'\] are listed twice"),
        ({"domain": ("a", "")}, r"a value is empty"),
        ({"p": 0.9, "epsilon": 1.0, "delta": 0.9}, r"at f = 1 is 0\.2\d+ < 1.*lower p"),
        ({"bound": "chernoff"}, r"theorem_5_13"),
        ({"cap_policy": "group_max"}, r"Extra inputs are not permitted"),
    ],
)
def test_settings_name_the_field_its_value_and_the_fix(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        ReconstructionRRSettings(**{**BASE, "domain": DOMAIN, **overrides})


def test_settings_are_frozen_and_the_mechanism_wants_them() -> None:
    settings = ReconstructionRRSettings(**BASE, domain=DOMAIN)
    with pytest.raises(ValidationError):
        settings.p = 0.7  # type: ignore[misc]
    with pytest.raises(InvalidParameter, match="must be a ReconstructionRRSettings"):
        ReconstructionRR({"p": 0.5})  # type: ignore[arg-type]


def test_domain_from_the_sensitive_hierarchy(shared_data: Path, tmp_path: Path) -> None:
    path = shared_data / "adult_hierarchy_occupation.csv"
    settings = ReconstructionRRSettings(**BASE, domain_hierarchy=path)
    assert settings.m == 14
    assert settings.domain[0] == "Tech-support" and "Sales" in settings.domain
    same = ReconstructionRRSettings(**BASE, domain=settings.domain, domain_hierarchy=path)
    assert same.domain == settings.domain
    relative = {**BASE, "domain_hierarchy": "adult_hierarchy_occupation.csv"}
    from_config = ReconstructionRRSettings.model_validate(
        relative, context={"base_dir": shared_data}
    )
    assert from_config.domain == settings.domain
    assert from_config.domain_hierarchy == path
    with pytest.raises(ValidationError, match="differs from the leaves of domain_hierarchy"):
        ReconstructionRRSettings(**BASE, domain=("x", "y"), domain_hierarchy=path)
    with pytest.raises(ValidationError, match=r"domain_hierarchy = .*does not exist"):
        ReconstructionRRSettings(**BASE, domain_hierarchy=tmp_path / "missing.csv")


def test_caps_are_the_digests_values() -> None:
    """Digest §4: m = 14, f = 1, p = ε = 0.5, δ = 0.3 -> 20.6395 (Eq. 10), 17.1025 (Eq. 9)."""
    domain = tuple(f"v{i}" for i in range(14))
    settings = ReconstructionRRSettings(**BASE, domain=domain)
    assert settings.caps["theorem_5_13"] == pytest.approx(20.6395, abs=1e-4)
    assert settings.caps["theorem_5_11"] == pytest.approx(17.1025, abs=1e-4)
    assert settings.max_trials == 20
    assert ReconstructionRRSettings(**BASE, domain=domain, bound="theorem_5_11").max_trials == 17


def test_docstring_examples_pass() -> None:
    result = doctest.testmod(reconstruction_rr_estimate)
    assert result.attempted >= 1 and result.failed == 0


# --- one release ---------------------------------------------------------------------------


def test_caps_respected_and_every_row_published_once() -> None:
    sizes = {(0, 0): {"a": 45, "b": 15}, (0, 1): {"c": 20}, (1, 0): {"a": 1}, (2, 1): {"d": 3}}
    table = make_table(population(sizes))
    release, manifest, lines = publish(mechanism(), table, DictState(), 1)
    cap = manifest["mechanism"]["max_trials"]
    assert cap == math.floor(ReconstructionRRSettings(**BASE, domain=DOMAIN).caps["theorem_5_13"])
    assert cap == 23
    got = by_qid(lines)
    assert set(got) == {(0, 0), (0, 1), (1, 0), (2, 1)}
    for qid, counts in sizes.items():
        line = got[qid]
        size = sum(counts.values())
        assert line["size"] == size == sum(line["sensitive"].values())
        assert line["trials"] == line["trials_total"] == min(size, cap)
        assert line["weight"] == pytest.approx(size / min(size, cap))
        assert set(line["sensitive"]) <= set(DOMAIN)
    assert np.all(release.group >= 0)
    assert np.array_equal(np.bincount(release.group), release.sizes)
    block = manifest["mechanism"]
    assert block["kind"] == KIND and block["m"] == 5 and block["domain"] == list(DOMAIN)
    assert block["groups"] == 4 and block["trials"] == 23 + 20 + 1 + 3
    assert block["largest_trials"] == 23 and block["rows_suppressed"] == 0
    assert block["rows_published"] == table.n_rows and "never decreases" in block["serial_rule"]
    assert release.utility["capped_groups"] == 1
    assert verify_release(manifest, lines) == []


def test_qids_are_the_exact_decoded_values(tmp_path: Path) -> None:
    columns = {
        "age": ["30", "34", "30", "25.5"],
        "education": ["Bachelors", "Masters", "Bachelors", "9th"],
        "city": ["Paris", "Lyon", "Paris", "Nice"],
    }
    table = encode_columns(tmp_path, columns, ["flu", "cold", "hiv", "flu"])
    mech = mechanism(domain=("cold", "flu", "hiv", "other"))
    release, manifest, lines = publish(mech, table, DictState(), 1)
    qids = sorted((q["age"], q["education"], q["city"]) for q in release.qids)
    assert qids == [(25.5, "9th", "Nice"), (30, "Bachelors", "Paris"), (34, "Masters", "Lyon")]
    assert sorted(release.sizes.tolist()) == [1, 1, 2]
    assert verify_release(manifest, lines) == []


def test_same_randomness_gives_an_identical_release() -> None:
    table = make_table(population({(0, 0): {"a": 40, "b": 20}, (1, 1): {"c": 7, "a": 2}}))
    first, _, lines_1 = publish(mechanism(), table, DictState(), 3)
    again, _, lines_2 = publish(mechanism(), table, DictState(), 3)
    assert np.array_equal(first.group, again.group)
    assert lines_1 == lines_2
    assert first.state == again.state and first.guarantee == again.guarantee
    _, _, lines_3 = publish(mechanism(), table, DictState(), 3, key=b"q" * 32)
    assert [line["sensitive"] for line in lines_3] != [line["sensitive"] for line in lines_1]


def test_a_value_outside_the_domain_is_refused() -> None:
    table = make_table([("x", (0,), "a"), ("y", (0,), "zzz")])
    with pytest.raises(SchemaError, match="'zzz' is not in the mechanism's domain"):
        publish(mechanism(), table, DictState(), 1)


def test_empty_snapshot() -> None:
    table = make_table([("x", (0,), "a")]).take(np.zeros(0, dtype=np.int64))
    release, manifest, lines = publish(mechanism(), table, DictState(), 1)
    assert lines == [] and release.group.shape == (0,)
    assert manifest["mechanism"]["groups"] == 0
    assert verify_release(manifest, lines) == []


# --- serial rules ----------------------------------------------------------------------------


def test_a_persons_randomized_value_is_reused_while_unchanged() -> None:
    """Singletons (one person per micro group) publish exactly their randomized value."""
    n = 400
    rows = [(f"p{i}", (i, 0), DOMAIN[i % 5]) for i in range(n)]
    mech, state = mechanism(), DictState()
    _, _, lines_1 = publish(mech, make_table(rows), state, 1)
    release_2, _, lines_2 = publish(mech, make_table(rows), state, 2)
    first, second = by_qid(lines_1), by_qid(lines_2)
    assert all(second[q]["sensitive"] == first[q]["sensitive"] for q in first)
    assert all(line["trials_total"] == 1 for line in lines_2)
    assert release_2.state == {}  # nothing fresh: no ledger change, no new trial marker
    # Eq. (1): a value survives with probability p + (1-p)/m = 0.6
    kept = np.mean([list(first[(i, 0)]["sensitive"]) == [rows[i][2]] for i in range(n)])
    assert abs(kept - 0.6) < 5 * math.sqrt(0.6 * 0.4 / n)

    # Release 3: 200 people change value: a new record version, a new trial of their group.
    changed = [(i, q, DOMAIN[(DOMAIN.index(v) + 1) % 5]) for i, q, v in rows[:200]]
    _, manifest_3, lines_3 = publish(mech, make_table(changed + rows[200:]), state, 3)
    third = by_qid(lines_3)
    assert all(third[(i, 0)]["trials_total"] == 2 for i in range(200))
    assert all(third[(i, 0)]["sensitive"] == first[(i, 0)]["sensitive"] for i in range(200, n))
    redrawn = np.mean(
        [third[(i, 0)]["sensitive"] != first[(i, 0)]["sensitive"] for i in range(200)]
    )
    assert redrawn > 0.3  # a fresh draw, not the old value
    assert manifest_3["mechanism"]["fresh_trials"] == 200

    # A fresh key (re-randomization) would change many singletons: the test can tell.
    _, _, other = publish(mech, make_table(rows), DictState(), 1, key=b"z" * 32)
    assert np.mean([by_qid(other)[q]["sensitive"] != first[q]["sensitive"] for q in first]) > 0.3


def test_trial_counts_never_decrease_over_three_releases_with_churn() -> None:
    rng = np.random.default_rng(7)
    groups = [(0, 0), (0, 1), (1, 0), (1, 1), (2, 2)]
    people = {f"id{i}": (groups[i % 5], DOMAIN[rng.integers(0, 3)]) for i in range(600)}
    mech, state = mechanism(), DictState()
    present = set(rng.choice(sorted(people), size=200, replace=False).tolist())
    history: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    ledger: dict[tuple[Any, ...], int] = {}
    for sequence in (1, 2, 3):
        rows = [(i, people[i][0], people[i][1]) for i in sorted(present)]
        _, manifest, lines = publish(mech, make_table(rows), state, sequence)
        history.append((manifest, lines))
        assert verify_release(manifest, lines) == []
        cap = manifest["mechanism"]["max_trials"]
        for qid, line in by_qid(lines).items():
            assert line["trials"] <= line["trials_total"] <= cap
            assert line["trials_total"] >= ledger.get(qid, 0)
            ledger[qid] = line["trials_total"]
        ledger_entries = {k: int(v) for k, v in state.entries.items() if k[:1] == b"g"}
        assert sorted(ledger_entries.values()) == sorted(ledger.values())
        # churn: 40 % leave, 150 join, 10 % of the stayers change value
        leaving = rng.choice(sorted(present), size=int(0.4 * len(present)), replace=False)
        present -= set(leaving.tolist())
        joining = rng.choice(sorted(set(people) - present), size=150, replace=False)
        present |= set(joining.tolist())
        for i in rng.choice(sorted(present), size=len(present) // 10, replace=False).tolist():
            people[i] = (people[i][0], DOMAIN[(DOMAIN.index(people[i][1]) + 1) % 3])
    assert verify_series(history) == []
    assert max(ledger.values()) == history[0][0]["mechanism"]["max_trials"]
    # a trial never counted twice: the ledger sums the fresh trials of every release
    assert sum(ledger.values()) == sum(m["mechanism"]["fresh_trials"] for m, _ in history)


def test_a_group_whose_budget_is_spent_and_trials_are_gone_is_suppressed() -> None:
    mech, state = mechanism(), DictState()
    first = [(f"old{i}", (0, 0), "a") for i in range(30)] + [("x", (1, 1), "b")]
    _, manifest_1, lines_1 = publish(mech, make_table(first), state, 1)
    assert by_qid(lines_1)[(0, 0)]["trials_total"] == 23
    second = [(f"new{i}", (0, 0), "a") for i in range(30)] + [("x", (1, 1), "b")]
    release, manifest_2, lines_2 = publish(mech, make_table(second), state, 2)
    assert list(by_qid(lines_2)) == [(1, 1)]
    assert np.count_nonzero(release.group == -1) == 30
    assert manifest_2["mechanism"]["rows_suppressed"] == 30
    assert release.state == {}
    # one old member returns: its trial is reused, the group is published again
    third = [("old0", (0, 0), "a"), *second]
    _, _, lines_3 = publish(mech, make_table(third), state, 3)
    line = by_qid(lines_3)[(0, 0)]
    assert (line["size"], line["trials"], line["trials_total"]) == (31, 1, 23)
    assert verify_series([(manifest_1, lines_1), (manifest_2, lines_2)]) == []


def test_a_series_keeps_its_parameters() -> None:
    state = DictState()
    table = make_table([("x", (0,), "a"), ("y", (1,), "b")])
    publish(mechanism(), table, state, 1)
    with pytest.raises(ConfigError, match="differ from those this series started with"):
        publish(mechanism(p=0.4), table, state, 2)


# --- the estimator ---------------------------------------------------------------------------


def test_the_digests_worked_example_through_reconstruct() -> None:
    """Digest §1.4: |S| = 100, p = 0.5, m = 14, O* = 40 -> F' = 0.728571, est = 72.857."""
    domain = [f"v{i}" for i in range(14)]
    manifest = {"mechanism": {"kind": KIND, "p": 0.5, "m": 14, "domain": domain}}
    line = {"qid": {"a": 1}, "size": 100, "trials": 100, "sensitive": {"v0": 40, "v3": 60}}
    other = {"qid": {"a": 2}, "size": 10, "trials": 10, "sensitive": {"v0": 10}}
    est = reconstruct([line, other], manifest, "v0", where={"a": 1})
    assert est.estimate == pytest.approx(72.857, abs=5e-4)
    assert est.frequency == pytest.approx(0.728571, abs=1e-6)
    assert (est.observed, est.size) == (40, 100)
    assert est.variance == pytest.approx(count_variance(est.frequency, 100, 0.5, 14))
    assert reconstruct([line, other], manifest, "v0", where={"a": [1, 2]}).size == 110
    assert reconstruct([line, other], manifest, "v0", where=lambda q: q["a"] > 1).size == 10
    with pytest.raises(InvalidParameter, match="no published group matches"):
        reconstruct([line], manifest, "v0", where={"a": 3})
    with pytest.raises(InvalidParameter, match="attribute 'b' is not a QID"):
        reconstruct([line], manifest, "v0", where={"b": 3})
    with pytest.raises(InvalidParameter, match="'zz': not in the release's sensitive domain"):
        reconstruct([line], manifest, "zz")


def test_the_estimator_is_unbiased_with_the_stated_variance() -> None:
    """Over 1,500 keys: mean within 5 SE of the truth, empirical variance near the stated one."""
    sizes = {
        (0, 0): {"a": 45, "b": 15},
        (0, 1): {"a": 5, "c": 20},
        (1, 0): {"a": 6, "b": 2},
        (1, 1): {"a": 1, "d": 1},
    }
    table = make_table(population(sizes))
    mech = mechanism()
    runs = 1500
    estimates = np.empty((runs, 2))
    variances = np.empty((runs, 2))
    for r in range(runs):
        _, manifest, lines = publish(mech, table, DictState(), 1, key=r.to_bytes(32, "little"))
        for j, where in enumerate((None, {"q0": 0})):
            est = reconstruct(lines, manifest, "a", where=where)
            estimates[r, j], variances[r, j] = est.estimate, est.variance
    truth = np.array([57.0, 50.0])
    mean_variance = variances.mean(axis=0)
    assert np.all(np.abs(estimates.mean(axis=0) - truth) < 5 * np.sqrt(mean_variance / runs))
    ratio = estimates.var(axis=0, ddof=1) / mean_variance
    assert np.all((ratio > 0.75) & (ratio < 1.3)), ratio


# --- the audit -------------------------------------------------------------------------------


def test_verify_release_catches_tampered_lines_and_manifests() -> None:
    table = make_table(population({(0, 0): {"a": 40, "b": 20}, (1, 1): {"c": 7}}))
    _, manifest, lines = publish(mechanism(), table, DictState(), 1)
    assert verify_release(manifest, lines) == []
    assert verify_release(manifest["mechanism"], lines) == []

    big = next(i for i, line in enumerate(lines) if line["size"] == 60)
    tampered = copy.deepcopy(lines)
    tampered[big].update(trials=30, trials_total=30, weight=2.0)
    problems = verify_release(manifest, tampered)
    assert any("trials = 30 above the cap floor(s) = 23" in p for p in problems), problems
    assert any("trials_total = 30 above the cap" in p for p in problems)

    tampered = copy.deepcopy(lines)
    tampered[big]["sensitive"]["a"] += 1
    assert any("sum to 61, size is 60" in p for p in verify_release(manifest, tampered))

    tampered = copy.deepcopy(lines)
    tampered[big]["sensitive"]["zzz"] = 0
    assert any("not in the manifest's domain" in p for p in verify_release(manifest, tampered))

    forged = copy.deepcopy(manifest)
    forged["mechanism"]["p"] = 0.3  # the caps no longer follow from the parameters
    problems = verify_release(forged, lines)
    assert any("cap.theorem_5_13" in p and "recomputed" in p for p in problems), problems

    forged = copy.deepcopy(manifest)
    forged["mechanism"]["max_trials"] = 60
    assert any("max_trials = 60" in p for p in verify_release(forged, lines))

    forged = copy.deepcopy(manifest)
    forged["mechanism"]["delta"] = 1.0
    assert verify_release(forged, lines)[0].startswith("manifest parameters are invalid")

    assert verify_release({"mechanism": {"kind": "dp-sanitised"}}, lines) != []


def test_verify_series_catches_a_ledger_that_decreases() -> None:
    table = make_table(population({(0, 0): {"a": 10}}))
    state = DictState()
    first = publish(mechanism(), table, state, 1)[1:]
    second = copy.deepcopy(publish(mechanism(), table, state, 2)[1:])
    assert verify_series([first, second]) == []
    manifest, lines = second
    lines[0].update(trials=5, trials_total=5, weight=2.0)
    manifest["mechanism"].update(trials=5, largest_trials=5, largest_trials_total=5)
    assert verify_release(manifest, lines) == []
    problems = verify_series([first, (manifest, lines)])
    assert any("down from 10 in release 1" in p for p in problems), problems


# --- Adult -----------------------------------------------------------------------------------


def encode_adult(table: Table) -> EncodedTable:
    schema = SchemaSettings(id="id", sensitive=ADULT_SENSITIVE, qid=ADULT_QID)
    raw = snapshot_from_columns(
        table.columns["id"],
        {q: table.columns[q] for q in ADULT_QID},
        table.columns[ADULT_SENSITIVE],
    )
    return encode(raw, schema, {})


@pytest.fixture(scope="module")
def adult(shared_data: Path) -> tuple[Table, ReconstructionRR]:
    path = shared_data / "adult_hierarchy_occupation.csv"
    settings = ReconstructionRRSettings(**BASE, domain_hierarchy=path)
    return read_csv_table(shared_data / "adult.csv"), ReconstructionRR(settings)


def test_adult_release_respects_caps_and_estimates_every_occupation(
    adult: tuple[Table, ReconstructionRR],
) -> None:
    raw, mech = adult
    table = encode_adult(raw)
    start = time.perf_counter()
    release, manifest, lines = publish(mech, table, DictState(), 1)
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0
    block = manifest["mechanism"]
    assert block["m"] == 14 and block["max_trials"] == 20
    assert block["rows_published"] == table.n_rows == 30162
    assert block["groups"] == np.unique(table.qid, axis=0).shape[0]
    assert max(line["trials"] for line in lines) == 20
    assert all(line["trials"] == min(line["size"], 20) for line in lines)
    assert verify_release(manifest, lines) == []
    truth = dict(zip(*np.unique(raw.columns[ADULT_SENSITIVE], return_counts=True), strict=True))
    for value in block["domain"]:
        est = reconstruct(lines, manifest, value)
        assert abs(est.estimate - truth.get(value, 0)) < 5 * est.standard_error, value
    men = reconstruct(lines, manifest, "Sales", where={"sex": "Male"})
    true_men = np.sum((raw.columns["sex"] == "Male") & (raw.columns[ADULT_SENSITIVE] == "Sales"))
    assert abs(men.estimate - true_men) < 5 * men.standard_error
    again, _, lines_again = publish(mech, table, DictState(), 1)
    assert lines_again == lines and np.array_equal(again.group, release.group)


def test_adult_series_ledger_never_decreases(adult: tuple[Table, ReconstructionRR]) -> None:
    raw, mech = adult
    series = make_series(raw.take(np.arange(12000)), ADULT_SENSITIVE, 3, keep=0.5, seed=3)
    state = DictState()
    history = [publish(mech, encode_adult(t), state, k)[1:] for k, t in enumerate(series, 1)]
    assert verify_series(history) == []
    seen: dict[tuple[Any, ...], int] = {}
    for manifest, lines in history:
        assert manifest["mechanism"]["largest_trials_total"] <= 20
        for qid, line in by_qid(lines).items():
            assert seen.get(qid, 0) <= line["trials_total"] <= 20
            seen[qid] = line["trials_total"]
    assert sum(seen.values()) == sum(m["mechanism"]["fresh_trials"] for m, _ in history)
