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
"""

from __future__ import annotations

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
from stream_release.config.mechanisms import MechanismKind

__all__ = [
    "GroupingSettings",
    "HistorySettings",
    "Horizon",
    "KafkaSettings",
    "MechanismKind",
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
