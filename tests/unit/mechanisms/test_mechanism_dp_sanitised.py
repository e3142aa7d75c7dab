"""Mechanism ``dp-sanitised`` (Holohan, Leith and Mason 2014, [HLM14]) on hand-built tables and
on Adult.

Stochastic checks are seeded (the secrets come from ``numpy.random.default_rng(seed)``): the
empirical e^epsilon check of ``dp_selftest.empirical_dp_check`` fails a correct mechanism with
probability ``alpha`` at most, and the negative control (half the Laplace scale, a keep
probability past the bound) shows the same check, at the same sample size, can fail.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError
from support.tables import SMALL_ROWS, encode_columns, keyed_pseudonyms

from stream_release.config import OutputSettings, SchemaSettings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.config.mechanisms.dp_sanitised import EARLIER_CAVEATS
from stream_release.core.privacy.dp_selftest import empirical_dp_check
from stream_release.core.privacy.metric_dp_laplace import laplace_scale_tight
from stream_release.core.privacy.metric_dp_lower_bounds import (
    error_lower_bound_compact,
    error_lower_bound_finite,
)
from stream_release.core.privacy.metric_dp_rr import rr_from_uniform, rr_keep
from stream_release.core.table import EncodedTable
from stream_release.devtools.datasets import ADULT_QID, ADULT_SENSITIVE, read_csv_table
from stream_release.errors import ConfigError, HistoryStoreError, SchemaError
from stream_release.io.encoding import encode
from stream_release.io.snapshot import snapshot_from_columns
from stream_release.mechanisms.base import MechanismRelease, ReleaseRandomness
from stream_release.mechanisms.dp_sanitised.audit import verify_release
from stream_release.mechanisms.dp_sanitised.mechanism import (
    CAVEAT,
    DPSanitised,
    DPSanitisedSettings,
    make_dp_sanitised,
)

KEY = b"k" * 32
CITIES = ("Paris", "Lyon", "Nice", "Marseille")
DISEASES = ("flu", "cold", "hiv", "cancer")
BASE: dict[str, Any] = {
    "epsilon": 4.0,  # four attributes, equal split: epsilon_j = 1
    "epsilon_budget": 8.0,
    "bounds": {"age": (17, 90)},
    "domains": {"city": CITIES},
    "sensitive_domain": DISEASES,
}


def settings(**overrides: Any) -> DPSanitisedSettings:
    return DPSanitisedSettings(**{**BASE, **overrides})


def table_of(tmp_path: Path, rows: list[tuple[str, ...]]) -> tuple[EncodedTable, np.ndarray]:
    """Encode ``(id, age, education, city, disease)`` rows, sorted by pseudonym as the
    publisher hands them over, and their pseudonyms (S16)."""
    columns = {
        "age": [r[1] for r in rows],
        "education": [r[2] for r in rows],
        "city": [r[3] for r in rows],
    }
    table = encode_columns(tmp_path, columns, [r[4] for r in rows], ids=[r[0] for r in rows])
    ps = keyed_pseudonyms(table.ids, KEY)
    order = np.argsort(ps)
    return table.take(order), ps[order]


class Store:
    """Committed mechanism state (the publisher's role)."""

    def __init__(self) -> None:
        self.entries: dict[bytes, bytes] = {}

    def load(self, keys: Any) -> list[bytes | None]:
        return [self.entries.get(k) for k in keys]

    def commit(self, release: MechanismRelease) -> None:
        self.entries.update(release.state)


def run(
    mech: DPSanitised,
    table: EncodedTable,
    ps: np.ndarray,
    store: Store | None = None,
    sequence: int = 1,
    randomness: ReleaseRandomness | None = None,
) -> MechanismRelease:
    store = store if store is not None else Store()
    rel = mech.release(
        table,
        ps,
        sequence=sequence,
        randomness=randomness or ReleaseRandomness.derive(KEY, "dp-sanitised", sequence),
        load_state=store.load,
    )
    store.commit(rel)
    return rel


def lines_of(rel: MechanismRelease, sequence: int = 1) -> list[dict[str, Any]]:
    return [
        {"release": f"r{sequence}", "sequence": sequence, "group": g, "size": int(size),
         "qid": rel.qids[g], "sensitive": rel.sensitive[g]}
        for g, size in enumerate(rel.sizes.tolist())
    ]  # fmt: skip


def person_view(rel: MechanismRelease, table: EncodedTable, person: str) -> tuple[Any, ...]:
    """The published group (qid, sensitive) holding ``person``; None if not published."""
    g = int(rel.group[list(table.ids).index(person)])
    return None if g < 0 else (rel.qids[g], rel.sensitive[g])


# --- settings -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"epsilon": -1.0}, "epsilon = -1.0"),
        ({"epsilon": math.nan}, "epsilon = nan"),
        ({"delta": 1.0}, "delta = 1.0"),
        ({"epsilon_budget": 2.0}, "epsilon_budget = 2.0"),
        ({"delta": 1e-6}, "delta_budget = 0.0"),
        ({"bounds": {"age": (90, 17)}}, "bounds.age = [90.0, 17.0]"),
        ({"bounds": {"age": (17, math.inf)}}, "bounds.age"),
        ({"resolution": {"city": 1.0}}, "resolution.city"),
        ({"resolution": {"age": 0.0}}, "resolution.age = 0.0"),
        ({"domains": {"city": ("Paris", "Paris")}}, "'Paris' listed twice"),
        ({"domains": {"city": ()}}, "domains.city = []"),
        ({"bounds": {"city": (0, 1)}}, "both name ['city']"),
        ({"sensitive_domain": None}, "sensitive_domain = None"),
        ({"weights": {"age": -1.0}}, "weights.age = -1.0"),
        ({"weights": {"age": 0.0, "education": 1.0, "city": 1.0}}, "weights.age = 0"),
        ({"scale": "loose"}, "scale"),
        ({"bound": {"age": (17, 90)}}, "Extra inputs are not permitted"),
    ],
)
def test_settings_name_the_field_value_and_fix(overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError, match=_escape(fragment)):
        settings(**overrides)


