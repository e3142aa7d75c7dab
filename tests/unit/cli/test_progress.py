"""A wait with no steps to count (``publish``) shows its seconds on a terminal, nothing
otherwise."""

from __future__ import annotations

import time

import pytest

from stream_release.cli import progress


def test_a_wait_ticks_its_seconds_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(progress, "shown", lambda: True)
    with progress.ticking("release r1: waiting", every_s=0.05):
        time.sleep(0.3)
    err = capsys.readouterr().err
    assert err.count("release r1: waiting: 00:0") >= 3  # redrawn while it waits


def test_a_wait_says_nothing_elsewhere(capsys: pytest.CaptureFixture[str]) -> None:
    with progress.ticking("release r1: waiting", every_s=0.05):  # capture is no terminal
        time.sleep(0.1)
    assert capsys.readouterr().err == ""
