"""The whole worker from its settings: what ``stream-release worker`` runs, and what a program
that embeds the service calls (:func:`run_worker`, or :func:`start_worker` for the Faust worker
without running it)::

    from stream_release.config import load_settings
    from stream_release.stream.worker import run_worker

    run_worker(load_settings("stream-release.toml"))

Before anything is connected or created, a horizon on shards is checked against
``stream-release plan``'s digest and the pseudonymisation key is read; then the process is
tuned (malloc arenas, the garbage collector), the kernels are compiled (or loaded from numba's
cache), the topics are created when missing, the records topic's partitions and the
principal's ACLs are checked (each a one-line refusal now, not a hang later), and the app is
built (:func:`~stream_release.stream.app.create_app`).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
from typing import TYPE_CHECKING

from stream_release.config import Settings, check_planned
from stream_release.history.pseudonym import load_key

if TYPE_CHECKING:
    from stream_release.stream.shutdown import BoundedStopWorker

__all__ = ["limit_malloc_arenas", "run_worker", "start_worker", "tune_gc"]


def start_worker(settings: Settings, *, loglevel: str = "info") -> BoundedStopWorker:
    """The checked, connected worker of ``settings``, ready to run
    (:class:`~stream_release.stream.shutdown.BoundedStopWorker`: it stops on SIGINT and
    SIGTERM, cleanly unless ``service.stop_timeout_s`` passes).

    Raises
    ------
    ConfigError
        A horizon on shards not planned for this data, or no key.
    KafkaError
        The broker refuses the login or an ACL, or the records topic has other partitions.
    """
    check_planned(settings.privacy, settings.grouping, settings.schema, settings.kafka.partitions)
    load_key(settings.history)
    # the service's modules are imported only once the settings passed
    from stream_release.io.release_files import make_private_dir
    from stream_release.pipeline.warm_up import warm_up
    from stream_release.stream.access import check_access
    from stream_release.stream.app import create_app, faust_dir
    from stream_release.stream.kafka import (
        check_records_partitions,
        ensure_topics,
        quiet_client_logs,
    )
    from stream_release.stream.logs import logging_config
    from stream_release.stream.shutdown import BoundedStopWorker

    limit_malloc_arenas()
    make_private_dir(faust_dir(settings).parent)  # mode 0700; Faust's directory goes inside
    app = create_app(settings)
    warm_up()
    # before the app subscribes (a broker may auto-create them otherwise): the records topic
    # with kafka.partitions partitions, the others with one
    quiet_client_logs()
    asyncio.run(ensure_topics(settings.kafka, settings.kafka.topics.every))
    asyncio.run(check_records_partitions(settings.kafka))  # the shards are fixed for a series
    asyncio.run(check_access(settings))
    tune_gc()
    return BoundedStopWorker(
        app,
        loglevel=loglevel,
        logging_config=logging_config(settings.service.log_format, loglevel),
        quiet=settings.service.log_format == "json",  # no banner among the JSON lines
        stop_timeout_s=settings.service.stop_timeout_s,
    )


def run_worker(settings: Settings, *, loglevel: str = "info") -> int:
    """Run the worker of ``settings`` (:func:`start_worker`) until it is stopped; returns its
    exit status."""
    worker = start_worker(settings, loglevel=loglevel)
    worker.execute_from_commandline()
    return 0


GC_GEN0_THRESHOLD = 50_000
"""Allocations between young-generation collections in the worker (CPython's default: 700)."""


def tune_gc() -> None:
    """Make the garbage collector cheap for the worker's batches (call once, after start-up).

    Everything alive at start-up (modules, hierarchies, compiled kernels, the app) is moved to
    the permanent generation (:func:`gc.freeze`), so full collections no longer walk it, and
    young collections run every :data:`GC_GEN0_THRESHOLD` allocations instead of 700: a batch
    of thousands of decoded records otherwise triggers dozens of collections. Memory is still
    reclaimed by reference counting; only cycles wait a little longer. Measured with
    ``benchmarks/service.py``.
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


MALLOC_ARENAS = 2
"""glibc malloc arenas the worker may use (glibc's default: 8 per core)."""
_M_ARENA_MAX = -8  # mallopt parameter number, glibc malloc.h


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``arenas`` (call once, before any thread starts); returns
    whether the C library took it (False off glibc).

    The worker decodes, stages and cuts in threads (``asyncio.to_thread``) and computes the
    utility report in another; glibc gives threads their own arenas, and memory freed in one is
    kept there, fragmented, for that arena only. Measured with ``benchmarks/load.py`` (1 M-row
    releases): three releases peaked at 3.65 GiB with glibc's default and 2.42 GiB with
    ``MALLOC_ARENA_MAX=2``; ten releases with this call peaked at 2.36 GiB. ``MALLOC_ARENA_MAX``
    does the same for a whole process; this call needs no restart.
    """
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(ctypes.c_int(_M_ARENA_MAX), ctypes.c_int(arenas)))