def _escape(text: str) -> str:
    return re.escape(text)


def test_settings_accept_the_toml_form() -> None:
    s = DPSanitisedSettings.model_validate(
        {"epsilon": 2, "epsilon_budget": 6, "bounds": {"age": [17, 90]},
         "sanitise_sensitive": False}
    )  # fmt: skip
    assert s.bounds == {"age": (17.0, 90.0)} and s.scale == "tight" and s.delta_budget == 0.0
    with pytest.raises(ValidationError):
        s.model_copy().__setattr__("epsilon", 3.0)


def test_numeric_qid_without_bounds_is_an_error_at_construction(tmp_path: Path) -> None:
    schema = SchemaSettings(
        id="id", sensitive="s", qid=("age", "education", "city"), numeric=("age",),
        hierarchies={"education": tmp_path / "education.csv"},
    )  # fmt: skip
    DPSanitised(settings(), schema=schema)  # complete: no error
    no_bounds = settings(bounds={})
    with pytest.raises(ConfigError, match=r"numeric QID 'age'.*bounds = \{age = \[lo, hi\]\}"):
        DPSanitised(no_bounds, schema=schema)
    with pytest.raises(ConfigError, match=r"QID 'city' has no data-independent domain"):
        DPSanitised(settings(domains={}), schema=schema)
    with pytest.raises(ConfigError, match=r"'education' has a hierarchy"):
        DPSanitised(settings(domains={"city": CITIES, "education": ("a",)}), schema=schema)
    with pytest.raises(ConfigError, match=r"mechanism.dp_sanitised.bounds names \['agee'\]"):
        DPSanitised(settings(bounds={"age": (17, 90), "agee": (0, 1)}), schema=schema)
    with pytest.raises(ConfigError, match=r"no weight for \['city'\]"):
        DPSanitised(settings(weights={"age": 1.0, "education": 1.0}), schema=schema)


