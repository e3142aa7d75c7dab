"""Builders shared by the end-to-end tests (not fixtures: plain functions)."""

from __future__ import annotations

from pathlib import Path

from stream_release.datasets import ADULT_QID, ADULT_SENSITIVE, Table, make_series, read_csv_table


def write_config(directory: Path, data: Path, **privacy: object) -> Path:
    """An Adult configuration (ARX hierarchies from ``data``) with ``privacy`` overrides."""
    hierarchies = "\n".join(f'"{a}" = "{data / f"adult_hierarchy_{a}.csv"}"' for a in ADULT_QID)
    lines = [
        f"{k} = {_toml(v)}"
        for k, v in {"l": 2, "strategy": "constant-ratio", "k_prime": 3, **privacy}.items()
    ]
    path = directory / "config.toml"
    path.write_text(
        "[schema]\n"
        'id = "id"\n'
        f'sensitive = "{ADULT_SENSITIVE}"\n'
        f"qid = {_toml(list(ADULT_QID))}\n"
        "[schema.hierarchies]\n"
        f"{hierarchies}\n"
        "[privacy]\n" + "\n".join(lines) + "\n[output]\nqueries = 500\n"
    )
    return path


def adult_series(
    data: Path, directory: Path, n: int, *, rounds: int | None = None, seed: int = 0
) -> list[Path]:
    """Write the first ``rounds`` (default all ``n``) snapshots of the paper's series on Adult."""
    series = make_series(read_csv_table(data / "adult.csv"), ADULT_SENSITIVE, n, seed=seed)
    paths = []
    for i, table in enumerate(series[: rounds or n], start=1):
        path = directory / f"t{i:02d}.csv"
        table.write_csv(path)
        paths.append(path)
    return paths


def adult_table(data: Path) -> Table:
    return read_csv_table(data / "adult.csv")


def _toml(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)
