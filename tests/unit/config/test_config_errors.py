"""A configuration error names the key, its value, where the value came from (the file or the
``SR_*`` variable) and, for a misspelt key or value, the closest right one."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_release.config import load_settings
from stream_release.errors import ConfigError

SCHEMA = '[schema]\nid = "id"\nqid = ["age"]\nsensitive = "disease"\n'


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    return str(caught.value)


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (
            "[privacy]\nl = 2\nk_prmie = 3\n",
            "config privacy.k_prmie = 3 (in {path}): [privacy] has no key 'k_prmie'; "
            "did you mean 'k_prime'?",
        ),
        (
            '[privacy]\nstrategy = "constant_ratio"\n',
            "config privacy.strategy = 'constant_ratio' (in {path}): Input should be "
            "'constant-ratio', 'geometric', 'minimal' or 'localized'; did you mean "
            "'constant-ratio'?",
        ),
        (
            "[privcy]\nl = 2\n",
            "config privcy (in {path}): the configuration has no key 'privcy'; did you mean "
            "'privacy'?",
        ),
        (
            "[privacy]\nl = 0.5\n",
            "config privacy.l = 0.5 (in {path}): the breach bound 1/l needs a finite l > 1",
        ),
        (
            "[redis]\nwhat = 1\n",
            "config redis.what = 1 (in {path}): [redis] has no key 'what' (its keys: url",
        ),
    ],
    ids=["misspelt-key", "misspelt-value", "misspelt-section", "section-check", "no-close-key"],
)
def test_an_error_in_the_file_names_the_file_and_the_closest_right_one(
    tmp_path: Path, table: str, expected: str
) -> None:
    path = tmp_path / "series.toml"
    path.write_text(SCHEMA + table)
    assert _error(path).startswith(expected.format(path=path))


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "SR_PRIVACY_LL",
            "3",
            "config privacy.ll = '3' (from the environment: SR_PRIVACY_LL): [privacy] has no key "
            "'ll'; did you mean 'l'?",
        ),
        (
            "SR_PRIVACY_L",
            "0.5",
            "config privacy.l = 0.5 (from the environment: SR_PRIVACY_L): the breach bound",
        ),
        (
            "SR_OUTPUT_FORMAT",
            "anatomie",
            "config output.format = 'anatomie' (from the environment: SR_OUTPUT_FORMAT): Input "
            "should be 'generalized' or 'anatomy'; did you mean 'anatomy'?",
        ),
    ],
)
def test_an_error_in_the_environment_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    path = tmp_path / "series.toml"
    path.write_text(SCHEMA + "[privacy]\nl = 2\n")  # the file's l is fine: the variable wins
    monkeypatch.setenv(variable, value)
    assert _error(path).startswith(expected)