def test_check_settings_and_factory_read_the_configuration(tmp_path: Path) -> None:
    schema = SchemaSettings(
        id="id", sensitive="s", qid=("age", "education", "city"), numeric=("age",),
        hierarchies={"education": tmp_path / "education.csv"},
    )  # fmt: skip
    config = SimpleNamespace(schema=schema, output=OutputSettings())
    settings().check_settings(config)
    assert isinstance(make_dp_sanitised(settings(), config), DPSanitised)
    with pytest.raises(ValueError, match=r"^mechanism.dp_sanitised.bounds has no entry for "):
        settings(bounds={}).check_settings(config)
    with pytest.raises(ValueError, match=r"output.format = 'anatomy'"):
        settings().check_settings(
            SimpleNamespace(schema=schema, output=OutputSettings(format="anatomy"))
        )
    with pytest.raises(ConfigError, match=r"numeric QID 'age'"):
        make_dp_sanitised(settings(bounds={}), config)


def test_table_checked_before_anything_is_released(tmp_path: Path) -> None:
    table, ps = table_of(tmp_path, SMALL_ROWS)
    with pytest.raises(ConfigError, match=r"numeric QID 'age'"):
        run(DPSanitised(settings(bounds={})), table, ps)
    with pytest.raises(ConfigError, match=r"QID 'city' has no data-independent domain"):
        run(DPSanitised(settings(domains={})), table, ps)
    with pytest.raises(
        SchemaError, match=r"value 'Lyon' is not in mechanism.dp_sanitised.domains.city"
    ):
        run(DPSanitised(settings(domains={"city": ("Paris", "Nice")})), table, ps)
    with pytest.raises(SchemaError, match=r"sensitive attribute: value 'hiv'"):
        run(DPSanitised(settings(sensitive_domain=("flu", "cold"))), table, ps)


# --- the release --------------------------------------------------------------------------------


def test_values_inside_bounds_and_nothing_dropped(tmp_path: Path) -> None:
    rows = [*SMALL_ROWS, ("h", "120", "9th", "Nice", "cancer"), ("i", "3", "9th", "Lyon", "flu")]
    table, ps = table_of(tmp_path, rows)
    for seq in range(1, 21):  # 20 independent secrets
        secret = ReleaseRandomness.derive(KEY + bytes([seq]), "dp-sanitised", 1)
        rel = run(DPSanitised(settings()), table, ps, sequence=seq, randomness=secret)
        assert (rel.group >= 0).all() and int(rel.sizes.sum()) == table.n_rows
        for q, s in zip(rel.qids, rel.sensitive, strict=True):
            assert 17.0 <= q["age"] <= 90.0
            assert q["city"] in CITIES and q["education"] in table.attributes[1].domain
            assert set(s) <= set(DISEASES)
        assert rel.guarantee["refused_budget"] == 0 and rel.guarantee["published"] == 9
        assert verify_release({"mechanism": rel.guarantee}, lines_of(rel)) == []


def test_group_lines_aggregate_distinct_sanitised_rows(tmp_path: Path) -> None:
    # 40 copies of one record, sanitised on a coarse grid: fewer lines than rows
    rows = [(f"p{i}", "30", "Bachelors", "Paris", "flu") for i in range(40)]
    table, ps = table_of(tmp_path, rows)
    rel = run(DPSanitised(settings(resolution={"age": 25.0})), table, ps)
    assert len(rel.qids) < 40 and int(rel.sizes.sum()) == 40
    keys = [tuple(q.values()) for q in rel.qids]
    assert len(set(keys)) == len(keys)
    # [17, 90] in ceil(73/25) = 3 steps of 73/3: the published ages are those grid points
    age = rel.guarantee["qid"]["age"]
    assert (age["resolution"], age["steps"]) == (25.0, 3)
    assert age["grid_step"] == pytest.approx(73.0 / 3.0)
    assert {q["age"] for q in rel.qids} <= {17.0, 17.0 + 73.0 / 3.0, 17.0 + 146.0 / 3.0, 90.0}
    assert [sum(s.values()) for s in rel.sensitive] == rel.sizes.tolist()
    assert verify_release({"mechanism": rel.guarantee}, lines_of(rel)) == []


