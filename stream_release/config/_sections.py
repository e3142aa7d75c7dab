"""The section models of the configuration: one frozen pydantic model per table of the file.

``[schema]``, ``[privacy]``, ``[output]``, ``[grouping]``, ``[virtual]``, ``[history]``,
``[kafka]`` (with ``[kafka.topics]``), ``[redis]`` and ``[service]``; ``[mechanism]`` is
:mod:`stream_release.config._mechanism`'s. Each model checks its own keys when it is built;
:class:`~stream_release.config.Settings` holds one of each.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from stream_release.core.privacy.strategy import Strategy, make_strategy
from stream_release.errors import InvalidParameter


class Section(BaseModel):
    """A table of the configuration: frozen, and a key it does not define is an error."""

    # each key's docstring is its description (the generated configuration reference reads it)
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class SchemaSettings(Section):
    id: str = "id"
    sensitive: str = "sensitive"
    qid: tuple[str, ...] = ()
    hierarchies: dict[str, Path] = Field(default_factory=dict)
    """ARX hierarchies of QIDs (generalization) and of ``sensitive`` (its domain: the values
    ``privacy.protected`` may name, also those no row holds yet)."""
    numeric: tuple[str, ...] | None = None
    """QIDs to treat as numeric; ``None`` = detect (every value parses as a number)."""

    @model_validator(mode="after")
    def _check_columns(self) -> SchemaSettings:
        if not self.qid:
            raise ValueError("schema.qid is empty: list the quasi-identifier columns")
        names = [self.id, self.sensitive, *self.qid]
        if len(set(names)) != len(names):
            raise ValueError(
                f"schema: a column is named twice among id, sensitive and qid: {names}"
            )
        unknown = sorted(set(self.hierarchies) - {*self.qid, self.sensitive})
        if unknown:
            raise ValueError(
                f"schema.hierarchies names {unknown}, which are not in schema.qid nor "
                "schema.sensitive"
            )
        return self


WEAK_BOUND = Fraction(9, 10)
"""A bound ``1/l`` above this needs ``[privacy] acknowledge_weak_l = true``: at ``l`` below
10/9 the guarantee lets an adversary be nearly sure of a protected value (``l = 1.001``:
0.999). The audit keeps its own copy (:data:`stream_release.audit.settings.WEAK_BOUND`)."""


class PrivacySettings(Section):
    l: float = 2.0  # noqa: E741 - the paper's symbol
    strategy: Literal["constant-ratio", "geometric", "minimal", "localized"] = "constant-ratio"
    k_prime: int = 20
    alpha: float = 2.0
    protected: tuple[str, ...] = ()
    min_group_size: int = Field(default=2, ge=1)
    """k-anonymity floor on every published group. 2 by default: with only some values
    protected, holders of unprotected values would otherwise be published as exact-QID
    singletons. 1 only when set explicitly (every manifest states the floor)."""
    horizon: int | None = Field(default=None, ge=1)
    """The number of releases the series is planned for. A setting that cannot keep every
    individual inside its plan that long is refused before release 1, with the fix
    (constant-ratio needs ``k_prime >= horizon``: Wong et al. 2010, §6.1). Unset: the
    releases the setting lasts (:mod:`stream_release.config._horizon`). Past it, the series
    goes on, and its manifests say so (``past_horizon``)."""
    planned: str | None = None
    """With ``horizon`` on shards (``kafka.partitions`` > 1): the digest ``stream-release
    plan`` prints for a setting every shard's part of every snapshot it was shown publishes
    for the horizon; a worker on shards refuses to start without it
    (:mod:`stream_release.config._planned`). Empty: unset (``SR_PRIVACY_PLANNED=``)."""

    @field_validator("planned")
    @classmethod
    def _empty_is_unset(cls, value: str | None) -> str | None:
        return value or None

    def make_strategy(self) -> Strategy:
        """The validated :class:`Strategy` these settings describe."""
        return make_strategy(self.strategy, ell=self.l, k_prime=self.k_prime, alpha=self.alpha)

    @model_validator(mode="after")
    def _check_parameters(self) -> PrivacySettings:
        try:
            self.make_strategy()
        except InvalidParameter as exc:
            raise ValueError(str(exc)) from None
        return self

    acknowledge_localized: bool = False
    """Required with ``strategy = "localized"``: the baseline bounds each release alone and
    does not meet the global guarantee. Every manifest states it (``strategy.acknowledged``)."""
    acknowledge_weak_l: bool = False
    """Required when the bound ``1/l`` is above :data:`WEAK_BOUND` (``l < 10/9``). Every
    manifest states it (``strategy.acknowledged``)."""

    @property
    def acknowledged(self) -> tuple[str, ...]:
        """The acknowledgement keys these settings need (and therefore set): what the
        manifest's ``strategy.acknowledged`` lists."""
        needed = []
        if self.strategy == "localized":
            needed.append("acknowledge_localized")
        if Fraction(self.l) < 1 / WEAK_BOUND:
            needed.append("acknowledge_weak_l")
        return tuple(needed)

    @model_validator(mode="after")
    def _check_acknowledged(self) -> PrivacySettings:
        """A weakened setting needs its acknowledgement key: nothing weakens silently."""
        if self.strategy == "localized" and not self.acknowledge_localized:
            raise ValueError(
                "privacy.strategy = 'localized' bounds each release alone (ratio l, no "
                "history): an individual's probability of being linked to a value across "
                "releases passes 1/l (the audit shows it); to run this baseline anyway add "
                "acknowledge_localized = true to [privacy] (SR_PRIVACY_ACKNOWLEDGE_LOCALIZED="
                "true), else choose constant-ratio or geometric"
            )
        if Fraction(self.l) < 1 / WEAK_BOUND and not self.acknowledge_weak_l:
            raise ValueError(
                f"privacy.l = {self.l!r} gives the bound 1/l = {1 / self.l:.6g}, above "
                f"{float(WEAK_BOUND):g}: a person may be linked to a protected value with "
                "near certainty; to publish under it anyway add acknowledge_weak_l = true to "
                "[privacy] (SR_PRIVACY_ACKNOWLEDGE_WEAK_L=true), else set l >= 1.112"
            )
        return self


