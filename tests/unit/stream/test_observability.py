"""The worker's metrics and health endpoint (docs/contract.md §5), without a broker or Redis.

Every metric the Grafana dashboard queries exists in the registry; rejections carry a stable
reason code that is not part of the wire message; the runner's outcomes move the metrics;
``/metrics`` and ``/health`` answer over HTTP.
"""

from __future__ import annotations

import asyncio
import json
import math
import platform
import re
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from faust.types import TP
from prometheus_client.parser import text_string_to_metric_families
from support.manifests import guarantee_manifest
from support.paths import REPO
from support.worker_stubs import StubService, stub_runner

from stream_release import __version__
from stream_release.config import Settings
from stream_release.stream.intake import SEAL_ERRORS, STAGE_ERRORS, Incoming, RecordValidator
from stream_release.stream.messages import (
    Rejected,
    Rejection,
    RejectReason,
    ReleaseNotice,
    SnapshotRecord,
    decode_seal,
    decode_snapshot_record,
    json_schemas,
)
from stream_release.stream.observability import HttpEndpoint, Metrics, health_payload
from stream_release.stream.service import Outgoing
from stream_release.stream.staging import ReleaseStatus, SealOutcome, StageOutcome

DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "stream-release.json"
SETTINGS = Settings(schema={"qid": ["age", "zip"], "numeric": ["age"]})
METRIC_NAME = re.compile(r"\bsr_[a-z0-9_]+")
MANIFEST = guarantee_manifest(
    3,
    records_in=100,
    published=90,
    suppressed=10,
    groups=30,
    elapsed_s=0.25,
    breach={"bound": 0.5, "max": 0.375, "p50": 0.25, "p99": 0.375},
    utility={"avg_group_size": 3.0, "max_group_size": 6},
).document()


def _exposed(metrics: Metrics) -> tuple[set[str], dict[str, float]]:
    """Family names and every sample (``name{labels}`` -> value) of the exposition."""
    body, _ = metrics.exposition()
    families, samples = set(), {}
    for family in text_string_to_metric_families(body.decode()):
        if family.name.endswith("_created"):  # the 0.0.4 text format's creation timestamps
            continue
        families.add(family.name)
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}"] = s.value
    return families, samples


def _walk(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "expr"] + [
            e for v in node.values() for e in _walk(v)
        ]
    if isinstance(node, list):
        return [e for v in node for e in _walk(v)]
    return []


def _incoming(value: bytes) -> Incoming:
    return Incoming("sr.records", 0, 5, b"key", value)


# -- the dashboard and the deploy files ----------------------------------------------------------


def test_every_metric_the_dashboard_queries_is_exposed() -> None:
    exprs = _walk(json.loads(DASHBOARD.read_text()))
    queried = {name for expr in exprs for name in METRIC_NAME.findall(expr)}
    families, samples = _exposed(Metrics())
    sample_names = {key.split("{")[0] for key in samples}
    missing = sorted(n for n in queried if n not in families and n not in sample_names)
    assert not missing, f"the dashboard queries metrics the worker does not expose: {missing}"
    # and it charts every family the worker exposes
    uncharted = sorted(
        f for f in families if not any(q == f or q.startswith(f"{f}_") for q in queried)
    )
    assert not uncharted, f"the dashboard has no panel for {uncharted}"


def test_the_registry_holds_the_documented_metrics() -> None:
    families, samples = _exposed(Metrics())
    assert families == {
        "sr_records_staged",
        "sr_records_rejected",
        "sr_releases_published",
        "sr_releases_refused",
        "sr_config_error",
        "sr_store_regressed",
        "sr_release_sequence",
        "sr_release_breach_max",
        "sr_release_breach_bound",
        "sr_release_suppressed_rows",
        "sr_release_spent_people",
        "sr_release_spent_pairs",
        "sr_series_horizon",
        "sr_release_past_horizon",
        "sr_release_avg_group_size",
        "sr_release_max_group_size",
        "sr_stage_seconds",
        "sr_group_seconds",
        "sr_commit_seconds",
        "sr_publish_seconds",
        "sr_consumer_lag",
        "sr_seal_incomplete",
        "sr_shard_owned",
        "sr_publication_failures",
        "sr_build_info",
        "sr_seconds_since_last_release",
        "sr_release_period_seconds",
    }
    build = f"sr_build_info{{python={platform.python_version()},version={__version__}}}"
    assert samples[build] == 1
    assert math.isnan(samples["sr_release_period_seconds{}"])  # unset: no alert compares true
    assert 0 <= samples["sr_seconds_since_last_release{}"] < 60  # since the worker started
    # every reason series exists at zero from the start
    for reason in RejectReason:
        assert samples[f"sr_records_rejected_total{{reason={reason.value}}}"] == 0


