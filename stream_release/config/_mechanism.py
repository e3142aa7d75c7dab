"""``[mechanism]``: the release mechanism of the series and its ``[mechanism.<kind>]`` table.

A kind's table is validated by the section model the kind registers
(:mod:`stream_release.config.mechanisms`), with
the configuration file's directory as the validation context (:data:`CONFIG_DIR`).
"""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import BaseModel, PrivateAttr, ValidationError, model_validator

from stream_release.config._sections import Section
from stream_release.config._suggest import rule, section_model
from stream_release.config.mechanisms import SECTIONS, section_name
from stream_release.release_format import KINDS, MechanismKind

CONFIG_DIR: ContextVar[Path | None] = ContextVar("CONFIG_DIR", default=None)
"""The directory of the configuration file being loaded
(:func:`~stream_release.config.load_settings`): passed to a mechanism section model as the
validation context ``{"base_dir": ...}``, so that a relative path in a section is relative to
the file (docs/contract.md §2)."""


class MechanismSettings(Section):
    """``[mechanism]``: which release mechanism the series uses, and its section.

    Each kind but the default has its own table, validated by the section model its module
    registers (:data:`stream_release.config.mechanisms.SECTIONS`)::

        [mechanism]
        kind = "sampled-k-anonymity"
        [mechanism.sampled_k_anonymity]
        k = 20
        beta = 0.1
        epsilon = 1.0
        levels = {age = 2, sex = 0}

    The active kind's table is required; a table of another registered kind is validated too
    (so switching ``kind`` cannot reveal a stale mistake). A section model gets the validation
    context ``{"base_dir": <the configuration file's directory>}`` (the working directory
    without a file) for its relative paths. From the environment:
    ``SR_MECHANISM_KIND``, and a table as JSON (``SR_MECHANISM_SAMPLED_K_ANONYMITY='{...}'``).
    """

    kind: MechanismKind = "global-guarantee"
    sampled_k_anonymity: dict[str, Any] | None = None
    reconstruction_private_rr: dict[str, Any] | None = None
    dp_sanitised: dict[str, Any] | None = None
    _sections: dict[str, BaseModel] = PrivateAttr(default_factory=dict)

    @property
    def section(self) -> BaseModel | None:
        """The validated section model of the active kind (``None`` for the default)."""
        return self._sections.get(self.kind)

    @model_validator(mode="after")
    def _check_sections(self) -> MechanismSettings:
        for kind in KINDS[1:]:  # every one with a table (SECTIONS)
            name = section_name(kind)
            raw = getattr(self, name)
            if raw is None:
                if kind == self.kind:
                    raise ValueError(
                        f"mechanism.kind = {kind!r} needs the table [mechanism.{name}] with its "
                        "parameters (see docs/mechanisms.md)"
                    )
                continue
            model = SECTIONS[kind]
            try:
                self._sections[kind] = model.model_validate(
                    raw, context={"base_dir": CONFIG_DIR.get()}
                )
            except ValidationError as exc:
                raise ValueError(_describe_section(f"mechanism.{name}", model, exc)) from None
        return self


def _describe_section(where: str, model: type[BaseModel], exc: ValidationError) -> str:
    """``where.key = value: rule`` of the first error of a section ``model`` (the closest key
    or value to a misspelt one)."""
    first = exc.errors()[0]
    parts = [str(part) for part in first["loc"]]
    loc = ".".join(parts)
    key = f"{where}.{loc}" if loc else where
    given = first.get("input")
    shown = f" = {given!r}" if loc and not isinstance(given, dict) else ""
    message = rule(first, section_model(model, parts[:-1]), within=where.split("."))
    return f"{key}{shown}: {message}"
