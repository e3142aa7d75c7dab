"""The worker's logs: one JSON object per line (default) or plain text, on stdout.

:func:`logging_config` is the :func:`logging.config.dictConfig` the worker hands to Faust
(``faust.Worker(logging_config=...)``), replacing Faust's coloured console format. In the JSON
format (python-json-logger) every line holds ``time``, ``level``, ``logger``, ``process`` and
``message``, plus the fields our log calls pass as ``extra`` (``event``: committed, sent,
rejected, retrying, crashed, publication_failed, release_refused, release_too_large,
seal_incomplete, config_error; ``release``: a producer's label; ``sequence``, ``published``,
``suppressed``, ``groups``, ``breach_max``, ``cut_s`` and ``send_s`` (seconds), ``messages``,
``rejected``, ``action``, ``error``: an exception type; ``detail`` and ``fix`` of a
``config_error``: the configuration's key, value and what to do), so a log pipeline can filter
and chart them without parsing sentences.

What the worker logs never holds an individual's id, a pseudonym or a QID or sensitive value:
releases are named by sequence, batches by counts, failures by exception type and message
(ours carry no ids; Redis and Kafka errors carry addresses and codes). The integration tests
grep the worker's log for the ids they sent.
"""

from __future__ import annotations

from typing import Any, Literal

LogFormat = Literal["json", "text"]

TEXT_FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s"
JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s"
JSON_RENAMES = {"asctime": "time", "levelname": "level", "name": "logger"}


def logging_config(log_format: LogFormat, level: str) -> dict[str, Any]:
    """A ``dictConfig`` sending every logger at ``level`` and above to stdout in
    ``log_format``."""
    if log_format == "json":
        formatter: dict[str, Any] = {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": JSON_FIELDS,
            "rename_fields": JSON_RENAMES,
        }
    else:
        formatter = {"format": TEXT_FORMAT}
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