def test_same_randomness_gives_an_identical_release(tmp_path: Path) -> None:
    table, ps = table_of(tmp_path, SMALL_ROWS)
    a = run(DPSanitised(settings()), table, ps)
    b = run(DPSanitised(settings()), table, ps)
    assert a.group.tolist() == b.group.tolist() and a.sizes.tolist() == b.sizes.tolist()
    assert (a.qids, a.sensitive, a.guarantee, a.state) == (
        b.qids,
        b.sensitive,
        b.guarantee,
        b.state,
    )
    other = run(DPSanitised(settings()), table, ps,
                randomness=ReleaseRandomness.derive(b"x" * 32, "dp-sanitised", 1))  # fmt: skip
    assert other.qids != a.qids


def test_unchanged_record_keeps_its_values_and_costs_nothing(tmp_path: Path) -> None:
    mech, store = DPSanitised(settings()), Store()
    t1, ps1 = table_of(tmp_path, SMALL_ROWS)
    r1 = run(mech, t1, ps1, store, sequence=1)
    assert len(r1.state) == 7 and all(len(v) == 1 + 24 for v in r1.state.values())
    # release 2: the same records, and 'b' moved to Nice
    rows2 = [r if r[0] != "b" else ("b", "34", "Masters", "Nice", "cold") for r in SMALL_ROWS]
    t2, ps2 = table_of(tmp_path, rows2)
    r2 = run(mech, t2, ps2, store, sequence=2)
    for person in "acdefg":
        assert person_view(r2, t2, person) == person_view(r1, t1, person)
    b = ps2[list(t2.ids).index("b")].tobytes()
    assert list(r2.state) == [b] and len(r2.state[b]) == 1 + 2 * 24  # charged once more
    # release 3: nothing new, nothing charged, the same lines
    r3 = run(mech, t2, ps2, store, sequence=3)
    assert r3.state == {} and (r3.qids, r3.sensitive) == (r2.qids, r2.sensitive)


def test_changed_parameters_draw_afresh_and_charge_again(tmp_path: Path) -> None:
    store = Store()
    table, ps = table_of(tmp_path, SMALL_ROWS)
    r1 = run(DPSanitised(settings()), table, ps, store)
    r2 = run(DPSanitised(settings(bounds={"age": (0, 100)})), table, ps, store, sequence=2)
    assert len(r2.state) == 7 and r2.qids != r1.qids
    assert r2.guarantee["parameters_digest"] != r1.guarantee["parameters_digest"]
    # a change of caps or grid is not a new mechanism: same draw, no charge
    r3 = run(DPSanitised(settings(epsilon_budget=12.0)), table, ps, store, sequence=3)
    assert r3.state == {} and r3.qids == r1.qids


def test_the_ledger_refuses_a_person_over_budget(tmp_path: Path) -> None:
    mech, store = DPSanitised(settings(epsilon_budget=4.0)), Store()  # one record version each
    t1, ps1 = table_of(tmp_path, SMALL_ROWS)
    r1 = run(mech, t1, ps1, store, sequence=1)
    rows2 = [r if r[0] != "b" else ("b", "35", "Masters", "Lyon", "cold") for r in SMALL_ROWS]
    t2, ps2 = table_of(tmp_path, rows2)
    r2 = run(mech, t2, ps2, store, sequence=2)
    assert person_view(r2, t2, "b") is None and int((r2.group < 0).sum()) == 1
    assert r2.guarantee["refused_budget"] == 1 and r2.guarantee["published"] == 6
    assert r2.state == {}  # nothing charged
    assert verify_release({"mechanism": r2.guarantee}, lines_of(r2, 2)) == []
    # 'b' back to the charged record: published again, free, with release 1's values
    r3 = run(mech, t1, ps1, store, sequence=3)
    assert r3.guarantee["refused_budget"] == 0 and r3.state == {}
    assert person_view(r3, t1, "b") == person_view(r1, t1, "b")


