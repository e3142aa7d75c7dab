"""Release mechanisms of the companion papers (``[mechanism] kind``): see :mod:`.base`.

``kind = "global-guarantee"`` (the default) is the grouping of Wong et al. 2010 in
:mod:`stream_release.mechanisms.global_guarantee.plan`; every other kind is a module registered in
:data:`MECHANISMS`, one :class:`~stream_release.mechanisms.base.Registration` line each::

    [mechanism]
    kind = "sampled-k-anonymity"
    [mechanism.sampled_k_anonymity]     # the kind with "_" for "-"
    k = 20
    ...

The configuration validates the active kind's section with its model
(:mod:`stream_release.config.mechanisms`), the publisher builds the mechanism with
:func:`make_mechanism` (offline ``anonymize`` and the worker alike,
:class:`~stream_release.pipeline.publisher.Publisher`) and the audit runs the kind's own
``<kind>/audit.py`` module (:mod:`stream_release.audit.mechanisms`).
"""

from __future__ import annotations

from typing import Any

from stream_release.mechanisms.registry import (
    MECHANISMS,
    Registration,
    make_mechanism,
    registration,
)

__all__ = [
    "MECHANISMS",
    "Mechanism",
    "MechanismRelease",
    "Registration",
    "ReleaseRandomness",
    "StateLoader",
    "make_mechanism",
    "registration",
]

_BASE = ("Mechanism", "MechanismRelease", "ReleaseRandomness", "StateLoader")


def __getattr__(name: str) -> Any:
    """The release protocol of :mod:`.base`, imported on first use: importing this package
    (as an audit module does) imports no release code."""
    if name in _BASE:
        from stream_release.mechanisms import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
