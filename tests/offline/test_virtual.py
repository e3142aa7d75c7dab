"""Virtual individuals (Wong et al. 2010, §8): a register makes settings feasible that Adult's value
frequencies refuse, the files state them, and the audit recomputes every claim."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from support.data import adult_register, adult_series, write_config

from stream_release.audit import AuditInputError, audit_directory
from stream_release.cli.main import main
from stream_release.config import load_settings
from stream_release.errors import ConfigError, GuaranteeUnsatisfiable, SchemaError
from stream_release.pipeline.anonymize import anonymize_files
from stream_release.stream.messages import GroupLine, Manifest


def _rows(path: Path, delimiter: str = ",") -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh, delimiter=delimiter))


def _with_register(config: Path, register: Path) -> Path:
    config.write_text(config.read_text() + f'[virtual]\nregistry = "{register}"\n')
    return config


def _configured(shared_data: Path, tmp_path: Path, **privacy: object) -> tuple[Path, Path]:
    """An Adult configuration with ``privacy`` and the whole table as its register; and the
    register's path."""
    register = adult_register(shared_data, tmp_path / "register.csv")
    return _with_register(write_config(tmp_path, shared_data, **privacy), register), register


def _first_release(shared_data: Path, tmp_path: Path, series: list[Path]) -> tuple[Path, Path]:
    """``stream-release anonymize`` of the first snapshot at k' = 5 with the register: the
    public directory and the register's path."""
    config, register = _configured(shared_data, tmp_path, k_prime=5)
    out = tmp_path / "out"
    assert main(["anonymize", "--config", str(config), "--out", str(out), str(series[0])]) == 0
    return out, register


@pytest.fixture
def series(shared_data: Path, tmp_path: Path) -> list[Path]:
    return adult_series(shared_data, tmp_path, 20, rounds=3)


def test_k_prime_5_is_refused_without_a_register_and_feasible_with_one(
    shared_data: Path, tmp_path: Path, series: list[Path]
) -> None:
    config = write_config(tmp_path, shared_data, k_prime=5)
    with pytest.raises(GuaranteeUnsatisfiable, match="largest feasible setting"):
        anonymize_files(load_settings(config), tmp_path / "plain", series)
    register = adult_register(shared_data, tmp_path / "register.csv")
    settings = load_settings(_with_register(config, register))
    out = tmp_path / "out"
    manifests = anonymize_files(settings, out, series)
    ids_in = [{row["id"] for row in _rows(p, ";")} for p in series]
    for seq, (manifest, present) in enumerate(zip(manifests, ids_in, strict=True), start=1):
        assert manifest["records_in"] == len(present)
        assert manifest["virtual"]["members"] > 0
        assert "cannot tell who is" in manifest["virtual"]["assumption"]
        lines = [json.loads(x) for x in (out / f"release-{seq:04d}.jsonl").read_text().splitlines()]
        cap = manifest["strategy"]["group_size_cap"]
        for line in lines:
            assert line["size"] == sum(line["sensitive"].values()) + line["virtual"]
            assert line["size"] <= cap
            assert sum(line["sensitive"].values()) >= 1  # no group of virtual members only
        assert sum(line["virtual"] for line in lines) == manifest["virtual"]["members"]
        for line in lines:  # the published wire contract (deploy/schemas) allows them
            GroupLine.model_validate(line, strict=False)
        Manifest.model_validate(manifest)
        rows = _rows(out.parent / "out.private" / f"assignments-{seq:04d}.csv")
        fake = {r["id"] for r in rows if r["virtual"] == "1"}
        real = {r["id"] for r in rows if r["virtual"] == "0"}
        assert real == present and not (fake & present)
        assert all(r["group"] != "" for r in rows if r["virtual"] == "1")
        assert len(fake) == manifest["virtual"]["members"]
    report = audit_directory(out, config=settings_path(tmp_path), snapshots=series)
    assert report.ok, report.table()
    # every virtual member checked; the NCP and query errors of such a release are not
    # recomputed (its table holds the register's candidates), and the audit says so
    undone = [line for line in report.not_done if "virtual" in line]
    assert [line.split(" ")[0] for line in undone] == ["utility.ncp", "utility.query_error,"]
    assert max(r.breach_max for r in report.releases) <= 0.5


def settings_path(tmp_path: Path) -> Path:
    return tmp_path / "config.toml"


