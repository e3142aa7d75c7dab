"""Settings: one frozen pydantic-settings object, loaded from TOML and ``SR_<SECTION>_<KEY>``.

Every tunable of the package lives here (STYLE.md rule 4). Environment variables override the
file: ``SR_`` + the section + ``_`` + the key, upper case (``SR_PRIVACY_L=3``,
``SR_PRIVACY_K_PRIME=5``, ``SR_REDIS_URL=...``). A key of a table inside a section follows a
double underscore, as deep as the tables go (``SR_KAFKA_TOPICS__CONTROL=ward7.control`` for
``[kafka.topics] control``, ``SR_MECHANISM_DP_SANITISED__EPSILON=2`` for
``[mechanism.dp_sanitised] epsilon``); lists and tables are given as JSON
(``SR_PRIVACY_PROTECTED='["flu"]'``, ``SR_KAFKA_TOPICS='{"control": "c"}'``). Relative paths are
relative to the file.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from stream_release.core.privacy.strategy import Strategy, make_strategy
from stream_release.errors import ConfigError, InvalidParameter
from stream_release.mechanisms.registry import (
    GLOBAL_GUARANTEE,
    KINDS,
    MECHANISMS,
    registration,
    section_name,
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SchemaSettings(_Section):
    id: str = "id"
    sensitive: str = "sensitive"
    qid: tuple[str, ...] = ()
    hierarchies: dict[str, Path] = Field(default_factory=dict)
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
        unknown = sorted(set(self.hierarchies) - set(self.qid))
        if unknown:
            raise ValueError(f"schema.hierarchies names {unknown}, which are not in schema.qid")
        return self


class PrivacySettings(_Section):
    l: float = 2.0  # noqa: E741 - the paper's symbol
    strategy: Literal["constant-ratio", "geometric", "minimal", "localized"] = "constant-ratio"
    k_prime: int = 20
    alpha: float = 2.0
    protected: tuple[str, ...] = ()
    min_group_size: int = Field(default=2, ge=1)
    """k-anonymity floor on every published group. 2 by default: with only some values
    protected, holders of unprotected values would otherwise be published as exact-QID
    singletons. 1 only when set explicitly (every manifest states the floor)."""

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


class OutputSettings(_Section):
    format: Literal["generalized", "anatomy"] = "generalized"
    queries: int = Field(default=5000, ge=0)
    """Random count queries behind ``utility.query_error`` (Wong et al. 2010, §8)."""
    query_seed: int = 0


class GroupingSettings(_Section):
    max_group_factor: float = Field(default=2.0, ge=1.0)
    """A group is never grown beyond this multiple of ``max(base ratio, min_group_size)``
    (the cap); a row whose own value would need more is *forced* into the suppressed set
    (Wong et al. 2010, §6.3), where its pairs whose Theorem 1 ratio exceeds the cap, for values a
    forced row holds, are not held to the bound (README, "What is promised"). A larger cap
    forces fewer rows but makes groups larger (``benchmarks/suppressed_set.py`` measures the
    suppression and refusals of a setting)."""
    insertion_window: int = Field(default=32, ge=0)
    """How far (rows in k-d order, each side) a leftover row looks for a group that stays valid
    with it before it is suppressed. Larger: less suppression, wider groups (higher NCP and, on
    Adult, higher query error: 512 took geometric alpha = 3 from 9.1 % to 6.0 % suppression
    but NCP from 0.42 to 0.49)."""


class VirtualSettings(_Section):
    """``[virtual]``: virtual individuals (Wong et al. 2010, §8).

    ``registry``: a CSV of a population register (the id column and the QID columns of
    ``[schema]``, no sensitive value). People of the register who are absent from a snapshot
    may join its groups to dilute them: they count in a group's size and hold no value. Valid
    only where the adversary cannot tell who is in a snapshot (README, "Virtual
    individuals")."""

    registry: Path | None = None


MechanismKind = Literal[
    "global-guarantee", "sampled-k-anonymity", "reconstruction-private-rr", "dp-sanitised"
]
"""``[mechanism] kind`` (equal to :data:`stream_release.mechanisms.MechanismKind`)."""


_CONFIG_DIR: ContextVar[Path | None] = ContextVar("_CONFIG_DIR", default=None)
"""The directory of the configuration file being loaded (:func:`load_settings`): passed to a
mechanism section model as the validation context ``{"base_dir": ...}``, so that a relative
path in a section is relative to the file (docs/contract.md §2)."""


class MechanismSettings(_Section):
    """``[mechanism]``: which release mechanism the series uses, and its section.

    Each kind but the default has its own table, validated by the section model its module
    registers (:data:`stream_release.mechanisms.MECHANISMS`)::

        [mechanism]
        kind = "sampled-k-anonymity"
        [mechanism.sampled_k_anonymity]
        k = 20
        beta = 0.1
        epsilon = 1.0
        levels = {age = 2, sex = 0}

    The active kind's table is required; a table of another registered kind is validated too
    (so switching ``kind`` cannot reveal a stale mistake). A section model gets the validation
    context ``{"base_dir": <the configuration file's directory>}`` (the working directory
    without a file) for its relative paths. From the environment:
    ``SR_MECHANISM_KIND``, and a table as JSON (``SR_MECHANISM_SAMPLED_K_ANONYMITY='{...}'``).
    """

    kind: MechanismKind = "global-guarantee"
    sampled_k_anonymity: dict[str, Any] | None = None
    reconstruction_private_rr: dict[str, Any] | None = None
    dp_sanitised: dict[str, Any] | None = None
    _sections: dict[str, BaseModel] = PrivateAttr(default_factory=dict)

    @property
    def section(self) -> BaseModel | None:
        """The validated section model of the active kind (``None`` for the default)."""
        return self._sections.get(self.kind)

    @model_validator(mode="after")
    def _check_sections(self) -> MechanismSettings:
        if self.kind != GLOBAL_GUARANTEE:
            try:
                registration(self.kind)
            except ConfigError as exc:  # a kind whose module is not in this version
                raise ValueError(str(exc)) from None
        for kind in KINDS[1:]:
            name = section_name(kind)
            raw = getattr(self, name)
            if raw is None:
                if kind == self.kind:
                    raise ValueError(
                        f"mechanism.kind = {kind!r} needs the table [mechanism.{name}] with its "
                        "parameters (see README, Mechanisms)"
                    )
                continue
            if kind not in MECHANISMS:  # not in this version: only its kind is refused
                continue
            model = registration(kind).settings_model()
            try:
                self._sections[kind] = model.model_validate(
                    raw, context={"base_dir": _CONFIG_DIR.get()}
                )
            except ValidationError as exc:
                raise ValueError(_describe_section(f"mechanism.{name}", exc)) from None
        return self


def _describe_section(where: str, exc: ValidationError) -> str:
    """``where.key = value: message`` of the first error of a section model."""
    first = exc.errors()[0]
    loc = ".".join(str(part) for part in first["loc"])
    key = f"{where}.{loc}" if loc else where
    given = first.get("input")
    message = first["msg"].removeprefix("Value error, ")
    shown = f" = {given!r}" if loc and not isinstance(given, dict) else ""
    return f"{key}{shown}: {message}"


class HistorySettings(_Section):
    key_file: Path | None = None
    """File holding the pseudonymisation key (keyed hash of ids). Or set ``SR_HISTORY_KEY``."""
    key: str | None = Field(default=None, repr=False)
    prefix: str = "sr"
    """Namespace of every Redis key."""


class TopicSettings(_Section):
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


class KafkaSettings(_Section):
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
    max_message_bytes: int = Field(default=1_048_576, ge=1024)
    """Larger messages are rejected (sr.rejected) without being parsed; also the producer's
    largest request."""
    request_timeout_ms: int = Field(default=5000, ge=100)
    """Time a connection attempt or a request may take before it fails. Short, so that an
    unreachable broker is reported in seconds; raise it for slow or distant clusters."""
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


class RedisSettings(_Section):
    url: str = "redis://127.0.0.1:6379/0"


class ServiceSettings(_Section):
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
    metrics_host: str = "0.0.0.0"
    """Address the endpoint listens on (all interfaces, for a scraper in another container)."""
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
    stop_timeout_s: float = Field(default=8.0, gt=0)
    """SIGTERM or Ctrl-C stops the worker within this many seconds, whatever Redis and the
    broker are doing: past it the clean stop is cut short (nothing is lost: see
    :mod:`stream_release.stream.shutdown`). Below compose's 10 s grace period."""
    seal_alert_after_s: float = Field(default=600.0, gt=0)
    """A sealed release still missing records this many seconds after the worker first saw it
    waiting gets a warning log line (``event`` ``seal_incomplete``: release, sealed, staged,
    missing, waited seconds), again every as many seconds while it waits; the alert rule of
    ``deploy/prometheus/alerts.yml`` fires on ``sr_seal_incomplete`` after as long."""

    @model_validator(mode="after")
    def _check_timeouts(self) -> ServiceSettings:
        if self.heartbeat_interval_s >= self.session_timeout_s:
            raise ValueError(
                f"service.heartbeat_interval_s = {self.heartbeat_interval_s} must be below "
                f"service.session_timeout_s = {self.session_timeout_s}"
            )
        return self


NESTED = "__"
"""Separates the keys of nested tables in an environment variable's name (:data:`__doc__`)."""


class _EnvSource(EnvSettingsSource):
    """pydantic-settings' environment source, with ``__`` reaching into nested tables.

    ``SR_<SECTION>_<KEY>`` splits once on ``_`` (section names hold no ``_``, keys do); what
    follows the key is split on :data:`NESTED`, so ``SR_KAFKA_TOPICS__CONTROL`` becomes
    ``{"kafka": {"topics": {"control": ...}}}``. A value that looks like a JSON list or
    table is parsed, as at the top level.
    """

    def explode_env_vars(
        self, field_name: str, field: FieldInfo, env_vars: Mapping[str, str | None]
    ) -> dict[str, Any]:
        return _nest(super().explode_env_vars(field_name, field, env_vars))

    def _extract_field_info(
        self, field: FieldInfo, field_name: str, *rest: Any
    ) -> list[tuple[str, str, bool]]:
        # only names under the prefix: the alias "schema" alone would read a variable SCHEMA
        names = super()._extract_field_info(field, field_name, *rest)
        prefix = self.env_prefix.lower()
        prefixed = [entry for entry in names if entry[1].lower().startswith(prefix)]
        return prefixed or names


def _nest(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with every ``a__b`` key moved into table ``a`` as ``b``, at every depth.

    Whole values are placed first and the ``__`` keys over them, shallower before deeper, so the
    more specific variable wins whatever the order of the environment. A key that would reach
    into a value that is not a table is kept as it is, for validation to name.
    """
    out: dict[str, Any] = {}
    for key in sorted(values, key=lambda k: (k.count(NESTED), k)):
        value = values[key]
        if isinstance(value, dict):
            value = _nest(value)
        *heads, last = key.split(NESTED)
        target: Any = out
        for head in heads:
            inner = target.get(head)
            if isinstance(inner, str):  # the table also given whole, as JSON
                inner = target[head] = _json_or(inner)
            if inner is None:
                inner = target[head] = {}
            if not isinstance(inner, dict):
                target = None
                break
            target = inner
        if target is None:
            out[key] = value  # a scalar in the way: an unknown key for validation to name
            continue
        if isinstance(value, str) and heads:
            value = _json_or(value)
        existing = target.get(last)
        if isinstance(existing, dict) and isinstance(value, dict):
            existing.update(value)
        else:
            target[last] = value
    return out


def _json_or(text: str) -> Any:
    """``text`` parsed when it is a JSON list or object, else ``text``."""
    if text.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


class Settings(BaseSettings):
    """The whole configuration (docs/contract.md §2)."""

    model_config = SettingsConfigDict(
        env_prefix="SR_",
        env_nested_delimiter="_",
        env_nested_max_split=1,
        frozen=True,
        extra="forbid",
    )

    schema_: SchemaSettings = Field(
        default_factory=SchemaSettings,
        alias="schema",
        # an alias is taken as the whole variable name: this one keeps the prefix (SR_SCHEMA_*)
        validation_alias=AliasChoices("schema", "sr_schema"),
    )
    privacy: PrivacySettings = Field(default_factory=PrivacySettings)
    output: OutputSettings = Field(default_factory=OutputSettings)
    grouping: GroupingSettings = Field(default_factory=GroupingSettings)
    virtual: VirtualSettings = Field(default_factory=VirtualSettings)
    mechanism: MechanismSettings = Field(default_factory=MechanismSettings)
    history: HistorySettings = Field(default_factory=HistorySettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)

    @field_validator("schema_", mode="before")
    @classmethod
    def _schema_default(cls, value: Any) -> Any:
        return SchemaSettings() if value is None else value

    @model_validator(mode="after")
    def _check_mechanism(self) -> Settings:
        """A mechanism section checked against the rest of the configuration (QID names,
        output format): its model's optional ``check_settings(settings)``."""
        section = self.mechanism.section
        check = getattr(section, "check_settings", None)
        if check is not None:
            check(self)
        if self.virtual.registry is not None and self.mechanism.kind != "global-guarantee":
            raise ValueError(
                f"virtual.registry is set but mechanism.kind = {self.mechanism.kind!r}: virtual "
                "individuals dilute the global guarantee's groups only; remove [virtual] or use "
                "the global guarantee"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment overrides the file, which arrives as init arguments.
        return (_EnvSource(settings_cls), init_settings)

    @property
    def schema(self) -> SchemaSettings:  # type: ignore[override]
        return self.schema_


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Read the TOML file at ``path`` (if any), apply ``SR_*`` variables and ``overrides``.

    Raises :class:`ConfigError` with one line naming the key, its value and the rule.
    """
    data: dict[str, Any] = {}
    base = Path.cwd()
    if path is not None:
        file = Path(path)
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {str(file)!r} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {str(file)!r} is not valid TOML: {exc}") from None
        base = file.resolve().parent
    for section, values in overrides.items():
        data.setdefault(section, {}).update(values)
    token = _CONFIG_DIR.set(base)
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    finally:
        _CONFIG_DIR.reset(token)
    return _resolve_paths(settings, base)


def _describe(exc: ValidationError) -> str:
    first = exc.errors()[0]
    hint = _nested_hint(first["loc"]) if first["type"] == "extra_forbidden" else None
    if hint is not None:
        return hint
    where = ".".join(str(part) for part in first["loc"]).replace("schema_", "schema")
    given = first.get("input")
    message = first["msg"].removeprefix("Value error, ")
    if message.startswith("mechanism."):  # a message that names its own key and value
        return f"config {message}"
    shown = f" = {given!r}" if where and not isinstance(given, dict) else ""
    return f"config {where}{shown}: {message}" if where else f"config: {message}"


def _nested_hint(loc: tuple[int | str, ...]) -> str | None:
    """For an unknown key like ``kafka.topics_control`` (``SR_KAFKA_TOPICS_CONTROL``) that
    means a key of a nested table: the message naming the variable that sets it."""
    if len(loc) != 2 or not all(isinstance(part, str) for part in loc):
        return None
    section, key = str(loc[0]), str(loc[1])
    field = Settings.model_fields.get(section)
    model = field.annotation if field is not None else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    for name, inner in model.model_fields.items():
        table = inner.annotation
        if key.startswith(f"{name}_") and isinstance(table, type) and issubclass(table, BaseModel):
            rest = key[len(name) + 1 :]
            variable = f"SR_{section}_{name}{NESTED}{rest}".upper()
            return (
                f"config {section}.{key}: [{section}] has no key {key!r}; for {rest!r} of "
                f"[{section}.{name}] set {variable} (a double underscore before a nested "
                "table's key)"
            )
    return None


def _resolve_paths(settings: Settings, base: Path) -> Settings:
    def resolve(p: Path) -> Path:
        return p if p.is_absolute() else base / p

    schema = settings.schema.model_copy(
        update={"hierarchies": {k: resolve(v) for k, v in settings.schema.hierarchies.items()}}
    )
    history = settings.history
    if history.key_file is not None:
        history = history.model_copy(update={"key_file": resolve(history.key_file)})
    archive = resolve(settings.service.archive)
    private_archive = settings.service.private_archive
    service = settings.service.model_copy(
        update={
            "archive": archive,
            "private_archive": (
                resolve(private_archive)
                if private_archive is not None
                else archive.with_name(archive.name + ".private")
            ),
        }
    )
    kafka = settings.kafka.model_copy(
        update={
            name: resolve(getattr(settings.kafka, name))
            for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
            if getattr(settings.kafka, name) is not None
        }
    )
    virtual = settings.virtual
    if virtual.registry is not None:
        virtual = virtual.model_copy(update={"registry": resolve(virtual.registry)})
    return settings.model_copy(
        update={
            "schema_": schema,
            "history": history,
            "service": service,
            "kafka": kafka,
            "virtual": virtual,
        }
    )
