"""Mode ``sampled-k-anonymity`` (papers 000/001, Li-Qardaji-Su) on hand-built tables.

The randomness is keyed (:class:`ReleaseRandomness`), so every stochastic check here is
deterministic; its tolerances are four standard errors. The empirical DP check runs the
mechanism on neighbouring tables (one row removed from a QID cell of ``n`` rows) at fresh
randomness per run and checks ``P_D(E) <= e^epsilon P_D'(E) + delta`` for the worst union E of
outcomes of the target cell (the hockey-stick divergence), both ways; a negative control shows
the same check, at the same sample size, refuses a delta below the mechanism's true one.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.tables import EDUCATION_HIERARCHY, keyed_pseudonyms

from stream_release.config import SchemaSettings, Settings, load_settings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.core.privacy.dp_selftest import hockey_stick_divergence
from stream_release.core.privacy.sampling_dp_calculators import calc_delta
from stream_release.core.privacy.sampling_dp_release import sample_mask
from stream_release.core.table import EncodedTable
from stream_release.errors import ConfigError, SchemaError
from stream_release.history.pseudonym import Pseudonymizer
from stream_release.io.encoding import encode
from stream_release.io.snapshot import snapshot_from_columns
from stream_release.mechanisms import make_mechanism
from stream_release.mechanisms.base import MechanismRelease, ReleaseRandomness, StateLoader
from stream_release.mechanisms.companion import render_companion
from stream_release.mechanisms.sampled_k_anonymity.audit import verify_release, verify_series
from stream_release.mechanisms.sampled_k_anonymity.mechanism import (
    KIND,
    SERIES_STATE_KEY,
    SampledKAnonymity,
    SampledKAnonymitySettings,
)

KEY = b"sampled-k-test-key-0123456789abc"
QID = ("zip", "sex")


def table_of(
    zips: list[int], sexes: list[str], values: list[str], ids: list[str] | None = None
) -> tuple[EncodedTable, np.ndarray]:
    """An encoded table (``zip`` numeric, ``sex`` a set) in pseudonym order, and its
    pseudonyms."""
    schema = SchemaSettings(id="id", sensitive="s", qid=QID, numeric=("zip",))
    ids = ids if ids is not None else [f"p{i}" for i in range(len(values))]
    raw = snapshot_from_columns(ids, {"zip": zips, "sex": sexes}, values)
    table = encode(raw, schema, {})
    ps = keyed_pseudonyms(table.ids, KEY)
    order = np.argsort(ps, kind="stable")
    return table.take(order), ps[order]


def mechanism(**overrides: Any) -> SampledKAnonymity:
    params: dict[str, Any] = {
        "k": 5,
        "beta": 0.3,
        "epsilon": 1.0,
        "levels": {"sex": 0},
        "widths": {"zip": 10},
    }
    params.update(overrides)
    return SampledKAnonymity(SampledKAnonymitySettings(**params), QID)


def state_before(sequence: int, epsilon: float = 1.0, log_delta: float = -5.0) -> Any:
    """A state loader holding the series total of ``sequence - 1`` earlier releases."""

    def load(keys: Any) -> list[bytes | None]:
        assert list(keys) == [SERIES_STATE_KEY]
        if sequence == 1:
            return [None]
        total = {"releases": sequence - 1, "epsilon": epsilon * (sequence - 1)}
        total["log_delta"] = log_delta + math.log(sequence - 1)
        return [json.dumps(total).encode()]

    return load


def run(
    m: SampledKAnonymity,
    table: EncodedTable,
    ps: np.ndarray,
    sequence: int = 1,
    load_state: StateLoader | None = None,
) -> MechanismRelease:
    """Release ``sequence`` of ``m`` with the test key's randomness, reading its state with
    ``load_state`` (default :func:`state_before` ``sequence``)."""
    randomness = ReleaseRandomness.derive(KEY, KIND, sequence)
    load = load_state if load_state is not None else state_before(sequence)
    return m.release(table, ps, sequence=sequence, randomness=randomness, load_state=load)


def random_table(n: int, seed: int = 7) -> tuple[EncodedTable, np.ndarray]:
    rng = np.random.default_rng(seed)
    zips = rng.integers(0, 60, size=n).tolist()
    sexes = rng.choice(["F", "M"], size=n).tolist()
    values = rng.choice(["flu", "cold", "hiv", "cancer"], size=n, p=[0.5, 0.3, 0.15, 0.05])
    return table_of(zips, sexes, values.tolist())


# -- the k rule, the sample, reproducibility ----------------------------------------------------


def test_every_published_pair_is_held_by_at_least_k_sampled_rows_and_nothing_else_is_cut() -> None:
    table, ps = random_table(3000)
    m = mechanism(k=8, beta=0.5)
    out = run(m, table, ps)
    # the sample the mechanism drew, recomputed from the same keyed randomness
    sampled = sample_mask(
        table.n_rows, 0.5, ReleaseRandomness.derive(KEY, KIND, 1).generator("sample")
    )
    cell_of = [
        (int(z) // 10, sex, value)
        for z, sex, value in zip(
            np.asarray(table.attributes[0].domain)[table.qid[:, 0]],
            np.asarray(table.attributes[1].domain)[table.qid[:, 1]],
            np.array(table.sensitive_values)[table.sensitive],
            strict=True,
        )
    ]
    counts = Counter(c for c, s in zip(cell_of, sampled, strict=True) if s)
    expected_kept = np.array(
        [bool(s) and counts[c] >= 8 for c, s in zip(cell_of, sampled, strict=True)]
    )
    np.testing.assert_array_equal(out.group >= 0, expected_kept)
    assert 0 < expected_kept.sum() < sampled.sum()  # the rule cut something and kept something
    for g, (qid, sensitive) in enumerate(zip(out.qids, out.sensitive, strict=True)):
        assert all(c >= 8 for c in sensitive.values())
        assert sum(sensitive.values()) == out.sizes[g]
        lo = qid["zip"][0]
        members = np.flatnonzero(out.group == g)
        assert {cell_of[i][:2] for i in members} == {(lo // 10, qid["sex"])}
        assert Counter(cell_of[i][2] for i in members) == sensitive
    # canonical order: ascending generalized codes, each QID cell once
    keys = [(q["zip"][0], q["sex"]) for q in out.qids]
    assert keys == sorted(set(keys))


def test_the_sample_fraction_is_beta_and_fresh_for_each_release() -> None:
    n, beta = 20_000, 0.3
    table, ps = table_of([5] * n, ["F"] * n, ["flu"] * n)  # one cell: every sampled row kept
    m = mechanism(k=2, beta=beta)
    first, second = run(m, table, ps, 1), run(m, table, ps, 2)
    sigma = math.sqrt(beta * (1 - beta) / n)
    for out in (first, second):
        assert abs(np.mean(out.group >= 0) - beta) < 5 * sigma
        assert out.sizes.tolist() == [int(np.count_nonzero(out.group >= 0))]
    # independent samples: they overlap in about beta^2 of the rows
    both = np.mean((first.group >= 0) & (second.group >= 0))
    assert abs(both - beta**2) < 5 * math.sqrt(beta**2 * (1 - beta**2) / n)


def test_the_same_randomness_gives_the_same_release_and_another_sequence_another() -> None:
    table, ps = random_table(2000)
    m = mechanism(k=4, beta=0.5)
    a, b = run(m, table, ps, 3), run(m, table, ps, 3)
    np.testing.assert_array_equal(a.group, b.group)
    assert (a.qids, a.sensitive, a.guarantee, a.state) == (
        b.qids,
        b.sensitive,
        b.guarantee,
        b.state,
    )
    c = run(m, table, ps, 4)
    assert not np.array_equal(a.group, c.group)
    other_key = ReleaseRandomness.derive(b"another-key-0123456789abcdef", KIND, 3)
    d = m.release(table, ps, sequence=3, randomness=other_key, load_state=state_before(3))
    assert not np.array_equal(a.group, d.group)


def test_generalization_is_the_configured_one(tmp_path: Path) -> None:
    hierarchy = tmp_path / "education.csv"
    hierarchy.write_text(EDUCATION_HIERARCHY, encoding="utf-8")
    schema = SchemaSettings(
        id="id",
        sensitive="s",
        qid=("age", "education", "city", "sex"),
        hierarchies={"education": hierarchy},
        numeric=("age",),
    )
    n = 40
    raw = snapshot_from_columns(
        [f"p{i}" for i in range(n)],
        {
            "age": ["-3", "7.5"] * (n // 2),
            "education": ["Bachelors", "Masters"] * (n // 2),
            "city": ["Paris"] * n,
            "sex": ["F", "M"] * (n // 2),
        },
        ["flu"] * n,
    )
    table = encode(raw, schema, load_hierarchies(schema))
    section = SampledKAnonymitySettings(
        k=2,
        beta=0.9,
        epsilon=3.0,
        levels={"education": 2, "city": 0, "sex": 1},
        widths={"age": 5},
    )
    m = SampledKAnonymity(section, schema.qid)
    out = run(m, table, np.zeros(n, dtype="S16"))
    assert out.qids == [
        {"age": [-5, -1], "education": "Higher education", "city": "Paris", "sex": "*"},
        {"age": [5, 9], "education": "Higher education", "city": "Paris", "sex": "*"},
    ]
    assert section.rules() == {
        "education": {"level": 2},
        "city": {"level": 0},
        "sex": {"level": 1},
        "age": {"width": 5},
    }


def test_an_empty_or_fully_suppressed_release_publishes_nothing() -> None:
    table, ps = table_of([1, 2], ["F", "M"], ["flu", "cold"])
    out = run(mechanism(k=5), table, ps)
    assert out.group.tolist() == [-1, -1]
    assert (out.sizes.tolist(), out.qids, out.sensitive) == ([], [], [])
    empty, eps = table_of([], [], [])
    assert run(mechanism(), empty, eps).sizes.shape == (0,)


# -- the guarantee ------------------------------------------------------------------------------


def test_the_guarantee_states_the_exact_delta_and_composes_the_series() -> None:
    table, ps = random_table(500)
    m = mechanism(k=20, beta=0.1, epsilon=1.0)
    figures = calc_delta(20, 0.1, 1.0)
    state: dict[bytes, bytes] = {}
    for sequence in (1, 2, 3):
        out = run(m, table, ps, sequence, lambda keys: [state.get(k) for k in keys])
        state.update(out.state)
        block = out.guarantee
        assert block["kind"] == KIND
        assert (block["k"], block["beta"], block["epsilon"]) == (20, 0.1, 1.0)
        assert block["delta"] == figures["delta"]  # Table 2 of [LQS12]: 4.07e-14
        assert f"{block['delta']:.3g}" == "4.07e-14"
        assert block["worst_group_size"] == 29
        assert block["delta_chernoff"] >= block["delta"] >= block["delta_floor"]
        assert block["delta_floor"] == pytest.approx(0.1**20, rel=1e-12)
        assert block["series"]["releases"] == sequence
        assert block["series"]["epsilon"] == pytest.approx(sequence * 1.0)
        assert block["series"]["delta"] == pytest.approx(sequence * figures["delta"], rel=1e-12)
    assert json.loads(state[SERIES_STATE_KEY])["releases"] == 3


def test_a_parameter_change_is_composed_with_the_parameters_of_each_release() -> None:
    table, ps = random_table(200)
    state: dict[bytes, bytes] = {}
    deltas = []
    for sequence, epsilon in ((1, 1.0), (2, 0.5)):
        m = mechanism(k=20, beta=0.1, epsilon=epsilon)
        out = run(m, table, ps, sequence, lambda keys: [state.get(k) for k in keys])
        state.update(out.state)
        deltas.append(calc_delta(20, 0.1, epsilon)["delta"])
    assert out.guarantee["series"]["epsilon"] == 1.5
    assert out.guarantee["series"]["delta"] == pytest.approx(sum(deltas), rel=1e-12)


def test_a_state_that_does_not_count_the_earlier_releases_is_refused() -> None:
    table, ps = random_table(50)
    with pytest.raises(SchemaError, match="0 earlier sampled releases but this is release 2"):
        run(mechanism(), table, ps, 2, lambda keys: [None])
    with pytest.raises(SchemaError, match="corrupt"):
        run(mechanism(), table, ps, 2, lambda keys: [b"not json"])


# -- empirical differential privacy on neighbouring tables --------------------------------------


def _target_counts(
    m: SampledKAnonymity, table: EncodedTable, ps: np.ndarray, runs: int
) -> np.ndarray:
    """Per run (fresh randomness: sequence 1..runs), the published count of the pair
    (zip bin 0, F, flu): 0 when suppressed or absent."""
    out = np.zeros(runs, dtype=np.int64)
    for sequence in range(1, runs + 1):
        release = run(m, table, ps, sequence)
        for qid, sensitive in zip(release.qids, release.sensitive, strict=True):
            if qid == {"zip": [0, 9], "sex": "F"}:
                out[sequence - 1] = sensitive.get("flu", 0)
    return out


def _hockey(p_counts: np.ndarray, q_counts: np.ndarray, epsilon: float) -> tuple[float, float]:
    """Worst ``P(E) - e^eps Q(E)`` over unions E of outcomes, both ways, and four standard
    errors of that estimate for the worst E."""
    size = int(max(p_counts.max(), q_counts.max())) + 1
    p = np.bincount(p_counts, minlength=size) / p_counts.size
    q = np.bincount(q_counts, minlength=size) / q_counts.size
    best, tolerance = -1.0, 0.0
    for a, b in ((p, q), (q, p)):
        value = hockey_stick_divergence(a, b, epsilon)
        worst = a > math.exp(epsilon) * b
        pa, pb = a[worst].sum(), b[worst].sum()
        se = math.sqrt(
            pa * (1 - pa) / p_counts.size + math.exp(2 * epsilon) * pb * (1 - pb) / q_counts.size
        )
        if value > best:
            best, tolerance = value, 4 * se + 1e-12
    return best, tolerance


def test_neighbouring_tables_give_output_frequencies_within_e_epsilon_and_delta() -> None:
    """k = 4, beta = 0.5, epsilon = 1: delta = d = 0.109 (worst cell n = 6). D holds the
    target pair (zip bin 0, F, flu) in a cell of n rows, for n = k (where a release publishes
    the cell whole with probability beta^k: the floor of d, attained) and n = 6 (the paper's
    worst case); D' holds one row less. Other rows share nothing with the target."""
    k, beta, epsilon = 4, 0.5, 1.0
    figures = calc_delta(k, beta, epsilon)
    delta = figures["delta"]
    assert figures["argmax_n"] == 6
    m = mechanism(k=k, beta=beta, epsilon=epsilon)
    runs = 4000
    other = ([50] * 6, ["M"] * 6, ["cold"] * 6)
    results = {}
    for n in (k, 6):
        d = table_of([3] * n + other[0], ["F"] * n + other[1], ["flu"] * n + other[2])
        ids = [f"p{i}" for i in range(1, n)] + [f"p{i}" for i in range(n, n + 6)]
        d_prime = table_of(
            [3] * (n - 1) + other[0], ["F"] * (n - 1) + other[1], ["flu"] * (n - 1) + other[2], ids
        )
        counts, counts_prime = _target_counts(m, *d, runs), _target_counts(m, *d_prime, runs)
        # the published count is Bin(n, beta) when >= k, else 0
        assert abs(np.mean(counts == n) - beta**n) < 4 * math.sqrt(beta**n / runs)
        results[n] = (counts, counts_prime)
        value, tolerance = _hockey(counts, counts_prime, epsilon)
        assert value <= delta + tolerance, (n, value, delta, tolerance)
    # at n = k the worst event (the whole cell published) has probability beta^k under D and
    # 0 under D': delta cannot be below beta^k, and the check sees it
    counts, counts_prime = results[k]
    value, tolerance = _hockey(counts, counts_prime, epsilon)
    assert value > beta**k / 2 + tolerance
    assert value == pytest.approx(beta**k, abs=tolerance)