def test_two_registries_do_not_collide() -> None:
    first, second = Metrics(), Metrics()
    first.records_staged.inc(3)
    assert _exposed(second)[1]["sr_records_staged_total{}"] == 0


def test_the_deploy_configs_point_at_the_worker_and_the_dashboards() -> None:
    prometheus = (DEPLOY / "prometheus.yml").read_text()
    assert 'names: ["stream-release"]' in prometheus and "port: 9464" in prometheus
    assert "scrape_interval: 15s" in prometheus
    datasource = (DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text()
    assert "url: http://prometheus:9090" in datasource and "uid: prometheus" in datasource
    provider = (DEPLOY / "grafana/provisioning/dashboards/dashboards.yml").read_text()
    assert "path: /var/lib/grafana/dashboards" in provider
    dashboard = json.loads(DASHBOARD.read_text())
    uids = {p["datasource"]["uid"] for p in dashboard["panels"] if p.get("type") != "row"}
    assert uids == {"${datasource}"}  # the variable, whose default is the provisioned one
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["current"]["value"] == "prometheus"
    assert "instance" in variables["instance"]["definition"]
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs and all('instance=~"$instance"' in e for e in exprs), "a query ignores $instance"
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


# -- reason codes ------------------------------------------------------------------------------


def test_reason_codes_are_short_and_stable() -> None:
    assert [r.value for r in RejectReason] == [
        "not_json",
        "oversize",
        "invalid_field",
        "hierarchy",
        "duplicate_id",
        "late",
        "over_seal",
        "seal_conflict",
        "too_large",
    ]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"not json", RejectReason.NOT_JSON),
        (b"\xff", RejectReason.NOT_JSON),
        (b"x" * 2000, RejectReason.OVERSIZE),
        (b'{"release": "r", "id": "p-1", "sensitive": "flu"}', RejectReason.INVALID_FIELD),
        (
            b'{"release": "r", "id": "p-1", "qid": {"age": 3}, "sensitive": "flu"}',
            RejectReason.INVALID_FIELD,
        ),
    ],
)
def test_decoding_gives_the_reason(raw: bytes, reason: RejectReason) -> None:
    refused = decode_snapshot_record(raw, SETTINGS.schema, max_bytes=1024)
    assert isinstance(refused, Rejection) and refused.reason is reason
    seal = decode_seal(b'{"release": "r", "records": -1}', max_bytes=1024)
    assert isinstance(seal, Rejection) and seal.reason is RejectReason.INVALID_FIELD


def test_the_validator_tells_hierarchy_from_invalid_values() -> None:
    validator = RecordValidator(SETTINGS, {"zip": SimpleNamespace(leaves=["10", "11"])})  # type: ignore[dict-item]

    def record(age: str, zip_: str) -> SnapshotRecord:
        return SnapshotRecord(release="r", id="p-1", qid={"age": age, "zip": zip_}, sensitive="s")

    assert validator.staged_row(record("30", "10")) == b'["30","10","s"]'
    hierarchy = validator.staged_row(record("30", "99"))
    assert isinstance(hierarchy, Rejection) and hierarchy.reason is RejectReason.HIERARCHY
    assert "qid.zip = '99'" in hierarchy.error
    numeric = validator.staged_row(record("old", "10"))
    assert isinstance(numeric, Rejection) and numeric.reason is RejectReason.INVALID_FIELD