class OutputSettings(Section):
    format: Literal["generalized", "anatomy"] = "generalized"
    queries: int = Field(default=5000, ge=0)
    """Random count queries behind ``utility.query_error`` (Wong et al. 2010, §8)."""
    query_seed: int = 0
    ledger: Path | None = None
    """The series ledger (:mod:`stream_release.io.series_ledger`): every release published,
    with the sha256 of its files, kept outside both archives so that a history store and
    archives restored from an older backup are refused. Default ``<archive>.ledger`` beside the
    public directory (``anonymize --out DIR``: ``DIR.ledger``; the worker:
    ``<service.archive>.ledger``). Not kept by workers on shards."""


class GroupingSettings(Section):
    max_group_factor: float = Field(default=2.0, ge=1.0)
    """A group is never grown beyond this multiple of ``max(base ratio, min_group_size)``
    (the cap). A row whose plan for some protected value of its history exceeds the cap is
    *withheld* into the suppressed set before grouping, whatever value it holds now
    (docs/guarantee.md: the rule reads no sensitive value); inside the series' horizon no
    row is, and past it a withheld row is held to the per-release bound. A larger cap lets a
    setting last longer (geometric) but makes groups larger (``benchmarks/suppressed_set.py``
    measures the suppression and refusals of a setting)."""
    insertion_window: int = Field(default=32, ge=0)
    """How far (rows in k-d order, each side) a leftover row looks for a group that stays valid
    with it before it is suppressed. Larger: less suppression, wider groups (higher NCP and, on
    Adult, higher query error: 512 took geometric alpha = 3 from 9.1 % to 6.0 % suppression
    but NCP from 0.42 to 0.49)."""
    threads: int = Field(default=0, ge=0)
    """Most threads the parallel grouping kernel runs on: 0, the cores this process may run
    on (``os.sched_getaffinity``: a container's share, not the machine's count); 1, one
    thread. Whatever the cap, each release runs on one thread or on the cap, whichever has
    been faster per row (another process may hold the cores); the groups are the same."""


