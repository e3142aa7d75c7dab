"""``[privacy] horizon``: the releases a series is planned for, checked against what its setting
lasts before release 1 (Wong et al. 2010, §6.1: ``k'`` is the number of releases still to
come), and the manifest's ``past_horizon`` after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_release.config import horizon_of, load_settings
from stream_release.errors import ConfigError


def settings_file(tmp_path: Path, privacy: str, grouping: str = "") -> Path:
    path = tmp_path / "c.toml"
    path.write_text(f'[schema]\nqid = ["age"]\n[privacy]\n{privacy}\n[grouping]\n{grouping}\n')
    return path


@pytest.mark.parametrize(
    ("privacy", "fix"),
    [
        # constant-ratio lasts k' releases
        ("horizon = 12\nk_prime = 3", "set k_prime = 12 (ratio 17.82"),
        # geometric alpha = 2 under the default cap 8 lasts 2 (ratios 4, 6, 10, ...)
        (
            'horizon = 4\nstrategy = "geometric"\nalpha = 2',
            "set grouping.max_group_factor >= 4.5 (the 4-th linkage plans 18)",
        ),
        ('horizon = 2\nstrategy = "minimal"', 'use strategy = "constant-ratio" with k_prime = 2'),
        ('horizon = 2\nstrategy = "localized"\nacknowledge_localized = true', "keeps no history"),
    ],
)
def test_a_setting_that_does_not_last_the_horizon_is_refused_with_the_fix(
    tmp_path: Path, privacy: str, fix: str
) -> None:
    with pytest.raises(ConfigError, match=r"privacy\.horizon") as caught:
        load_settings(settings_file(tmp_path, privacy))
    assert fix in str(caught.value)


def test_a_setting_that_lasts_the_horizon_is_accepted(tmp_path: Path) -> None:
    settings = load_settings(settings_file(tmp_path, "horizon = 12\nk_prime = 12"))
    horizon = horizon_of(settings.privacy, settings.grouping)
    assert (horizon.releases, horizon.lasts, horizon.configured) == (12, 12, True)
    assert not horizon.past(12) and horizon.past(13)
    # the fix the refusal names for geometric is enough
    geometric = 'horizon = 4\nstrategy = "geometric"\nalpha = 2'
    load_settings(settings_file(tmp_path, geometric, "max_group_factor = 4.5"))


def test_without_a_horizon_the_series_is_planned_for_what_its_setting_lasts(
    tmp_path: Path,
) -> None:
    settings = load_settings(settings_file(tmp_path, "k_prime = 5"))
    horizon = horizon_of(settings.privacy, settings.grouping)
    assert (horizon.releases, horizon.lasts, horizon.configured) == (5, 5, False)
    localized = load_settings(
        settings_file(tmp_path, 'strategy = "localized"\nacknowledge_localized = true')
    )
    assert horizon_of(localized.privacy, localized.grouping).releases is None
