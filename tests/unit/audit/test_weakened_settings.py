"""The audit's side of "no silent weakening" (issue 26, item 4): a weakened setting is stated
in every manifest, and a protected value names a value of its release."""

from __future__ import annotations

from typing import Any

import pytest

from stream_release.audit.settings import (
    WEAK_BOUND,
    check_protected_named,
    check_settings,
)
from stream_release.audit.settings import same_value as audit_same_value
from stream_release.config import same_value
from stream_release.config._sections import WEAK_BOUND as CONFIG_WEAK_BOUND


def _manifest(ell: float, name: str, **strategy: Any) -> dict[str, Any]:
    return {"l": ell, "strategy": {"name": name, "base_ratio": ell, **strategy}}


def test_the_audits_copies_are_the_configurations() -> None:
    assert WEAK_BOUND == CONFIG_WEAK_BOUND
    for a, b in [("Sales ", "sales"), ("Sales", "Sale"), ("\tADM ", "adm"), ("a b", "ab")]:
        assert audit_same_value(a, b) == same_value(a, b)


@pytest.mark.parametrize(
    ("manifest", "missing"),
    [
        (_manifest(2.0, "localized"), ["acknowledge_localized"]),
        (_manifest(1.001, "minimal"), ["acknowledge_weak_l"]),
        (_manifest(1.05, "localized"), ["acknowledge_localized", "acknowledge_weak_l"]),
        (_manifest(1.001, "minimal", acknowledged=["acknowledge_weak_l"]), []),
        (_manifest(1.2, "minimal"), []),
    ],
)
def test_a_weakened_setting_must_be_stated(manifest: dict[str, Any], missing: list[str]) -> None:
    problems: list[str] = []
    check_settings(manifest, None, problems)
    keys = ("acknowledge_localized", "acknowledge_weak_l")
    assert [k for k in keys if any(f"does not state {k}:" in p for p in problems)] == missing
    assert len(problems) == len(missing)


def test_a_protected_value_no_row_holds_beside_its_other_spelling_is_a_problem() -> None:
    lines = [{"sensitive": {"Adm-clerical": 2, "Sales": 3}}]
    problems: list[str] = []
    check_protected_named(
        _manifest(2.0, "minimal", protected=["adm-clerical"]), lines, None, problems
    )
    assert problems == [
        "manifest strategy.protected names 'adm-clerical', which no row of the release holds, "
        "while 'Adm-clerical' (the same up to case and blanks) is not protected: its holders "
        "were not protected"
    ]
    # held by a suppressed row only (the private record), or absent with nothing alike: fine
    record = {"suppressed": {"sensitive": {"adm-clerical": 1}}}
    problems = []
    check_protected_named(
        _manifest(2.0, "minimal", protected=["adm-clerical", "Armed-Forces"]), lines, record,
        problems,
    )  # fmt: skip
    assert problems == []
