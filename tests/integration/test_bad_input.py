"""Bad input: one clear line naming the problem, exit 2, nothing half-written (docs/contract.md
§3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.data import adult_series, write_config

from stream_release.cli.main import main


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err.strip()


def _anonymize(
    capsys: pytest.CaptureFixture[str], config: Path, out: Path, *snaps: Path
) -> tuple[int, str]:
    """``stream-release anonymize`` of ``snaps`` into ``out``: its exit code and stderr."""
    return _run(capsys, "anonymize", "--config", str(config), "--out", str(out), *map(str, snaps))


@pytest.fixture
def series(shared_data: Path, tmp_path: Path) -> list[Path]:
    return adult_series(shared_data, tmp_path, 20, rounds=2)


def _nothing_written(out: Path) -> bool:
    return not list(out.glob("*-0001.*")) and not (out / "history" / "history.npz").exists()


def test_missing_column(
    shared_data: Path, tmp_path: Path, series: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    text = series[1].read_text().splitlines()
    header = text[0].split(";")
    drop = header.index("education")
    series[1].write_text(
        "\n".join(";".join(f for j, f in enumerate(r.split(";")) if j != drop) for r in text)
    )
    out = tmp_path / "out"
    code, err = _anonymize(capsys, write_config(tmp_path, shared_data), out, *series)
    assert code == 2
    assert len(err.splitlines()) == 1 and "'education'" in err
    assert _nothing_written(out)  # the first, valid snapshot was not published either


def test_unknown_hierarchy_value(
    shared_data: Path, tmp_path: Path, series: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    text = series[0].read_text().replace(";Bachelors;", ";Bachelor;", 1)
    series[0].write_text(text)
    out = tmp_path / "out"
    code, err = _anonymize(capsys, write_config(tmp_path, shared_data), out, series[0])
    assert code == 2
    assert "'Bachelor'" in err and "education" in err and "line" in err
    assert _nothing_written(out)


def test_duplicate_id(
    shared_data: Path, tmp_path: Path, series: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = series[0].read_text().splitlines()
    series[0].write_text("\n".join([*lines, lines[5]]) + "\n")
    out = tmp_path / "out"
    code, err = _anonymize(capsys, write_config(tmp_path, shared_data), out, series[0])
    assert code == 2
    assert "more than once" in err and "line" in err
    assert _nothing_written(out)


def test_infeasible_parameters_name_the_value_and_the_largest_setting(
    shared_data: Path, tmp_path: Path, series: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # k' = 5 at l = 2 needs ratio 7.73; the most frequent occupation allows about 7.5
    out = tmp_path / "out"
    config = write_config(tmp_path, shared_data, k_prime=5)
    code, err = _anonymize(capsys, config, out, series[0])
    assert code == 2
    assert "infeasible" in err and "largest feasible setting: k_prime = 4" in err
    assert _nothing_written(out)


def test_bad_configuration(
    shared_data: Path, tmp_path: Path, series: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, shared_data, l=1)
    code, err = _anonymize(capsys, config, tmp_path / "o", series[0])
    assert code == 2 and "privacy" in err and "l = 1" in err
    code, err = _anonymize(capsys, tmp_path / "nope.toml", Path("o"), series[0])
    assert code == 2 and "does not exist" in err


def test_audit_of_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, "audit", str(tmp_path / "nothing"))
    assert code == 2 and "not a directory" in err
