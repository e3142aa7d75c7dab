"""The registry of release mechanisms: how each ``[mechanism] kind`` is built.

The kinds and the models of their ``[mechanism.<kind>]`` tables belong to the configuration
(:mod:`stream_release.config.mechanisms`); this module names, for every kind but the default,
the factory that builds its :class:`~stream_release.mechanisms.base.Mechanism` from a
validated table. A mechanism's module is imported on first use (:meth:`Registration.make`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from stream_release.config.mechanisms import section_name
from stream_release.errors import ConfigError
from stream_release.release_format import GLOBAL_GUARANTEE, KINDS

if TYPE_CHECKING:
    from pydantic import BaseModel

    from stream_release.config import Settings
    from stream_release.history.pseudonym import Pseudonymizer
    from stream_release.mechanisms.base import Mechanism, ReleaseMechanism

__all__ = [
    "MECHANISMS",
    "Registration",
    "make_mechanism",
    "registration",
]


@dataclass(frozen=True)
class Registration:
    """Where a mode lives: one line of :data:`MECHANISMS`.

    The factory is resolved on first use (importing its module then), so the configuration
    can name every kind without importing every mode's release code.

    Attributes
    ----------
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


MECHANISMS: Final[dict[str, Registration]] = {
    "sampled-k-anonymity": Registration(
        "stream_release.mechanisms.sampled_k_anonymity.mechanism",
        "make_sampled_k_anonymity",
        pass_settings=True,
    ),
    "reconstruction-private-rr": Registration(
        "stream_release.mechanisms.reconstruction_rr.mechanism",
        "ReconstructionRR",
    ),
    "dp-sanitised": Registration(
        "stream_release.mechanisms.dp_sanitised.mechanism",
        "make_dp_sanitised",
        pass_settings=True,
    ),
}
"""kind -> where its factory lives (every kind but the default; its table's model is
:data:`stream_release.config.mechanisms.SECTIONS`)."""


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


def make_mechanism(settings: Settings, pseudonymizer: Pseudonymizer) -> ReleaseMechanism[Any]:
    """The configured mechanism of a series whose ids ``pseudonymizer`` pseudonymises:
    :class:`~stream_release.mechanisms.global_guarantee.mechanism.GlobalGuarantee` for the
    default kind, a companion kind behind
    :class:`~stream_release.mechanisms.companion.CompanionMechanism` for the others.

    Raises
    ------
    ConfigError
        The section is inconsistent with data-independent facts only known once files are read
        (e.g. a hierarchy level above the hierarchy's height).
    """
    kind = settings.mechanism.kind
    if kind == GLOBAL_GUARANTEE:
        from stream_release.mechanisms.global_guarantee.mechanism import GlobalGuarantee

        return GlobalGuarantee(settings, pseudonymizer)
    from stream_release.mechanisms.companion import CompanionMechanism

    section = settings.mechanism.section
    if section is None:  # unreachable: the configuration refuses a missing section
        raise ConfigError(f"mechanism.kind = {kind!r} needs its [mechanism.{section_name(kind)}]")
    return CompanionMechanism(registration(kind).make(section, settings), settings)
