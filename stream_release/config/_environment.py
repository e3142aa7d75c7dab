"""The environment source of the settings: ``SR_<SECTION>_<KEY>``, and ``__`` into the keys of
nested tables (:mod:`stream_release.config`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import EnvSettingsSource

NESTED = "__"
"""Separates the keys of nested tables in an environment variable's name
(:mod:`stream_release.config`)."""


class EnvSource(EnvSettingsSource):
    """pydantic-settings' environment source, with ``__`` reaching into nested tables.

    ``SR_<SECTION>_<KEY>`` splits once on ``_`` (section names hold no ``_``, keys do); what
    follows the key is split on :data:`NESTED`, so ``SR_KAFKA_TOPICS__CONTROL`` becomes
    ``{"kafka": {"topics": {"control": ...}}}``. A value that looks like a JSON list or
    table is parsed, as at the top level.
    """

    def explode_env_vars(
        self, field_name: str, field: FieldInfo, env_vars: Mapping[str, str | None]
    ) -> dict[str, Any]:
        return nest(super().explode_env_vars(field_name, field, env_vars))

    def _extract_field_info(
        self, field: FieldInfo, field_name: str, *rest: Any
    ) -> list[tuple[str, str, bool]]:
        # only names under the prefix: the alias "schema" alone would read a variable SCHEMA
        names = super()._extract_field_info(field, field_name, *rest)
        prefix = self.env_prefix.lower()
        prefixed = [entry for entry in names if entry[1].lower().startswith(prefix)]
        return prefixed or names


def nest(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with every ``a__b`` key moved into table ``a`` as ``b``, at every depth.

    Whole values are placed first and the ``__`` keys over them, shallower before deeper, so the
    more specific variable wins whatever the order of the environment. A key that would reach
    into a value that is not a table is kept as it is, for validation to name.
    """
    out: dict[str, Any] = {}
    for key in sorted(values, key=lambda k: (k.count(NESTED), k)):
        value = values[key]
        if isinstance(value, dict):
            value = nest(value)
        *heads, last = key.split(NESTED)
        target: Any = out
        for head in heads:
            inner = target.get(head)
            if isinstance(inner, str):  # the table also given whole, as JSON
                inner = target[head] = _json_or(inner)
            if inner is None:
                inner = target[head] = {}
            if not isinstance(inner, dict):
                target = None
                break
            target = inner
        if target is None:
            out[key] = value  # a scalar in the way: an unknown key for validation to name
            continue
        if isinstance(value, str) and heads:
            value = _json_or(value)
        existing = target.get(last)
        if isinstance(existing, dict) and isinstance(value, dict):
            existing.update(value)
        else:
            target[last] = value
    return out


def _json_or(text: str) -> Any:
    """``text`` parsed when it is a JSON list or object, else ``text``."""
    if text.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text
