"""The Adult configuration of each registered ``[mechanism] kind``, for the tests that run the
mechanisms end to end."""

from __future__ import annotations

import json
from pathlib import Path

from stream_release.config.mechanisms import section_name
from support.data import write_config

OCCUPATIONS = [
    "Adm-clerical",
    "Armed-Forces",
    "Craft-repair",
    "Exec-managerial",
    "Farming-fishing",
    "Handlers-cleaners",
    "Machine-op-inspct",
    "Other-service",
    "Priv-house-serv",
    "Prof-specialty",
    "Protective-serv",
    "Sales",
    "Tech-support",
    "Transport-moving",
]

SECTIONS: dict[str, str] = {
    "sampled-k-anonymity": (
        "k = 10\nbeta = 0.3\nepsilon = 1.5\n"
        'levels = {age = 3, sex = 0, race = 1, "marital-status" = 2, education = 3, '
        '"native-country" = 2, workclass = 2}\n'
    ),
    "reconstruction-private-rr": (
        "p = 0.5\nepsilon = 0.5\ndelta = 0.3\n"
        'domain_hierarchy = "adult_hierarchy_occupation.csv"\n'  # relative to the config file
    ),
    "dp-sanitised": (
        f"epsilon = 4.0\nepsilon_budget = 12.0\nsensitive_domain = {json.dumps(OCCUPATIONS)}\n"
    ),
}
"""The ``[mechanism.<kind>]`` table of each kind on the Adult configuration."""


def kind_config(directory: Path, data: Path, kind: str) -> Path:
    """The Adult configuration with ``kind``'s table, in ``directory`` beside a copy of the
    occupation hierarchy (for relative paths in a table)."""
    occupation = "adult_hierarchy_occupation.csv"
    (directory / occupation).write_bytes((data / occupation).read_bytes())
    path = write_config(directory, data)
    text = path.read_text(encoding="utf-8")
    text += f'[mechanism]\nkind = "{kind}"\n[mechanism.{section_name(kind)}]\n{SECTIONS[kind]}'
    path.write_text(text, encoding="utf-8")
    return path