def test_other_rows_do_not_change_a_record(tmp_path: Path) -> None:
    """Theorem 5's product form: a record's output depends on its own key only."""
    alone, ps_alone = table_of(tmp_path, [SMALL_ROWS[3]])
    crowd, ps_crowd = table_of(tmp_path, SMALL_ROWS)
    assert (
        person_view(run(DPSanitised(settings()), alone, ps_alone), alone, "d")[0]
        == (person_view(run(DPSanitised(settings()), crowd, ps_crowd), crowd, "d")[0])
    )


def test_guarantee_reports_errors_next_to_the_lower_bounds(tmp_path: Path) -> None:
    table, ps = table_of(tmp_path, SMALL_ROWS)
    g = run(DPSanitised(settings(delta=0.01, delta_budget=0.02)), table, ps).guarantee
    age = g["qid"]["age"]
    assert age["epsilon"] == pytest.approx(1.0) and age["delta"] == pytest.approx(0.0025)
    # the paper's continuous scales for reference; the grid Laplace is pure epsilon: its
    # scale is the paper's at delta = 0 (73 steps of one year, q = e^{-1/73})
    assert age["scale_tight"] == pytest.approx(laplace_scale_tight(73.0, 1.0, 0.0025))
    assert age["scale_tight"] < age["scale_paper"]
    assert age["scale"] == pytest.approx(73.0, rel=1e-5) and age["steps"] == 73
    assert age["epsilon_realized"] <= 1.0 and age["sampler"] == "grid-laplace-v1"
    assert age["lower_bound"] == pytest.approx(error_lower_bound_compact(73.0, 1.0, 0.0025))
    assert 1.0 < age["ratio"] < 4.0 and age["theorem"] == "6"
    city = g["qid"]["city"]
    assert city["lower_bound"] == pytest.approx(error_lower_bound_finite(4, 1.0, 0.0025))
    assert city["ratio"] == pytest.approx(1.0) and city["theorem"] == "7"
    assert g["sensitive"]["sanitised"] and g["caveat"] == CAVEAT
    assert g["composition"]["epsilon"] == pytest.approx(4.0)
    assert set(g["counts"]["estimate"]) == set(DISEASES)


def test_sensitive_attribute_can_be_left_exact(tmp_path: Path) -> None:
    table, ps = table_of(tmp_path, SMALL_ROWS)
    rel = run(DPSanitised(settings(sanitise_sensitive=False, sensitive_domain=None)), table, ps)
    assert rel.guarantee["sensitive"] == {
        "sanitised": False,
        "note": "published exactly: not protected",
    }
    assert rel.guarantee["qid"]["age"]["epsilon"] == pytest.approx(4.0 / 3.0)
    assert rel.guarantee["counts"]["estimate"] == {"cold": 2.0, "flu": 4.0, "hiv": 1.0}
    assert verify_release({"mechanism": rel.guarantee}, lines_of(rel)) == []


# --- the sanitiser's distribution and the empirical e^epsilon check -----------------------------


def test_randomised_response_has_the_right_distribution() -> None:
    u = (np.arange(200_000) + 0.5) / 200_000  # a fine grid of uniforms
    keep, _ = rr_keep(4, 1.0, 0.0)
    out = rr_from_uniform(np.zeros(200_000, dtype=np.int64), u, 4, keep)
    assert np.bincount(out, minlength=4) / 200_000 == pytest.approx(
        [keep, *[(1 - keep) / 3] * 3], abs=1e-4
    )


