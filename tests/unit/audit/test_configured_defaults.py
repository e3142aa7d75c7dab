"""The audit reads configurations without the planning code, so it keeps its own copy of the
defaults: it must agree with the service's."""

from __future__ import annotations

from stream_release.audit.settings import ConfiguredOutput, ConfiguredPrivacy
from stream_release.config import GroupingSettings, OutputSettings, PrivacySettings, SchemaSettings


def test_the_audits_defaults_are_the_services() -> None:
    audit, privacy, grouping = ConfiguredPrivacy(), PrivacySettings(), GroupingSettings()
    assert (audit.ell, audit.strategy, audit.k_prime, audit.alpha) == (
        privacy.l,
        privacy.strategy,
        privacy.k_prime,
        privacy.alpha,
    )
    assert (audit.protected, audit.min_group_size) == (privacy.protected, privacy.min_group_size)
    assert audit.max_group_factor == grouping.max_group_factor


def test_the_audits_query_workload_defaults_are_the_services() -> None:
    audit, output = ConfiguredOutput(), OutputSettings()
    assert (audit.queries, audit.query_seed) == (output.queries, output.query_seed)
    assert audit.numeric == SchemaSettings(id="id", sensitive="s", qid=("a",)).numeric
