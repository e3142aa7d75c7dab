"""Data for the demo and the experiments: the bundled Adult and the paper's serial series.

``make_series`` rebuilds the series of Wong et al. 2010, §8: the table is split into ``n`` random
partitions P_1..P_n; T_1 = P_1 and T_i = P_i plus a random ``keep`` fraction of T_{i-1}'s rows
(the same individuals, so they carry their history); then a random ``change`` fraction of
*all* of T_i's rows get a sensitive value re-drawn from the table's global distribution (the
issue's reading of "20 % of the rows"; the transient values of the paper change freely).

:class:`ChurnPopulation` is the same churn at any size (the load and scale benchmarks): rows
drawn with replacement from a table, each release keeping ``keep`` of the previous one's
individuals (``change`` of them with a value drawn again) and adding new ones.
"""

from __future__ import annotations

import csv
import gzip
import io
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

ADULT_QID = ("age", "sex", "race", "marital-status", "education", "native-country", "workclass")
ADULT_SENSITIVE = "occupation"


@dataclass(frozen=True, eq=False)
class Table:
    """Columns of raw strings, all of the same length."""

    columns: dict[str, np.ndarray]

    @property
    def n_rows(self) -> int:
        return len(next(iter(self.columns.values())))

    def take(self, rows: np.ndarray) -> Table:
        return Table({k: v[rows] for k, v in self.columns.items()})

    def write_csv(self, path: Path, delimiter: str = ";") -> None:
        names = list(self.columns)
        with path.open("w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, delimiter=delimiter)
            writer.writerow(names)
            writer.writerows(zip(*(self.columns[n].tolist() for n in names), strict=True))


def adult_schema(data_dir: Path) -> dict[str, object]:
    """The ``[schema]`` of Adult with the ARX hierarchies in ``data_dir`` (a settings
    override: ``load_settings(None, schema=adult_schema(d))``)."""
    return {
        "id": "id",
        "sensitive": ADULT_SENSITIVE,
        "qid": list(ADULT_QID),
        "hierarchies": {a: str(data_dir / f"adult_hierarchy_{a}.csv") for a in ADULT_QID},
    }


def read_csv_table(
    path: Path | str, *, id_column: str | None = "id", id_prefix: str = "p"
) -> Table:
    """Read a ``;``/``,`` CSV (optionally gzipped) into a :class:`Table`; add ``id_column`` with
    ids ``<prefix>-<row>`` when the file has none."""
    raw = Path(path).read_bytes()
    if str(path).endswith(".gz"):
        raw = gzip.decompress(raw)
    return _parse(raw.decode("utf-8-sig"), id_column, id_prefix)


def bundled_adult() -> Table:
    """The Adult data set shipped with the package (30,162 rows; CC BY 4.0, see ATTRIBUTION.md)."""
    raw = resources.files("stream_release.data").joinpath("adult.csv.gz").read_bytes()
    return _parse(gzip.decompress(raw).decode("utf-8-sig"), "id", "adult")


def bundled_hierarchy(attribute: str) -> Path:
    """Path of the bundled ARX hierarchy of an Adult attribute."""
    return Path(
        str(resources.files("stream_release.data").joinpath(f"adult_hierarchy_{attribute}.csv"))
    )


def _parse(text: str, id_column: str | None, id_prefix: str) -> Table:
    first = text.split("\n", 1)[0]
    delimiter = ";" if first.count(";") > first.count(",") else ","
    rows = list(csv.reader(io.StringIO(text), delimiter=delimiter))
    header = [h.strip() for h in rows[0]]
    body = [r for r in rows[1:] if r]
    columns = {
        name: np.array([r[j].strip() for r in body], dtype=object) for j, name in enumerate(header)
    }
    if id_column is not None and id_column not in columns:
        columns = {
            id_column: np.array([f"{id_prefix}-{i}" for i in range(len(body))], dtype=object),
            **columns,
        }
    return Table(columns)


def make_series(
    table: Table,
    sensitive: str,
    n: int = 20,
    *,
    keep: float = 0.2,
    change: float = 0.2,
    seed: int = 0,
) -> list[Table]:
    """The serial snapshots T_1..T_n of Wong et al. 2010, §8 (see the module docstring)."""
    rng = np.random.default_rng(seed)
    global_values = table.columns[sensitive]
    parts = np.array_split(rng.permutation(table.n_rows), n)
    series: list[Table] = []
    previous: Table | None = None
    for part in parts:
        current = table.take(part)
        if previous is not None:
            carried = previous.take(
                rng.choice(previous.n_rows, size=round(keep * previous.n_rows), replace=False)
            )
            current = Table(
                {
                    k: np.concatenate([current.columns[k], carried.columns[k]])
                    for k in current.columns
                }
            )
        values = current.columns[sensitive].copy()
        redraw = rng.random(current.n_rows) < change
        values[redraw] = rng.choice(global_values, size=int(redraw.sum()))
        current = Table({**current.columns, sensitive: values})
        series.append(current)
        previous = current
    return series


class ChurnPopulation:
    """Individuals drawn from ``table``'s rows, release after release (the churn of Wong et al.
    2010, §8).

    Release 1 holds ``rows`` individuals, each a row of ``table`` drawn with replacement
    (its QIDs and value); each later release keeps ``keep`` of the previous one's individuals
    (``change`` of those with a value drawn again from the table) and adds new ones up to
    ``rows``. Ids are ``{prefix}<n>``, never reused.
    """

    def __init__(
        self,
        table: Table,
        qid: tuple[str, ...],
        sensitive: str,
        rows: int,
        *,
        keep: float = 0.2,
        change: float = 0.2,
        seed: int = 0,
        prefix: str = "L",
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.qid = {q: table.columns[q] for q in qid}
        self.values = table.columns[sensitive]
        self.rows, self.keep, self.change, self.prefix = rows, keep, change, prefix
        self.next_id = 0
        self.ids = np.empty(0, dtype=np.int64)
        self.source = np.empty(0, dtype=np.int64)  # the table row of each individual
        self.sensitive = np.empty(0, dtype=object)

    def _new(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids = np.arange(self.next_id, self.next_id + n)
        self.next_id += n
        source = self.rng.integers(0, len(self.values), n)
        return ids, source, self.values[source]

    def advance(self) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
        """The next snapshot's columns: ``(ids, {qid: values}, sensitive)``."""
        if self.ids.size == 0:
            self.ids, self.source, self.sensitive = self._new(self.rows)
        else:
            kept = self.rng.choice(self.ids.size, size=round(self.keep * self.rows), replace=False)
            ids, source, sensitive = self.ids[kept], self.source[kept], self.sensitive[kept].copy()
            redraw = self.rng.random(kept.size) < self.change
            sensitive[redraw] = self.values[self.rng.integers(0, len(self.values), redraw.sum())]
            new_ids, new_source, new_sensitive = self._new(self.rows - kept.size)
            self.ids = np.concatenate([ids, new_ids])
            self.source = np.concatenate([source, new_source])
            self.sensitive = np.concatenate([sensitive, new_sensitive])
        names = np.array([f"{self.prefix}{i}" for i in self.ids.tolist()], dtype=object)
        return names, {q: column[self.source] for q, column in self.qid.items()}, self.sensitive
