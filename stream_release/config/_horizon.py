"""The horizon of a series: how many releases its privacy settings keep every individual inside
the strategy's plan, and the check of ``[privacy] horizon`` against it.

Wong et al. (ICDE 2010) define the constant-ratio strategy's ``k'`` as the number of linkages
still to come (§6.1): ``n_c`` allows ``k'`` linkages of a pair at that ratio, after which the
pair is at the bound. An individual is linked at most once per release, so a setting lasts
:meth:`~stream_release.core.privacy.strategy.Strategy.lasts` releases: inside them no plan
exceeds the cap, nobody is withheld for their history, and nobody's breach passes ``1/l``
(every linkage, in a group or in the suppressed set, meets its plan). ``[privacy] horizon = H``
is the number of releases the series is planned for; a configuration whose setting does not
last ``H`` releases is refused before release 1, with the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from stream_release.config._sections import GroupingSettings, PrivacySettings
from stream_release.core.grouping.partition import group_size_cap
from stream_release.core.privacy.breach import constant_ratio_target
from stream_release.core.privacy.strategy import Strategy

__all__ = ["Horizon", "check_horizon", "horizon_of"]


@dataclass(frozen=True)
class Horizon:
    """The horizon of a series' settings.

    ``releases``: the releases the series is planned for: ``[privacy] horizon`` when set,
    else what the setting lasts (``None`` for the localized baseline, which keeps no history).
    ``lasts``: the releases the setting keeps everyone inside its plan. ``configured``:
    whether ``releases`` is the configuration's.
    """

    releases: int | None
    lasts: int | None
    configured: bool

    def past(self, sequence: int) -> bool:
        """Whether release ``sequence`` lies past the horizon (its withheld individuals are
        held to the per-release bound only)."""
        return self.releases is not None and sequence > self.releases


def horizon_of(privacy: PrivacySettings, grouping: GroupingSettings) -> Horizon:
    """The horizon of these settings (module docstring)."""
    strategy = privacy.make_strategy()
    lasts = strategy.lasts(_cap(strategy, privacy, grouping))
    if privacy.horizon is not None:
        return Horizon(privacy.horizon, lasts, True)
    return Horizon(lasts, lasts, False)


def check_horizon(privacy: PrivacySettings, grouping: GroupingSettings) -> None:
    """Refuse ``[privacy] horizon = H`` when the setting lasts fewer than ``H`` releases.

    Raises
    ------
    ValueError
        One line naming the keys and the fix: constant-ratio needs ``k_prime >= H``;
        geometric, a cap (``max_group_factor``) at least the ``H``-th linkage's planned ratio;
        minimal lasts one release; the localized baseline has no horizon.
    """
    horizon = privacy.horizon
    if horizon is None:
        return
    strategy = privacy.make_strategy()
    cap = _cap(strategy, privacy, grouping)
    lasts = strategy.lasts(cap)
    if lasts is None:
        raise ValueError(
            f"privacy.horizon = {horizon} but strategy localized keeps no history: it bounds "
            "each release alone and has no horizon; remove privacy.horizon or use "
            f'strategy = "constant-ratio" with k_prime = {horizon}'
        )
    if lasts >= horizon:
        return
    head = (
        f"privacy.horizon = {horizon} but strategy {strategy.name} at l = {strategy.ell:g} keeps "
        f"every individual inside its plan for {lasts} release{'s' if lasts != 1 else ''} only"
    )
    if strategy.name == "constant-ratio":
        raise ValueError(
            f"{head} (k_prime = {strategy.k_prime}: Wong et al. 2010, §6.1, k' is the number "
            f"of releases still to come); set k_prime = {horizon} (ratio "
            f"{_ratio(strategy.ell, horizon):.4g}: protect only the values rarer than 1 in "
            f"{_ratio(strategy.ell, horizon):.3g} rows; `stream-release plan` lists them)"
        )
    if strategy.name == "geometric":
        need = float(strategy.schedule(horizon).max())
        factor = need / max(strategy.base_ratio, privacy.min_group_size)
        raise ValueError(
            f"{head} under the group-size cap {cap} (grouping.max_group_factor = "
            f"{grouping.max_group_factor:g}: its linkage {lasts + 1} plans a ratio of "
            f"{float(strategy.schedule(lasts + 1)[-1]):.4g}); set grouping.max_group_factor >= "
            f"{_ceil2(factor):g} (the {horizon}-th linkage plans {need:.4g}), or use "
            f'strategy = "constant-ratio" with k_prime = {horizon}'
        )
    raise ValueError(
        f"{head} (it plans at the minimum of Wong et al.'s Theorem 1: their Theorem 2's dead "
        "end); use "
        f'strategy = "constant-ratio" with k_prime = {horizon}'
    )


def _cap(strategy: Strategy, privacy: PrivacySettings, grouping: GroupingSettings) -> int:
    return group_size_cap(strategy.base_ratio, privacy.min_group_size, grouping.max_group_factor)


def _ratio(ell: float, k_prime: int) -> float:
    return constant_ratio_target(ell, k_prime)


def _ceil2(value: float) -> float:
    """``value`` rounded up to two decimals (a suggestion that is itself enough)."""
    return -(-round(value * 100, 9) // 1) / 100