# -- the audit of a release from its files ------------------------------------------------------


def _files(out: MechanismRelease, table: EncodedTable) -> tuple[dict[str, Any], list[Any]]:
    settings = Settings(schema=SchemaSettings(id="id", sensitive="s", qid=QID, numeric=("zip",)))
    groups, manifest = render_companion(
        table, out, label="r1", sequence=1, settings=settings, elapsed_s=0.5
    )
    return manifest.document(), [json.loads(line) for line in groups.splitlines()]


def test_verify_release_passes_a_release_and_names_what_was_tampered() -> None:
    table, ps = random_table(3000)
    out = run(mechanism(k=8, beta=0.5), table, ps)
    manifest, lines = _files(out, table)
    assert "records_in" not in manifest and "suppressed" not in manifest
    assert "elapsed_s" not in manifest and "breach" not in manifest
    assert manifest["published"] == int(np.count_nonzero(out.group >= 0)) > 0
    assert verify_release(manifest, lines) == []
    assert verify_series([(manifest, lines)]) == []

    low = json.loads(json.dumps(lines))
    value = next(iter(low[0]["sensitive"]))
    low[0]["size"] -= low[0]["sensitive"][value] - 3
    low[0]["sensitive"][value] = 3
    problems = verify_release(manifest, low)
    assert any("published 3 times, below k = 8" in p for p in problems)

    wrong = json.loads(json.dumps(manifest))
    wrong["mechanism"]["delta"] /= 10
    assert any("mechanism.delta" in p for p in verify_release(wrong, lines))
    wrong = json.loads(json.dumps(manifest))
    wrong["mechanism"]["epsilon"] = 0.1
    assert any("epsilon" in p for p in verify_release(wrong, lines))
    wrong = json.loads(json.dumps(manifest))
    wrong["mechanism"]["series"]["epsilon"] = 2.0
    assert any("series.epsilon" in p for p in verify_release(wrong, lines))
    twice = [*lines, {**lines[0], "group": len(lines)}]
    assert any("appears on two lines" in p for p in verify_release(manifest, twice))
    binned = json.loads(json.dumps(lines))
    binned[0]["qid"]["zip"] = [3, 12]
    assert any("is not a bin" in p for p in verify_release(manifest, binned))


