"""The exception tree of stream_release.

::

    StreamReleaseError
    ├── ConfigError               bad configuration file or setting
    │   └── KeyMismatch           the history was written under another pseudonymisation key
    ├── InvalidParameter          a privacy parameter out of its domain (also a ValueError)
    ├── SchemaError               malformed snapshot: missing column, duplicate id, unknown value
    ├── GuaranteeUnsatisfiable    no grouping meets the bound; the release is refused
    ├── HistoryStoreError         the history store failed (wraps redis / OS errors)
    │   ├── SequenceConflict      a commit for a sequence that is not the next one
    │   └── StoreRegressed        the store is behind what was already published
    │       └── SeriesRewound     the store or an archive is behind the series ledger
    ├── ArchiveConflict           a published file would be replaced by other content
    └── KafkaError                the Kafka cluster failed or refused (wraps aiokafka / OS errors)
    PrivacyLeakWarning(RuntimeWarning)

Every message names the field, the value and the fix.
"""

from __future__ import annotations


class StreamReleaseError(Exception):
    """Root of every error raised by stream_release."""


class ConfigError(StreamReleaseError):
    """The configuration is invalid: names the key, its value and what is allowed."""


class KeyMismatch(ConfigError):
    """The history store was written under another pseudonymisation key: opening it under this
    one would silently start every individual's history afresh."""


class InvalidParameter(StreamReleaseError, ValueError):
    """A privacy parameter lies outside its domain (e.g. ``l <= 1``)."""


class SchemaError(StreamReleaseError):
    """A snapshot does not match the configured schema."""


class GuaranteeUnsatisfiable(StreamReleaseError):
    """No grouping can meet the global guarantee with these parameters; nothing is released.

    ``public``: the message holds only counts of the release and settings (never an id, a QID
    value or a row's position), so it may go where the publisher's operators read it (the
    worker's log and status topic); otherwise they get the kind of failure only.
    """

    def __init__(self, message: str, *, public: bool = False) -> None:
        super().__init__(message)
        self.public = public


class HistoryStoreError(StreamReleaseError):
    """The history store failed; the release was not committed."""


class SequenceConflict(HistoryStoreError):
    """A commit named a sequence number that is not the store's next one."""


class StoreRegressed(HistoryStoreError):
    """The history store is behind the releases already published (it lost commits, e.g. a
    Redis restarted without persistence): cutting now would reuse published sequence numbers
    and forget linkages. Nothing is cut until the store is restored."""


class SeriesRewound(StoreRegressed):
    """The history store or an archive is behind what the series ledger records as published,
    or holds another release under a sequence the ledger records (restored from an older
    backup, or another series'): publishing would reuse a published sequence number and
    forget the linkages of the releases since. Nothing is published until they are restored."""


NEW_SERIES_CAVEAT = (
    "a new series restarts every individual's count from zero while the releases already "
    "published stay public, so the guarantee no longer covers what can be linked across the "
    "two series"
)
"""What every message that suggests a new series (history, archive, ``history.prefix``) says
about it: the guarantee is per series, and the old releases cannot be withdrawn."""


class ArchiveConflict(StreamReleaseError):
    """Publishing would replace a published release file by different content; published
    files are write-once."""


class KafkaError(StreamReleaseError):
    """Talking to Kafka failed (unreachable, refused, timed out); names the bootstrap address."""


class PrivacyLeakWarning(RuntimeWarning):
    """A setting weakens the guarantee (e.g. the localized baseline)."""
