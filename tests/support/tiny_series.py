"""A tiny synthetic series for the tests of the series ledger and the audit's figures: a few
hundred rows per snapshot with a numeric, a hierarchy and a set QID, published offline with a
local history in well under a second per release (plain functions, not fixtures)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from stream_release.cli.main import main
from support.tables import EDUCATION_HIERARCHY

VALUES = (
    "cold", "flu", "hiv", "asthma", "mumps", "angina", "gout", "acne",
    "gastritis", "migraine", "otitis", "anemia", "eczema", "measles", "rubella", "sciatica",
)  # fmt: skip
EDUCATION = ("Bachelors", "Some-college", "11th", "HS-grad", "Masters", "9th", "Doctorate")
CITIES = ("Paris", "Lyon", "Nice", "Lille", "Brest")


def tiny_config(directory: Path, fmt: str = "generalized", **output: object) -> Path:
    """``config.toml`` in ``directory``: age numeric, education by
    :data:`~support.tables.EDUCATION_HIERARCHY`, city a set; l = 2, constant-ratio k' = 4;
    200 queries per release; ``output`` adds ``[output]`` keys (strings quoted)."""
    hierarchy = directory / "education.csv"
    hierarchy.write_text(EDUCATION_HIERARCHY, encoding="utf-8")
    extra = "".join(
        f"{k} = {v!r}\n".replace("'", '"') if isinstance(v, str) else f"{k} = {v}\n"
        for k, v in output.items()
    )
    path = directory / "config.toml"
    path.write_text(
        '[schema]\nid = "id"\nsensitive = "disease"\nqid = ["age", "education", "city"]\n'
        'numeric = ["age"]\n[schema.hierarchies]\neducation = "education.csv"\n'
        '[privacy]\nl = 2\nstrategy = "constant-ratio"\nk_prime = 4\n'
        f'[output]\nformat = "{fmt}"\nqueries = 200\nquery_seed = 7\n{extra}',
        encoding="utf-8",
    )
    return path


def tiny_snapshots(directory: Path, releases: int, rows: int = 240, seed: int = 0) -> list[Path]:
    """``releases`` snapshots ``s01.csv``, ... of ``rows`` rows each, most ids in every one."""
    rng = np.random.default_rng(seed)
    paths = []
    for k in range(1, releases + 1):
        ids = rng.choice(rows + rows // 4, size=rows, replace=False)
        path = directory / f"s{k:02d}.csv"
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["id", "age", "education", "city", "disease"])
            for i in sorted(ids.tolist()):
                writer.writerow(
                    [
                        f"p{i}",
                        str(20 + int(rng.integers(0, 45))),
                        EDUCATION[int(rng.integers(0, len(EDUCATION)))],
                        CITIES[int(rng.integers(0, len(CITIES)))],
                        VALUES[int(rng.integers(0, len(VALUES)))],
                    ]
                )
        paths.append(path)
    return paths


def anonymize(config: Path, out: Path, *snapshots: Path, extra: tuple[str, ...] = ()) -> int:
    """``stream-release anonymize --config config --out out [extra] snapshots``'s exit code."""
    argv = ["anonymize", "--config", str(config), "--out", str(out), *extra]
    return main([*argv, *map(str, snapshots)])