# -- the configuration --------------------------------------------------------------------------


def _config(tmp_path: Path, section: str, schema: str = "") -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        "[schema]\n"
        'id = "id"\nsensitive = "s"\nqid = ["zip", "sex"]\nnumeric = ["zip"]\n'
        f"{schema}"
        '[mechanism]\nkind = "sampled-k-anonymity"\n'
        f"{section}",
        encoding="utf-8",
    )
    return path


GOOD = "[mechanism.sampled_k_anonymity]\nk = 20\nbeta = 0.1\nepsilon = 1.0\n"


def test_a_valid_section_loads_and_builds_the_mechanism(tmp_path: Path) -> None:
    settings = load_settings(_config(tmp_path, GOOD + "levels = {sex = 1}\nwidths = {zip = 10}\n"))
    section = settings.mechanism.section
    assert isinstance(section, SampledKAnonymitySettings)
    assert (section.k, section.beta, section.epsilon) == (20, 0.1, 1.0)
    built = make_mechanism(settings, Pseudonymizer(KEY)).release_step  # type: ignore[attr-defined]
    assert isinstance(built, SampledKAnonymity) and built.qid == QID


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            "[mechanism.sampled_k_anonymity]\nk = 20\nbeta = 1.5\nepsilon = 1.0\n",
            "mechanism.sampled_k_anonymity.beta = 1.5: the sampling probability must satisfy "
            "0 < beta < 1",
        ),
        (
            "[mechanism.sampled_k_anonymity]\nk = 20\nbeta = 0.2\nepsilon = 0.2\n",
            "mechanism.sampled_k_anonymity.epsilon = 0.2: Theorem 3.9 of Li-Qardaji-Su needs "
            "epsilon >= -ln(1 - beta) = 0.223144 for beta = 0.2",
        ),
        (
            "[mechanism.sampled_k_anonymity]\nk = 1\nbeta = 0.2\nepsilon = 1.0\n",
            "mechanism.sampled_k_anonymity.k = 1: a cell of one record",
        ),
        (
            "",
            "mechanism.kind = 'sampled-k-anonymity' needs the table "
            "[mechanism.sampled_k_anonymity]",
        ),
        (
            GOOD + "levels = {sex = 0, zip = 0, age = 2}\n",
            "mechanism.sampled_k_anonymity.levels.age = 2: 'age' is not a QID",
        ),
        (
            GOOD + "levels = {sex = 2}\nwidths = {zip = 10}\n",
            "mechanism.sampled_k_anonymity.levels.sex = 2: 'sex' has no hierarchy",
        ),
        (
            GOOD + "levels = {sex = -1}\n",
            "mechanism.sampled_k_anonymity.levels.sex = -1: a level is >= 0",
        ),
        (GOOD + "levels = {sex = 0}\n", "QID 'zip' needs exactly one of levels.zip and widths.zip"),
        (
            GOOD + "levels = {sex = 0, zip = 0}\nwidths = {zip = 10}\n",
            "QID 'zip' needs exactly one of levels.zip and widths.zip (both are set)",
        ),
        (
            GOOD + "levels = {sex = 0, zip = 0}\nseed = 3\n",
            "mechanism.sampled_k_anonymity.seed = 3: [mechanism.sampled_k_anonymity] has no key "
            "'seed' (its keys: k, beta, epsilon, levels, widths)",
        ),
    ],
    ids=[
        "beta",
        "epsilon-below-min",
        "k-one",
        "missing-section",
        "unknown-qid",
        "unknown-level",
        "negative-level",
        "missing-qid",
        "level-and-width",
        "unknown-key",
    ],
)
def test_bad_sections_are_config_errors_naming_key_value_and_fix(
    tmp_path: Path, section: str, message: str
) -> None:
    path = _config(tmp_path, section)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    text = str(caught.value)
    assert text.startswith("config ")
    assert f" (in {path})" in text  # where the value came from, before the rule
    assert message in text.replace(f" (in {path})", "")


