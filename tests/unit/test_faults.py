"""The kill points' switch: named points only, a count >= 1, inert without the variable."""

from __future__ import annotations

import pytest

from stream_release.faults import POINTS, _target, kill_point


def test_no_variable_means_no_kill_point() -> None:
    assert _target(None) is None and _target("") is None
    for point in POINTS:
        kill_point(point)  # the test process is not killed


def test_a_point_and_its_count_are_parsed() -> None:
    assert _target("committed") == ("committed", 1)
    assert _target("committed:3") == ("committed", 3)


@pytest.mark.parametrize("spec", ["comitted", "committed:0", "committed:x", "committed:-1"])
def test_an_unknown_point_or_a_bad_count_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="STREAM_RELEASE_KILL_AT"):
        _target(spec)