class VirtualSettings(Section):
    """``[virtual]``: virtual individuals (Wong et al. 2010, §8).

    ``registry``: a CSV of a population register (the id column and the QID columns of
    ``[schema]``, no sensitive value). People of the register who are absent from a snapshot
    may join its groups to dilute them: they count in a group's size and hold no value. Valid
    only where the adversary cannot tell who is in a snapshot (docs/guarantee.md, "Virtual
    individuals")."""

    registry: Path | None = None


class HistorySettings(Section):
    key_file: Path | None = None
    """File holding the pseudonymisation key (keyed hash of ids). Or set ``SR_HISTORY_KEY``."""
    key: str | None = Field(default=None, repr=False)
    prefix: str = "sr"
    """Namespace of every Redis key."""


class TopicSettings(Section):
    """Kafka topic names (docs/contract.md §5)."""

    records: str = "sr.records"
    control: str = "sr.control"
    releases: str = "sr.releases"
    manifests: str = "sr.manifests"
    rejected: str = "sr.rejected"
    status: str = "sr.status"
    """Why a sealed release was not published (refused, blocked by rejected records), keyed
    by its label: for the producer, like ``rejected``."""

    @property
    def every(self) -> list[str]:
        """Every topic name: records, control, releases, manifests, rejected, status."""
        return [
            self.records,
            self.control,
            self.releases,
            self.manifests,
            self.rejected,
            self.status,
        ]


class KafkaSettings(Section):
    """The Kafka client settings; security settings pass through to aiokafka / faust."""

    bootstrap: str = "127.0.0.1:9092"
    client_id: str = "stream-release"
    group_id: str = "stream-release"
    """Consumer group of the worker. Its Faust agents (seals on ``topics.control``) join
    ``group_id``; its batch consumer of ``topics.records`` joins ``group_id + "-records"``
    (a plain aiokafka group: it cannot share Faust's group protocol). Grant both to the
    worker's Kafka user."""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    idempotent: bool = True
    """Idempotent producer (exactly-once writes per partition). Some Kafka-protocol brokers
    (e.g. the Tansu broker of the demo) do not support it: set false."""
    transactions: bool = True
    """The worker sends each release (its group lines and its manifest) in one Kafka
    transaction: a consumer with ``isolation.level = read_committed`` sees a release whole or
    not at all. Needs ``idempotent``; set false for a broker without transactions (the demo's
    Tansu). Consumers reading uncommitted messages still see each release once by its
    ``sequence``."""
    transactional_id: str | None = None
    """The worker's transactional id; default ``group_id + "-releases"``. It must be stable
    across restarts of one worker (a restarted worker fences its predecessor's open
    transaction) and differ between workers. Grant the worker's Kafka user WRITE and
    DESCRIBE on it."""
    transaction_timeout_ms: int = Field(default=900_000, ge=1000)
    """How long the broker lets one release's transaction stay open before it aborts it
    (the producer's ``transaction.timeout.ms``). A release is one transaction, so this bounds
    the largest release a worker can send: its sender takes about 0.72 µs per row
    (``benchmarks/scale_out.py``), so aiokafka's default of 60 s ends near 80M rows and this
    default near a billion. The default is the broker's own ceiling
    (``transaction.max.timeout.ms``, 15 minutes by default), which refuses a longer one when
    the worker starts. The cost of a long one: a
    worker that dies in a transaction and never comes back holds ``read_committed``
    consumers of its partitions for up to this long (a worker that restarts under the same
    ``transactional_id`` aborts it at once)."""
    max_message_bytes: int = Field(default=1_048_576, ge=1024)
    """Larger messages are rejected (sr.rejected) without being parsed; also the producer's
    largest request."""
    request_timeout_ms: int = Field(default=5000, ge=100)
    """Time a connection attempt or a request may take before it fails. Short, so that an
    unreachable broker is reported in seconds; raise it for slow or distant clusters."""
    partitions: int = Field(default=1, ge=1, le=4096)
    """Partitions of ``topics.records`` when this package creates it, and the number the
    worker and ``stream-release publish`` expect it to have. Records are keyed by the
    individual's id, so Kafka's default partitioner keeps an individual on one partition: each
    partition is a **shard** with the histories of its own individuals, planned on its own,
    and the workers of one ``group_id`` share the shards. Fixed for a series: another value
    moves individuals between shards, away from their histories (docs/scale-out.md)."""
    replication_factor: int = Field(default=1, ge=1)
    """Replication factor of the topics this package creates when they are missing (single-
    broker default; a production cluster wants 3). Existing topics are left as they are."""
    topics: TopicSettings = Field(default_factory=TopicSettings)

    @property
    def records_group_id(self) -> str:
        """The consumer group of the worker's records consumer: ``group_id + "-records"``."""
        return f"{self.group_id}-records"

    @property
    def release_transactional_id(self) -> str | None:
        """The transactional id of the worker's release producer; ``None`` without
        transactions."""
        if not self.transactions:
            return None
        return self.transactional_id or f"{self.group_id}-releases"

    @model_validator(mode="after")
    def _check_transactions(self) -> KafkaSettings:
        if self.transactions and not self.idempotent:
            raise ValueError(
                "kafka.transactions = true needs kafka.idempotent = true (a transactional "
                "producer is idempotent); set both true, or transactions = false for a broker "
                "without them (SR_KAFKA_TRANSACTIONS=false)"
            )
        return self

    @model_validator(mode="after")
    def _check_security(self) -> KafkaSettings:
        sasl = self.security_protocol.startswith("SASL_")
        ssl = self.security_protocol.endswith("SSL")
        if sasl and (self.sasl_username is None or self.sasl_password is None):
            raise ValueError(
                f"security_protocol {self.security_protocol!r} needs sasl_username and "
                "sasl_password (SR_KAFKA_SASL_USERNAME, SR_KAFKA_SASL_PASSWORD)"
            )
        given = [
            name
            for name in ("sasl_mechanism", "sasl_username", "sasl_password")
            if not sasl and getattr(self, name) is not None
        ] + [
            name
            for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
            if not ssl and getattr(self, name) is not None
        ]
        if given:
            raise ValueError(
                f"{', '.join(given)} set but security_protocol is {self.security_protocol!r}, "
                "which does not use them; set security_protocol (SASL_SSL, SASL_PLAINTEXT or "
                "SSL) or remove them"
            )
        return self


