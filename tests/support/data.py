"""The real data sets as the end-to-end tests use them: Adult snapshots and series, the wage
panel, and the configurations that read them (plain functions, not fixtures)."""

from __future__ import annotations

import bz2
import csv
import io
from pathlib import Path

import numpy as np

from stream_release.devtools.datasets import (
    ADULT_QID,
    ADULT_SENSITIVE,
    Table,
    make_series,
    read_csv_table,
)


def _write_config(directory: Path, schema: str, privacy: dict[str, object]) -> Path:
    """``config.toml`` in ``directory``: the ``[schema]`` text, constant-ratio at l = 2 with
    ``privacy`` overrides, 500 queries per release."""
    settings = {"l": 2, "strategy": "constant-ratio", **privacy}
    lines = [f"{k} = {_toml(v)}" for k, v in settings.items()]
    path = directory / "config.toml"
    path.write_text(schema + "[privacy]\n" + "\n".join(lines) + "\n[output]\nqueries = 500\n")
    return path


def write_config(directory: Path, data: Path, **privacy: object) -> Path:
    """An Adult configuration (ARX hierarchies from ``data``) with ``privacy`` overrides."""
    hierarchies = "\n".join(f'"{a}" = "{data / f"adult_hierarchy_{a}.csv"}"' for a in ADULT_QID)
    schema = (
        f'[schema]\nid = "id"\nsensitive = "{ADULT_SENSITIVE}"\n'
        f"qid = {_toml(list(ADULT_QID))}\n[schema.hierarchies]\n{hierarchies}\n"
    )
    return _write_config(directory, schema, {"k_prime": 3, **privacy})


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


def adult_register(data: Path, path: Path) -> Path:
    """Write Adult's ids and QIDs (no sensitive value) to ``path``: the population register
    of virtual individuals for :func:`adult_series` (Wong et al. 2010, §8)."""
    table = adult_table(data)
    Table({c: table.columns[c] for c in ("id", *ADULT_QID)}).write_csv(path)
    return path


WAGE_PANEL = Path(__file__).resolve().parents[1] / "data" / "wage_panel.csv.bz2"
"""Vella and Verbeek's 8-year wage panel (``tests/data/README.md``)."""

WAGE_QID = ("black", "hisp", "married", "union", "educ", "exper")


def wage_panel_series(directory: Path) -> list[Path]:
    """Write the wage panel as one snapshot per year (``y1980.csv`` ...): id ``nr``, sensitive
    ``occupation``, QIDs :data:`WAGE_QID`."""
    rows = list(csv.DictReader(io.StringIO(bz2.decompress(WAGE_PANEL.read_bytes()).decode())))
    columns = ["nr", "occupation", *WAGE_QID]
    paths = []
    for year in sorted({r["year"] for r in rows}):
        path = directory / f"y{year}.csv"
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(columns)
            writer.writerows([r[c] for c in columns] for r in rows if r["year"] == year)
        paths.append(path)
    return paths


def wage_panel_config(directory: Path, **privacy: object) -> Path:
    """A configuration of :func:`wage_panel_series`: every occupation protected."""
    schema = f'[schema]\nid = "nr"\nsensitive = "occupation"\nqid = {_toml(list(WAGE_QID))}\n'
    return _write_config(directory, schema, {"k_prime": 2, **privacy})


def adult_table(data: Path) -> Table:
    return read_csv_table(data / "adult.csv")


def adult_snapshot(data: Path, path: Path, rows: int) -> Path:
    """Write the first ``rows`` rows of Adult (ids ``p-0``, ``p-1``, ...) to ``path`` (``;``)."""
    adult_table(data).take(np.arange(rows)).write_csv(path)
    return path


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)
