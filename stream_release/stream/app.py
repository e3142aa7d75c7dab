"""The Faust application of the streaming service (docs/contract.md §5): the only app.

:func:`create_app` builds it from :class:`~stream_release.config.Settings` around a
:class:`~stream_release.stream.service.ReleaseService`, which does all the work; the app only
hands it batches of messages:

- ``topics.records``: the :class:`~stream_release.stream.records_consumer.RecordConsumer`
  service (aiokafka batches; Faust's per-event stream is too slow for this volume) passes
  batches of up to ``service.batch_records`` messages (or what arrived within
  ``service.batch_window_s``) to :meth:`ServiceRunner.stage_records`: they are staged in
  Redis; each refused message goes to ``topics.rejected`` (its
  :class:`~stream_release.stream.messages.Rejected` JSON, keyed as received); then every ready
  release is published.
- ``topics.control``: a Faust agent does the same for seals.

Publication (:meth:`ServiceRunner.cut_and_send`) cuts and commits every ready release in a thread,
then sends each committed but unsent release, its groups then its manifest, waits until the
broker has acknowledged all of them and only then marks it published. It also runs when the
worker starts (a release committed before a crash is sent again, same content and sequence)
and every ``service.retry_interval_s`` (a send that failed is retried). Before its first cut
it reads the highest sequence on ``topics.manifests`` (the end of the topic only,
:func:`~stream_release.stream.kafka.last_manifest_sequence`), and raises it with every release
it sends: while the history store's last sequence is below it (Redis restored from an older
backup with the archives, whose own check it passes), nothing is cut or sent, the release due
is held (``store_regressed``, ``/health`` degraded, a ``held`` status message) until the store
is restored.

Offsets: the records consumer commits a batch's offsets only after
:meth:`ServiceRunner.stage_records` returned, i.e. after the batch is staged in Redis and its
rejections are acknowledged by the broker. For seals, ``Stream.take_events`` acknowledges a
batch's events only after the agent's loop body has returned, and Faust commits only
acknowledged offsets. A batch whose staging fails (Redis down) is retried until it succeeds,
after pauses growing up to ``service.retry_interval_s`` (:mod:`~stream_release.stream.retry`),
never skipped, so its offsets are never committed ahead; a failure of the worker's own code
ends the process before anything of the batch is committed
(:func:`~stream_release.stream.shutdown.exit_on_bug`).
``stream_processing_timeout`` only logs a warning; it acknowledges nothing.

Every call into the service holds one lock, so staging and the cut never interleave. Logs name
releases by sequence and counts only, never an id, a key or a value.

Observability (:mod:`~stream_release.stream.observability`): the runner counts staged and
rejected messages, times staging, cuts and sends and sets the release gauges from each
manifest; with ``service.metrics_port`` set (not 0) the app serves ``/metrics`` and
``/health`` on it, refreshing consumer lag and waiting seals at each scrape.

Notes
-----
Releases (group lines, manifests) go through the worker's own aiokafka producer
(:mod:`stream_release.stream.release_producer`: record batches, ``acks="all"``, idempotence as
``kafka.idempotent``). Rejections go through Faust's producer, which enables idempotence only
for transactions (``processing_guarantee = "exactly_once"``, not used here), so
``kafka.idempotent`` has no effect on it; its writes are acknowledged by all in-sync replicas
(``producer_acks = -1``). A release sent twice (after a crash or a failed send) carries the
same ``sequence``: consumers dedupe by it.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import faust

from stream_release.config import KafkaSettings, Settings
from stream_release.history.redis_client import connect
from stream_release.io.release_files import default_private_dir
from stream_release.stream.kafka import (
    client_options,
)
from stream_release.stream.logs import describe_failure, unexpected
from stream_release.stream.observability import HttpEndpoint, Metrics
from stream_release.stream.records_consumer import RecordConsumer
from stream_release.stream.release_producer import ReleaseProducer
from stream_release.stream.runner import ServiceRunner
from stream_release.stream.seal_watch import SealWatch
from stream_release.stream.service import BaseReleaseService, ReleaseService
from stream_release.stream.sharded.service import ShardedReleaseService

log = logging.getLogger(__name__)

SHARD_POLL_S = 0.2
"""How often a worker on shards looks whether the release in flight needs a step of its."""


def faust_dir(settings: Settings) -> Path:
    """Faust's directory: ``.faust`` in the worker's private archive."""
    conf = settings.service
    return (conf.private_archive or default_private_dir(conf.archive)) / ".faust"


def create_app(
    settings: Settings,
    service: BaseReleaseService | None = None,
    metrics: Metrics | None = None,
) -> faust.App:
    """The worker's Faust app: the records consumer, the agent of ``topics.control``, the
    publication at start and every ``service.retry_interval_s``, and ``/metrics`` and
    ``/health`` on ``service.metrics_port`` unless it is 0. ``service``: by default the one
    ``settings`` call for (:func:`make_service`); ``metrics``: a new :class:`Metrics` by
    default. The whole worker, checks and start-up included:
    :func:`~stream_release.stream.worker.run_worker`."""
    if service is None:
        service = make_service(settings)
    kafka, conf = settings.kafka, settings.service
    app = faust.App(
        kafka.group_id,
        broker=[f"kafka://{server.strip()}" for server in kafka.bootstrap.split(",")],
        broker_client_id=kafka.client_id,
        broker_credentials=_credentials(kafka),
        broker_session_timeout=conf.session_timeout_s,
        broker_heartbeat_interval=conf.heartbeat_interval_s,
        broker_rebalance_timeout=conf.rebalance_timeout_s,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_max_request_size=kafka.max_message_bytes,
        key_serializer="raw",
        value_serializer="raw",
        store="memory://",
        # Faust's own directory (empty: no table is kept on disk) inside the worker's private
        # archive, not in the working directory (start_worker creates the archive first)
        datadir=str(faust_dir(settings)),
        topic_disable_leader=True,
        topic_allow_declare=False,
        web_enabled=False,
    )
    runner = ServiceRunner(app, service, settings, metrics)
    runner.records = RecordConsumer(runner, settings, beacon=app.beacon)
    app.service(runner.records)  # type: ignore[arg-type]  # Faust starts instances too
    # on shards only the owner of shard 0 opens the transactional producer; every worker sends
    # its rejections outside transactions
    sharded = isinstance(service, ShardedReleaseService)
    runner.releases = ReleaseProducer(kafka, plain_outside_transactions=sharded, beacon=app.beacon)
    app.service(runner.releases)  # type: ignore[arg-type]
    control = app.topic(kafka.topics.control, key_serializer="raw", value_serializer="raw")

    @app.agent(control, name="stage-seals")
    async def stage_seals(stream: faust.StreamT[bytes]) -> None:
        # faust-streaming has take_events; its StreamT type does not declare it
        batches = stream.take_events(  # type: ignore[attr-defined]
            conf.batch_records, within=conf.batch_window_s
        )
        async for events in batches:
            await runner.stage_seals(events)

    @app.task  # type: ignore[untyped-decorator]
    async def cut_and_send_at_start() -> None:
        try:
            await runner.restore_metrics()
        except Exception as exc:  # Redis down: the gauges wait for the next release
            log.warning(
                "cannot restore the release gauges: %s",
                describe_failure(exc),
                exc_info=unexpected(exc),
                extra={"event": "gauges_not_restored", "error": type(exc).__name__},
            )
        await runner.cut_and_send()

    @app.timer(interval=conf.retry_interval_s)  # type: ignore[untyped-decorator]
    async def cut_and_send_periodically() -> None:
        await runner.cut_and_send()

    if isinstance(service, ShardedReleaseService):

        @app.timer(interval=SHARD_POLL_S)  # type: ignore[untyped-decorator]
        async def follow_shards() -> None:
            # another worker's vote or part may let this one go on: look again soon while a
            # release is in flight (a read of one hash), not only at the next retry interval
            # and, on the sender, while a release another worker finished waits to be sent
            # (it waited for the next retry interval: 0.1-0.95 s per release in
            # benchmarks/scale_out.py at a 1 s interval); a failed publication and a held cut
            # wait for the retry interval instead
            held = service.config_problem is not None or service.store_problem is not None
            if held:
                return
            try:
                in_flight = bool(await asyncio.to_thread(service.cut.current))
                unsent = runner.publication_ok and runner.sends_releases()
                waiting = unsent and bool(await asyncio.to_thread(service.pending))
            except Exception as exc:  # Redis away: the periodic publication says so, once
                # per retry interval, not here every SHARD_POLL_S (an exception raised out of
                # a timer would crash the app)
                if unexpected(exc) is not None:
                    log.error(
                        "cannot follow the release in flight: %s",
                        describe_failure(exc),
                        exc_info=exc,
                        extra={"event": "follow_failed", "error": type(exc).__name__},
                    )
                return
            if in_flight or waiting:
                await runner.cut_and_send()

    seal_watch = SealWatch(conf.seal_alert_after_s)  # logs seals that stay incomplete

    @app.timer(interval=min(conf.retry_interval_s, conf.seal_alert_after_s))  # type: ignore[untyped-decorator]
    async def watch_seals() -> None:
        await seal_watch.run(service.waiting)

    if conf.metrics_port:
        endpoint = HttpEndpoint(runner.metrics, runner.refresh_metrics, runner.health)

        @app.task  # type: ignore[untyped-decorator]
        async def serve_metrics() -> None:
            await endpoint.serve(conf.metrics_host, conf.metrics_port)

    return app


def make_service(settings: Settings) -> BaseReleaseService:
    """The release service ``settings`` call for, connected to ``redis.url``: on shards
    (``kafka.partitions`` above 1, or a Redis Cluster) a
    :class:`~stream_release.stream.sharded.service.ShardedReleaseService`, else a
    :class:`~stream_release.stream.service.ReleaseService`."""
    client = connect(settings.redis.url, cluster=settings.redis.cluster)
    if settings.kafka.partitions > 1 or settings.redis.cluster:
        return ShardedReleaseService(settings, client)
    return ReleaseService(settings, client)


def _credentials(kafka: KafkaSettings) -> Any:
    """Faust credentials for the security settings (``None`` for ``PLAINTEXT``)."""
    ssl_context = client_options(kafka).get("ssl_context")
    if kafka.security_protocol.startswith("SASL_"):
        password = kafka.sasl_password
        return faust.SASLCredentials(
            username=kafka.sasl_username,
            password=None if password is None else password.get_secret_value(),
            ssl_context=ssl_context,
            mechanism=kafka.sasl_mechanism or "PLAIN",
        )
    if ssl_context is not None:
        return faust.SSLCredentials(ssl_context)
    return None
