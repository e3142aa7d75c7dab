"""The registry of release mechanisms: every ``[mechanism] kind``, its section model (name ->
model) and how to build it.

The configuration (:mod:`stream_release.config`) validates the ``[mechanism.<kind>]`` tables
with the models registered here, so this module and the section models (each kind's
``settings`` module) belong to the configuration's layer: they import only the core, the
errors and the hierarchy reader. A mechanism itself is imported on first use
(:meth:`Registration.make`), so loading a configuration imports no release code.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from stream_release.errors import ConfigError
from stream_release.mechanisms.dp_sanitised.settings import DPSanitisedSettings
from stream_release.mechanisms.reconstruction_rr.settings import ReconstructionRRSettings
from stream_release.mechanisms.sampled_k_anonymity.settings import SampledKAnonymitySettings

if TYPE_CHECKING:
    from pydantic import BaseModel

    from stream_release.config import Settings
    from stream_release.mechanisms.base import Mechanism

__all__ = [
    "GLOBAL_GUARANTEE",
    "KINDS",
    "MECHANISMS",
    "CompanionKind",
    "MechanismKind",
    "Registration",
    "describe_release",
    "make_mechanism",
    "registration",
    "section_name",
]


@dataclass(frozen=True)
class Registration:
    """Where a mode lives: one line of :data:`MECHANISMS`.

    The factory is resolved on first use (importing its module then), so the configuration
    can name every kind without importing every mode's release code.

    Attributes
    ----------
    settings : type[BaseModel]
        The section model (a pydantic model class) of ``[mechanism.<kind>]``.
    module : str
        Dotted path of the module of the factory, e.g.
        ``"stream_release.mechanisms.sampled_k_anonymity.mechanism"``.
    factory : str
        Name of what builds the :class:`Mechanism`: called as ``factory(section)`` or, with
        ``pass_settings``, ``factory(section, settings)`` (the whole :class:`~stream_release.
        config.Settings`).
    pass_settings : bool
        See ``factory``.
    """

    settings: type[BaseModel]
    module: str
    factory: str
    pass_settings: bool = False

    def make(self, section: BaseModel, settings: Settings) -> Mechanism:
        """The mechanism for a validated ``section`` of ``settings``."""
        factory = getattr(importlib.import_module(self.module), self.factory)
        mechanism: Mechanism = (
            factory(section, settings) if self.pass_settings else factory(section)
        )
        return mechanism


CompanionKind = Literal["sampled-k-anonymity", "reconstruction-private-rr", "dp-sanitised"]
"""The kinds of the companion papers: a manifest's ``mechanism.kind``."""
MechanismKind = Literal["global-guarantee", CompanionKind]
"""Every value of ``[mechanism] kind`` (docs/contract.md §2)."""

KINDS: Final[tuple[str, ...]] = get_args(MechanismKind)

GLOBAL_GUARANTEE: Final = "global-guarantee"
"""The default kind: Wong et al.'s global guarantee, planned by
:mod:`stream_release.pipeline.plan`."""

MECHANISMS: Final[dict[str, Registration]] = {
    "sampled-k-anonymity": Registration(
        SampledKAnonymitySettings,
        "stream_release.mechanisms.sampled_k_anonymity.mechanism",
        "make_sampled_k_anonymity",
        pass_settings=True,
    ),
    "reconstruction-private-rr": Registration(
        ReconstructionRRSettings,
        "stream_release.mechanisms.reconstruction_rr.mechanism",
        "ReconstructionRR",
    ),
    "dp-sanitised": Registration(
        DPSanitisedSettings,
        "stream_release.mechanisms.dp_sanitised.mechanism",
        "make_dp_sanitised",
        pass_settings=True,
    ),
}
"""kind -> where its section model, factory and verifier live (every kind but the default)."""


def section_name(kind: str) -> str:
    """The ``[mechanism.<name>]`` table of ``kind``: ``sampled-k-anonymity`` ->
    ``sampled_k_anonymity``."""
    return kind.replace("-", "_")


def registration(kind: str) -> Registration:
    """The registration of ``kind``.

    Raises
    ------
    ConfigError
        ``kind`` is a known kind whose module is not in this version, or not a kind at all.
    """
    found = MECHANISMS.get(kind)
    if found is not None:
        return found
    if kind in KINDS:
        raise ConfigError(
            f"mechanism.kind = {kind!r} is not available in this version of stream-release "
            f"(available: {', '.join([GLOBAL_GUARANTEE, *MECHANISMS])}); choose one of those"
        )
    raise ConfigError(f"mechanism.kind = {kind!r} is not a mechanism; use one of {list(KINDS)}")


def make_mechanism(settings: Settings) -> Mechanism | None:
    """The configured mechanism, or ``None`` for the global guarantee.

    Raises
    ------
    ConfigError
        The section is inconsistent with data-independent facts only known once files are read
        (e.g. a hierarchy level above the hierarchy's height).
    """
    kind = settings.mechanism.kind
    if kind == GLOBAL_GUARANTEE:
        return None
    section = settings.mechanism.section
    if section is None:  # unreachable: the configuration refuses a missing section
        raise ConfigError(f"mechanism.kind = {kind!r} needs its [mechanism.{section_name(kind)}]")
    return registration(kind).make(section, settings)


def describe_release(manifest: dict[str, Any]) -> str:
    """One line about a mechanism's release for ``stream-release anonymize``: counts, group
    sizes and the guarantee block's ``epsilon``/``delta`` (and the series') when it has them."""
    u = manifest.get("utility", {})
    block = manifest.get("mechanism", {})
    text = (
        f"release {manifest['sequence']:>4} {manifest['release']}: "
        f"{manifest['published']} published, {manifest['groups']} groups "
        f"(avg {u.get('avg_group_size', 0.0):.2f}, max {u.get('max_group_size', 0)}), "
        f"{block.get('kind')}"
    )
    if "epsilon" in block and "delta" in block:
        text += f": epsilon {block['epsilon']:g}, delta {block['delta']:.3g}"
        series = block.get("series")
        if isinstance(series, dict) and "epsilon" in series and "delta" in series:
            text += f" (series: epsilon {series['epsilon']:g}, delta {series['delta']:.3g})"
    return text