def test_the_audit_finds_a_virtual_member_that_is_not_stated(
    shared_data: Path, tmp_path: Path, series: list[Path]
) -> None:
    out, _ = _first_release(shared_data, tmp_path, series)
    path = out / "release-0001.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[0]["virtual"] -= 1
    lines[0]["size"] -= 1  # a smaller group: a larger share for its value
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = audit_directory(out, snapshots=series[:1])
    assert not report.ok
    problems = " ".join(report.releases[0].problems)
    assert "virtual members stated but" in problems


def test_virtual_members_are_linked_and_their_history_bounds_them(
    shared_data: Path, tmp_path: Path, series: list[Path]
) -> None:
    """A virtual member is linked to its group's values: the audit recomputes its breach from
    the assignments across releases like anyone's, and the series stays within 1/l."""
    config, _ = _configured(shared_data, tmp_path, strategy="geometric", alpha=5)
    out = tmp_path / "out"
    anonymize_files(load_settings(config), out, series)
    private = tmp_path / "out.private"
    linked: dict[str, int] = {}
    for seq in range(1, len(series) + 1):
        for row in _rows(private / f"assignments-{seq:04d}.csv"):
            if row["virtual"] == "1":
                linked[row["id"]] = linked.get(row["id"], 0) + 1
    assert max(linked.values()) >= 2  # someone of the register diluted two releases
    report = audit_directory(out, config=config, snapshots=series)
    assert report.ok, report.table()


def test_a_register_without_a_qid_column_is_refused_by_name(
    shared_data: Path, tmp_path: Path, series: list[Path]
) -> None:
    register = tmp_path / "register.csv"
    register.write_text("id;sex;age\np-0;Male;39\n")
    config = _with_register(write_config(tmp_path, shared_data, k_prime=5), register)
    with pytest.raises(SchemaError, match=r"virtual.registry .* has no column 'race'"):
        anonymize_files(load_settings(config), tmp_path / "out", series[:1])
    assert not (tmp_path / "out").exists()


def test_a_register_is_only_for_the_global_guarantee(shared_data: Path, tmp_path: Path) -> None:
    config, _ = _configured(shared_data, tmp_path)
    config.write_text(
        config.read_text()
        + '[mechanism]\nkind = "sampled-k-anonymity"\n[mechanism.sampled_k_anonymity]\n'
        + "k = 20\nbeta = 0.1\nepsilon = 1.0\nlevels = "
        + '{age = 3, sex = 0, race = 1, "marital-status" = 2, education = 3, '
        + '"native-country" = 2, workclass = 2}\n'
    )
    with pytest.raises(ConfigError, match=r"virtual\.registry is set but mechanism\.kind"):
        load_settings(config)


def test_the_audit_refuses_a_manifest_that_drops_the_assumption(
    shared_data: Path, tmp_path: Path, series: list[Path]
) -> None:
    out, _ = _first_release(shared_data, tmp_path, series)
    path = out / "manifest-0001.json"
    manifest = json.loads(path.read_text())
    manifest["virtual"] = manifest["virtual"]["members"]  # a bare count, no assumption
    path.write_text(json.dumps(manifest))
    with pytest.raises(AuditInputError, match=r"virtual = [0-9]+: Input should be a valid dict"):
        audit_directory(out)
    manifest["virtual"] = {"members": manifest["virtual"], "assumption": "none"}
    path.write_text(json.dumps(manifest))
    report = audit_directory(out)
    assert "does not state that the guarantee needs" in " ".join(report.releases[0].problems)


def test_without_the_register_the_audit_still_checks_the_real_members(
    shared_data: Path, tmp_path: Path, series: list[Path]
) -> None:
    out, register = _first_release(shared_data, tmp_path, series)
    register.unlink()
    report = audit_directory(out, snapshots=series[:1])
    assert report.ok, report.table()
    assert any("virtual members against the register" in line for line in report.not_done)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id;sex\np-0;Male\n;Female\n", r"line 3: the id \(column 'id'\) is empty"),
        ("id;sex\np-0;Male\n\np-0;Female\n", r"id 'p-0' is on lines 2 and 4; a register lists"),
    ],
)
def test_a_register_with_a_bad_id_is_refused_by_line(
    tmp_path: Path, text: str, message: str
) -> None:
    from stream_release.config import SchemaSettings
    from stream_release.io.registry import _read_columns

    path = tmp_path / "register.csv"
    path.write_text(text)
    with pytest.raises(SchemaError, match=message):
        _read_columns(path, path.read_bytes(), SchemaSettings(id="id", sensitive="s", qid=("sex",)))
