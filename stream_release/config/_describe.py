"""One line for a configuration that does not validate: the key, its value and the rule."""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from stream_release.config._environment import NESTED
from stream_release.config._settings import Settings


def describe_error(exc: ValidationError) -> str:
    """The one line of :class:`~stream_release.errors.ConfigError` for ``exc``: ``config
    key = value: rule`` of its first error (the variable to set for a nested table's key)."""
    first = exc.errors()[0]
    hint = _nested_hint(first["loc"]) if first["type"] == "extra_forbidden" else None
    if hint is not None:
        return hint
    where = ".".join(str(part) for part in first["loc"]).replace("schema_", "schema")
    given = first.get("input")
    message = first["msg"].removeprefix("Value error, ")
    if message.startswith(("mechanism.", "privacy.")):  # names its own key and value
        return f"config {message}"
    shown = f" = {given!r}" if where and not isinstance(given, dict) else ""
    return f"config {where}{shown}: {message}" if where else f"config: {message}"


def _nested_hint(loc: tuple[int | str, ...]) -> str | None:
    """For an unknown key like ``kafka.topics_control`` (``SR_KAFKA_TOPICS_CONTROL``) that
    means a key of a nested table: the message naming the variable that sets it."""
    if len(loc) != 2 or not all(isinstance(part, str) for part in loc):
        return None
    section, key = str(loc[0]), str(loc[1])
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