def _target_outputs(
    mech: DPSanitised, table: EncodedTable, ps: np.ndarray, secrets: list[bytes]
) -> dict[str, np.ndarray]:
    """Per attribute, the published value of the table's one person under each secret."""
    out: dict[str, list[Any]] = {"age": [], "education": [], "city": [], "sensitive": []}
    for secret in secrets:
        rel = mech.release(table, ps, sequence=1, randomness=ReleaseRandomness(secret, 1),
                           load_state=lambda keys: [None] * len(keys))  # fmt: skip
        [qid], [sens] = rel.qids, rel.sensitive
        for name in ("age", "education", "city"):
            out[name].append(qid[name])
        out["sensitive"].append(next(iter(sens)))
    domains = {"education": list(table.attributes[1].domain), "city": CITIES, "sensitive": DISEASES}
    return {
        name: np.asarray(v, dtype=np.float64) if name == "age"
        else np.array([list(domains[name]).index(x) for x in v])
        for name, v in out.items()
    }  # fmt: skip


AGE_EDGES = np.array([35.25, 53.5, 71.75])  # quarters of [17, 90]: the worst sets are tails
N_SECRETS = 6_000
ALPHA = 1e-4


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, ...]:
    """Two tables differing in one person's record: the extremes of every attribute."""
    tmp = tmp_path_factory.mktemp("neighbours")
    d, ps = table_of(tmp, [("x", "17", "Bachelors", "Paris", "flu")])
    d_prime, ps_prime = table_of(tmp, [("x", "90", "9th", "Nice", "hiv")])
    assert ps.tolist() == ps_prime.tolist()
    rng = np.random.default_rng(2026)
    secrets = [rng.bytes(32) for _ in range(N_SECRETS)]
    return d, d_prime, ps, secrets


def _check(mech: DPSanitised, neighbours: tuple[Any, ...]) -> dict[str, Any]:
    d, d_prime, ps, secrets = neighbours
    samples = [_target_outputs(mech, t, ps, secrets) for t in (d, d_prime)]
    results = {}
    for name in ("age", "education", "city", "sensitive"):
        results[name] = empirical_dp_check(
            lambda x, g, name=name: samples[int(x[0])][name],
            0, 1, 1.0, 0.0, np.random.default_rng(0),
            bins=AGE_EDGES if name == "age" else None, n_samples=N_SECRETS, alpha=ALPHA,
        )  # fmt: skip
    return results


def test_empirical_dp_on_neighbouring_tables(neighbours: tuple[Any, ...]) -> None:
    # epsilon = 4 over four attributes: each attribute's output is 1-DP on its own
    results = _check(DPSanitised(settings()), neighbours)
    assert all(r.passed for r in results.values()), results


def test_negative_control_with_half_the_noise_fails(neighbours: tuple[Any, ...]) -> None:
    # The same check against epsilon_j = 1, on the mechanism with half the noise of every
    # attribute: half the grid Laplace's scale (epsilon_j' = 2) and half the probability p of
    # each other category (e^epsilon_j' = m + 2e). True delta: 1 - e^{-1/2} = 0.39 and 1/2.
    half = {"age": 2.0, "education": math.log(6 + 2 * math.e), "city": math.log(3 + 2 * math.e)}
    total = sum(half.values()) + half["city"]
    mech = DPSanitised(
        settings(epsilon=total, epsilon_budget=total, weights=half, sensitive_weight=half["city"])
    )
    d, _, ps, _ = neighbours
    g = run(mech, d, ps).guarantee
    assert g["qid"]["age"]["scale"] == pytest.approx(73.0 / 2.0, rel=1e-5)
    assert g["sensitive"]["p_other"] == pytest.approx(rr_keep(4, 1.0, 0.0).p / 2.0)
    results = _check(mech, neighbours)
    assert not any(r.passed for r in results.values()), results
    assert all(r.delta_hat > 0.3 for r in results.values()), results


# --- the audit ----------------------------------------------------------------------------------