def test_staging_outcomes_carry_their_reason() -> None:
    assert {o: r for o, (r, _) in STAGE_ERRORS.items()} == {
        StageOutcome.DUPLICATE_ID: RejectReason.DUPLICATE_ID,
        StageOutcome.LATE: RejectReason.LATE,
        StageOutcome.OVER_SEAL: RejectReason.OVER_SEAL,
        StageOutcome.TOO_LARGE: RejectReason.TOO_LARGE,
    }
    assert SEAL_ERRORS[SealOutcome.CONFLICT][0] is RejectReason.SEAL_CONFLICT
    assert SEAL_ERRORS[SealOutcome.TOO_LARGE][0] is RejectReason.TOO_LARGE


def test_the_reason_is_not_part_of_the_wire_message() -> None:
    fields = {"error": "late", "topic": "t", "partition": 0, "offset": 1, "raw": "{}"}
    rejected = Rejected.because(RejectReason.LATE, **fields)
    assert rejected.reason is RejectReason.LATE
    assert json.loads(rejected.model_dump_json()) == fields
    assert "reason" not in json_schemas()["rejected"]["properties"]
    assert Rejected(**fields).reason is RejectReason.INVALID_FIELD


# -- the metrics' updates ----------------------------------------------------------------------


def test_outcomes_move_the_metrics() -> None:
    metrics = Metrics()
    late = Rejected.because(
        RejectReason.LATE, error="late", topic="t", partition=0, offset=1, raw="{}"
    )
    metrics.observe_batch(5, [None, late, None], 0.02)
    metrics.observe_batch(0, [late], 0.01)  # seals: none staged as records
    metrics.observe_cut([MANIFEST], 1.0)
    metrics.observe_cut([], 0.5)  # nothing ready: nothing observed
    metrics.observe_publish(3, 0.1)
    _, samples = _exposed(metrics)
    assert samples["sr_records_staged_total{}"] == 4
    assert samples["sr_records_rejected_total{reason=late}"] == 2
    assert samples["sr_stage_seconds_count{}"] == 2
    assert samples["sr_group_seconds_sum{}"] == pytest.approx(0.25)
    assert samples["sr_commit_seconds_sum{}"] == pytest.approx(0.75)
    assert samples["sr_releases_published_total{}"] == 1
    assert samples["sr_release_sequence{}"] == 3
    assert samples["sr_release_breach_max{}"] == 0.375
    assert samples["sr_release_breach_bound{}"] == 0.5
    assert samples["sr_release_suppressed_rows{}"] == 10
    assert samples["sr_release_avg_group_size{}"] == 3.0
    assert samples["sr_release_max_group_size{}"] == 6
    assert samples["sr_publish_seconds_count{}"] == 1


def test_a_mechanism_release_leaves_the_breach_and_suppression_gauges_alone() -> None:
    """A DP kind's manifest has neither a breach block nor a suppression count: the gauges
    keep the last global-guarantee figures instead of dropping to a false 0."""
    metrics = Metrics()
    metrics.observe_cut([MANIFEST], 1.0)
    dp = {k: v for k, v in MANIFEST.items() if k not in ("breach", "suppressed")}
    dp["utility"] = {"avg_group_size": 1.5, "max_group_size": 2}
    metrics.observe_cut([dp], 1.0)
    metrics.observe_refusals(2, config_error=True)
    _, samples = _exposed(metrics)
    assert samples["sr_release_breach_max{}"] == 0.375
    assert samples["sr_release_suppressed_rows{}"] == 10
    assert samples["sr_release_avg_group_size{}"] == 1.5
    assert samples["sr_releases_refused_total{}"] == 2
    assert samples["sr_config_error{}"] == 1


def test_the_horizon_gauges_follow_the_last_release() -> None:
    metrics = Metrics()
    inside = {**MANIFEST, "strategy": {"horizon": 4}, "past_horizon": False}
    spent = {"spent_people": 3, "spent": 7}
    past = {**inside, "past_horizon": True, "breach": {**MANIFEST["breach"], **spent}}
    metrics.observe_cut([inside], 1.0)
    _, samples = _exposed(metrics)
    assert samples["sr_series_horizon{}"] == 4 and samples["sr_release_past_horizon{}"] == 0
    metrics.observe_cut([past], 1.0)
    _, samples = _exposed(metrics)
    assert samples["sr_release_past_horizon{}"] == 1
    assert samples["sr_release_spent_people{}"] == 3
    assert samples["sr_release_spent_pairs{}"] == 7


