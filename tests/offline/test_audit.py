"""The audit verifies what it claims and says what it could not (issue 10, item 6).

``stream-release audit DIR [--private PDIR] [--config C] [--strict] [SNAPSHOT ...]``: labels
against the configured hierarchies, groups against their snapshot rows, the bound in exact
arithmetic, one line for a malformed file, and nothing imported from the planning code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.data import adult_series, write_config
from support.mechanisms import kind_config

from stream_release.audit import AuditInputError, audit_directory
from stream_release.cli.main import main
from stream_release.devtools.datasets import ADULT_SENSITIVE

RARE = ["Armed-Forces", "Priv-house-serv", "Protective-serv", "Tech-support", "Farming-fishing"]
"""Adult's five rarest occupations."""


def _series(
    shared_data: Path, tmp_path: Path, rounds: int = 2, **privacy: object
) -> tuple[Path, Path, list[Path]]:
    config = write_config(tmp_path, shared_data, **privacy)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=rounds)
    out = tmp_path / "out"
    assert main(["anonymize", "--config", str(config), "--out", str(out), *map(str, snaps)]) == 0
    return config, out, snaps


def _drop_ledger(out: Path) -> None:
    """Remove the series ledger beside ``out``: a tampered file is then caught (or not) by
    the check under test, not by its digest in the ledger."""
    out.with_name(out.name + ".ledger").unlink()


