"""Prometheus metrics and the health endpoint of the streaming worker (docs/contract.md §5).

:class:`Metrics` holds every metric on its own ``CollectorRegistry`` (not the process-global
one, so several apps or tests never collide). :class:`~stream_release.stream.runner.ServiceRunner`
feeds it from the outcomes of staging, cutting and sending; :class:`HttpEndpoint` serves it on
``service.metrics_host:service.metrics_port`` (``metrics_port = 0``: no endpoint):

- ``GET /metrics``: the Prometheus text exposition (``choose_encoder`` honours ``Accept``);
- ``GET /health``: JSON :func:`health_payload`, HTTP 200 when ``ok``, 503 when ``degraded``
  (compose's health check: the worker and its data);
- ``GET /livez``: 200 while the process serves (a Kubernetes liveness probe: a refused
  snapshot must not restart a healthy worker);
- ``GET /readyz``: 200 when the worker can publish (Redis, the broker, the last publication,
  no release held by the configuration or the store), else 503 with the reasons.

================================  =====================================================
metric                            meaning
================================  =====================================================
``sr_records_staged_total``       records accepted by staging (a redelivered one again)
``sr_records_rejected_total``     messages sent to ``sr.rejected``, by ``reason``
                                  (:class:`~stream_release.stream.messages.RejectReason`)
``sr_releases_published_total``   releases whose messages the broker acknowledged
``sr_releases_refused_total``     sealed releases refused at the cut (infeasible guarantee,
                                  rows that do not encode; log event ``release_refused``)
``sr_config_error``               1 while the configuration cannot make the next ready
                                  release (log event ``config_error``; ``/health`` 503)
``sr_store_regressed``            1 while the history store is behind the releases already
                                  published (log event ``store_regressed``; ``/health``
                                  503): nothing is cut until it is restored
``sr_release_sequence``           the last sequence sent
``sr_release_breach_max``         breach probability, max over individuals (last cut)
``sr_release_breach_bound``       the bound it must stay below (last cut)
``sr_release_suppressed_rows``    rows suppressed (last cut)
``sr_release_avg_group_size``     published rows / groups (last cut)
``sr_release_max_group_size``     largest group (last cut)
``sr_stage_seconds``              staging one batch of records or seals
``sr_group_seconds``              planning one release (history load and grouping: the
                                  manifest's ``elapsed_s``)
``sr_commit_seconds``             the rest of a cut: reading the staged rows, rendering,
                                  archive files and the Redis commit transaction
``sr_publish_seconds``            sending one release until acknowledged and marked
``sr_consumer_lag``               per ``topic`` and ``partition``: end offset minus
                                  committed offset (see Notes)
``sr_seal_incomplete``            per sealed ``release`` label: records still missing
``sr_shard_owned``                per ``shard``: 1 while this worker cuts that shard
                                  (``kafka.partitions`` above 1: the partitions of the
                                  records topic its consumer is assigned)
``sr_release_spent_people``       individuals of the last release with a pair past 1/l
``sr_release_spent_pairs``        their (individual, protected value) pairs past 1/l
``sr_series_horizon``             the releases the series is planned for
``sr_release_past_horizon``       1 when the last release lies past the horizon
``sr_publication_failures_total`` publication attempts that failed (each is retried)
``sr_seconds_since_last_release`` since this worker last sent a release (or started)
``sr_release_period_seconds``     ``service.release_period_s`` (NaN when unset)
``sr_build_info``                 1, labelled with the worker's ``version`` and ``python``
================================  =====================================================

Notes
-----
No metric carries an id, a key of ``sr.records`` or a QID or sensitive value: labels are reason
codes, topic names, partitions and release labels (the producer's snapshot names).

``sr_consumer_lag`` comes from Faust's monitor, refreshed at each scrape: the end offset is
the high watermark of the last Fetch response that returned records (not ListOffsets, which
the local Tansu broker answers short of the log end), the committed offset the last commit of
this worker. It is therefore a lower bound while records are waiting unfetched, and absent for
a partition this worker has not committed yet.

``sr_commit_seconds``: when one call cuts several releases, each is given the mean.
"""

