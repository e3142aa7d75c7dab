"""A protected value must name a value (issue 26, item 4): the spelling rules of
:mod:`stream_release.mechanisms.global_guarantee.protected` and the load-time check against the
sensitive attribute's hierarchy."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_release.config import closest_match, load_settings
from stream_release.errors import ConfigError, GuaranteeUnsatisfiable
from stream_release.mechanisms.global_guarantee.protected import (
    check_protected_present,
    protected_misses,
)

ADULT = ("Adm-clerical", "Exec-managerial", "Priv-house-serv", "Protective-serv", "Sales")


def test_the_closest_match_prefers_case_and_blanks_to_difflib() -> None:
    assert closest_match("Sales ", ADULT) == "Sales"
    assert closest_match("adm-clerical", ADULT) == "Adm-clerical"
    assert closest_match("Adm-clerikal", ADULT) == "Adm-clerical"
    assert closest_match("Armed-Forces", ADULT) is None


@pytest.mark.parametrize(
    ("value", "match"),
    [("adm-clerical", "Adm-clerical"), ("Sales ", "Sales"), ("Exec-managerjal", "Exec-managerial")],
)
def test_a_misspelled_value_is_refused_with_its_closest_match(value: str, match: str) -> None:
    assert protected_misses(ADULT, [value]) == [(value, match)]
    with pytest.raises(GuaranteeUnsatisfiable) as info:
        check_protected_present(ADULT, [value], sensitive="occupation", where="release 't1'")
    message = str(info.value)
    assert info.value.public and "\n" not in message
    assert message.startswith("release 't1': privacy.protected names values no row")
    assert f"{value!r} (closest: {match!r})" in message
    assert f'protected = ["{match}"]' in message
    assert '[schema.hierarchies] "occupation" = "FILE"' in message


def test_the_issues_example_names_both_values() -> None:
    misses = protected_misses(ADULT, ["adm-clerical", "Sales "])
    assert misses == [("adm-clerical", "Adm-clerical"), ("Sales ", "Sales")]


def test_a_value_absent_with_nothing_close_is_accepted() -> None:
    assert protected_misses(ADULT, ["Armed-Forces", "Sales"]) == []


def test_a_close_value_that_is_protected_itself_is_no_miss() -> None:
    # both protected: no row goes unprotected
    assert protected_misses(ADULT, ["Priv-house-serv", "Protective-serv"]) == []
    assert protected_misses(ADULT[:3] + ADULT[4:], ["Protective-serv"]) == [
        ("Protective-serv", "Priv-house-serv")
    ]


def test_a_value_an_earlier_release_held_or_the_hierarchy_declares_is_known() -> None:
    present = ("Adm-clerical", "Priv-house-serv", "Sales")
    assert protected_misses(present, ["Protective-serv"]) == [
        ("Protective-serv", "Priv-house-serv")
    ]
    assert protected_misses(present, ["Protective-serv"], seen=ADULT) == []
    assert protected_misses(present, ["Protective-serv"], declared=ADULT) == []


def test_a_variant_up_to_case_and_blanks_is_refused_even_when_known() -> None:
    """The rows of ``sales`` are the ones ``Sales`` meant: neither the history nor a hierarchy
    that does not list ``sales`` as a value of its own excuses it."""
    present = ("Adm-clerical", "sales")
    assert protected_misses(present, ["Sales"], seen=ADULT, declared=ADULT) == [("Sales", "sales")]
    assert protected_misses(present, ["Sales"], declared=(*ADULT, "sales")) == []


def _hierarchy(tmp_path: Path) -> Path:
    path = tmp_path / "occupation.csv"
    path.write_text("".join(f"{v};*\n" for v in (*ADULT, "Armed-Forces")))
    return path


def test_with_a_sensitive_hierarchy_a_value_not_a_leaf_fails_at_load(tmp_path: Path) -> None:
    schema = {
        "qid": ["age"],
        "sensitive": "occupation",
        "hierarchies": {"occupation": str(_hierarchy(tmp_path))},
    }
    with pytest.raises(ConfigError) as info:
        load_settings(schema=schema, privacy={"protected": ["adm-clerical", "Sales ", "Zz"]})
    message = str(info.value)
    assert message.startswith(
        "config privacy.protected names values that are not leaves of the hierarchy of the "
        "sensitive attribute 'occupation'"
    )
    assert (
        "'adm-clerical' (closest: 'Adm-clerical'), 'Sales ' (closest: 'Sales'), 'Zz' "
        "(nothing close)"
    ) in message
    assert 'protected = ["Adm-clerical", "Sales"]' in message
    # a leaf no release holds yet is declared: accepted
    settings = load_settings(schema=schema, privacy={"protected": ["Armed-Forces", "Sales"]})
    assert settings.privacy.protected == ("Armed-Forces", "Sales")


def test_a_hierarchy_may_name_the_sensitive_attribute_only_among_non_qids() -> None:
    with pytest.raises(ConfigError, match=r"not in schema\.qid nor schema\.sensitive"):
        load_settings(schema={"qid": ["age"], "hierarchies": {"zip": "z.csv"}})
