"""The release service (:class:`~stream_release.stream.service.ReleaseService`) on a real
Redis without a worker process: a snapshot as ``topics.records`` messages, a release staged
and sealed, and what its runner logged and counted.

The runner itself, with the real release producer on the session's broker, comes from the
``make_runner`` fixture (``tests/integration/conftest.py``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from stream_release.devtools.datasets import read_csv_table
from stream_release.stream.intake import Incoming
from stream_release.stream.logs import RedactingJsonFormatter, logging_config
from stream_release.stream.runner import ServiceRunner
from stream_release.stream.service import ReleaseService


def record_messages(
    path: Path,
    label: str,
    qid: tuple[str, ...],
    start: int,
    *,
    id_column: str = "id",
    sensitive: str = "occupation",
) -> list[Incoming]:
    """Every row of the snapshot at ``path`` (Adult's columns by default) as a
    ``topics.records`` message of release ``label`` (partition 0, offsets from ``start``), in
    file order."""
    table = read_csv_table(path, id_column=id_column)
    out = []
    for i in range(table.n_rows):
        value = {
            "release": label,
            "id": table.columns[id_column][i],
            "qid": {q: table.columns[q][i] for q in qid},
            "sensitive": table.columns[sensitive][i],
        }
        out.append(Incoming("sr.records", 0, start + i, None, json.dumps(value).encode()))
    return out


def stage_sealed(service: ReleaseService, snapshot: Path, label: str, offset: int) -> None:
    """Stage every row of ``snapshot`` as release ``label``, then its seal."""
    messages = record_messages(snapshot, label, service.settings.schema.qid, offset)
    assert service.accept_records(messages).rejected == []
    seal = json.dumps({"release": label, "records": len(messages)}).encode()
    assert service.accept_seal(Incoming("sr.control", 0, offset, None, seal)) is None


def log_events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    """The captured log records whose ``event`` field is ``event``."""
    return [r for r in caplog.records if getattr(r, "event", None) == event]


def as_worker_logs(records: list[logging.LogRecord]) -> list[dict[str, Any]]:
    """``records`` as the worker writes them (its JSON format, :func:`~stream_release.stream.
    logs.logging_config`), parsed: pytest's own format shows a traceback unredacted."""
    config = logging_config("json", "debug")["formatters"]["default"]
    formatter = RedactingJsonFormatter(config["fmt"], rename_fields=config["rename_fields"])
    return [json.loads(formatter.format(record)) for record in records]


def metric_sample(runner: ServiceRunner, name: str) -> float:
    """The value of the unlabelled metric sample ``name`` in the runner's registry."""
    value = runner.metrics.registry.get_sample_value(name)
    assert value is not None, f"no sample {name}"
    return value