from __future__ import annotations

import asyncio
import logging
import math
import platform
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import choose_encoder

from stream_release.errors import NEW_SERIES_CAVEAT
from stream_release.stream.logs import unexpected
from stream_release.stream.messages import Rejected, RejectReason
from stream_release.stream.staging import ReleaseStatus
from stream_release.version import __version__

log = logging.getLogger(__name__)

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""Histogram buckets (seconds) of every duration: from one small batch to a large cut."""


class Metrics:
    """Every metric of the worker, on ``registry`` (a new one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.records_staged = Counter(
            "sr_records_staged", "Records accepted by staging.", registry=r
        )
        self.records_rejected = Counter(
            "sr_records_rejected",
            "Messages (records and seals) sent to the rejected topic, by reason code.",
            ["reason"],
            registry=r,
        )
        for reason in RejectReason:  # every series exists from the start (rate() needs it)
            self.records_rejected.labels(reason=reason.value)
        self.releases_published = Counter(
            "sr_releases_published", "Releases sent and acknowledged by the broker.", registry=r
        )
        self.releases_refused = Counter(
            "sr_releases_refused",
            "Sealed releases refused at the cut (infeasible guarantee, rows that do not encode).",
            registry=r,
        )
        self.config_error = Gauge(
            "sr_config_error",
            "1 while the configuration cannot make the next ready release, else 0.",
            registry=r,
        )
        self.store_regressed = Gauge(
            "sr_store_regressed",
            "1 while the history store is behind the releases already published, else 0.",
            registry=r,
        )
        self.release_sequence = Gauge(
            "sr_release_sequence", "Sequence of the last release sent.", registry=r
        )
        self.publication_failures = Counter(
            "sr_publication_failures",
            "Publication attempts that failed (cut, commit or send; each retried).",
            registry=r,
        )
        self.build = Info("sr_build", "The worker's version and Python.", registry=r)
        self.build.info({"version": __version__, "python": platform.python_version()})
        self.last_release_time = time.time()
        """``time.time()`` when this worker last sent a release, or started (none sent yet):
        an alert on the time since fires a period after a restart at the latest."""
        self.since_last_release = Gauge(
            "sr_seconds_since_last_release",
            "Seconds since this worker last sent a release, or started if it has sent none.",
            registry=r,
        )
        self.since_last_release.set_function(self._since_last_release)
        self.release_period_s = math.nan
        """``service.release_period_s`` (NaN unset: no comparison with it is true)."""
        self.release_period = Gauge(
            "sr_release_period_seconds",
            "The longest the series may go without a release (service.release_period_s; NaN "
            "when unset).",
            registry=r,
        )
        self.release_period.set_function(lambda: self.release_period_s)
        self.breach_max = Gauge(
            "sr_release_breach_max", "Breach probability, max over individuals.", registry=r
        )
        self.breach_bound = Gauge(
            "sr_release_breach_bound", "Breach bound of the last release (1/l).", registry=r
        )
        self.suppressed_rows = Gauge(
            "sr_release_suppressed_rows", "Rows suppressed in the last release.", registry=r
        )
        self.spent_people = Gauge(
            "sr_release_spent_people",
            "Individuals of the last release with a pair past the breach bound (linked by a "
            "suppressed set past the horizon).",
            registry=r,
        )
        self.spent_pairs = Gauge(
            "sr_release_spent_pairs",
            "Their (individual, protected value) pairs past the breach bound.",
            registry=r,
        )
        self.horizon = Gauge(
            "sr_series_horizon",
            "Releases the series is planned for ([privacy] horizon, or what its setting lasts).",
            registry=r,
        )
        self.past_horizon = Gauge(
            "sr_release_past_horizon",
            "1 when the last release lies past the series' horizon (individuals withheld for "
            "their history held to the per-release bound only), else 0.",
            registry=r,
        )
        self.avg_group_size = Gauge(
            "sr_release_avg_group_size", "Published rows per group, last release.", registry=r
        )
        self.max_group_size = Gauge(
            "sr_release_max_group_size", "Largest group of the last release.", registry=r
        )
        self.stage_seconds = _histogram("sr_stage_seconds", "Staging one batch.", r)
        self.group_seconds = _histogram("sr_group_seconds", "Planning one release.", r)
        self.commit_seconds = _histogram(
            "sr_commit_seconds", "Rendering, archiving and committing one release.", r
        )
        self.publish_seconds = _histogram(
            "sr_publish_seconds", "Sending one release until acknowledged.", r
        )
        self.consumer_lag = Gauge(
            "sr_consumer_lag",
            "End offset minus committed offset of a consumed partition.",
            ["topic", "partition"],
            registry=r,
        )
        self.shards_owned = Gauge(
            "sr_shard_owned",
            "1 for each shard (partition of the records topic) this worker cuts; none on one "
            "namespace.",
            ["shard"],
            registry=r,
        )
        self.seal_incomplete = Gauge(
            "sr_seal_incomplete",
            "Records a sealed release still waits for.",
            ["release"],
            registry=r,
        )

    # -- outcomes ------------------------------------------------------------------------------

    def observe_batch(
        self, records: int, rejected: Sequence[Rejected | None], seconds: float
    ) -> None:
        """A staged batch: ``records`` of its messages are records (0 for seals)."""
        refused = [r for r in rejected if r is not None]
        for r in refused:
            self.records_rejected.labels(reason=r.reason.value).inc()
        if records:
            self.records_staged.inc(max(records - len(refused), 0))
        self.stage_seconds.observe(seconds)

    def observe_cut(self, manifests: Sequence[Mapping[str, Any]], seconds: float) -> None:
        """Releases committed by one cut that took ``seconds``; gauges from the last one."""
        if not manifests:
            return
        planning = [float(m.get("elapsed_s", 0.0)) for m in manifests]
        rest = max(seconds - sum(planning), 0.0) / len(manifests)
        for manifest, planned in zip(manifests, planning, strict=True):
            self.group_seconds.observe(planned)
            self.commit_seconds.observe(rest)
            self._release_gauges(manifest)

    def observe_restored(self, manifest: Mapping[str, Any] | None, published: int) -> None:
        """At start: the release gauges from the last committed release's ``manifest`` and
        the sequence gauge from the last ``published`` one, as before the restart (not 0, not
        missing: a dashboard keeps its line)."""
        if manifest is not None:
            self._release_gauges(manifest)
        self.release_sequence.set(published)

    def _release_gauges(self, manifest: Mapping[str, Any]) -> None:
        # a mechanism kind's manifest has no breach block, a DP kind's no suppression
        # count: those gauges keep their last value rather than show a false 0
        breach = manifest.get("breach") or {}
        utility = manifest.get("utility", {})
        if "max" in breach and "bound" in breach:
            self.breach_max.set(float(breach["max"]))
            self.breach_bound.set(float(breach["bound"]))
            self.spent_people.set(float(breach.get("spent_people", 0)))
            self.spent_pairs.set(float(breach.get("spent", 0)))
            self.past_horizon.set(1 if manifest.get("past_horizon") else 0)
            horizon = (manifest.get("strategy") or {}).get("horizon")
            if isinstance(horizon, int):
                self.horizon.set(horizon)
        if "suppressed" in manifest:
            self.suppressed_rows.set(float(manifest["suppressed"]))
        self.avg_group_size.set(float(utility.get("avg_group_size", 0.0)))
        self.max_group_size.set(float(utility.get("max_group_size", 0)))

    def observe_refusals(
        self, refused: int, config_error: bool, store_regressed: bool = False
    ) -> None:
        """After a cut: ``refused`` releases it refused, and whether it stopped at a release
        the configuration cannot make or because the history store went backwards."""
        if refused:
            self.releases_refused.inc(refused)
        self.config_error.set(1 if config_error else 0)
        self.store_regressed.set(1 if store_regressed else 0)

    def observe_publish(self, sequence: int, seconds: float) -> None:
        """Release ``sequence`` was sent in ``seconds`` and marked published."""
        self.releases_published.inc()
        self.release_sequence.set(sequence)
        self.publish_seconds.observe(seconds)
        self.last_release_time = time.time()

    def observe_publication_failure(self) -> None:
        """A publication attempt failed (it is retried)."""
        self.publication_failures.inc()

    def _since_last_release(self) -> float:
        return max(time.time() - self.last_release_time, 0.0)

    def observe_shards(self, shards: Iterable[int]) -> None:
        """The shards this worker owns now (after a rebalance)."""
        self.shards_owned.clear()
        for shard in sorted(shards):
            self.shards_owned.labels(shard=str(shard)).set(1)

    # -- state, refreshed at each scrape -------------------------------------------------------

    def observe_lag(self, committed: Mapping[Any, int], end: Mapping[Any, int]) -> None:
        """``committed`` and ``end`` offsets by topic-partition (``.topic``, ``.partition``)."""
        self.consumer_lag.clear()
        for tp, offset in end.items():
            done = committed.get(tp)
            if done is not None:
                self.consumer_lag.labels(topic=tp.topic, partition=str(tp.partition)).set(
                    max(offset - done, 0)
                )

    def observe_waiting(self, statuses: Iterable[ReleaseStatus]) -> None:
        """The sealed releases still missing records."""
        self.seal_incomplete.clear()
        for status in statuses:
            missing = (status.sealed or 0) - status.staged
            self.seal_incomplete.labels(release=status.label).set(max(missing, 0))

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The registry in the format ``accept`` asks for, and its content type."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type


def health_payload(
    *,
    redis_ok: bool,
    published: int | None,
    publication_ok: bool,
    config_error: Mapping[str, str] | None = None,
    store_error: Mapping[str, str] | None = None,
    kafka_error: str | None = None,
    refused: Mapping[str, Any] | None = None,
    blocked: Sequence[Mapping[str, Any]] = (),
    publication_error: str | None = None,
    horizon: int | None = None,
) -> tuple[int, dict[str, Any]]:
    """The HTTP status and JSON body of ``/health``.

    ``ok`` (200) when Redis answers PING, the broker answers a login, the last publication
    attempt succeeded, no release is held up by the configuration or the store, no release
    was refused since the last one committed, and no sealed release is blocked by its
    rejected records; else ``degraded`` (503) with ``reasons``: one line per problem.
    ``ready``: the first five hold (the worker can publish: ``/readyz``), ``unready_reasons``
    their lines; a refused or blocked release is its producer's to fix, not the worker's.
    ``published_sequence``: the last sequence marked published (``None`` when Redis cannot
    tell). ``config_error`` / ``store_error``: ``None``, or the held release (``release``,
    ``error``; :class:`~stream_release.stream.notices.ConfigProblem`, ``StoreProblem``).
    ``kafka``: whether the broker answered; ``refused``: the last refused release's status
    message; ``blocked``: those of the blocked releases
    (:class:`~stream_release.stream.messages.ReleaseNotice`). ``horizon``: the releases the
    series is planned for (``None``: a kind without one); past it the body says so
    (``past_horizon``, a line in ``notes``) without turning ``degraded``: the worker is well,
    its series has outlived its plan.
    """
    unready = []  # what stops the worker from publishing (/readyz)
    if not redis_ok:
        unready.append("Redis does not answer PING")
    if kafka_error is not None:
        unready.append(f"Kafka: {kafka_error}")
    if not publication_ok:
        unready.append(f"the last publication failed: {publication_error or 'see the log'}")
    if config_error is not None:
        unready.append(f"release {config_error['release']!r} held: {config_error['error']}")
    if store_error is not None:
        unready.append(f"release {store_error['release']!r} held: {store_error['error']}")
    reasons = list(unready)  # and what its producers must fix (/health)
    if refused is not None:
        reasons.append(f"release {refused['release']!r} refused: {refused['reason']}")
    reasons.extend(f"release {b['release']!r} blocked: {b['reason']}" for b in blocked)
    ok = not reasons
    past = horizon is not None and published is not None and published > horizon
    notes = []
    if past:
        notes.append(
            f"release {published} is past the series' horizon of {horizon} releases: "
            "individuals withheld for their history are held to the per-release bound only; "
            f"plan a new series, knowing that {NEW_SERIES_CAVEAT}"
        )
    body = {
        "status": "ok" if ok else "degraded",
        "reasons": reasons,
        "ready": not unready,
        "unready_reasons": unready,
        "notes": notes,
        "horizon": horizon,
        "past_horizon": past,
        "redis": redis_ok,
        "kafka": kafka_error is None,
        "publication_ok": publication_ok,
        "published_sequence": published,
        "config_error": None if config_error is None else dict(config_error),
        "store_error": None if store_error is None else dict(store_error),
        "refused": None if refused is None else dict(refused),
        "blocked": [dict(b) for b in blocked],
    }
    return (200 if ok else 503), body


class HttpEndpoint:
    """``/metrics`` and ``/health`` on an aiohttp server in the worker's event loop.

    ``refresh`` updates the scrape-time metrics (lag, waiting seals) before ``/metrics``
    answers; ``health`` returns :func:`health_payload`'s pair.
    """

    def __init__(
        self,
        metrics: Metrics,
        refresh: Callable[[], Awaitable[None]],
        health: Callable[[], Awaitable[tuple[int, dict[str, Any]]]],
    ) -> None:
        self.metrics, self._refresh, self._health = metrics, refresh, health
        self.app = web.Application()
        self.app.router.add_get("/metrics", self._metrics_page)
        self.app.router.add_get("/health", self._health_page)
        self.app.router.add_get("/livez", self._live_page)
        self.app.router.add_get("/readyz", self._ready_page)

    async def serve(self, host: str, port: int) -> None:
        """Serve until cancelled (the app stopping); a port that cannot be bound is logged
        and the worker runs on without the endpoint."""
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        try:
            try:
                await web.TCPSite(runner, host, port).start()
            except OSError as exc:
                log.error("metrics endpoint disabled: cannot listen on %s:%d: %s", host, port, exc)
                return
            log.info("metrics and health on http://%s:%d/", host, port)
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    async def _metrics_page(self, request: web.Request) -> web.Response:
        try:
            await self._refresh()
        except Exception as exc:  # a scrape still answers with what it has
            log.warning("metrics refresh failed: %s", type(exc).__name__, exc_info=unexpected(exc))
        body, content_type = self.metrics.exposition(request.headers.get("Accept", ""))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _health_page(self, request: web.Request) -> web.Response:
        status, body = await self._health()
        return web.json_response(body, status=status)

    async def _live_page(self, request: web.Request) -> web.Response:
        # the event loop answers: nothing a restart would mend (a liveness probe's question)
        return web.json_response({"status": "live"})

    async def _ready_page(self, request: web.Request) -> web.Response:
        _, body = await self._health()
        ready = bool(body["ready"])
        answer = {"status": "ready" if ready else "not ready", "reasons": body["unready_reasons"]}
        return web.json_response(answer, status=200 if ready else 503)


def _histogram(name: str, documentation: str, registry: CollectorRegistry) -> Histogram:
    return Histogram(name, f"{documentation} Seconds.", buckets=DURATION_BUCKETS, registry=registry)
