r"""Privacy budget of one person: the split over a record, composition, the serial ledger.

[HLM14] sanitises each record once (product sanitisation, Eq. 7) and its budget does not grow
with the number of rows (Theorem 5); re-serving a stored draw is free post-processing
(Theorem 4). It has no composition theorem, so everything here is marked [X]: the split of one
record's (epsilon, delta) over its attributes (:func:`split_budget`), basic composition
([DR14] Theorem 3.16, :func:`compose_budget`), and the per-person ledger over serial releases
(digest F2: :func:`new_ledger`, :func:`ledger_charge`, :func:`ledger_charge_batch`,
:func:`ledger_spent`), kept as plain JSON data the caller persists.

[HLM14] is N. Holohan, D. J. Leith, O. Mason, Differential Privacy in Metric Spaces,
arXiv:1402.6124 (2014), as in :mod:`stream_release.core.privacy.metric_dp`; [DR14] is C. Dwork,
A. Roth, The Algorithmic Foundations of Differential Privacy (2014), Theorem 3.16 (basic
composition).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stream_release.core.privacy.metric_dp import _epsilon_delta
from stream_release.errors import InvalidParameter

__all__ = [
    "BUDGET_RTOL",
    "BudgetSplit",
    "LedgerBatch",
    "LedgerCharge",
    "compose_budget",
    "ledger_charge",
    "ledger_charge_batch",
    "ledger_spent",
    "new_ledger",
    "split_budget",
]

BUDGET_RTOL = 1e-9
"""A person's spend ``s`` stays within a cap ``c`` iff ``s <= c (1 + BUDGET_RTOL)``: absorbs the
rounding of :func:`split_budget` shares that sum to the cap, and nothing else."""


# --- budget inside one record and across releases ---------------------------------------------


class BudgetSplit(NamedTuple):
    """Per-attribute budgets ``(k,)`` float64: ``epsilon[j]``, ``delta[j]``."""

    epsilon: NDArray[np.float64]
    delta: NDArray[np.float64]


def split_budget(epsilon: float, delta: float, weights: ArrayLike) -> BudgetSplit:
    r"""Split one record's (epsilon, delta) over its k attributes in proportion to ``weights``.

    Section 5 of [HLM14] (Eq. 7, Theorem 5) sanitises each *row* once and the budget does not
    grow with the number of rows. The *attributes* of one row are several mechanisms applied
    to the same person, and compose [X]: independent (epsilon_j, delta_j)-DP attributes give
    ``(sum epsilon_j, sum delta_j)`` (basic composition, [DR14] Theorem 3.16; exact for
    delta = 0, where the likelihood ratios multiply). So ``epsilon_j = epsilon w_j / sum w``
    and ``delta_j = delta w_j / sum w``.

    Parameters
    ----------
    epsilon : float, the record's epsilon, finite, >= 0
    delta : float, the record's delta, ``0 <= delta < 1``
    weights : (k,) array_like of float, finite, >= 0, positive sum (0: attribute gets no
        budget, i.e. a uniform RR output or an unpublishable numeric attribute)

    Examples
    --------
    >>> s = split_budget(1.0, 0.0, [1, 3])
    >>> s.epsilon.tolist(), s.delta.tolist()
    ([0.25, 0.75], [0.0, 0.0])

    Notes
    -----
    Recommended: ``delta = 0``. For Laplace, delta buys only ``-ln(1 - delta) ~ delta`` of
    epsilon. Alternatives the caller may prefer: the whole record as one categorical value
    over the product domain with one randomised response (exact, Example 6, but useless once
    ``prod |D_j|`` is large); or, numeric attributes only, scales with
    ``sum_j W_j / b_j <= epsilon - ln(1 - delta)`` (weighted-l1 Laplace, [X]).
    The shares sum to the inputs up to rounding; :func:`ledger_charge` allows
    :data:`BUDGET_RTOL` for it.
    """
    eps, dlt = _epsilon_delta(epsilon, delta)
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"weights: must be an array of real numbers ({exc})") from exc
    if w.ndim != 1 or w.size == 0:
        raise InvalidParameter(f"weights: shape {w.shape}, need a non-empty (k,) vector")
    if not (np.isfinite(w).all() and (w >= 0).all() and w.sum() > 0):
        raise InvalidParameter(
            f"weights = {w.tolist()}: must be finite, >= 0, with a positive sum (e.g. [1, 1])"
        )
    share = w / math.fsum(w.tolist())
    return BudgetSplit(eps * share, dlt * share)


def compose_budget(epsilons: ArrayLike, deltas: ArrayLike) -> tuple[float, float]:
    r"""Total budget of several mechanisms on the same person: ``(sum epsilon_i, sum delta_i)``.

    Basic composition [X; [DR14] Theorem 3.16; [HLM14] has no composition theorem]. It is
    what :func:`split_budget` inverts and what :func:`ledger_charge` accumulates. Rows of
    *different* people in one product release do not compose (Theorem 5 of [HLM14]): rows
    with different 1-row mechanisms give ``(max epsilon_i, max delta_i)``.

    Parameters
    ----------
    epsilons, deltas : (k,) array_like of float, each ``epsilon_i >= 0``,
        ``0 <= delta_i < 1``

    Examples
    --------
    >>> compose_budget([0.5, 0.25], [0.0, 1e-6])
    (0.75, 1e-06)
    """
    e = np.atleast_1d(np.asarray(epsilons, dtype=np.float64))
    d = np.atleast_1d(np.asarray(deltas, dtype=np.float64))
    if e.shape != d.shape or e.ndim != 1:
        raise InvalidParameter(f"epsilons has shape {e.shape} but deltas has shape {d.shape}")
    for ei, di in zip(e.tolist(), d.tolist(), strict=True):
        _epsilon_delta(ei, di, ("epsilons[i]", "deltas[i]"))
    return math.fsum(e.tolist()), math.fsum(d.tolist())


# --- per-person ledger over serial releases (plain state) -------------------------------------


@dataclass(frozen=True)
class LedgerCharge:
    """Outcome of :func:`ledger_charge`.

    ``granted``: the record may be sanitised (or, if ``cached``, its stored draw re-served).
    ``cached``: the record was charged before; re-serving the stored draw is free.
    ``state``: the ledger after the charge (the input object is never modified).
    ``epsilon_spent``, ``delta_spent``: the person's totals after the charge.
    ``reason``: why a charge was refused ("" if granted).
    """

    granted: bool
    cached: bool
    state: dict[str, Any]
    epsilon_spent: float
    delta_spent: float
    reason: str


@dataclass(frozen=True)
class LedgerBatch:
    """Outcome of :func:`ledger_charge_batch`: ``(n,)`` bool masks and the new state."""

    granted: NDArray[np.bool_]
    cached: NDArray[np.bool_]
    state: dict[str, Any]


def new_ledger(epsilon_cap: float, delta_cap: float) -> dict[str, Any]:
    r"""An empty per-person budget ledger with a lifetime cap ``(epsilon_cap, delta_cap)``.

    Plain JSON data (digest F2 [X]; [HLM14] has no composition theorem)::

        {"epsilon_cap": float, "delta_cap": float,
         "people": {person: {record: [epsilon, delta], ...}, ...}}

    ``person`` is the caller's pseudonym, ``record`` names one sanitised record version; both
    are strings. The caller persists the dict and passes it back; functions here never modify
    it. A person's spend is the basic composition of their records' costs
    (:func:`compose_budget`).

    Examples
    --------
    >>> new_ledger(2.0, 0.0)
    {'epsilon_cap': 2.0, 'delta_cap': 0.0, 'people': {}}
    """
    eps, dlt = _epsilon_delta(epsilon_cap, delta_cap, ("epsilon_cap", "delta_cap"))
    return {"epsilon_cap": eps, "delta_cap": dlt, "people": {}}


def _ledger(state: object) -> tuple[float, float, dict[str, Any]]:
    if not isinstance(state, dict) or not {"epsilon_cap", "delta_cap", "people"} <= set(state):
        raise InvalidParameter(
            "state: not a ledger; need a dict with epsilon_cap, delta_cap and people "
            "(build one with new_ledger)"
        )
    eps, dlt = _epsilon_delta(
        state["epsilon_cap"], state["delta_cap"], ("epsilon_cap", "delta_cap")
    )
    if not isinstance(state["people"], dict):
        raise InvalidParameter("state['people']: must be a dict person -> {record: [eps, delta]}")
    return eps, dlt, state["people"]


def _person_spent(records: dict[str, Any]) -> tuple[float, float]:
    try:
        costs = [(float(c[0]), float(c[1])) for c in records.values()]
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        raise InvalidParameter(
            f"state: a record cost is not an [epsilon, delta] pair ({exc}); the ledger is corrupt"
        ) from exc
    return math.fsum(c[0] for c in costs), math.fsum(c[1] for c in costs)


def ledger_spent(state: dict[str, Any], person: str) -> tuple[float, float]:
    """``(epsilon, delta)`` spent by ``person`` so far: basic composition of their records.

    See :func:`new_ledger` (digest F2 [X]; [HLM14] Theorem 4 makes re-serving free).
    """
    _, _, people = _ledger(state)
    return _person_spent(people.get(person, {}))


def ledger_charge(
    state: dict[str, Any], person: str, record: str, epsilon: float, delta: float
) -> LedgerCharge:
    r"""Charge ``(epsilon, delta)`` to ``person`` for sanitising ``record``, unless over the cap.

    Digest F2 [X], resting on [HLM14]: a record is sanitised once and stored. Re-serving the
    stored draw, or any query on it, is post-processing and free (Theorem 4), so charging a
    ``record`` already in the ledger is granted as ``cached`` at no cost. A new record of the
    same person (an update, a new period) is a new mechanism on that person and composes:
    ``(sum epsilon_r, sum delta_r)``. A charge that would take the person past the cap (with
    :data:`BUDGET_RTOL`) is refused: the result has ``granted = False`` and the unchanged
    state; the caller suppresses the record, or refuses the release.

    Parameters
    ----------
    state : dict, a ledger from :func:`new_ledger` (or a previous charge)
    person : str, the person's pseudonym
    record : str, the sanitised record's id; a new version must get a new id
    epsilon, delta : float, the record's budget (its :func:`split_budget` total)

    Examples
    --------
    >>> s = new_ledger(1.0, 0.0)
    >>> c = ledger_charge(s, "p1", "r1", 0.75, 0.0)
    >>> c.granted, ledger_charge(c.state, "p1", "r2", 0.5, 0.0).granted
    (True, False)

    Notes
    -----
    *Never redraw* noise for a cached record: a fresh draw per request is the averaging attack
    Section 4 of the paper warns about, and the ledger could not see it.
    *Timing leaks*: the fact that a new version exists can reveal that the value changed;
    re-sanitise on a fixed schedule, whether or not the value changed, to avoid it.
    *k records of one person in one release* are k charges: independent (epsilon, delta)
    rows compose to ``(k epsilon, k delta)``, tighter than the group-privacy chaining
    ``(k epsilon, delta sum_i e^{i epsilon})`` of digest F2.
    """
    batch = ledger_charge_batch(state, [person], [record], epsilon, delta)
    e_spent, d_spent = _person_spent(batch.state["people"].get(person, {}))
    granted = bool(batch.granted[0])
    reason = ""
    if not granted:
        cap_e, cap_d, _ = _ledger(state)
        reason = (
            f"person {person!r}: spent (epsilon, delta) = ({e_spent:.6g}, {d_spent:.6g}); "
            f"this record needs ({float(epsilon):.6g}, {float(delta):.6g}) more, over the cap "
            f"({cap_e:.6g}, {cap_d:.6g})"
        )
    return LedgerCharge(granted, bool(batch.cached[0]), batch.state, e_spent, d_spent, reason)


def ledger_charge_batch(
    state: dict[str, Any],
    persons: Sequence[str],
    records: Sequence[str],
    epsilon: float,
    delta: float,
) -> LedgerBatch:
    r"""Charge each ``(persons[i], records[i])`` of one release in order (:func:`ledger_charge`).

    Digest F2 [X] on Theorems 4 and 5 of [HLM14]. A person with several new records in the
    batch is charged for each; once a charge is refused, their later records in the batch may
    still fit (a cached or cheaper one) and are judged one by one.

    Parameters
    ----------
    state : dict, the ledger
    persons, records : length-n sequences of str
    epsilon, delta : float, each record's budget

    Returns
    -------
    LedgerBatch: ``granted``, ``cached`` ``(n,)`` bool and the new state (input unchanged).
    """
    cap_e, cap_d, people = _ledger(state)
    eps, dlt = _epsilon_delta(epsilon, delta)
    if len(persons) != len(records):
        raise InvalidParameter(
            f"persons has {len(persons)} entries but records has {len(records)}; one per record"
        )
    new_people = dict(people)
    copied: set[str] = set()
    granted = np.zeros(len(persons), dtype=bool)
    cached = np.zeros(len(persons), dtype=bool)
    for i, (person, record) in enumerate(zip(persons, records, strict=True)):
        if not isinstance(person, str) or not isinstance(record, str):
            raise InvalidParameter(
                f"persons[{i}] = {person!r}, records[{i}] = {record!r}: must be str "
                "(pseudonym and record id)"
            )
        mine = new_people.get(person, {})
        if not isinstance(mine, dict):
            raise InvalidParameter(f"state['people'][{person!r}]: must be a dict record -> cost")
        if record in mine:
            granted[i] = cached[i] = True
            continue
        spent_e, spent_d = _person_spent(mine)
        if math.fsum([spent_e, eps]) > cap_e * (1.0 + BUDGET_RTOL) or math.fsum(
            [spent_d, dlt]
        ) > cap_d * (1.0 + BUDGET_RTOL):
            continue
        if person not in copied:
            mine = dict(mine)
            new_people[person] = mine
            copied.add(person)
        mine[record] = [eps, dlt]
        granted[i] = True
    new_state = {"epsilon_cap": cap_e, "delta_cap": cap_d, "people": new_people}
    return LedgerBatch(granted, cached, new_state)
