"""A horizon on shards is planned on data: ``[privacy] planned``.

On one shard, a setting that lasts ``H`` releases (:mod:`stream_release.config._horizon`) keeps
everyone inside its plan for ``H`` releases wherever the data allows a release at all. On
``kafka.partitions`` ``P > 1`` shards each part is planned alone against its own individuals'
histories (Wong et al., ICDE 2010, Lemma 4), so every protected value must be rare enough in
every part of every release: a value held by 5 % of a release may be held by 10 % of a part of
90 rows, and that part refuses the release. Only the data tells, so the configuration carries
the verdict of the tool that saw the data: ``stream-release plan`` cuts each snapshot it is
shown as the worker cuts it, plans every shard's parts as a series of its own, and prints
:func:`plan_digest` for a setting every part of every snapshot publishes for the horizon. A
worker on shards refuses to start with a ``horizon`` whose ``planned`` is missing or was
printed for other settings (:func:`check_planned`): a series is refused at configuration, not
at the release where a part first falls short.

The digest covers what decides whether a part can be made: the privacy setting (``l``, the
strategy and its parameter, the protected values, ``min_group_size``, the horizon), the
grouping, the columns (``schema``: id, sensitive, QIDs, which are numeric), the contents of
the hierarchies (the QIDs' generalization; the sensitive attribute's domain, which decides
whether a protected value is spelled as the data spells it) and the number of shards; not
paths, keys or the service's addresses. It is a checksum of the configuration, never of data.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson

from stream_release.config._sections import GroupingSettings, PrivacySettings, SchemaSettings
from stream_release.errors import ConfigError

__all__ = ["check_planned", "plan_digest"]

DIGEST_PREFIX = "plan1-"
"""The version of what :func:`plan_digest` covers: a digest of another version never matches."""


def plan_digest(
    privacy: PrivacySettings,
    grouping: GroupingSettings,
    schema: SchemaSettings,
    shards: int,
    horizon: int,
) -> str:
    """The digest ``stream-release plan`` prints for these settings planned for ``horizon``
    releases on ``shards`` shards (module docstring)."""
    setting: dict[str, object] = {
        "l": privacy.l,
        "strategy": privacy.strategy,
        "protected": sorted(privacy.protected),
        "min_group_size": privacy.min_group_size,
        "horizon": horizon,
        "grouping": grouping.model_dump(mode="json"),
        "columns": [schema.id, schema.sensitive, *schema.qid],
        "numeric": None if schema.numeric is None else list(schema.numeric),
        "hierarchies": {
            column: _content(column, path) for column, path in sorted(schema.hierarchies.items())
        },
        "shards": shards,
    }
    if privacy.strategy == "constant-ratio":
        setting["k_prime"] = privacy.k_prime
    elif privacy.strategy == "geometric":
        setting["alpha"] = privacy.alpha
    canonical = orjson.dumps(setting, option=orjson.OPT_SORT_KEYS)
    return DIGEST_PREFIX + hashlib.sha256(canonical).hexdigest()[:16]


def _content(column: str, path: Path) -> str:
    """The SHA-256 of a hierarchy file's bytes."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ConfigError(
            f"schema.hierarchies.{column} = {str(path)!r} cannot be read ({exc.strerror}): "
            "give the path of the hierarchy's CSV file"
        ) from None


def check_planned(
    privacy: PrivacySettings, grouping: GroupingSettings, schema: SchemaSettings, shards: int
) -> None:
    """Refuse a ``horizon`` on ``shards > 1`` shards whose ``planned`` is not the digest of
    these settings.

    Raises
    ------
    ConfigError
        One line: the keys, what is missing or stale, and the command that plans the series.
    """
    horizon = privacy.horizon
    if shards <= 1 or horizon is None:
        return
    if privacy.planned == plan_digest(privacy, grouping, schema, shards, horizon):
        return
    state = (
        "privacy.planned is not set"
        if privacy.planned is None
        else f"privacy.planned = {privacy.planned!r} was printed for other settings (the "
        "privacy setting, the protected values, the horizon, the grouping, the columns or "
        "the number of shards changed since)"
    )
    raise ConfigError(
        f"privacy.horizon = {horizon} on kafka.partitions = {shards} shards, but {state}: each "
        "shard plans its part of a release alone, so every protected value must be rare enough "
        "in every part of every release, which only the data can tell; run `stream-release "
        f"plan --config <this file> --horizon {horizon} <snapshots>` on the series' snapshots "
        "(or earlier ones like them) and set privacy.planned to the digest it prints for the "
        "setting you choose, or use kafka.partitions = 1 (without privacy.horizon the series "
        "is not planned: a part refuses any release its rows cannot make)"
    )
