"""The whole configuration, :class:`Settings`: one of each section, the checks across sections,
and where the values come from (the environment over the file)."""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from stream_release.config._environment import EnvSource
from stream_release.config._horizon import check_horizon
from stream_release.config._mechanism import CONFIG_DIR, MechanismSettings
from stream_release.config._protected import check_protected_leaves
from stream_release.config._sections import (
    GroupingSettings,
    HistorySettings,
    KafkaSettings,
    OutputSettings,
    PrivacySettings,
    RedisSettings,
    SchemaSettings,
    ServiceSettings,
    VirtualSettings,
)


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
        if self.mechanism.kind == "global-guarantee":
            check_horizon(self.privacy, self.grouping)
        if self.virtual.registry is not None and self.mechanism.kind != "global-guarantee":
            raise ValueError(
                f"virtual.registry is set but mechanism.kind = {self.mechanism.kind!r}: virtual "
                "individuals dilute the global guarantee's groups only; remove [virtual] or use "
                "the global guarantee"
            )
        return self

    @model_validator(mode="after")
    def _check_protected(self) -> Settings:
        """With a hierarchy of the sensitive attribute, every protected value is one of its
        leaves (:func:`~stream_release.config._protected.check_protected_leaves`)."""
        hierarchy = self.schema_.hierarchies.get(self.schema_.sensitive)
        if hierarchy is not None and self.privacy.protected:
            check_protected_leaves(
                self.privacy.protected, self.schema_.sensitive, hierarchy, CONFIG_DIR.get()
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
        return (EnvSource(settings_cls), init_settings)

    @property
    def schema(self) -> SchemaSettings:  # type: ignore[override]
        return self.schema_