class RedisSettings(Section):
    url: str = "redis://127.0.0.1:6379/0"
    """A Redis server (``redis://``, ``rediss://``, ``unix://``), or with ``cluster`` any node
    of a Redis Cluster."""
    cluster: bool = False
    """``url`` is a node of a Redis Cluster: every shard's keys share one hash tag
    (``{prefix:p}``) and the release-level records have their own (``{prefix:release}``), so
    each commit stays one transaction in one slot."""


class ServiceSettings(Section):
    """The streaming worker (``stream-release worker``, docs/contract.md §5)."""

    archive: Path = Path("archive")
    """Where the worker writes the public files of every release (group lines, manifests):
    publishable as a whole."""
    private_archive: Path | None = None
    """Where the worker writes the private files of every release (assignments, private
    records), never to be published; default ``<archive>.private`` (created mode 0700)."""
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    """Port of the worker's HTTP endpoint: ``/metrics`` (Prometheus) and ``/health`` (JSON);
    0 disables it."""
    metrics_host: str = "127.0.0.1"
    """Address the endpoint listens on: this machine only by default; the container image sets
    ``SR_SERVICE_METRICS_HOST=0.0.0.0`` (every interface, for a scraper or a probe from
    outside the container)."""
    log_format: Literal["json", "text"] = "json"
    """The worker's log lines on stdout: JSON objects (for a log pipeline) or plain text
    (:mod:`stream_release.stream.logs`)."""
    rejected_raw: Literal["redact", "full"] = "redact"
    """What a message on ``topics.rejected`` shows of the refused message: ``redact`` (its
    ids and Kafka key replaced by their keyed pseudonyms, undeclared fields hidden) or
    ``full`` (as received, docs/contract.md §5 to the letter);
    :mod:`stream_release.stream.redaction`."""
    batch_records: int = Field(default=5000, ge=1)
    """Records staged in Redis per batch: the worker takes up to this many ``sr.records``
    messages (or seals) at once, stages them in one round of Redis calls, then lets their
    offsets be committed. Larger batches spread the per-batch round trips (staging call,
    offset commit) over more records."""
    batch_window_s: float = Field(default=0.5, gt=0)
    """Longest wait (seconds) for a batch to fill before the messages already received are
    staged; bounds the delay a lone message (e.g. a seal) adds to its release."""
    retry_interval_s: float = Field(default=5.0, gt=0)
    """Period (seconds) of the background check that cuts ready releases and re-sends committed
    but unsent ones (after a failed send), besides the check after each batch; also the longest
    pause before staging a batch (or starting the records consumer) again after Redis or the
    broker failed: the pauses start at 0.1 s and double, with jitter, up to it
    (:mod:`stream_release.stream.retry`)."""
    session_timeout_s: float = Field(default=30.0, gt=0)
    """Consumer-group session timeout (seconds): a worker silent this long is considered dead
    and its partitions reassigned. Some brokers (Tansu) hold a group's first join for about
    half of it, so tests use a few seconds."""
    heartbeat_interval_s: float = Field(default=3.0, gt=0)
    """Consumer-group heartbeat period (seconds); below ``session_timeout_s`` (a third or
    less is usual)."""
    rebalance_timeout_s: float = Field(default=60.0, gt=0)
    """Longest time (seconds) a rebalance waits for the group's members to rejoin."""
    max_release_rows: int = Field(default=2_000_000, ge=1)
    """Most distinct ids one release may hold. The worker stages a release's rows in Redis
    (about 200 bytes each) and holds them all in memory while it cuts the release (about
    2 KiB each at the peak: 300,000 Adult rows took 550 MiB), so a larger snapshot is refused
    before it can exhaust either: a seal announcing more ids is rejected (reason
    ``too_large``), and so is every new id beyond this many staged for one release;
    ``stream-release publish`` refuses such a snapshot before reading it. Raise it (for the
    worker and the publisher) where the memory is there, or split the snapshot into several
    releases."""
    stop_timeout_s: float = Field(default=6.0, gt=0)
    """SIGTERM or Ctrl-C stops the worker within this many seconds, whatever Redis and the
    broker are doing: past it the clean stop is cut short (nothing is lost: see
    :mod:`stream_release.stream.shutdown`). With the process's own exit, at least 3 s inside
    compose's 10 s grace period (``tests/integration/test_dependency_faults.py`` measures it
    with Redis and with the broker away)."""
    seal_alert_after_s: float = Field(default=600.0, gt=0)
    """A sealed release still missing records this many seconds after the worker first saw it
    waiting gets a warning log line (``event`` ``seal_incomplete``: release, sealed, staged,
    missing, waited seconds), again every as many seconds while it waits; the alert rule of
    ``deploy/prometheus/alerts.yml`` fires on ``sr_seal_incomplete`` after as long."""
    release_period_s: float | None = Field(default=None, gt=0)
    """The longest the series may go without a release (e.g. ``2764800``, 32 days, for a
    monthly one): exported as ``sr_release_period_seconds``, and the alert
    ``StreamReleaseNoRecentRelease`` fires when ``sr_seconds_since_last_release`` passes it.
    Unset: no such alert."""

    @model_validator(mode="after")
    def _check_timeouts(self) -> ServiceSettings:
        if self.heartbeat_interval_s >= self.session_timeout_s:
            raise ValueError(
                f"service.heartbeat_interval_s = {self.heartbeat_interval_s} must be below "
                f"service.session_timeout_s = {self.session_timeout_s}"
            )
        return self


class ConfiguredSections(Protocol):
    """What a ``[mechanism.<kind>]`` table's ``check_settings(settings)`` reads of the rest of
    the configuration (:class:`~stream_release.config.Settings` fits)."""

    @property
    def schema(self) -> SchemaSettings: ...

    @property
    def output(self) -> OutputSettings: ...
