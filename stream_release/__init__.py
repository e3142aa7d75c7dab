"""stream-release: privacy-preserving serial data publishing with a global breach guarantee.

The public API, for a program that publishes a series without the service::

    from pathlib import Path

    from stream_release import anonymize_files, load_settings

    settings = load_settings("stream-release.toml")
    manifests = anonymize_files(settings, Path("out"), [Path("2023.csv"), Path("2024.csv")])

Names are imported on first use (PEP 562), so ``import stream_release.audit`` or the
``calc`` command loads no planning code. Everything else is internal; the external contract
(configuration, commands, files, topics) is ``docs/contract.md``. The layers, and what each
may import, are in docs/layout.md.
"""

import typing as _typing

from stream_release.lazy_names import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from stream_release.audit import AuditReport, audit_directory
    from stream_release.config import Settings, load_settings
    from stream_release.core.privacy.strategy import Strategy, make_strategy
    from stream_release.errors import (
        ArchiveConflict,
        ConfigError,
        GuaranteeUnsatisfiable,
        HistoryStoreError,
        InvalidParameter,
        KafkaError,
        KeyMismatch,
        PrivacyLeakWarning,
        SchemaError,
        SequenceConflict,
        SeriesRewound,
        StoreRegressed,
        StreamReleaseError,
    )
    from stream_release.history import make_history_store
    from stream_release.history.pseudonym import generate_key
    from stream_release.io.snapshot import snapshot_from_columns
    from stream_release.io.snapshot_csv import read_snapshot
    from stream_release.mechanisms.global_guarantee.plan import ReleasePlan, plan_release
    from stream_release.pipeline.anonymize import anonymize_files
    from stream_release.pipeline.publisher import Publisher

from stream_release.version import __version__

_EXPORTS: dict[str, str] = {
    "ArchiveConflict": "stream_release.errors",
    "AuditReport": "stream_release.audit",
    "ConfigError": "stream_release.errors",
    "GuaranteeUnsatisfiable": "stream_release.errors",
    "HistoryStoreError": "stream_release.errors",
    "InvalidParameter": "stream_release.errors",
    "KafkaError": "stream_release.errors",
    "KeyMismatch": "stream_release.errors",
    "PrivacyLeakWarning": "stream_release.errors",
    "Publisher": "stream_release.pipeline.publisher",
    "ReleasePlan": "stream_release.mechanisms.global_guarantee.plan",
    "SchemaError": "stream_release.errors",
    "SequenceConflict": "stream_release.errors",
    "SeriesRewound": "stream_release.errors",
    "Settings": "stream_release.config",
    "StoreRegressed": "stream_release.errors",
    "Strategy": "stream_release.core.privacy.strategy",
    "StreamReleaseError": "stream_release.errors",
    "anonymize_files": "stream_release.pipeline.anonymize",
    "audit_directory": "stream_release.audit",
    "generate_key": "stream_release.history.pseudonym",
    "load_settings": "stream_release.config",
    "make_history_store": "stream_release.history",
    "make_strategy": "stream_release.core.privacy.strategy",
    "plan_release": "stream_release.mechanisms.global_guarantee.plan",
    "read_snapshot": "stream_release.io.snapshot_csv",
    "snapshot_from_columns": "stream_release.io.snapshot",
}
"""Public name -> the module that defines it."""

__all__ = [
    "ArchiveConflict",
    "AuditReport",
    "ConfigError",
    "GuaranteeUnsatisfiable",
    "HistoryStoreError",
    "InvalidParameter",
    "KafkaError",
    "KeyMismatch",
    "PrivacyLeakWarning",
    "Publisher",
    "ReleasePlan",
    "SchemaError",
    "SequenceConflict",
    "SeriesRewound",
    "Settings",
    "StoreRegressed",
    "Strategy",
    "StreamReleaseError",
    "__version__",
    "anonymize_files",
    "audit_directory",
    "generate_key",
    "load_settings",
    "make_history_store",
    "make_strategy",
    "plan_release",
    "read_snapshot",
    "snapshot_from_columns",
]


__getattr__, __dir__ = _lazy_names(__name__, _EXPORTS, globals())