def test_health_says_when_the_series_is_past_its_horizon() -> None:
    """Past the horizon the worker is well (200, ``ok``): the body says the series has
    outlived its plan, with what a new series costs."""
    status, body = health_payload(redis_ok=True, published=4, publication_ok=True, horizon=4)
    assert (status, body["past_horizon"], body["notes"]) == (200, False, [])
    status, body = health_payload(redis_ok=True, published=5, publication_ok=True, horizon=4)
    assert status == 200 and body["status"] == "ok" and body["past_horizon"] is True
    [note] = body["notes"]
    assert "past the series' horizon of 4 releases" in note
    assert "restarts every individual's count from zero while the releases already" in note


def test_lag_and_waiting_seals_replace_their_series() -> None:
    metrics = Metrics()
    tp0, tp1 = (
        TP(topic="sr.records", partition=0),
        TP(topic="sr.control", partition=0),
    )
    metrics.observe_lag({tp0: 10}, {tp0: 25, tp1: 4})  # tp1 never committed: no sample
    metrics.observe_waiting([ReleaseStatus("2026-10", 7, 10, None)])
    _, samples = _exposed(metrics)
    assert samples["sr_consumer_lag{partition=0,topic=sr.records}"] == 15
    assert not any(k.startswith("sr_consumer_lag{partition=0,topic=sr.control") for k in samples)
    assert samples["sr_seal_incomplete{release=2026-10}"] == 3
    metrics.observe_waiting([])
    assert not any(k.startswith("sr_seal_incomplete") for k in _exposed(metrics)[1])


# -- health ------------------------------------------------------------------------------------


def test_health_payload() -> None:
    assert health_payload(redis_ok=True, published=4, publication_ok=True) == (
        200,
        {
            "status": "ok",
            "reasons": [],
            "ready": True,
            "unready_reasons": [],
            "notes": [],
            "horizon": None,
            "past_horizon": False,
            "redis": True,
            "kafka": True,
            "publication_ok": True,
            "published_sequence": 4,
            "config_error": None,
            "store_error": None,
            "refused": None,
            "blocked": [],
        },
    )
    status, body = health_payload(
        redis_ok=True,
        published=4,
        publication_ok=True,
        store_error={"release": "r5", "error": "the history store lost commits"},
    )
    assert (status, body["status"], body["store_error"]["release"]) == (503, "degraded", "r5")
    status, body = health_payload(redis_ok=False, published=None, publication_ok=True)
    assert (status, body["status"], body["published_sequence"]) == (503, "degraded", None)
    status, body = health_payload(redis_ok=True, published=2, publication_ok=False)
    assert (status, body["status"]) == (503, "degraded")
    problem = {"release": "2026-11", "error": "mechanism parameters ... differ"}
    status, body = health_payload(
        redis_ok=True, published=2, publication_ok=True, config_error=problem
    )
    assert (status, body["status"], body["config_error"]) == (503, "degraded", problem)
    # each problem is one line of reasons
    refusal = {"release": "r7", "reason": "infeasible: ..."}
    blocked = {"release": "r8", "reason": "sealed with 5 ids, 3 staged and 2 ..."}
    status, body = health_payload(
        redis_ok=True,
        published=2,
        publication_ok=False,
        publication_error="KafkaConnectionError: ...",
        kafka_error="Kafka at h:9092: cannot connect: ...",
        refused=refusal,
        blocked=[blocked],
    )
    assert status == 503 and body["kafka"] is False
    assert body["reasons"] == [
        "Kafka: Kafka at h:9092: cannot connect: ...",
        "the last publication failed: KafkaConnectionError: ...",
        "release 'r7' refused: infeasible: ...",
        "release 'r8' blocked: sealed with 5 ids, 3 staged and 2 ...",
    ]