def test_a_level_above_the_hierarchy_is_a_config_error_when_the_mechanism_is_built(
    tmp_path: Path,
) -> None:
    hierarchy = tmp_path / "sex.csv"
    hierarchy.write_text("F;*\nM;*\n", encoding="utf-8")
    path = _config(
        tmp_path,
        GOOD + "levels = {sex = 2}\nwidths = {zip = 10}\n",
        schema=f'[schema.hierarchies]\nsex = "{hierarchy}"\n',
    )
    settings = load_settings(path)
    with pytest.raises(ConfigError, match=r"levels.sex = 2: the hierarchy .* has levels 0..1"):
        make_mechanism(settings, Pseudonymizer(KEY))


def test_widths_need_a_declared_numeric_qid_and_exact_values_a_declared_type(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config.toml"
    base = '[schema]\nid = "id"\nsensitive = "s"\nqid = ["zip", "sex"]\n'
    path.write_text(
        base + '[mechanism]\nkind = "sampled-k-anonymity"\n' + GOOD + "widths = {zip = 10}\n"
        "levels = {sex = 0}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"bins need .zip. declared numeric in schema\.numeric"):
        load_settings(path)
    path.write_text(
        base + '[mechanism]\nkind = "sampled-k-anonymity"\n' + GOOD + "levels = {zip = 1, "
        "sex = 0}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"levels\.sex = 0 publishes .sex. exactly"):
        load_settings(path)


def test_the_anatomy_format_is_refused(tmp_path: Path) -> None:
    path = _config(tmp_path, GOOD + "levels = {sex = 0}\nwidths = {zip = 10}\n")
    path.write_text(path.read_text() + '[output]\nformat = "anatomy"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"set output\.format = .generalized."):
        load_settings(path)


def test_the_section_comes_from_the_environment_as_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        '[schema]\nid = "id"\nsensitive = "s"\nqid = ["zip", "sex"]\nnumeric = ["zip"]\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("SR_MECHANISM_KIND", "sampled-k-anonymity")
    monkeypatch.setenv(
        "SR_MECHANISM_SAMPLED_K_ANONYMITY",
        json.dumps({"k": 10, "beta": 0.2, "epsilon": 1.0, "levels": {"sex": 1, "zip": 1}}),
    )
    section = load_settings(path).mechanism.section
    assert isinstance(section, SampledKAnonymitySettings) and section.k == 10