def test_verify_release_catches_tampering(tmp_path: Path) -> None:
    table, ps = table_of(tmp_path, SMALL_ROWS)
    rel = run(DPSanitised(settings()), table, ps)
    # as read back from manifest-0001.json and release-0001.jsonl
    manifest = json.loads(json.dumps({"release": "r1", "sequence": 1, "mechanism": rel.guarantee}))
    lines = [json.loads(json.dumps(line)) for line in lines_of(rel)]
    assert verify_release(manifest, lines) == []

    def problems(edit: Any) -> list[str]:
        m, ls = copy.deepcopy(manifest), copy.deepcopy(lines)
        edit(m, ls)
        return verify_release(m, ls)

    def out_of_bounds(m: dict, ls: list) -> None:
        ls[0]["qid"]["age"] = 95.0

    [p] = problems(out_of_bounds)
    assert "line 1: qid.age = 95.0 is outside its bounds [17.0, 90.0]" in p
    assert any(
        "not in its domain" in p
        for p in problems(lambda m, ls: ls[1]["qid"].__setitem__("city", "Berlin"))
    )
    assert any(
        "sensitive value 'malaria'" in p
        for p in problems(lambda m, ls: ls[1].__setitem__("sensitive", {"malaria": 1}))
    )
    assert any(
        "mechanism.qid.age.scale" in p
        for p in problems(lambda m, ls: m["mechanism"]["qid"]["age"].__setitem__("scale", 1.0))
    )
    assert any(
        "parameters_digest" in p
        for p in problems(lambda m, ls: m["mechanism"]["qid"]["age"].__setitem__("bounds", [0, 90]))
    )
    assert any(
        "mechanism.counts['flu']" in p
        for p in problems(
            lambda m, ls: m["mechanism"]["counts"]["estimate"].__setitem__("flu", 9.0)
        )
    )
    assert any("mechanism.published" in p for p in problems(lambda m, ls: ls.pop()))
    # the caveat: altered fails; as a release published before its wording changed, passes
    assert any(
        "mechanism.caveat" in p
        for p in problems(lambda m, ls: m["mechanism"].__setitem__("caveat", "none"))
    )
    assert problems(lambda m, ls: m["mechanism"].__setitem__("caveat", EARLIER_CAVEATS[0])) == []
    assert any(
        "already another line's" in p
        for p in problems(lambda m, ls: ls.append({**ls[0], "group": 99}))
    )
    assert verify_release({"mechanism": {"kind": "global-guarantee"}}, lines) == [
        "manifest: mechanism.kind = 'global-guarantee', not 'dp-sanitised'"
    ]


# --- Adult ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def adult(shared_data: Path) -> tuple[EncodedTable, np.ndarray, tuple[str, ...]]:
    hierarchies = {a: shared_data / f"adult_hierarchy_{a}.csv" for a in ADULT_QID if a != "age"}
    schema = SchemaSettings(
        id="id", sensitive=ADULT_SENSITIVE, qid=ADULT_QID, numeric=("age",), hierarchies=hierarchies
    )
    raw_table = read_csv_table(shared_data / "adult.csv")
    raw = snapshot_from_columns(
        raw_table.columns["id"],
        {a: raw_table.columns[a] for a in ADULT_QID},
        raw_table.columns[ADULT_SENSITIVE],
    )
    table = encode(raw, schema, load_hierarchies(schema))
    occupations = tuple(
        line.split(";")[0]
        for line in (shared_data / "adult_hierarchy_occupation.csv").read_text().splitlines()
        if line.strip()
    )
    ps = keyed_pseudonyms(table.ids, KEY)
    order = np.argsort(ps)
    return table.take(order), ps[order], occupations


