"""MkDocs hook: the configuration and command-line references, generated from the code at every
build (``mkdocs.yml``: ``hooks``), so the pages never drift from the settings models and the
parser. A page asks for one with a marker line: ``<!-- generated: config -->`` or
``<!-- generated: cli -->``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["cli_reference", "config_reference", "on_page_markdown"]

MARKERS = ("config", "cli")


def on_page_markdown(markdown: str, **_: Any) -> str:
    for name in MARKERS:
        marker = f"<!-- generated: {name} -->"
        if marker in markdown:
            markdown = markdown.replace(
                marker, config_reference() if name == "config" else cli_reference()
            )
    return markdown


# -- the configuration -------------------------------------------------------------------------


def _type(annotation: Any) -> str:
    text = str(annotation) if not isinstance(annotation, type) else annotation.__name__
    for noise in ("typing.", "pathlib.", "<class '", "'>"):
        text = text.replace(noise, "")
    return text.replace("Literal", "one of ")


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return "(computed)"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "(its table)"
    return f"`{value!r}`" if value is not None else "unset"


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def config_reference() -> str:
    from stream_release.config import Settings
    from stream_release.config.mechanisms import SECTIONS, section_name

    out = []
    for name, field in Settings.model_fields.items():
        section = field.alias or name
        model = field.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        out.append(_table(f"[{section}]", section, model))
        for inner_name, inner in model.model_fields.items():  # nested tables: [kafka.topics]
            inner_model = inner.annotation
            if isinstance(inner_model, type) and issubclass(inner_model, BaseModel):
                out.append(
                    _table(
                        f"[{section}.{inner_name}]",
                        f"{section}_{inner_name}",
                        inner_model,
                        nested=True,
                    )
                )
    for kind, model in SECTIONS.items():
        out.append(_table(f"[mechanism.{section_name(kind)}]", None, model, kind=kind))
    return "\n".join(out)


def _table(
    title: str,
    prefix: str | None,
    model: type[BaseModel],
    *,
    nested: bool = False,
    kind: str | None = None,
) -> str:
    head = f"### `{title}`\n\n"
    if kind is not None:
        head += f'With `[mechanism] kind = "{kind}"`; from the environment as one JSON table.\n\n'
    rows = ["| key | type | default | environment | meaning |", "|---|---|---|---|---|"]
    for key, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            continue  # a nested table: its own section
        shown = field.alias or key
        if prefix is None:
            variable = ""
        elif nested:
            section, table = prefix.split("_", 1)
            variable = f"`SR_{section}_{table}__{shown}`".upper()
        else:
            variable = f"`SR_{prefix}_{shown}`".upper()
        meaning = _one_line(field.description or "")  # the key's docstring
        kind_of = _one_line(_type(annotation))
        rows.append(f"| `{shown}` | {kind_of} | {_default(field)} | {variable} | {meaning} |")
    return head + "\n".join(rows) + "\n"


# -- the command line --------------------------------------------------------------------------


def cli_reference() -> str:
    from stream_release.cli.examples import parsers
    from stream_release.cli.main import _parser

    out = []
    for path, parser in parsers(_parser()):
        if not path:
            continue
        parser.prog = f"stream-release {path}"
        help_text = parser.format_help()
        out.append(f"### `stream-release {path}`\n\n```text\n{help_text.rstrip()}\n```\n")
    return "\n".join(out)