REFUSAL = ReleaseNotice(
    release="r4",
    status="refused",
    error="GuaranteeUnsatisfiable",
    reason="infeasible",
    fix="send it again under a new label",
)


class HealthStubService(StubService):
    """Answers the runner's health and publication calls; Redis is up while ``up``."""

    def __init__(self) -> None:
        super().__init__()
        self.up = True

    def redis_answers(self) -> bool:
        return self.up

    def waiting(self) -> list[ReleaseStatus]:
        return [ReleaseStatus("r9", 1, 2, None)]

    def cut_ready(self) -> list[dict[str, Any]]:
        if self.committed:
            return []
        self.committed = MANIFEST["sequence"]  # type: ignore[assignment]
        return [MANIFEST]

    def outgoing(self, sequence: int) -> list[Outgoing]:
        return [Outgoing("sr.manifests", b"r", b"m")]

    def blocked(self) -> list[ReleaseStatus]:
        return [s for s in self.waiting() if s.blocked]


def test_the_endpoint_serves_metrics_and_health() -> None:
    service = HealthStubService()
    runner, _ = stub_runner(service, SETTINGS)
    broker: list[str | None] = [None]

    async def kafka_problem() -> str | None:  # the broker, as the real probe reports it
        return broker[0]

    runner.kafka_problem = kafka_problem  # type: ignore[method-assign]

    async def scenario() -> None:
        await runner.cut_and_send()  # release 1..3 committed and sent
        endpoint = HttpEndpoint(runner.metrics, runner.refresh_metrics, runner.health)
        async with TestClient(TestServer(endpoint.app)) as client:
            response = await client.get("/metrics")
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            text = await response.text()
            assert "sr_releases_published_total 3.0" in text
            assert 'sr_seal_incomplete{release="r9"} 1.0' in text
            response = await client.get("/health")
            assert (response.status, await response.json()) == (
                200,
                {
                    "status": "ok",
                    "reasons": [],
                    "ready": True,
                    "unready_reasons": [],
                    "notes": [],
                    "horizon": 20,
                    "past_horizon": False,
                    "redis": True,
                    "kafka": True,
                    "publication_ok": True,
                    "published_sequence": 3,
                    "config_error": None,
                    "store_error": None,
                    "refused": None,
                    "blocked": [],
                },
            )
            broker[0] = "Kafka at 127.0.0.1:9092: cannot connect: ..."
            response = await client.get("/health")
            body = await response.json()
            assert (response.status, body["kafka"]) == (503, False)
            assert body["reasons"] == [f"Kafka: {broker[0]}"]
            response = await client.get("/readyz")  # it cannot publish
            assert (response.status, await response.json()) == (
                503,
                {"status": "not ready", "reasons": [f"Kafka: {broker[0]}"]},
            )
            response = await client.get("/livez")  # but it serves: no restart
            assert (response.status, await response.json()) == (200, {"status": "live"})
            broker[0] = None
            service.up = False
            response = await client.get("/health")
            body = await response.json()
            assert (response.status, body["status"], body["redis"]) == (503, "degraded", False)
            assert (await client.get("/readyz")).status == 503
            service.up = True
            service.last_refusal = REFUSAL  # a producer's snapshot refused: not the worker's
            response = await client.get("/health")
            assert response.status == 503
            assert (await response.json())["reasons"] == ["release 'r4' refused: infeasible"]
            response = await client.get("/readyz")
            assert (response.status, await response.json()) == (
                200,
                {"status": "ready", "reasons": []},
            )

    asyncio.run(scenario())


def test_owned_shards_replace_their_series() -> None:
    metrics = Metrics()
    metrics.observe_shards({3, 0})
    _, samples = _exposed(metrics)
    assert {k: v for k, v in samples.items() if k.startswith("sr_shard_owned")} == {
        "sr_shard_owned{shard=0}": 1,
        "sr_shard_owned{shard=3}": 1,
    }
    metrics.observe_shards({1})  # after a rebalance: the shards moved away are gone
    owned = [k for k in _exposed(metrics)[1] if k.startswith("sr_shard_owned")]
    assert owned == ["sr_shard_owned{shard=1}"]
