"""The worker's log formats: JSON lines with the ``extra`` fields, or plain text."""

from __future__ import annotations

import json
import logging
import logging.config
from collections.abc import Iterator

import pytest

from stream_release.stream.logs import logging_config


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_the_extra_fields(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logging.config.dictConfig(logging_config("json", "info"))
    log = logging.getLogger("stream_release.test")
    log.info("release %d sent", 3, extra={"event": "sent", "sequence": 3, "messages": 12})
    log.debug("below the level")
    [line] = capsys.readouterr().out.splitlines()
    entry = json.loads(line)
    assert entry["message"] == "release 3 sent" and entry["level"] == "INFO"
    assert entry["logger"] == "stream_release.test"
    assert (entry["event"], entry["sequence"], entry["messages"]) == ("sent", 3, 12)
    assert {"time", "process"} <= entry.keys()


def test_text_lines_are_one_sentence_each(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logging.config.dictConfig(logging_config("text", "warning"))
    log = logging.getLogger("stream_release.test")
    log.info("not shown")
    log.warning("cannot %s, retrying", "stage records", extra={"event": "retrying"})
    [line] = capsys.readouterr().out.splitlines()
    assert line.endswith("[WARNING] stream_release.test: cannot stage records, retrying")
