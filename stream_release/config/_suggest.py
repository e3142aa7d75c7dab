"""What a configuration error adds to pydantic's rule: the closest key or value to a misspelt
one, and where the value came from (the file or an ``SR_*`` variable)."""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from stream_release.config._environment import NESTED

__all__ = ["Origin", "closest", "rule", "section_model"]

_QUOTED = re.compile(r"'([^']*)'")


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice most like ``word`` (difflib's ratio at least 0.6), ``None`` if none is."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def section_model(root: type[BaseModel], parts: Sequence[str]) -> type[BaseModel] | None:
    """The model of the table at ``parts`` under ``root`` (fields by name or alias; an
    optional table's model), ``None`` when ``parts`` leads to no model."""
    model: type[BaseModel] | None = root
    for part in parts:
        if model is None:
            return None
        fields = {f.alias or name: f for name, f in model.model_fields.items()}
        fields.update(model.model_fields)
        found = fields.get(part)
        model = _model_of(found.annotation) if found is not None else None
    return model


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        models = [m for m in map(_model_of, get_args(annotation)) if m is not None]
        return models[0] if len(models) == 1 else None
    return None


def _keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def rule(error: ErrorDetails, model: type[BaseModel] | None, within: Sequence[str] = ()) -> str:
    """pydantic's rule of ``error`` in a table of ``model`` (the table at ``within``, the
    error's location being relative to it), with the closest key to an unknown one (``model``'s
    keys) or the closest allowed value to a wrong one."""
    message = error["msg"].removeprefix("Value error, ")
    loc = [str(part) for part in error["loc"]]
    given = error.get("input")
    if error["type"] == "extra_forbidden" and loc:
        table = ".".join([*within, *loc[:-1]])
        where = f"[{table}]" if table else "the configuration"
        keys = _keys(model) if model is not None else []
        match = closest(loc[-1], keys)
        if match is not None:
            return f"{where} has no key {loc[-1]!r}; did you mean {match!r}?"
        listed = f" (its keys: {', '.join(keys)})" if keys else ""
        return f"{where} has no key {loc[-1]!r}{listed}"
    if error["type"] in ("literal_error", "enum") and isinstance(given, str):
        allowed = _QUOTED.findall(str((error.get("ctx") or {}).get("expected", "")))
        match = closest(given, allowed)
        if match is not None:
            return f"{message}; did you mean {match!r}?"
    return message


@dataclass(frozen=True)
class Origin:
    """Where the configuration's values came from: ``file`` (``None``: no file) and the
    values the ``SR_*`` variables set (``environment``, nested like the file), which win."""

    file: Path | None = None
    environment: Mapping[str, Any] = field(default_factory=dict)

    def of(self, parts: Sequence[str]) -> str:
        """`` (from SR_PRIVACY_L)``, `` (in series.toml)`` or nothing: where the value at key
        path ``parts`` came from."""
        variable = self.variable(parts)
        if variable is not None:
            return f" (from the environment: {variable})"
        return f" (in {self.file})" if self.file is not None else ""

    def variable(self, parts: Sequence[str]) -> str | None:
        """The ``SR_*`` variable that set the value at ``parts`` (or the table holding it, given
        whole as JSON), ``None`` when no variable did."""
        value: Any = self.environment
        walked: list[str] = []
        for part in parts:
            if not isinstance(value, Mapping):
                break  # a table given whole by one variable
            if part not in value:
                return None
            value = value[part]
            walked.append(part)
        if len(walked) < 2:  # a section alone is no variable
            return None
        head = f"SR_{walked[0]}_{walked[1]}"
        return (head + "".join(f"{NESTED}{p}" for p in walked[2:])).upper()
