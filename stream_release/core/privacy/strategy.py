r"""Ratio strategies: the group-size ratio ``|G| / n(G,s)`` each (individual, value) requires.

Every strategy maps an individual's history for one value, ``(log P, links)``, to the ratio
its next group holding that value must meet. Sources, all [WFLWX10] (see ``breach.py``):

* ``constant-ratio`` (§6.1, min-max optimal by Theorem 4): ``max(n_c, \tilde n^+)`` with
  ``n_c = constant_ratio_target(l, k')``. ``n_c`` is the plan; ``\tilde n`` ([WFLWX10] Theorem 1)
  still guards an individual linked more than ``k'`` times, and is infinite once ``P <= 1 - 1/l``.
* ``geometric`` (§6.2): ``max(alpha * \tilde n, \tilde n^+)``.

``\tilde n^+ = \tilde n (1 + RATIO_RTOL)``: where a ratio is [WFLWX10] Theorem 1's own bound, it is
planned a hair above it, so that a planned group stays strictly below ``1/l`` however the
history's floats round (the margin on the safe side, :mod:`stream_release.core.privacy.breach`);
the base ratio likewise stays above ``l``. A plan ratio clear of the bound (``n_c > l``,
``alpha > 1``) is used as it is.
* ``minimal``: ``\tilde n (1 + MINIMAL_MARGIN)``, [WFLWX10] Theorem 1's bound with a margin against
  rounding; it shows [WFLWX10] Theorem 2's dead end: an individual linked at (close to) the minimum
  can never be linked to that value again.
* ``localized``: ``l`` whatever the history (Principle 1, per-release l-diversity in ratio
  form). The baseline the product exists to beat: it does not meet the global guarantee.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stream_release.core.privacy.breach import (
    RATIO_RTOL,
    constant_ratio_target,
    minimum_ratio_from_log_product,
)
from stream_release.core.privacy.validation import check_alpha, check_ell, check_k_prime
from stream_release.errors import InvalidParameter

STRATEGY_NAMES: tuple[str, ...] = ("constant-ratio", "geometric", "minimal", "localized")

MOST_LINKAGES = 10_000
"""Where :meth:`Strategy.lasts` stops counting."""

MINIMAL_MARGIN = 1e-6
"""Relative margin of the ``minimal`` strategy above [WFLWX10] Theorem 1's ratio ``\tilde n``."""


