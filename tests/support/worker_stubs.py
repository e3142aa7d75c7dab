"""Stand-ins for the worker's Kafka producers and its release service in the unit tests of
:class:`~stream_release.stream.runner.ServiceRunner` (its retry and ordering logic is pure; the
integration tests use the real producer on the real broker).

:class:`StubReleases` satisfies :class:`~stream_release.stream.release_producer.Releases`, the
Protocol of the real :class:`~stream_release.stream.release_producer.ReleaseProducer`
(``tests/unit/stream/test_release_producer_protocol.py`` checks both).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

from stream_release.config import Settings
from stream_release.stream.runner import ServiceRunner
from stream_release.stream.service import Outgoing


class StubProducer:
    """Faust's producer: records what is sent; deliveries to a topic in ``failing`` fail."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []
        self.failing: set[str] = set()

    async def send(
        self, topic: str, key: bytes | None, value: bytes, *_: Any
    ) -> asyncio.Future[None]:
        """Record ``(topic, key, value)``; a future that fails if ``topic`` is failing."""
        self.sent.append((topic, key, value))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if topic in self.failing:
            future.set_exception(OSError("broker down"))
        else:
            future.set_result(None)
        return future


class StubReleases:
    """The worker's release producer, sending through a :class:`StubProducer` one message
    after the other and failing on the first failed delivery, as a batch would."""

    def __init__(self, producer: StubProducer) -> None:
        self.producer = producer
        self.committed = self.aborted = self.ended = 0

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Counts the transactions committed and aborted (the sends go out as they come)."""
        try:
            yield
        except BaseException:
            self.aborted += 1
            raise
        self.committed += 1

    async def send(self, messages: Sequence[Outgoing]) -> None:
        """Send ``messages`` in order, each awaited; raises the first failed delivery's
        error."""
        for m in messages:
            await (await self.producer.send(m.topic, m.key, m.value))

    async def end_transactions(self) -> None:
        """Counts the calls (the real producer stops its transactional producer)."""
        self.ended += 1


class StubService:
    """The release service as the runner calls it, with no release refused or held: releases
    ``published + 1 .. committed`` are committed but unsent (tests set ``committed``), and
    :meth:`outgoing` has no message (subclasses say what to send and what else to answer)."""

    config_problem = None
    store_problem = None
    refused: tuple[str, ...] = ()
    last_refusal = None

    def __init__(self) -> None:
        self.committed = 0
        self.marked = 0

    def published(self) -> int:
        """The last sequence marked published."""
        return self.marked

    def last_sequence(self) -> int:
        """The last sequence committed."""
        return self.committed

    def pending(self) -> list[int]:
        """The committed sequences not yet marked published."""
        return list(range(self.marked + 1, self.committed + 1))

    def outgoing(self, sequence: int) -> list[Outgoing]:
        """The messages of release ``sequence``: none."""
        return []

    def mark_published(self, sequence: int) -> int:
        """Mark every release up to ``sequence`` published."""
        self.marked = sequence
        return sequence

    def status_outbox(self) -> list[bytes]:
        """No status message to send."""
        return []

    def blocked(self) -> list[Any]:
        """No blocked release."""
        return []


def stub_runner(service: StubService, settings: Settings) -> tuple[ServiceRunner, StubProducer]:
    """A :class:`ServiceRunner` of ``service`` whose releases go through
    :class:`StubReleases` into the returned :class:`StubProducer` (also the Faust app's
    producer); the app's consumer lag is empty."""
    producer = StubProducer()
    monitor = SimpleNamespace(tp_committed_offsets={}, tp_end_offsets={})
    app = SimpleNamespace(producer=producer, monitor=monitor)
    runner = ServiceRunner(app, service, settings)  # type: ignore[arg-type]
    runner.releases = StubReleases(producer)
    runner.manifests_sequence = 0  # no manifests topic to read: nothing published before
    return runner, producer
