"""Settings: one frozen pydantic-settings object, loaded from TOML and ``SR_<SECTION>_<KEY>``.

Every tunable of the package lives here (STYLE.md rule 4). Environment variables override the
file: ``SR_`` + the section + ``_`` + the key, upper case (``SR_PRIVACY_L=3``,
``SR_PRIVACY_K_PRIME=5``, ``SR_REDIS_URL=...``). A key of a table inside a section follows a
double underscore, as deep as the tables go (``SR_KAFKA_TOPICS__CONTROL=ward7.control`` for
``[kafka.topics] control``, ``SR_MECHANISM_DP_SANITISED__EPSILON=2`` for
``[mechanism.dp_sanitised] epsilon``); lists and tables are given as JSON
(``SR_PRIVACY_PROTECTED='["flu"]'``, ``SR_KAFKA_TOPICS='{"control": "c"}'``). Relative paths are
relative to the file.

The package's modules are private; every name is imported from here: the section models
(:mod:`._sections`, ``[mechanism]`` in :mod:`._mechanism`), the environment source
(:mod:`._environment`), :class:`Settings` (:mod:`._settings`), the one-line error of a
configuration that does not validate (:mod:`._describe`), :func:`load_settings`
(:mod:`._load`), the spelling rules of ``privacy.protected`` (:mod:`._protected`) and the
check of a horizon on shards against ``stream-release plan``'s digest (:mod:`._planned`).
Their modules are imported on first use (PEP 562): the audit reads a mechanism's table model
(:mod:`.mechanisms`) without loading the rest of the configuration.
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from stream_release.config._horizon import Horizon, horizon_of
    from stream_release.config._load import load_settings
    from stream_release.config._mechanism import MechanismSettings
    from stream_release.config._planned import check_planned, plan_digest
    from stream_release.config._protected import (
        closest_match,
        corrected,
        describe_misses,
        same_value,
    )
    from stream_release.config._sections import (
        GroupingSettings,
        HistorySettings,
        KafkaSettings,
        OutputSettings,
        PrivacySettings,
        RedisSettings,
        SchemaSettings,
        ServiceSettings,
        TopicSettings,
        VirtualSettings,
    )
    from stream_release.config._settings import Settings

_EXPORTS: dict[str, str] = {
    "GroupingSettings": "_sections",
    "HistorySettings": "_sections",
    "Horizon": "_horizon",
    "KafkaSettings": "_sections",
    "MechanismSettings": "_mechanism",
    "OutputSettings": "_sections",
    "PrivacySettings": "_sections",
    "RedisSettings": "_sections",
    "SchemaSettings": "_sections",
    "ServiceSettings": "_sections",
    "Settings": "_settings",
    "TopicSettings": "_sections",
    "VirtualSettings": "_sections",
    "check_planned": "_planned",
    "closest_match": "_protected",
    "corrected": "_protected",
    "describe_misses": "_protected",
    "horizon_of": "_horizon",
    "load_settings": "_load",
    "plan_digest": "_planned",
    "same_value": "_protected",
}
"""Public name -> the private module of this package that defines it."""

__all__ = [
    "GroupingSettings",
    "HistorySettings",
    "Horizon",
    "KafkaSettings",
    "MechanismSettings",
    "OutputSettings",
    "PrivacySettings",
    "RedisSettings",
    "SchemaSettings",
    "ServiceSettings",
    "Settings",
    "TopicSettings",
    "VirtualSettings",
    "check_planned",
    "closest_match",
    "corrected",
    "describe_misses",
    "horizon_of",
    "load_settings",
    "plan_digest",
    "same_value",
]


def __getattr__(name: str) -> typing.Any:
    """A public name, imported from its module on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
