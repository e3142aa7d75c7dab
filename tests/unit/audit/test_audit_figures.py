"""The audit checks every figure it prints (issue 26, item 6), on a tiny synthetic series.

Measured on main before: a forged ``query_error`` or ``ncp`` passed, a deleted last release
went unnoticed, and without the private files the audit printed ``ok`` with ``breach.max
0.000000`` and exited 0. Each tampering below must fail the release (or the series), and what
the files given do not allow must be listed as not checked, never passed.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from support.tiny_series import anonymize, tiny_config, tiny_snapshots

from stream_release.audit import AuditReport, audit_directory
from stream_release.cli.main import main

RELEASES = 6
"""Releases of the tiny series; the last two suppress rows."""

KEY = "01" * 32
"""The series' pseudonymisation key: fixed, so that its releases are the same in every run."""


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny series of :data:`RELEASES` releases in each format: ``<format>/out`` (with
    ``out.private``, ``out.ledger``) and its ``config.toml``; the snapshots were moved to
    ``kept/`` after publishing, so the audit finds them only when given."""
    root = tmp_path_factory.mktemp("figures")
    (root / "sent").mkdir()
    snaps = tiny_snapshots(root / "sent", RELEASES)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SR_HISTORY_KEY", KEY)
        for fmt in ("generalized", "anatomy"):
            work = root / fmt
            work.mkdir()
            config = tiny_config(work, fmt)
            assert anonymize(config, work / "out", *snaps) == 0
    (root / "sent").rename(root / "kept")
    return root


@pytest.fixture
def series(published: Path, tmp_path: Path) -> Callable[[str], tuple[Path, Path, list[Path]]]:
    """A copy of the published series of a format to tamper with: ``(out, config, snaps)``."""

    def copy(fmt: str = "generalized") -> tuple[Path, Path, list[Path]]:
        work = tmp_path / fmt
        shutil.copytree(published / fmt, work)
        return work / "out", work / "config.toml", sorted((published / "kept").glob("*.csv"))

    return copy


def _audit(out: Path, config: Path | None, snaps: list[Path] = ()) -> AuditReport:  # type: ignore[assignment]
    return audit_directory(out, config=config, snapshots=snaps)


def _forge(out: Path, sequence: int, change: Callable[[dict], None]) -> None:  # type: ignore[type-arg]
    path = out / f"manifest-{sequence:04d}.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest, indent=2) + "\n")


def _problems(report: AuditReport, sequence: int) -> list[str]:
    return report.releases[sequence - 1].problems


@pytest.mark.parametrize("fmt", ["generalized", "anatomy"])
def test_every_figure_of_an_untouched_series_is_recomputed(
    fmt: str, series: Callable[[str], tuple[Path, Path, list[Path]]]
) -> None:
    out, config, snaps = series(fmt)
    report = _audit(out, config, snaps)
    assert report.ok, report.table()
    assert report.exit_code() == 0
    # all recomputed; the planner's search for a place for an unplaced row is its claim
    assert [line for line in report.not_done if "unplaced" not in line] == []
    manifests = [json.loads((out / f"manifest-{k:04d}.json").read_text()) for k in (5, 6)]
    assert all(m["suppressed"] > 0 for m in manifests)  # suppression figures exercised


def _forge_figure(out: Path, sequence: int, key: str) -> None:
    """Forge ``utility.<key>`` of release ``sequence``: an integer one more, a float off by
    1 % and 0.01."""

    def change(manifest: dict) -> None:  # type: ignore[type-arg]
        stated = manifest["utility"][key]
        manifest["utility"][key] = stated + 1 if isinstance(stated, int) else stated * 1.01 + 0.01

    _forge(out, sequence, change)


QUERY_FIGURES = ["query_error", "query_error_median", "query_error_trimmed", "queries"]


@pytest.mark.parametrize("fmt", ["generalized", "anatomy"])
def test_a_forged_query_figure_fails_with_the_snapshots(
    fmt: str, series: Callable[[str], tuple[Path, Path, list[Path]]]
) -> None:
    out, config, snaps = series(fmt)
    for k, key in enumerate(QUERY_FIGURES, start=1):  # one in each of releases 1-4
        _forge_figure(out, k, key)
    report = _audit(out, config, snaps)
    for k, key in enumerate(QUERY_FIGURES, start=1):
        assert [p.split(" = ")[0] for p in _problems(report, k)] == [f"manifest utility.{key}"]
    assert not _problems(report, 5) and not _problems(report, 6)
    # without the snapshots the figures are not recomputed, and the audit says so
    report = _audit(out, config)
    assert not any(r.problems for r in report.releases)
    assert any("utility.query_error" in line and "give the snapshots" in line
               for line in report.not_done)  # fmt: skip


def test_a_forged_ncp_fails_from_the_lines_and_the_hierarchies(
    series: Callable[[str], tuple[Path, Path, list[Path]]],
) -> None:
    out, config, snaps = series("generalized")
    for k in (2, 6):
        _forge(out, k, lambda m: m["utility"].update(ncp=m["utility"]["ncp"] + 0.01))
    report = _audit(out, config, snaps)
    for k in (2, 6):
        assert any(p.startswith("manifest utility.ncp = ") for p in _problems(report, k))
    # without the snapshots: release 2 suppressed nothing, so its lines show the domains;
    # release 6 suppressed rows, whose values may widen them: not recomputed, said so
    report = _audit(out, config)
    assert any(p.startswith("manifest utility.ncp = ") for p in _problems(report, 2))
    assert not _problems(report, 6)
    assert any("utility.ncp: its domains are the snapshot's" in line
               and line.endswith("(releases 5, 6)") for line in report.not_done)  # fmt: skip
    # without the hierarchies, not at all
    report = _audit(out, None)
    assert any("utility.ncp: it needs the hierarchies" in line for line in report.not_done)


def test_an_anatomy_release_states_no_generalization(
    series: Callable[[str], tuple[Path, Path, list[Path]]],
) -> None:
    out, _, _ = series("anatomy")
    _forge(out, 1, lambda m: m["utility"].update(ncp=0.25))
    report = _audit(out, None)
    assert "manifest utility.ncp = 0.25 but the files give 0.0" in _problems(report, 1)


SIZE_FIGURES = ["avg_group_size", "max_group_size", "min_group_size", "groups", "published"]
ROW_FIGURES = ["suppressed", "suppression", "discernibility"]


@pytest.mark.parametrize("keys", [SIZE_FIGURES, ROW_FIGURES])
def test_a_forged_group_size_figure_fails(
    keys: list[str], series: Callable[[str], tuple[Path, Path, list[Path]]]
) -> None:
    """Sizes come from the public lines alone; the suppressed rows from the assignments."""
    out, _, _ = series("generalized")
    first = RELEASES + 1 - len(keys)  # the last releases, which suppress rows
    for k, key in enumerate(keys, start=first):
        _forge_figure(out, k, key)
    report = _audit(out, None)
    for k, key in enumerate(keys, start=first):
        assert [p.split(" = ")[0] for p in _problems(report, k)] == [f"manifest utility.{key}"]
    shutil.move(out.with_name("out.private"), out.with_name("hidden"))  # public-only
    report = _audit(out, None)
    public = keys == SIZE_FIGURES
    for k, key in enumerate(keys, start=first):
        forged = [p.split(" = ")[0] for p in _problems(report, k)] == [f"manifest utility.{key}"]
        assert forged == public
    if not public:
        assert any("utility.suppressed, suppression and discernibility" in line
                   for line in report.not_done)  # fmt: skip


def test_a_forged_bound_fails(series: Callable[[str], tuple[Path, Path, list[Path]]]) -> None:
    out, _, _ = series("generalized")
    _forge(out, 3, lambda m: m["breach"].update(bound=0.6))
    _forge(out, 4, lambda m: m["suppressed_set"].update(share_bound=0.6))
    report = _audit(out, None)
    assert "manifest breach.bound = 0.6 but 1/l = 0.5" in _problems(report, 3)
    assert "manifest suppressed_set.share_bound = 0.6 but 1/l = 0.5" in _problems(report, 4)


def test_a_deleted_last_release_is_caught_by_the_ledger(
    series: Callable[[str], tuple[Path, Path, list[Path]]], capsys: pytest.CaptureFixture[str]
) -> None:
    out, config, snaps = series("generalized")
    for name in ("release-0006.jsonl", "manifest-0006.json"):
        (out / name).unlink()
    report = _audit(out, config, snaps[:5])
    assert [r.ok for r in report.releases] == [True] * 5  # the rest is consistent
    assert not report.ok
    assert report.problems == [
        f"release(s) 6 recorded in the series ledger are missing from {str(out)!r} (deleted, "
        "or the archive was restored from an older backup)"
    ]
    capsys.readouterr()
    assert main(["audit", str(out), "--config", str(config), *map(str, snaps[:5])]) == 1
    assert "series: FAIL: release(s) 6 recorded in the series ledger" in capsys.readouterr().out
    # without the ledger the series looks shorter: passed, but said what could not be told
    ledger = out.with_name("out.ledger")
    moved = ledger.rename(out.with_name("elsewhere.ledger"))
    report = _audit(out, config, snaps[:5])
    assert report.ok and not report.strict_ok
    assert any("a deleted last release" in line for line in report.not_done)
    assert not audit_directory(out, ledger=moved).ok  # named explicitly


def test_an_altered_release_file_differs_from_the_ledger(
    series: Callable[[str], tuple[Path, Path, list[Path]]],
) -> None:
    """Groups reordered (every figure still adds up) and a private file changed."""
    out, _, _ = series("generalized")
    path = out / "release-0003.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[::-1]) + "\n")
    assignments = out.with_name("out.private") / "assignments-0004.csv"
    assignments.write_text(assignments.read_text().replace("\r\n", "\n"))
    report = _audit(out, None)
    assert "release 3: release-0003.jsonl (altered) differ from the series ledger" in (
        report.problems
    )
    assert "release 4: assignments-0004.csv (altered) differ from the series ledger" in (
        report.problems
    )


def test_public_only_mode_says_what_it_could_not_check(
    series: Callable[[str], tuple[Path, Path, list[Path]]], capsys: pytest.CaptureFixture[str]
) -> None:
    out, config, _ = series("generalized")
    shutil.move(out.with_name("out.private"), out.with_name("elsewhere"))
    capsys.readouterr()
    assert main(["audit", str(out), "--config", str(config)]) == 3
    printed = capsys.readouterr().out
    rows = printed.splitlines()[1 : RELEASES + 1]
    for row in rows:
        assert row.rstrip().endswith("unchecked: no private files, the breach cannot be recomputed")
        assert "0.000000" not in row and " ok" not in row
    assert "no breach probability (breach.max, p50, p99, spent)" in printed
    assert main(["audit", "--strict", str(out), "--config", str(config)]) == 1
    capsys.readouterr()
    assert main(["audit", "--json", str(out)]) == 3
    body = json.loads(capsys.readouterr().out)
    assert {r["breach_max"] for r in body["releases"]} == {None}
    assert {r["records"] for r in body["releases"]} == {None}
    assert {r["status"].split(":")[0] for r in body["releases"]} == {"unchecked"}
    # a failed check is still a failure: exit 1, not 3
    _forge(out, 1, lambda m: m["utility"].update(max_group_size=99))
    assert main(["audit", str(out)]) == 1
