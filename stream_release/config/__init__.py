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

import typing

from stream_release.lazy_names import lazy_names

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
    "GroupingSettings": "stream_release.config._sections",
    "HistorySettings": "stream_release.config._sections",
    "Horizon": "stream_release.config._horizon",
    "KafkaSettings": "stream_release.config._sections",
    "MechanismSettings": "stream_release.config._mechanism",
    "OutputSettings": "stream_release.config._sections",
    "PrivacySettings": "stream_release.config._sections",
    "RedisSettings": "stream_release.config._sections",
    "SchemaSettings": "stream_release.config._sections",
    "ServiceSettings": "stream_release.config._sections",
    "Settings": "stream_release.config._settings",
    "TopicSettings": "stream_release.config._sections",
    "VirtualSettings": "stream_release.config._sections",
    "check_planned": "stream_release.config._planned",
    "closest_match": "stream_release.config._protected",
    "corrected": "stream_release.config._protected",
    "describe_misses": "stream_release.config._protected",
    "horizon_of": "stream_release.config._horizon",
    "load_settings": "stream_release.config._load",
    "plan_digest": "stream_release.config._planned",
    "same_value": "stream_release.config._protected",
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


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, globals())
