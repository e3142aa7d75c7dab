"""No silent weakening (issue 26, item 4): a weakened setting is refused when the configuration
is loaded unless it is acknowledged, and a protected value that names nothing is an error."""

from __future__ import annotations

import pytest

from stream_release.config import load_settings
from stream_release.errors import ConfigError

SCHEMA = {"qid": ["age"]}


def _privacy(**privacy: object) -> tuple[str, ...]:
    return load_settings(schema=SCHEMA, privacy=privacy).privacy.acknowledged


def test_localized_needs_its_acknowledgement() -> None:
    with pytest.raises(ConfigError) as info:
        _privacy(strategy="localized")
    message = str(info.value)
    assert message.startswith("config privacy.strategy = 'localized' bounds each release alone")
    assert "add acknowledge_localized = true to [privacy]" in message
    assert "\n" not in message
    assert _privacy(strategy="localized", acknowledge_localized=True) == ("acknowledge_localized",)


@pytest.mark.parametrize("ell", [1.001, 1.05, 1.111])
def test_a_bound_above_0_9_needs_its_acknowledgement(ell: float) -> None:
    with pytest.raises(ConfigError) as info:
        _privacy(l=ell)
    message = str(info.value)
    assert message.startswith(f"config privacy.l = {ell!r} gives the bound 1/l = ")
    assert "above 0.9" in message and "add acknowledge_weak_l = true to [privacy]" in message
    assert _privacy(l=ell, acknowledge_weak_l=True) == ("acknowledge_weak_l",)


@pytest.mark.parametrize("ell", [1.112, 1.2, 2.0])
def test_a_bound_at_most_0_9_needs_none(ell: float) -> None:
    assert _privacy(l=ell) == ()
    assert _privacy(l=ell, acknowledge_weak_l=True) == ()  # not needed: not stated


def test_both_acknowledgements_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SR_PRIVACY_ACKNOWLEDGE_WEAK_L", "true")
    assert _privacy(l=1.001, strategy="localized", acknowledge_localized=True) == (
        "acknowledge_localized",
        "acknowledge_weak_l",
    )
