"""Stand-ins for the worker's Kafka producers in the unit tests of :class:`ServiceRunner`
(its retry and ordering logic is pure; the integration tests use the real broker)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from stream_release.stream.service import Outgoing


class StubProducer:
    """Faust's producer: records what is sent; deliveries to a topic in ``failing`` fail."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []
        self.failing: set[str] = set()

    async def send(
        self, topic: str, key: bytes | None, value: bytes, *_: Any
    ) -> asyncio.Future[None]:
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
        self.committed = self.aborted = 0

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
        for m in messages:
            await (await self.producer.send(m.topic, m.key, m.value))
