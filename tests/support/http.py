"""A test worker's HTTP endpoint (``/metrics``, ``/health``): one GET, the exposition's samples,
and polling until a page shows what a test waits for."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.worker import Worker

T = TypeVar("T")
HTTP_TIMEOUT_S = 20.0
"""Longest wait for the endpoint to answer and show what is polled for."""


def http_get(url: str) -> tuple[int, bytes]:
    """The status and body of a GET of ``url`` (an error status too: 503 is degraded, still a
    JSON body); raises ``OSError`` when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:  # 503: degraded, still a JSON body
        return exc.code, exc.read()


def metric_samples(text: str) -> dict[str, float]:
    """``name`` or ``name{k=v,...}`` -> value, for every sample of the exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def poll(worker: Worker, url: str, accept: Callable[[int, bytes], T | None], what: str) -> T:
    """GET ``url`` every 0.2 s (the worker alive) until ``accept(status, body)`` returns
    something, and return it; fails after :data:`HTTP_TIMEOUT_S` naming ``what``."""
    deadline = time.monotonic() + HTTP_TIMEOUT_S
    while True:
        worker.check_alive()
        try:
            status, body = http_get(url)
        except OSError:
            status, body = 0, b""
        found = accept(status, body)
        if found is not None:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"{url} never {what}: {status} {body.decode()}\n{worker.tail()}")
        time.sleep(0.2)


def health_until(worker: Worker, url: str, done: str) -> dict[str, object]:
    """``/health``'s body once it is 503 and one of its reasons contains ``done``."""

    def accept(status: int, body: bytes) -> dict[str, object] | None:
        health = json.loads(body or b"{}")
        reasons = health.get("reasons", []) if status == 503 else []
        return health if any(done in reason for reason in reasons) else None

    return poll(worker, url, accept, f"said {done!r}")
