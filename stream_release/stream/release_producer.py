"""The worker's producer of releases: group lines and manifests, in record batches, each
release in one Kafka transaction.

A million-row release is about 200,000 group messages. Faust's producer sends them one
``send`` at a time (tens of microseconds each); this :class:`mode.Service`, started and stopped
with the Faust app, owns an ``AIOKafkaProducer`` (:func:`~stream_release.stream.kafka.
producer_options`: ``acks="all"``, idempotence as ``kafka.idempotent``) and sends them with
:func:`~stream_release.stream.kafka.send_batched`. The producer is started on first use, so a
broker that is down when the worker starts delays publication (retried) instead of the start.

With ``kafka.transactions`` the producer has the worker's transactional id
(:attr:`~stream_release.config.KafkaSettings.release_transactional_id`) and
:meth:`ReleaseProducer.transaction` wraps a release: committed as a whole, or aborted when
anything in it fails (the worker then sends the release again, in a new transaction). Starting
the producer (``init_transactions``) aborts a transaction its predecessor under the same id
left open, and fences that predecessor. After a failure the producer is dropped and started
again: a fenced or failed transactional producer cannot go on.

Fencing
-------
On shards the worker that owns shard 0 sends the releases, and the id goes with the shard:
the next owner's producer fences the previous owner's. A fenced producer does not know it
until its next request, which the broker refuses (``ProducerFenced``); aiokafka then puts its
transactions in a fatal state from which they can only be dropped, and asserts when asked to
abort (``Invalid state transition FATAL_ERROR -> ABORTING_TRANSACTION``). A worker that got
shard 0 back used to send with the producer another owner had fenced meanwhile, and its abort
replaced the ``ProducerFenced`` with that ``AssertionError`` (issue 26, item 7). So:

- a worker that loses shard 0 drops its transactional producer (:meth:`ReleaseProducer.
  end_transactions`), and starts a new one, which fences whoever had it, if shard 0 comes
  back;
- a transaction is begun only on a producer that is ready for one, otherwise on a new one;
- a failed transaction is aborted only if aiokafka can still abort it; one that failed
  fatally (fenced) is dropped with its producer, and the broker aborts it when the next
  producer under the id starts (or after ``kafka.transaction_timeout_ms``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from itertools import groupby
from typing import TYPE_CHECKING, Any, Protocol

import mode
from aiokafka import AIOKafkaProducer
from aiokafka.producer.transaction_manager import TransactionState

from stream_release.config import KafkaSettings
from stream_release.stream.kafka import producer_options, send_batched, transactional_options

if TYPE_CHECKING:
    from stream_release.stream.service import Outgoing


class Releases(Protocol):
    """What the worker needs of its release producer (:class:`ReleaseProducer`; the unit
    tests' stand-in shares it)."""

    def transaction(self) -> AbstractAsyncContextManager[None]: ...

    async def send(self, messages: Sequence[Outgoing]) -> None: ...

    async def end_transactions(self) -> None: ...


class ReleaseProducer(mode.Service):
    """Sends :class:`~stream_release.stream.service.Outgoing` messages in record batches."""

    def __init__(
        self, kafka: KafkaSettings, *, plain_outside_transactions: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.kafka = kafka
        self.plain_outside_transactions = plain_outside_transactions
        """Send what is not in a :meth:`transaction` through a producer without a
        transactional id (a worker on shards that does not send releases must not open the
        transactional one: it would fence the worker that does)."""
        self.producer: AIOKafkaProducer | None = None
        self.plain: AIOKafkaProducer | None = None
        self._one_at_a_time = asyncio.Lock()
        self._owner: asyncio.Task[Any] | None = None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """The block's sends as one transaction (committed when it exits, aborted when it
        raises); without ``kafka.transactions``, the block as it is."""
        if self.kafka.release_transactional_id is None:
            yield
            return
        async with self._one_at_a_time:  # other tasks' sends wait: never in this transaction
            if self.producer is not None and transaction_state(self.producer) != _READY:
                await self._drop()  # failed outside a transaction: cannot begin one
            producer = await self._connected()
            self._owner = asyncio.current_task()
            try:
                await producer.begin_transaction()
                try:
                    yield
                except BaseException:
                    if transaction_state(producer) in _ABORTABLE:
                        await producer.abort_transaction()
                    raise  # fenced: dropped below; the next producer's start aborts it
                await producer.commit_transaction()
            except BaseException:
                await self._drop()
                raise
            finally:
                self._owner = None

    async def send(self, messages: Sequence[Outgoing]) -> None:
        """Send ``messages`` (runs of one topic in order) and wait until the broker
        acknowledged every one; raises the client's error otherwise. Outside a
        :meth:`transaction` of this task, with transactions on, in a transaction of their own
        (the worker's rejections)."""
        transactional = self.kafka.release_transactional_id is not None
        if transactional and self._owner is not asyncio.current_task():
            if self.plain_outside_transactions:
                await self._send_runs(messages, await self._plain())
                return
            async with self.transaction():
                await self._send_runs(messages, await self._connected())
            return
        await self._send_runs(messages, await self._connected())

    async def end_transactions(self) -> None:
        """Stop the transactional producer, if one is started: this worker no longer sends
        the releases, and the next sender's producer, under the same transactional id, fences
        this one (module docstring). The next :meth:`transaction` starts a new one."""
        async with self._one_at_a_time:
            await self._drop()

    async def _send_runs(self, messages: Sequence[Outgoing], producer: AIOKafkaProducer) -> None:
        for topic, run in groupby(messages, key=lambda m: m.topic):
            await send_batched(
                producer,
                topic,
                ((m.key, m.value) for m in run),
                max_bytes=self.kafka.max_message_bytes,
            )

    async def _connected(self) -> AIOKafkaProducer:
        if self.producer is None:
            producer = AIOKafkaProducer(**transactional_options(self.kafka))
            try:
                await producer.start()
            except BaseException:
                await producer.stop()
                raise
            self.producer = producer
        return self.producer

    async def _plain(self) -> AIOKafkaProducer:
        if self.plain is None:
            producer = AIOKafkaProducer(**producer_options(self.kafka))
            try:
                await producer.start()
            except BaseException:
                await producer.stop()
                raise
            self.plain = producer
        return self.plain

    async def _drop(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            # a failed producer may fail to stop too; it is gone either way
            with suppress(Exception):
                await producer.stop()

    async def on_stop(self) -> None:
        await self._drop()
        plain, self.plain = self.plain, None
        if plain is not None:
            with suppress(Exception):
                await plain.stop()


_READY = TransactionState.READY
_ABORTABLE = frozenset({TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR})
"""The states from which aiokafka can abort a transaction (``TransactionState.
is_transition_valid`` to ``ABORTING_TRANSACTION``); from any other, ``abort_transaction``
asserts."""


def transaction_state(producer: AIOKafkaProducer) -> TransactionState | None:
    """Where ``producer``'s transactions stand (``None`` without a transactional id).

    aiokafka keeps it in its transaction manager and has no public accessor; its own
    ``TransactionContext`` reads the manager the same way (``is_fatal_error()``) before
    aborting. Pinned by ``tests/integration/test_release_producer.py`` on the real broker.
    """
    manager = producer._txn_manager
    return None if manager is None else manager.state
