"""What the decision to take decoys tells the README's adversary (review of issue 26).

The adversary knows who is in the snapshot and who is published, so it knows the suppressed
persons; it recomputes from the public files who the rule withholds for their history
(``W``: the audit checks that the private list is exactly that), and it knows the set's
multiset (the snapshot's totals less the published counts). The planner adds decoys (or the
set holds unplaced rows) only when ``W`` alone is not a valid set: with no unplaced row, a set
larger than ``W`` says that some protected value holds at least ``1/l`` of ``W``.

:func:`withheld_posterior` is that adversary's probability that one member of ``W`` holds
each value: every assignment of the set's multiset to its members equally likely (the
possible worlds of Wong et al., ICDE 2010), conditioned on ``W`` alone failing the
per-release floor when the set is larger than ``W``. It knows nothing of how the decoys were
grouped; an adversary that does (each decoy group valid under its members' plans) learns more.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from math import comb

RATIO_MARGIN = Fraction(1e-9)
"""The planner's floor for the set is ``l (1 + RATIO_RTOL)``."""


def withheld_posterior(
    multiset: dict[str, int],
    withheld: int,
    *,
    ell: float,
    protected: set[str] | None,
    larger_than_withheld: bool,
) -> dict[str, Fraction]:
    """P(a given member of ``W`` holds each value), exactly.

    ``multiset``: the set's values and counts; ``withheld``: ``|W| >= 1``;
    ``larger_than_withheld``: the set has members besides ``W`` (decoys; the caller checks
    there is no unplaced row), so ``W`` alone fails the floor.
    """
    values = sorted(multiset)
    floor = Fraction(ell) * (1 + RATIO_MARGIN)
    total = Fraction(0)
    mass = {v: Fraction(0) for v in values}
    ranges = [range(min(multiset[v], withheld) + 1) for v in values]
    for x in itertools.product(*ranges):
        if sum(x) != withheld:
            continue
        fails = any(
            c and (protected is None or v in protected) and c * floor > withheld
            for v, c in zip(values, x, strict=True)
        )
        if larger_than_withheld and not fails:
            continue
        # assignments of the multiset in which W's slots hold x: choose which copies go to W
        weight = Fraction(1)
        for v, c in zip(values, x, strict=True):
            weight *= comb(multiset[v], c)
        total += weight
        for v, c in zip(values, x, strict=True):
            mass[v] += weight * Fraction(c, withheld)
    return {v: mass[v] / total for v in values if total}