def test_adult_release(adult: tuple[EncodedTable, np.ndarray, tuple[str, ...]]) -> None:
    table, ps, occupations = adult
    mech = DPSanitised(
        DPSanitisedSettings(
            epsilon=8.0, epsilon_budget=16.0, bounds={"age": (17, 90)},
            resolution={"age": 1.0}, sensitive_domain=occupations,
        )
    )  # fmt: skip
    store = Store()
    rel = run(mech, table, ps, store)
    g = rel.guarantee
    assert int(rel.sizes.sum()) == table.n_rows == 30162 and (rel.group >= 0).all()
    assert g["refused_budget"] == 0 and len(rel.state) == table.n_rows
    ages = np.array([q["age"] for q in rel.qids])
    assert ((ages >= 17) & (ages <= 90) & (ages == np.round(ages))).all()
    assert verify_release({"mechanism": g}, lines_of(rel)) == []
    # the dashboard counts are unbiased: every true count within 5 standard errors
    true = dict(zip(table.sensitive_values, np.bincount(table.sensitive).tolist(), strict=True))
    for value in occupations:
        est, var = g["counts"]["estimate"][value], g["counts"]["variance"][value]
        assert abs(est - true.get(value, 0)) <= 5 * math.sqrt(var), value
    # release 2 of the same snapshot: the same lines, nothing charged
    again = run(mech, table, ps, store, sequence=2)
    assert again.state == {} and (again.qids, again.sensitive) == (rel.qids, rel.sensitive)


def test_wide_and_empty_tables(tmp_path: Path) -> None:
    # more attributes than one row_uniforms call draws (8): independent draws per attribute
    names = [f"c{j}" for j in range(11)]
    columns = {n: ["a", "b", "a", "b"] for n in names}
    table = encode_columns(tmp_path, columns, ["flu", "flu", "cold", "hiv"])
    ps = keyed_pseudonyms(table.ids)
    order = np.argsort(ps)
    table, ps = table.take(order), ps[order]
    mech = DPSanitised(
        DPSanitisedSettings(epsilon=12.0, epsilon_budget=12.0, sensitive_domain=DISEASES,
                            domains=dict.fromkeys(names, ("a", "b")))
    )  # fmt: skip
    rel = run(mech, table, ps)
    assert int(rel.sizes.sum()) == 4 and verify_release(rel.guarantee, lines_of(rel)) == []
    assert all(set(q) == set(names) for q in rel.qids)
    empty = run(mech, table.take(np.array([], dtype=np.int64)), ps[:0])
    assert (empty.group.size, empty.sizes.size, empty.qids, empty.state) == (0, 0, [], {})
    assert empty.guarantee["published"] == 0 and empty.guarantee["counts"]["n"] == 0
    assert verify_release(empty.guarantee, []) == []


def test_kind_detected_from_the_data_must_match_the_settings(tmp_path: Path) -> None:
    # schema.numeric unset: 'age' with a non-number, or 'city' with numbers only, is the
    # snapshot's fault (SchemaError: the release is refused, the service goes on)
    rows = [(*r[:1], "unknown", *r[2:]) if r[0] == "a" else r for r in SMALL_ROWS]
    table, ps = table_of(tmp_path, rows)
    with pytest.raises(SchemaError, match=r"QID 'age': a value of this snapshot is not a number"):
        run(DPSanitised(settings(domains={"city": CITIES})), table, ps)
    rows = [(*r[:3], "75001", r[4]) for r in SMALL_ROWS]
    table, ps = table_of(tmp_path, rows)
    with pytest.raises(SchemaError, match=r"QID 'city': every value of this snapshot is a number"):
        run(DPSanitised(settings(domains={"city": ("75001",)})), table, ps)


def test_a_corrupt_ledger_entry_stops_the_release(tmp_path: Path) -> None:
    table, ps = table_of(tmp_path, SMALL_ROWS)
    mech, store = DPSanitised(settings()), Store()
    run(mech, table, ps, store)
    person = next(iter(store.entries))
    store.entries[person] = store.entries[person][:-3]
    with pytest.raises(HistoryStoreError, match=r"ledger entry of 22 bytes is corrupt"):
        run(mech, table, ps, store, sequence=2)
