"""One line for a configuration that does not validate: the key, its value, where it came from
and the rule (with the closest key or value to a misspelt one)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ValidationError

from stream_release.config._environment import NESTED
from stream_release.config._settings import Settings
from stream_release.config._suggest import Origin, rule, section_model

_OWN_KEY = re.compile(r"^((?:mechanism|privacy)\.[A-Za-z0-9_.]+)")
"""The key a model validator's message starts with (it names its own key and value)."""
_SECTION_KEY = re.compile(r"^([a-z_]+)(?= = )")
"""A section's own check naming one of its keys first (``l = 0.5: ...``)."""


def describe_error(exc: ValidationError, origin: Origin | None = None) -> str:
    """The one line of :class:`~stream_release.errors.ConfigError` for ``exc``: ``config
    key = value (where it came from): rule`` of its first error (the variable to set for a
    nested table's key; the closest key or value to a misspelt one)."""
    origin = origin or Origin()
    first = exc.errors()[0]
    parts = [str(part).replace("schema_", "schema") for part in first["loc"]]
    if first["type"] == "extra_forbidden":
        hint = _nested_hint(tuple(parts))
        if hint is not None:
            return hint
    message = first["msg"].removeprefix("Value error, ")
    own = _OWN_KEY.match(message)
    if own is not None:  # names its own key and value
        key, rest = own.group(1), message[own.end() :]
        return f"config {key}{_shown_before_rule(rest, origin.of(key.split('.')))}"
    named = _SECTION_KEY.match(message) if len(parts) == 1 else None
    model = section_model(Settings, parts)
    if named is not None and model is not None and named.group(1) in model.model_fields:
        # a section's check naming its key: ``l = 0.5: rule``
        key, rest = named.group(1), message[named.end() :]
        return f"config {parts[0]}.{key}{_shown_before_rule(rest, origin.of([*parts, key]))}"
    where = ".".join(parts)
    given = first.get("input")
    shown = f" = {given!r}" if where and not isinstance(given, dict) else ""
    text = rule(first, section_model(Settings, parts[:-1]))
    if not where:
        return f"config: {text}"
    return f"config {where}{shown}{origin.of(parts)}: {text}"


def _shown_before_rule(rest: str, source: str) -> str:
    """``rest`` of a self-naming message (`` = 3: rule``) with ``source`` before its rule."""
    value, colon, tail = rest.partition(": ")
    return f"{value}{source}{colon}{tail}" if colon else f"{rest}{source}"


def _nested_hint(loc: tuple[str, ...]) -> str | None:
    """For an unknown key like ``kafka.topics_control`` (``SR_KAFKA_TOPICS_CONTROL``) that
    means a key of a nested table: the message naming the variable that sets it."""
    if len(loc) != 2:
        return None
    section, key = loc
    field = Settings.model_fields.get(section)
    model = field.annotation if field is not None else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    for name, inner in model.model_fields.items():
        table = inner.annotation
        if key.startswith(f"{name}_") and isinstance(table, type) and issubclass(table, BaseModel):
            rest = key[len(name) + 1 :]
            variable = f"SR_{section}_{name}{NESTED}{rest}".upper()
            return (
                f"config {section}.{key}: [{section}] has no key {key!r}; for {rest!r} of "
                f"[{section}.{name}] set {variable} (a double underscore before a nested "
                "table's key)"
            )
    return None
