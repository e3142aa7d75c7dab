"""The ``[mechanism.<kind>]`` tables: every kind of release mechanism and the model of its
table, one module per companion kind.

The configuration validates the active kind's table with the model :data:`SECTIONS` names
for it; the mechanism (``stream_release.mechanisms.<kind>``) and its independent audit read
the same model. These modules import only the core, the errors and the hierarchy reader, so
loading a configuration imports no release code.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from pydantic import BaseModel

from stream_release.config.mechanisms.dp_sanitised import DPSanitisedSettings
from stream_release.config.mechanisms.reconstruction_rr import ReconstructionRRSettings
from stream_release.config.mechanisms.sampled_k_anonymity import SampledKAnonymitySettings

__all__ = [
    "GLOBAL_GUARANTEE",
    "KINDS",
    "SECTIONS",
    "CompanionKind",
    "MechanismKind",
    "section_name",
]

CompanionKind = Literal["sampled-k-anonymity", "reconstruction-private-rr", "dp-sanitised"]
"""The kinds of the companion papers: a manifest's ``mechanism.kind``."""
MechanismKind = Literal["global-guarantee", CompanionKind]
"""Every value of ``[mechanism] kind`` (docs/contract.md §2)."""

KINDS: Final[tuple[str, ...]] = get_args(MechanismKind)

GLOBAL_GUARANTEE: Final = "global-guarantee"
"""The default kind: Wong et al.'s global guarantee (Wong et al. 2010), configured by
``[privacy]``; it has no table of its own."""

SECTIONS: Final[dict[str, type[BaseModel]]] = {
    "sampled-k-anonymity": SampledKAnonymitySettings,
    "reconstruction-private-rr": ReconstructionRRSettings,
    "dp-sanitised": DPSanitisedSettings,
}
"""kind -> the model of its ``[mechanism.<kind>]`` table (every kind but the default)."""


def section_name(kind: str) -> str:
    """The ``[mechanism.<name>]`` table of ``kind``: ``sampled-k-anonymity`` ->
    ``sampled_k_anonymity``."""
    return kind.replace("-", "_")
