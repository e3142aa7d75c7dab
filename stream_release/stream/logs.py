"""The worker's logs: one JSON object per line (default) or plain text, on stdout.

:func:`logging_config` is the :func:`logging.config.dictConfig` the worker hands to Faust
(``faust.Worker(logging_config=...)``), replacing Faust's coloured console format. In the JSON
format (python-json-logger) every line holds ``time``, ``level``, ``logger``, ``process`` and
``message``, plus the fields our log calls pass as ``extra`` (``event``: committed, sent,
rejected, retrying, crashed, publication_failed, release_refused, release_too_large,
seal_incomplete, config_error, shards_not_taken, follow_failed, probe_failed,
gauges_not_restored and others; ``release``: a producer's label; ``sequence``, ``published``,
``suppressed``, ``groups``, ``breach_max``, ``cut_s`` and ``send_s`` (seconds), ``messages``,
``rejected``, ``action``, ``error``: an exception type; ``exc_info``: the traceback of a
failure of the worker's own code, see below; ``detail`` and ``fix`` of a
``config_error``: the configuration's key, value and what to do), so a log pipeline can filter
and chart them without parsing sentences.

What the worker logs never holds an individual's id, a pseudonym or a QID or sensitive value:
releases are named by sequence, batches by counts, failures by exception type, with the
message of a Redis or Kafka error (addresses and codes). The integration tests grep the
worker's log for the ids they sent.

Failures come in two kinds. A failure of Redis, the broker or the network (:func:`~stream_release.
stream.retry.is_dependency_error`) is expected: it is logged on one line, with its message, and
tried again. Any other exception is a failure of this program: it is logged with its traceback
(``exc_info``: :func:`failure_traceback`), in which each exception shows its type, and its
message only when it is a dependency's. The message of any other exception is withheld, since
it may quote what it failed on (``KeyError('p-17')``, a mechanism's check naming a sensitive
value), and so are the exception's notes; the frames show files, lines, functions and source
lines, never local variables. Both formats do this for every record they write, third-party
ones included (Faust's and mode's crash reports): the traceback of ``exc_info``, and any
exception passed as an argument of the message (``"Crashed reason=%r"``), shown as
:func:`describe_failure` describes it. A message a library formatted itself before logging it
is written as it is.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping
from typing import Any, Literal

from pythonjsonlogger.json import JsonFormatter

from stream_release.stream.retry import is_dependency_error

LogFormat = Literal["json", "text"]

WITHHELD = "[message withheld: it may quote a value]"
"""What a traceback shows in place of the message of an exception that is not a dependency's."""

TEXT_FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s"
JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s"
JSON_RENAMES = {"asctime": "time", "levelname": "level", "name": "logger"}


def logging_config(log_format: LogFormat, level: str) -> dict[str, Any]:
    """A ``dictConfig`` sending every logger at ``level`` and above to stdout in
    ``log_format``."""
    if log_format == "json":
        formatter: dict[str, Any] = {
            "()": f"{__name__}.RedactingJsonFormatter",
            "fmt": JSON_FIELDS,
            "rename_fields": JSON_RENAMES,
        }
    else:
        formatter = {"()": f"{__name__}.RedactingFormatter", "fmt": TEXT_FORMAT}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "stream": "ext://sys.stdout",
            }
        },
        "root": {"level": level.upper(), "handlers": ["default"]},
    }


def describe_failure(exc: BaseException) -> str:
    """One line for a failure: the type and message of a dependency's (Redis, the broker, the
    network: addresses and codes), the type alone of anything else (its message could quote
    a value of the data)."""
    name = type(exc).__name__
    if not is_dependency_error(exc):
        return name
    text = " ".join(str(exc).split())
    return f"{name}: {text}" if text else name


def unexpected(exc: BaseException) -> BaseException | None:
    """The ``exc_info`` of a log call reporting the failure ``exc``: ``None`` for a dependency's
    (one line; it is tried again), ``exc`` for a failure of this program (its traceback)."""
    return None if is_dependency_error(exc) else exc


def failure_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` and of the exceptions it was raised from or while handling, as
    :func:`traceback.format_exception` writes it, each exception's message withheld unless it
    is a dependency's (:data:`WITHHELD`), and no notes."""
    chain: list[tuple[BaseException, str]] = []  # each exception, and how it led to the next
    seen: set[int] = set()
    current: BaseException | None = exc
    link = ""
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, _CONTEXT
        else:
            current = None
    lines: list[str] = []
    for failure, link in reversed(chain):
        if failure.__traceback__ is not None:
            lines.append("Traceback (most recent call last):\n")
            lines.extend(traceback.format_tb(failure.__traceback__))
        lines.append(f"{_headline(failure)}\n")
        if link:
            lines.append(link)
    return "".join(lines).rstrip("\n")


_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def _headline(exc: BaseException) -> str:
    kind = type(exc)
    name = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__"):
        name = f"{kind.__module__}.{name}"
    if not is_dependency_error(exc):
        return f"{name}: {WITHHELD}"
    text = str(exc)
    return f"{name}: {text}" if text else name


class _Redacting(logging.Formatter):
    """What both formats share: the traceback of :func:`failure_traceback`, and exceptions
    among a message's arguments shown as :func:`describe_failure` describes them."""

    def format(self, record: logging.LogRecord) -> str:
        # a copy: another handler may see the record as it was logged; and no traceback
        # another formatter wrote into the record (exc_text) is reused
        record = logging.makeLogRecord(record.__dict__)
        record.exc_text = None
        record.args = _described(record.args)
        return super().format(record)

    def formatException(self, ei: Any) -> str:
        exc = ei[1] if isinstance(ei, tuple) else None
        if not isinstance(exc, BaseException):
            return ""
        return failure_traceback(exc)


def _described(args: Any) -> Any:
    if isinstance(args, tuple):
        return tuple(_argument(arg) for arg in args)
    if isinstance(args, Mapping):
        return {key: _argument(value) for key, value in args.items()}
    return args


def _argument(arg: Any) -> Any:
    return describe_failure(arg) if isinstance(arg, BaseException) else arg


class RedactingFormatter(_Redacting):
    """The text format: one line per record, then a redacted traceback if it has one."""


class RedactingJsonFormatter(_Redacting, JsonFormatter):
    """The JSON format: one object per line; a redacted traceback goes in ``exc_info``."""
