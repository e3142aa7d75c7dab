"""The worker's log formats: JSON lines with the ``extra`` fields, or plain text; a failure of
the worker's own code with its traceback, each message withheld but a dependency's."""

from __future__ import annotations

import json
import logging
import logging.config
from collections.abc import Iterator

import pytest
import redis
from aiokafka.errors import ProducerFenced

from stream_release.stream.logs import (
    WITHHELD,
    describe_failure,
    failure_traceback,
    logging_config,
    unexpected,
)


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


def _lookup(table: dict[str, str], key: str) -> str:
    return table[key]


PERSON, VALUE = "p-" + "17", "HIV-" + "positive"
"""An id and a value the failures below quote (built, so that no source line shows them: a
traceback's frames show the source lines, which hold code, never the data it runs on)."""


def _failing_cut(person: str, value: str) -> None:
    """A failure of the program's own code whose messages quote an id and a value, raised
    while handling another: a ``KeyError`` of the id during a ``ValueError`` naming both."""
    try:
        raise ValueError(f"sensitive value {value!r} of {person} is not in the domain")
    except ValueError:
        _lookup({}, person)


def test_an_unexpected_exception_has_a_traceback_without_its_messages(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logging.config.dictConfig(logging_config("json", "info"))
    log = logging.getLogger("stream_release.test")
    try:
        _failing_cut(PERSON, VALUE)
    except KeyError as exc:
        log.error("publication failed: %s", describe_failure(exc), exc_info=unexpected(exc))
        log.error("Crashed reason=%r", exc, exc_info=exc)  # as mode's crash report logs it
    out = capsys.readouterr().out
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["message"] == "publication failed: KeyError"
    assert second["message"] == "Crashed reason='KeyError'"
    trace = first["exc_info"]
    assert trace == second["exc_info"]
    assert trace.startswith("Traceback (most recent call last):")
    assert "in _failing_cut" in trace and "in _lookup" in trace  # where it failed
    assert f"ValueError: {WITHHELD}" in trace and f"KeyError: {WITHHELD}" in trace
    assert "During handling of the above exception" in trace
    assert PERSON not in out and VALUE not in out


def test_a_dependency_failure_is_one_line_with_its_message() -> None:
    exc = redis.ConnectionError("Error 111 connecting to 10.0.0.5:6379. Connection refused.")
    assert unexpected(exc) is None
    assert describe_failure(exc) == (
        "ConnectionError: Error 111 connecting to 10.0.0.5:6379. Connection refused."
    )
    assert describe_failure(ValueError("p-17")) == "ValueError"
    assert unexpected(ValueError("p-17")) is not None


def test_a_traceback_keeps_the_message_of_a_dependency_it_was_raised_from() -> None:
    try:
        try:
            raise ProducerFenced()
        except ProducerFenced as fenced:
            raise RuntimeError(PERSON) from fenced
    except RuntimeError as exc:
        trace = failure_traceback(exc)
    assert "aiokafka.errors.ProducerFenced: ProducerFenced: There is a newer producer" in trace
    assert "The above exception was the direct cause" in trace
    assert trace.endswith(f"RuntimeError: {WITHHELD}") and PERSON not in trace


def test_text_lines_carry_the_redacted_traceback_too(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logging.config.dictConfig(logging_config("text", "info"))
    log = logging.getLogger("stream_release.test")
    try:
        _failing_cut(PERSON, VALUE)
    except KeyError as exc:
        log.critical("cannot stage records: %s", type(exc).__name__, exc_info=exc)
    out = capsys.readouterr().out
    assert "stream_release.test: cannot stage records: KeyError\nTraceback" in out
    assert out.rstrip().endswith(f"KeyError: {WITHHELD}") and PERSON not in out
