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
from helpers import adult_series, write_config

from stream_release.audit import audit_directory
from stream_release.cli import main
from stream_release.datasets import ADULT_SENSITIVE


def _series(shared_data: Path, tmp_path: Path, rounds: int = 2) -> tuple[Path, Path, list[Path]]:
    config = write_config(tmp_path, shared_data)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=rounds)
    out = tmp_path / "out"
    assert main(["anonymize", "--config", str(config), "--out", str(out), *map(str, snaps)]) == 0
    return config, out, snaps


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
    assert "sex = 'Male' does not cover its rows' values" in capsys.readouterr().out
    # without the hierarchies, a leaf no member holds cannot be told from a label: said so
    assert main(["audit", str(out), *map(str, snaps)]) == 0
    printed = capsys.readouterr().out
    assert "not checked:" in printed and "give --config" in printed
    assert main(["audit", "--strict", str(out), *map(str, snaps)]) == 1


def test_a_missing_snapshot_is_reported_and_a_moved_one_is_found_by_its_hash(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, out, snaps = _series(shared_data, tmp_path)
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
        manifest = {
            "release": f"r{k}",
            "sequence": k,
            "records_in": n,
            "published": n,
            "suppressed": 0,
            "groups": 1,
            "l": 2.0,
            "strategy": {"name": "constant-ratio", "protected": ["s"], "min_group_size": 2},
            "schema": {"id": "id", "qid": ["age"], "sensitive": "disease"},
            "breach": {"bound": 0.5, "max": 1 - ((n - c) / n) ** k},
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
    (out / "manifest-0001.json").write_text('{"sequence": 1, "release": ')
    capsys.readouterr()
    assert main(["audit", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "manifest-0001.json: not valid JSON" in err
    (out / "manifest-0001.json").write_text('{"sequence": 1}')
    (out / "release-0001.jsonl").write_text('{"group": 0, "size": "five"}\n')
    assert main(["audit", str(out)]) == 2
    assert "release-0001.jsonl, line 1: group and size must be integers" in capsys.readouterr().err


PLANNING = (
    "stream_release.release",
    "stream_release.series",
    "stream_release.publication",
    "stream_release.config",
    "stream_release.metrics",
    "stream_release.table",
    "stream_release.grouping",
    "stream_release.history",
    "stream_release.stream",
    "stream_release.mechanisms.base",
    "stream_release.mechanisms.sampled_k_anonymity",
    "stream_release.mechanisms.reconstruction_rr",
    "stream_release.mechanisms.dp_sanitised",
)
"""Modules the audit must not import (a prefix names a package; ``_audit`` and ``_params``
modules of a mechanism are the audit's own)."""


def test_the_audit_imports_nothing_from_the_planning_code_for_any_kind(
    shared_data: Path, tmp_path: Path
) -> None:
    from test_mechanisms import kind_config

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
    ]
    assert loaded == [], f"the audit imported planning code: {loaded}"
    assert ADULT_SENSITIVE  # the series above are Adult's
