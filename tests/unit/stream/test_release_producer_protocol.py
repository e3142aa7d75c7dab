"""The worker's release producer and the unit tests' stand-in share one Protocol,
:class:`~stream_release.stream.release_producer.Releases` (what
:class:`~stream_release.stream.runner.ServiceRunner` calls): the stand-in the runner's unit tests
send through cannot drift from the real :class:`ReleaseProducer` unnoticed.

Both are assigned to ``Releases``-typed names (mypy checks the assignment), and at run time
each method of the Protocol is on both with the same parameters (names, kinds, annotations),
coroutine or not alike, and ``transaction()`` gives an asynchronous context manager.
"""

from __future__ import annotations

import inspect
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from support.worker_stubs import StubProducer, StubReleases

from stream_release.config import KafkaSettings
from stream_release.stream.release_producer import ReleaseProducer, Releases

PROTOCOL_METHODS = sorted(
    name for name, member in vars(Releases).items() if callable(member) and name[0] != "_"
)
"""The methods the Protocol declares."""


def _implementations() -> list[Releases]:
    """One real producer (not started: it connects on first use) and one stand-in, each
    typed as the Protocol."""
    real: Releases = ReleaseProducer(KafkaSettings())
    stand_in: Releases = StubReleases(StubProducer())
    return [real, stand_in]


def _shape(method: Any) -> tuple[bool, list[tuple[str, Any, Any]]]:
    """Whether ``method`` is a coroutine function, and its parameters as (name, kind,
    annotation) without ``self``; a decorated method is read through ``__wrapped__``."""
    signature = inspect.signature(method)
    parameters = [(p.name, p.kind, p.annotation) for p in signature.parameters.values()]
    return inspect.iscoroutinefunction(method), parameters[1:]


def test_the_protocol_declares_what_the_runner_calls() -> None:
    assert PROTOCOL_METHODS == ["end_transactions", "send", "transaction"]


@pytest.mark.parametrize("name", PROTOCOL_METHODS)
@pytest.mark.parametrize("implementation", [ReleaseProducer, StubReleases])
def test_each_method_has_the_protocols_signature(implementation: type, name: str) -> None:
    assert _shape(getattr(implementation, name)) == _shape(getattr(Releases, name))


def test_both_transactions_are_asynchronous_context_managers() -> None:
    for releases in _implementations():
        assert isinstance(releases.transaction(), AbstractAsyncContextManager)
