"""Release mechanisms of the companion papers (``[mechanism] kind``): see :mod:`.base`.

``kind = "global-guarantee"`` (the default) is the grouping of paper 003 in
:mod:`stream_release.release`; every other kind is a module registered in
:data:`MECHANISMS`, one :class:`~stream_release.mechanisms.base.Registration` line each::

    [mechanism]
    kind = "sampled-k-anonymity"
    [mechanism.sampled_k_anonymity]     # the kind with "_" for "-": section_name(kind)
    k = 20
    ...

The configuration validates the active kind's section with the registered model
(:mod:`stream_release.config`), the publisher builds the mechanism with :func:`make_mechanism`
(offline ``anonymize`` and the worker alike, :class:`~stream_release.series.Publisher`) and the
audit calls the registered ``verify_release`` (:mod:`stream_release.audit`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from stream_release.errors import ConfigError
from stream_release.mechanisms.base import (
    Mechanism,
    MechanismRelease,
    Registration,
    ReleaseRandomness,
    StateLoader,
)

if TYPE_CHECKING:
    from stream_release.config import Settings

__all__ = [
    "GLOBAL_GUARANTEE",
    "KINDS",
    "MECHANISMS",
    "Mechanism",
    "MechanismKind",
    "MechanismRelease",
    "Registration",
    "ReleaseRandomness",
    "StateLoader",
    "describe_release",
    "make_mechanism",
    "registration",
    "section_name",
]

MechanismKind = Literal[
    "global-guarantee", "sampled-k-anonymity", "reconstruction-private-rr", "dp-sanitised"
]
"""Every value of ``[mechanism] kind`` (CONTRACT §2)."""

KINDS: Final[tuple[str, ...]] = get_args(MechanismKind)

GLOBAL_GUARANTEE: Final = "global-guarantee"
"""The default kind: paper 003's global guarantee, planned by :mod:`stream_release.release`."""

MECHANISMS: Final[dict[str, Registration]] = {
    "sampled-k-anonymity": Registration(
        "stream_release.mechanisms.sampled_k_anonymity",
        "SampledKAnonymitySettings",
        "make_sampled_k_anonymity",
        verify_series="verify_series",
        pass_settings=True,
    ),
    "reconstruction-private-rr": Registration(
        "stream_release.mechanisms.reconstruction_rr",
        "ReconstructionRRSettings",
        "ReconstructionRR",
        verify_series="verify_series",
        verify_module="stream_release.mechanisms.reconstruction_rr_audit",
    ),
    "dp-sanitised": Registration(
        "stream_release.mechanisms.dp_sanitised",
        "DPSanitisedSettings",
        "make_dp_sanitised",
        pass_settings=True,
        verify_module="stream_release.mechanisms.dp_sanitised_audit",
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
