"""``stream-release reconstruct``: the analyst's count estimate from a reconstruction-private-rr
series on Adult, published offline with the configuration of ``test_mechanisms``.

The command's numbers are the library's :func:`~stream_release.mechanisms.
reconstruction_rr.estimate.reconstruct` on the same files; the true count (from the snapshots
and the private assignments, which the command never reads) lies within 5 standard errors;
bad arguments are one error line and exit 2.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from support.data import adult_series, write_config
from support.mechanisms import kind_config

from stream_release.cli.main import main
from stream_release.cli.reconstruct import Z
from stream_release.devtools.datasets import read_csv_table
from stream_release.mechanisms.reconstruction_rr.estimate import reconstruct

KIND = "reconstruction-private-rr"
KEY = "reconstruct-test-key-0123456789abcdef"
RELEASES = 2
QUERIES: list[tuple[str, dict[str, list[str]]]] = [
    ("Sales", {}),
    ("Sales", {"sex": ["Female"], "education": ["Bachelors", "Masters"]}),
    ("Exec-managerial", {"age": ["39", "40", "41"]}),
    ("Craft-repair", {"marital-status": ["Never-married"], "race": ["White"]}),
    ("Armed-Forces", {"sex": ["Male"]}),
]
"""(sensitive value, --where filters): several values of an attribute mean any of them."""


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> tuple[Path, list[Path]]:
    """Two offline releases of reconstruction-private-rr on the Adult series, and the
    snapshots they were made from."""
    directory = tmp_path_factory.mktemp("rr-series")
    config = kind_config(directory, shared_data, KIND)
    snapshots = adult_series(shared_data, directory, 20, rounds=RELEASES)
    out = directory / "out"
    argv = ["anonymize", "--config", str(config), "--out", str(out), *map(str, snapshots)]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SR_HISTORY_KEY", KEY)  # the same randomized values in every run
        assert main(argv) == 0
    return out, snapshots


def _argv(out: Path, value: str, where: Mapping[str, Sequence[str]], *extra: str) -> list[str]:
    filters = [f"--where={name}={v}" for name, values in where.items() for v in values]
    return ["reconstruct", str(out), "--value", value, *filters, *extra]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _release(out: Path, sequence: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    manifest = json.loads((out / f"manifest-{sequence:04d}.json").read_text())
    lines = (out / f"release-{sequence:04d}.jsonl").read_text().splitlines()
    return manifest, [json.loads(line) for line in lines]


def _true_count(
    out: Path, snapshot: Path, sequence: int, value: str, where: Mapping[str, Sequence[str]]
) -> int:
    """Published rows of the snapshot with ``value`` whose QIDs pass ``where``."""
    with (out.with_name(out.name + ".private") / f"assignments-{sequence:04d}.csv").open(
        newline=""
    ) as fh:
        published = {row["id"] for row in csv.DictReader(fh) if row["group"] != ""}
    table = read_csv_table(snapshot)
    columns = table.columns
    return sum(
        1
        for i, ident in enumerate(columns["id"])
        if ident in published
        and columns["occupation"][i] == value
        and all(columns[name][i] in values for name, values in where.items())
    )


@pytest.mark.parametrize(("value", "where"), QUERIES)
def test_the_estimate_is_the_librarys_and_covers_the_true_count(
    capsys: pytest.CaptureFixture[str],
    series: tuple[Path, list[Path]],
    value: str,
    where: dict[str, list[str]],
) -> None:
    out, snapshots = series
    code, text, err = _run(capsys, _argv(out, value, where, "--json"))
    assert (code, err) == (0, "")
    answer = json.loads(text)
    assert answer["value"] == value and answer["where"] == where
    assert answer["sensitive"] == "occupation" and answer["confidence"] == 0.95
    assert [r["sequence"] for r in answer["releases"]] == [1, 2]
    for got, snapshot in zip(answer["releases"], snapshots, strict=True):
        sequence = got["sequence"]
        manifest, lines = _release(out, sequence)
        expected = reconstruct(lines, manifest, value, where or None)
        assert got["release"] == snapshot.stem
        assert got["estimate"] == expected.estimate
        assert got["variance"] == expected.variance
        assert got["standard_error"] == expected.standard_error
        assert got["frequency"] == expected.frequency
        assert (got["rows"], got["observed"]) == (expected.size, expected.observed)
        half = Z * expected.standard_error
        assert got["ci95"] == [expected.estimate - half, expected.estimate + half]
        matching = [line for line in lines if all(line["qid"][k] in v for k, v in where.items())]
        assert got["groups"] == len(matching)
        assert got["rows"] == sum(line["size"] for line in matching)
        truth = _true_count(out, snapshot, sequence, value, where)
        assert abs(got["estimate"] - truth) <= 5 * got["standard_error"], (sequence, truth, got)


def test_text_output_and_one_release(
    capsys: pytest.CaptureFixture[str], series: tuple[Path, list[Path]]
) -> None:
    out, _ = series
    where = {"sex": ["Female"], "education": ["Bachelors", "Masters"]}
    code, text, _ = _run(capsys, _argv(out, "Sales", where))
    assert code == 0
    query, header, columns, *rows = text.splitlines()
    assert query == (
        "COUNT(*) WHERE sex = Female AND education IN (Bachelors, Masters) AND occupation = Sales"
    )
    assert "Lemma 1" in header and "arXiv:1202.3179" in header and "95 %" in header
    assert columns.split() == [
        "release", "label", "groups", "rows", "estimate", "variance", "std_error", "ci95",
    ]  # fmt: skip
    assert [row.split()[:2] for row in rows] == [["1", "t01"], ["2", "t02"]]
    manifest, lines = _release(out, 2)
    expected = reconstruct(lines, manifest, "Sales", where)
    assert f"{expected.estimate:.2f}" in rows[1] and f"{expected.standard_error:.2f}" in rows[1]

    code, text, _ = _run(capsys, _argv(out, "Sales", where, "--release", "2", "--json"))
    assert code == 0
    [only] = json.loads(text)["releases"]
    assert (only["sequence"], only["estimate"]) == (2, expected.estimate)


def test_a_release_without_a_matching_group_has_no_estimate(
    capsys: pytest.CaptureFixture[str], series: tuple[Path, list[Path]]
) -> None:
    out, _ = series
    lines = [_release(out, k)[1] for k in (1, 2)]
    ages = [{line["qid"]["age"] for line in release} for release in lines]
    only_second = sorted(ages[1] - ages[0])
    if not only_second:
        pytest.fail("the fixture series has no age published only in release 2")
    age = only_second[0]
    code, text, _ = _run(capsys, _argv(out, "Sales", {"age": [age]}, "--json"))
    assert code == 0
    first, second = json.loads(text)["releases"]
    assert first["groups"] == first["rows"] == 0
    assert first["estimate"] is None and first["ci95"] is None
    assert second["groups"] >= 1 and second["estimate"] is not None
    code, text, _ = _run(capsys, _argv(out, "Sales", {"age": [age]}))
    assert code == 0 and "no published group matches" in text.splitlines()[3]


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code, text, err = _run(capsys, argv)
    assert (code, text) == (2, "")
    [line] = err.splitlines()
    assert line.startswith("stream-release reconstruct: error: ")
    return line


def test_bad_arguments_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
    series: tuple[Path, list[Path]],
    shared_data: Path,
    tmp_path: Path,
) -> None:
    out, snapshots = series
    assert "not a QID" in _error(capsys, _argv(out, "Sales", {"salary": ["<=50K"]}))
    assert "age, sex, race" in _error(capsys, _argv(out, "Sales", {"salary": ["<=50K"]}))
    line = _error(capsys, _argv(out, "Sale", {}))
    assert "'Sale'" in line and "sensitive domain" in line and "'Sales'" in line
    assert "holds releases 1..2" in _error(capsys, _argv(out, "Sales", {}, "--release", "3"))
    assert "no published group" in _error(capsys, _argv(out, "Sales", {"age": ["300"]}))
    assert "not a directory" in _error(capsys, _argv(tmp_path / "missing", "Sales", {}))
    assert "no manifest" in _error(capsys, _argv(tmp_path, "Sales", {}))
    # a series of the global guarantee is not reconstruction-private
    other = tmp_path / "global"
    config = write_config(tmp_path, shared_data)
    assert main(["anonymize", "--config", str(config), "--out", str(other), str(snapshots[0])]) == 0
    capsys.readouterr()
    line = _error(capsys, _argv(other, "Sales", {}))
    assert "'global-guarantee'" in line and KIND in line
    # a malformed filter: argparse's usage and one error line, exit 2
    with pytest.raises(SystemExit) as exc:
        main(["reconstruct", str(out), "--value", "Sales", "--where", "age"])
    assert exc.value.code == 2
    assert "give ATTR=VALUE" in capsys.readouterr().err