@dataclass(frozen=True)
class Strategy:
    """A validated ratio strategy; build it with :func:`make_strategy`.

    ``required_ratio(log_p, links)`` is vectorised: ``(m,) float64`` and ``(m,) int`` in,
    ``(m,) float64`` out (``inf`` = no linkage allowed).
    """

    name: str
    ell: float
    k_prime: int | None = None
    alpha: float | None = None
    target: float = field(init=False)

    def __post_init__(self) -> None:
        # Validate here too: Strategy is public, and unchecked fields fail open (a geometric
        # strategy without alpha required ratio 0; alpha < 1 or l < 1 undercut [WFLWX10] Theorem 1).
        check_ell(self.ell)
        if self.name == "constant-ratio":
            object.__setattr__(self, "target", constant_ratio_target(self.ell, self.k_prime or 0))
        elif self.name == "geometric":
            if self.alpha is None:
                raise InvalidParameter("alpha = None: geometric needs alpha > 1 (e.g. alpha = 2)")
            object.__setattr__(self, "target", check_alpha(self.alpha) * self.ell)
        elif self.name == "minimal":
            object.__setattr__(self, "target", self.ell * (1.0 + MINIMAL_MARGIN))
        elif self.name == "localized":
            object.__setattr__(self, "target", self.ell)
        else:
            raise InvalidParameter(
                f"strategy = {self.name!r}: must be one of {', '.join(STRATEGY_NAMES)}"
            )

    @property
    def base_ratio(self) -> float:
        """The ratio required of an (individual, value) pair with no history: the plan's
        ratio, and above [WFLWX10] Theorem 1's ``l`` by the safe margin (``localized``: ``l``)."""
        if self.name == "localized":
            return self.target
        return max(self.target, self.ell * (1.0 + RATIO_RTOL))

    @property
    def uses_history(self) -> bool:
        """False only for the localized baseline."""
        return self.name != "localized"

    def required_ratio(self, log_p: ArrayLike, links: ArrayLike) -> NDArray[np.float64]:
        """Ratio required for the next linkage of pairs with history ``(log_p, links)``."""
        log_p_arr = np.asarray(log_p, dtype=np.float64)
        if self.name == "localized":
            return np.full(log_p_arr.shape, self.ell)
        minimum = minimum_ratio_from_log_product(self.ell, log_p_arr)
        safe = minimum * (1.0 + RATIO_RTOL)
        if self.name == "constant-ratio":
            return np.maximum(self.target, safe)
        if self.name == "geometric":
            return np.maximum((self.alpha or 0.0) * minimum, safe)
        return minimum * (1.0 + MINIMAL_MARGIN)

    def schedule(self, releases: int) -> NDArray[np.float64]:
        """Planned ratio of the 1st..``releases``-th linkage if every earlier one met its plan.

        Constant-ratio: ``n_c`` for ``k'`` linkages, then ``inf``. Geometric: ``alpha
        \tilde n(j)`` with ``P`` updated by ``1 - 1/ratio`` after each (Figure 5 of [WFLWX10]).
        """
        ratios = np.empty(releases)
        log_p = 0.0
        for j in range(releases):
            ratio = float(self.required_ratio(log_p, j))
            ratios[j] = ratio
            log_p = log_p + np.log1p(-1.0 / ratio) if np.isfinite(ratio) else -np.inf
        return ratios

    def lasts(self, cap: float, *, most: int = MOST_LINKAGES) -> int | None:
        """How many linkages of one (individual, value) pair the plan keeps within ``cap``:
        the largest ``L`` such that the 1st..``L``-th linkages, each at exactly its planned
        ratio, plan at most ``cap`` (:meth:`schedule`); ``most`` when it is longer still.
        ``None`` for the localized baseline, which keeps no history.

        A linkage above its plan spends less of the pair's budget (Theorem 3 of [WFLWX10]: the
        breach falls as the ratio grows, and so does the next plan), so the schedule is the
        worst case: an individual linked at most ``L`` times, each time in a group or a
        suppressed set that meets its plan, is never withheld for its history (its plan never
        exceeds ``cap``), and one linked in every release is linked at most ``L`` times in ``L``
        releases: the **horizon** a series of this setting lasts.

        * constant-ratio: ``k'`` (§6.1: ``k'`` is the number of linkages, the releases still to
          come, the plan allows at ``n_c``; the ``k'+1``-th finds the pair at the bound), when
          ``cap >= n_c``;
        * geometric: the linkages before ``alpha ñ(j)`` passes the cap (§6.2: the ratio grows
          with every linkage, so a larger cap or a smaller ``alpha`` lasts longer);
        * minimal: 1 ([WFLWX10] Theorem 2: a linkage at the minimum leaves the pair at the bound).
        """
        if not self.uses_history:
            return None
        log_p = 0.0
        for j in range(most):
            ratio = float(self.required_ratio(log_p, j))
            if not ratio <= cap:  # inf: at the bound
                return j
            log_p += float(np.log1p(-1.0 / ratio))
        return most


def make_strategy(
    name: str, *, ell: float, k_prime: int | None = None, alpha: float | None = None
) -> Strategy:
    """Validate the parameters of strategy ``name`` and build it.

    ``k_prime`` is used only by ``constant-ratio``, ``alpha`` only by ``geometric``.
    """
    ell = check_ell(ell)
    if name == "constant-ratio":
        return Strategy(name, ell, k_prime=check_k_prime(k_prime if k_prime is not None else 20))
    if name == "geometric":
        return Strategy(name, ell, alpha=check_alpha(alpha if alpha is not None else 2.0))
    if name in ("minimal", "localized"):
        return Strategy(name, ell)
    raise InvalidParameter(f"strategy = {name!r}: must be one of {', '.join(STRATEGY_NAMES)}")