def _relabel_sex(out: Path) -> None:
    """Change one group's ``sex`` label from ``Female`` to ``Male``: sizes and counts still
    add up, only the rows tell."""
    path = out / "release-0001.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    line = next(x for x in lines if x["qid"]["sex"] == "Female")
    line["qid"]["sex"] = "Male"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_a_changed_label_fails_with_the_hierarchies_and_is_reported_without(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, out, snaps = _series(shared_data, tmp_path)
    assert main(["audit", str(out), "--config", str(config), *map(str, snaps)]) == 0
    _relabel_sex(out)
    capsys.readouterr()
    assert main(["audit", str(out), "--config", str(config), *map(str, snaps)]) == 1
    printed = capsys.readouterr().out
    assert "sex = 'Male' does not cover its rows' values" in printed
    assert "release-0001.jsonl (altered) differ from the series ledger" in printed
    _drop_ledger(out)
    # without the hierarchies, a leaf no member holds cannot be told from a label: said so
    assert main(["audit", str(out), *map(str, snaps)]) == 0
    printed = capsys.readouterr().out
    assert "not checked:" in printed and "give --config" in printed
    assert main(["audit", "--strict", str(out), *map(str, snaps)]) == 1


def test_a_missing_snapshot_is_reported_and_a_moved_one_is_found_by_its_hash(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, out, snaps = _series(shared_data, tmp_path)
    _drop_ledger(out)
    _relabel_sex(out)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    for snap in snaps:
        snap.rename(moved / f"renamed-{snap.name}")
    capsys.readouterr()
    # the snapshot is gone from where the private record says: the comparison is not done
    assert main(["audit", str(out), "--config", str(config)]) == 0
    printed = capsys.readouterr().out
    assert "no snapshot (with the recorded sha256) for releases 1, 2" in printed
    assert main(["audit", "--strict", str(out), "--config", str(config)]) == 1
    # given from another folder under another name, each is matched by its sha256
    renamed = sorted(moved.iterdir(), reverse=True)
    assert main(["audit", str(out), "--config", str(config), *map(str, renamed)]) == 1
    assert "does not cover its rows' values" in capsys.readouterr().out


def test_the_bound_is_checked_exactly(tmp_path: Path) -> None:
    """Two releases of one group of 114,243 rows, 33,461 of them holding s: every member's
    breach is 1 - (80782/114243)^2 = 1/2 + 3.8e-11 exactly, which a 1e-9 slack let through."""
    out, private = tmp_path / "out", tmp_path / "out.private"
    out.mkdir()
    private.mkdir()
    n, c = 114_243, 33_461
    ids = [f"p{i}" for i in range(n)]
    for k in (1, 2):
        line = {
            "release": f"r{k}",
            "sequence": k,
            "group": 0,
            "size": n,
            "qid": {"age": [17, 90]},
            "sensitive": {"s": c, "t": n - c},
        }
        (out / f"release-{k:04d}.jsonl").write_text(json.dumps(line) + "\n")
        breach = 1 - ((n - c) / n) ** k  # every member's
        manifest = {
            "release": f"r{k}",
            "sequence": k,
            "records_in": n,
            "published": n,
            "suppressed": 0,
            "groups": 1,
            "l": 2.0,
            "strategy": {
                "name": "constant-ratio",
                "l": 2.0,
                "base_ratio": 2.0,
                "protected": ["s"],
                "min_group_size": 2,
            },
            "schema": {"id": "id", "qid": ["age"], "sensitive": "disease"},
            "breach": {"bound": 0.5, "max": breach, "p50": breach, "p99": breach},
            "utility": {},
            "elapsed_s": 0.0,
        }
        (out / f"manifest-{k:04d}.json").write_text(json.dumps(manifest))
        (private / f"assignments-{k:04d}.csv").write_text(
            "id,group\r\n" + "".join(f"{i},0\r\n" for i in ids)
        )
    report = audit_directory(out)
    assert report.releases[0].ok
    assert any("breach above 1/l" in p for p in report.releases[1].problems)


def test_a_malformed_file_is_one_line_and_exit_2(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = _series(shared_data, tmp_path, rounds=1)
    path, record_path = out / "manifest-0001.json", tmp_path / "out.private" / "private-0001.json"
    good, record = json.loads(path.read_text()), json.loads(record_path.read_text())
    capsys.readouterr()

    def fails_with(message: str) -> None:
        assert main(["audit", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err

    path.write_text('{"sequence": 1, "release": ')
    fails_with("manifest-0001.json: not valid JSON")
    broken: list[tuple[dict[str, object], str]] = [
        ({"l": None}, "l is null: leave the field out, or give it a value"),
        ({"l": "2"}, "l = '2': Input should be a valid number"),
        ({"l": 0}, "l = 0: Input should be greater than 1"),
        ({"strategy": "constant-ratio"}, "strategy = 'constant-ratio': Input should be a valid"),
        (
            {"strategy": {**good["strategy"], "min_group_size": "2"}},
            "strategy.min_group_size = '2': Input should be a valid integer",
        ),
        (
            {"strategy": {**good["strategy"], "protected": 3}},
            "strategy.protected = 3: Input should be a valid list",
        ),
        ({"records_in": -1}, "records_in = -1: Input should be greater than or equal to 0"),
    ]
    for change, message in broken:
        path.write_text(json.dumps({**good, **change}))
        fails_with(message)
    path.write_text(json.dumps(good))
    record_path.write_text(json.dumps({**record, "suppressed": {"sensitive": {"Sales": "2"}}}))
    fails_with("suppressed.sensitive must be an object of counts >= 1")
    record_path.write_text(json.dumps(record))
    lines = out / "release-0001.jsonl"
    first, rest = lines.read_text().split("\n", 1)
    lines.write_text(json.dumps({**json.loads(first), "qid": ["x"]}) + "\n" + rest)
    fails_with("release-0001.jsonl, line 1: qid = ['x']: Input should be a valid dictionary")
    lines.write_text(json.dumps({**json.loads(first), "size": "five"}) + "\n" + rest)
    fails_with("release-0001.jsonl, line 1: size = 'five': Input should be a valid integer")
    lines.write_text(json.dumps({**json.loads(first), "sensitive": {"Sales": 0}}) + "\n" + rest)
    fails_with("line 1: sensitive.Sales = 0: Input should be greater than or equal to 1")
    lines.write_text(json.dumps({**json.loads(first), "colour": "red"}) + "\n" + rest)
    fails_with("line 1: colour = 'red': Extra inputs are not permitted")


PLANNING = (
    "stream_release.mechanisms.global_guarantee.plan",
    "stream_release.pipeline.publisher",
    "stream_release.mechanisms.global_guarantee.render",
    "stream_release.config",
    "stream_release.core.utility",
    "stream_release.core.table",
    "stream_release.core.grouping",
    "stream_release.history",
    "stream_release.stream",
    "stream_release.mechanisms.base",
    "stream_release.mechanisms.sampled_k_anonymity.mechanism",
    "stream_release.mechanisms.reconstruction_rr.mechanism",
    "stream_release.mechanisms.dp_sanitised.mechanism",
    "stream_release.core.privacy.strategy",
)
"""Modules the audit must not import (a prefix names a package; ``_audit`` and ``_params``
modules of a mechanism are the audit's own)."""
SHARED = (
    "stream_release.config",
    "stream_release.config.mechanisms",
    "stream_release.config.hierarchy",
)
"""What the audit shares with the mechanisms: the models of their tables (and the hierarchy
reader one of them uses), under the configuration's package (whose other modules are imported
only on first use)."""


def test_the_audit_imports_nothing_from_the_planning_code_for_any_kind(
    shared_data: Path, tmp_path: Path
) -> None:
    from stream_release.mechanisms import MECHANISMS

    directories = []
    for kind in ("global-guarantee", *MECHANISMS):
        work = tmp_path / kind
        work.mkdir()
        if kind == "global-guarantee":
            config = write_config(work, shared_data)
        else:
            config = kind_config(work, shared_data, kind)
        snaps = adult_series(shared_data, work, 20, rounds=2)
        out = work / "out"
        argv = ["anonymize", "--config", str(config), "--out", str(out), *map(str, snaps)]
        assert main(argv) == 0
        directories.append(str(out))
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from stream_release.audit import audit_directory\n"
        "oks = [audit_directory(Path(d)).ok for d in sys.argv[1:]]\n"
        "print(json.dumps({'ok': oks, 'modules': sorted(sys.modules)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *directories], capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout)
    assert result["ok"] == [True] * len(directories)
    loaded = [
        m
        for m in result["modules"]
        if any(m == p or m.startswith(p + ".") for p in PLANNING)
        and not m.endswith(("_audit", "_params"))
        and not (m in SHARED or m.startswith("stream_release.config.mechanisms."))
    ]
    assert loaded == [], f"the audit imported planning code: {loaded}"
    assert ADULT_SENSITIVE  # the series above are Adult's


def test_the_audit_holds_each_manifest_to_the_configuration_and_the_files(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settings taken from the manifest under audit prove nothing, and every figure it states
    is recomputed: each change below fails, with the configuration or without."""
    monkeypatch.setenv("SR_HISTORY_KEY", "5e" * 32)  # a series with suppressed rows
    config, out, snaps = _series(shared_data, tmp_path, rounds=6)
    report = audit_directory(out, config=config, snapshots=snaps)
    assert report.ok and all("unplaced" in line for line in report.not_done), report.not_done
    _drop_ledger(out)
    k = max(
        range(1, 7),
        key=lambda k: json.loads((out / f"manifest-{k:04d}.json").read_text())["suppressed"],
    )
    path = out / f"manifest-{k:04d}.json"
    good = json.loads(path.read_text())
    changes: list[tuple[dict[str, object], bool]] = [  # (change, caught without --config too)
        ({"strategy": {**good["strategy"], "protected": ["nothing-real"]}}, False),
        ({"strategy": {**good["strategy"], "group_size_cap": 2}}, True),
        ({"strategy": {**good["strategy"], "base_ratio": 2.5}}, True),
        ({"l": 1.5}, False),
        ({"breach": {**good["breach"], "max": 0.9}}, True),
        ({"breach": {**good["breach"], "p50": 0.123}}, True),
        ({"breach": {**good["breach"], "spent": good["breach"]["spent"] + 1}}, True),
        ({"suppressed_set": {**good["suppressed_set"], "breach_max": 0.99}}, True),
        ({"suppressed_set": {**good["suppressed_set"], "share_max": 0.9}}, True),
    ]
    for change, public in changes:
        path.write_text(json.dumps({**good, **change}))
        assert not audit_directory(out, config=config, snapshots=snaps).ok, change
        if public:
            assert not audit_directory(out).ok, change
    # a figure the format does not have is not a manifest of the format
    path.write_text(json.dumps({**good, "suppressed_set": {**good["suppressed_set"], "decoys": 9}}))
    with pytest.raises(AuditInputError, match=r"suppressed_set\.decoys = 9: Extra inputs"):
        audit_directory(out)
    path.write_text(json.dumps(good))
    # a header-only assignments file does not skip the checks, --strict or not
    assignments = tmp_path / "out.private" / f"assignments-{k:04d}.csv"
    assignments.write_text("id,group\n")
    assert not audit_directory(out).ok


def test_a_group_above_1_over_l_fails_from_the_public_files_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    line = {"release": "r1", "sequence": 1, "group": 0, "size": 3, "qid": {"age": 30},
            "sensitive": {"s": 2, "t": 1}}  # fmt: skip
    (out / "release-0001.jsonl").write_text(json.dumps(line) + "\n")
    manifest = {"release": "r1", "sequence": 1, "records_in": 3, "published": 3, "suppressed": 0,
                "groups": 1, "l": 2.0, "utility": {}, "elapsed_s": 0.0,
                "strategy": {"name": "constant-ratio", "l": 2.0, "k_prime": 3, "base_ratio": 4.85},
                "breach": {"bound": 0.5, "max": 0.4, "p50": 0.4, "p99": 0.4}}  # fmt: skip
    (out / "manifest-0001.json").write_text(json.dumps(manifest))
    report = audit_directory(out)
    assert any("2 of its 3 rows hold 's'" in p for p in report.releases[0].problems)


def test_the_private_record_cannot_buy_an_exemption_or_hide_the_set(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row listed as unplaced that a group could take as it stands, a row listed as
    withheld for its history that the rule does not withhold, a private record without the set
    the manifest states, a record naming another snapshot: each fails."""
    monkeypatch.setenv("SR_HISTORY_KEY", "5e" * 32)
    # the five rarest occupations protected: release 5 takes a group as decoys
    config, out, snaps = _series(shared_data, tmp_path, rounds=6, protected=RARE)
    _drop_ledger(out)
    private = tmp_path / "out.private"
    k = next(
        k
        for k in range(1, 7)
        if json.loads((private / f"private-{k:04d}.json").read_text())["suppressed"]["decoys"]
    )
    path = private / f"private-{k:04d}.json"
    good = json.loads(path.read_text())
    block = good["suppressed"]
    suppressed = [
        line.split(",")[0]
        for line in (private / f"assignments-{k:04d}.csv").read_text().splitlines()[1:]
        if line.split(",")[1] == ""
    ]
    decoys = [i for i in suppressed if i not in block["withheld"] + block["unplaced"]]
    caught = 0
    for row in decoys:
        lie = {**block, "unplaced": [*block["unplaced"], row]}
        path.write_text(json.dumps({**good, "suppressed": lie}))
        report = audit_directory(out, config=config, snapshots=snaps)
        caught += any("could take as it stands" in p for p in report.releases[k - 1].problems)
    assert caught  # a decoy came out of a group that takes it back
    lie = {**block, "withheld": [*block["withheld"], decoys[0]]}
    path.write_text(json.dumps({**good, "suppressed": lie}))
    report = audit_directory(out, config=config, snapshots=snaps)
    assert any("withheld for their history" in p for p in report.releases[k - 1].problems)
    path.write_text(json.dumps({key: v for key, v in good.items() if key != "suppressed"}))
    assert not audit_directory(out, config=config, snapshots=snaps).ok
    other = {**good["source"], "sha256": "0" * 64}
    path.write_text(json.dumps({**good, "source": other}))
    report = audit_directory(out, config=config, snapshots=snaps)
    assert any("is not the snapshot release" in p for p in report.releases[k - 1].problems)
