"""The ``[mechanism.<kind>]`` tables: every kind of release mechanism and the model of its
table, one module per companion kind.

The configuration validates the active kind's table with the model :data:`SECTIONS` names
for it; the mechanism (``stream_release.mechanisms.<kind>``) and its independent audit read
the same model. These modules import only the core, the errors and the hierarchy reader, so
loading a configuration imports no release code.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel

from stream_release.config.mechanisms.dp_sanitised import DPSanitisedSettings
from stream_release.config.mechanisms.reconstruction_rr import ReconstructionRRSettings
from stream_release.config.mechanisms.sampled_k_anonymity import SampledKAnonymitySettings

__all__ = ["SECTIONS", "section_name"]

SECTIONS: Final[dict[str, type[BaseModel]]] = {
    "sampled-k-anonymity": SampledKAnonymitySettings,
    "reconstruction-private-rr": ReconstructionRRSettings,
    "dp-sanitised": DPSanitisedSettings,
}
"""kind -> the model of its ``[mechanism.<kind>]`` table (every kind of
:data:`~stream_release.release_format.KINDS` but the default)."""


def section_name(kind: str) -> str:
    """The ``[mechanism.<name>]`` table of ``kind``: ``sampled-k-anonymity`` ->
    ``sampled_k_anonymity``."""
    return kind.replace("-", "_")
