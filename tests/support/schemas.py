"""The exported JSON Schemas of the wire messages and files (``deploy/schemas``), as a check
of documents the tests read back."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import jsonschema

SCHEMAS = Path(__file__).resolve().parents[2] / "deploy" / "schemas"
"""The exported JSON Schemas of the wire messages and files."""


def schema_errors(name: str, documents: Iterable[bytes | str | dict[str, object]]) -> list[str]:
    """Why each of ``documents`` (JSON text or parsed) fails ``deploy/schemas/<name>
    .schema.json``, checked by the ``jsonschema`` validator of the dialect the schema declares
    in ``$schema``; ``[]`` when every one is valid."""
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema, default=None)
    assert validator_class is not None, f"{name}.schema.json declares no known $schema"
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    errors = []
    for document in documents:
        parsed = document if isinstance(document, dict) else json.loads(document)
        errors += [f"{name}: {e.message}" for e in validator.iter_errors(parsed)]
    return errors
