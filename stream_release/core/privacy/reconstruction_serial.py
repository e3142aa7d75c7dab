r"""Serial releases under Algorithm 1's cap: the rules that keep [WHF12]'s one-shot guarantee
across releases.

The paper covers one static release. Across a series the adversary sees every trial ever
published, so Theorem 5.13's cap must bound all of them: rule 1 (:func:`sticky_perturb`) draws
a record's randomized value once and reuses it (the record independence of §3.1, Eq. 1);
rule 2 (:func:`trial_budget`, :func:`advance_trial_ledger`) counts the trials ever published
per micro group in a :class:`TrialLedger` and never lets the count pass the cap.
:func:`serial_rp_randomize` composes both with Algorithm 1's Sampling and Scaling
(Theorem 5.16) and returns a :class:`SerialRelease`.

Randomness: every function that draws takes a :class:`numpy.random.Generator`; see
:mod:`stream_release.core.privacy.reconstruction` on seeding, and for the full reference of [WHF12]
(K. Wang, C. Han, A. W.-C. Fu, Randomization Resilient To Sensitive Reconstruction,
arXiv:1202.3179, 2012) and its digest.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stream_release.core.privacy.reconstruction import (
    BOUNDS,
    Bound,
    _check_cap_at_least_one,
    _perturb,
)
from stream_release.core.privacy.reconstruction_algorithm import _systematic
from stream_release.core.privacy.reconstruction_kernels import (
    _check_cap_args,
    _check_choice,
    _check_codes,
    _check_rng,
    _check_rows,
    _int_array,
    _runs,
)
from stream_release.core.privacy.validation import check_domain_size, check_open_probability
from stream_release.errors import InvalidParameter

# --- serial rules ------------------------------------------------------------------------------


class StickyDraw(NamedTuple):
    """Result of :func:`sticky_perturb`: values per row plus the entries to persist."""

    randomized: NDArray[np.int64]
    """(n,) randomized code per input row."""
    new_keys: NDArray[Any]
    """(k,) keys drawn for the first time, ascending; persist with ``new_values``."""
    new_values: NDArray[np.int64]
    """(k,) their randomized codes."""


def sticky_perturb(
    keys: ArrayLike,
    codes: ArrayLike,
    p: float,
    m: int,
    rng: np.random.Generator,
    *,
    known_keys: ArrayLike | None = None,
    known_values: ArrayLike | None = None,
) -> StickyDraw:
    r"""Serial rule 1: a record's randomized value is drawn once and reused (§3.1, Eq. 1, [WHF12]).

    Uniform perturbation (Eq. 1) is applied only to keys not in ``known_keys``; known keys
    get ``known_values`` back. The paper covers one static release; this rule is our
    extension of Theorem 5.13 to a series: re-randomizing a record in every
    release would hand an adversary who averages ``k`` releases ``k`` independent trials per
    record and break any trial cap. The record independence of §3.1 ("insertion and
    deletion of records on D can be done through insertion and deletion of randomized
    records on D*") is what makes reuse sound.

    The state is plain data, a mapping key → randomized code given as two arrays, so a caller
    can keep it anywhere (e.g. a Redis hash written with ``HSETNX`` from ``new_keys``,
    ``new_values``). Entries are never removed: a deleted record that comes back must get its
    old value.

    Parameters
    ----------
    keys : (n,) any sortable dtype (e.g. ``S16`` pseudonyms, int64), one per **record
        version**: when a record's sensitive value or its non-sensitive values change it is a
        new record (a new trial), so build the key from the pseudonym and a version. Rows
        sharing a key share one draw and must share their code.
    codes : (n,) int, original code per row, ``0 <= code < m``
    p, m, rng : as in :func:`perturb`
    known_keys : (K,) unique keys drawn in earlier releases (same dtype kind as ``keys``)
    known_values : (K,) int, their randomized codes, ``0 <= value < m``

    Returns
    -------
    StickyDraw
    """
    p = check_open_probability(p, "p")
    m = check_domain_size(m)
    rng = _check_rng(rng)
    codes_arr = _check_codes(codes, m)
    keys_arr = _check_keys(keys, codes_arr.shape[0], unique=False)
    known_k, known_v = _check_state(known_keys, known_values, m, keys_arr)
    found, index = _lookup(keys_arr, known_k)
    out = np.empty(codes_arr.shape[0], dtype=np.int64)
    out[found] = known_v[index[found]]
    new = ~found
    new_keys, first, inverse = np.unique(keys_arr[new], return_index=True, return_inverse=True)
    new_codes = codes_arr[new]
    if np.any(new_codes != new_codes[first][inverse]):
        raise InvalidParameter(
            "keys: rows sharing a key carry different codes; a key must name one record "
            "version (append a version to the pseudonym when the value changes)"
        )
    drawn = _perturb(new_codes[first], p, m, rng)
    out[new] = drawn[inverse]
    return StickyDraw(out, new_keys, drawn)


class TrialLedger(NamedTuple):
    """Serial rule 2's state: trials ever published per group (plain arrays)."""

    keys: NDArray[Any]
    """(L,) group keys, ascending, unique."""
    counts: NDArray[np.int64]
    """(L,) ``T_g``, distinct independent trials ever published for the group, ``>= 0``."""


def trial_budget(
    group_keys: ArrayLike,
    cap: float,
    *,
    ledger_keys: ArrayLike | None = None,
    ledger_counts: ArrayLike | None = None,
) -> NDArray[np.int64]:
    r"""Fresh trials a group may still publish: ``max(0, floor(s) - T_g)`` (Theorem 5.13, [WHF12]).

    Theorem 5.13 caps the number of independent trials of a micro group; across releases
    the adversary sees every trial ever published, so the cap applies to ``T_g``
    (:func:`advance_trial_ledger`), not to one snapshot. Groups absent from the ledger have
    ``T_g = 0``.

    Parameters
    ----------
    group_keys : (G,) group keys (any sortable dtype matching the ledger's)
    cap : float, ``s >= 0``, e.g. ``rp_cap(p, epsilon, delta, m)`` (the data-independent cap)
    ledger_keys, ledger_counts : the ledger, as in :class:`TrialLedger`

    Returns
    -------
    (G,) int64, ``>= 0``.
    """
    if isinstance(cap, bool) or not isinstance(cap, numbers.Real) or not 0 <= cap < math.inf:
        raise InvalidParameter(f"cap = {cap!r}: must be a finite number >= 0 (e.g. rp_cap(...))")
    keys_arr = _check_keys(group_keys, None, unique=False, name="group_keys")
    ledger = _check_ledger(ledger_keys, ledger_counts, keys_arr)
    used = _ledger_counts_for(keys_arr, ledger)
    return np.maximum(0, math.floor(cap) - used)


def advance_trial_ledger(
    group_keys: ArrayLike,
    new_trials: ArrayLike,
    *,
    ledger_keys: ArrayLike | None = None,
    ledger_counts: ArrayLike | None = None,
) -> TrialLedger:
    r"""Serial rule 2: add a release's fresh trials to ``T_g``, never decreasing it ([WHF12] §5).

    ``|g|`` in Theorem 5.13 is the number of independent trials (§5, "|g| in Equation (10)
    really refers to the number of independent Poisson trials"). A trial once published
    stays known, so ``T_g`` counts every trial ever published for ``g``; deletions do not
    decrement it. Reused (sticky) trials are not fresh and must not be counted again.

    Parameters
    ----------
    group_keys : (k,) group keys of this release (repeats are summed)
    new_trials : (k,) int, fresh trials per key, ``>= 0``
    ledger_keys, ledger_counts : the ledger before the release (absent: empty)

    Returns
    -------
    TrialLedger after the release: every old key kept, counts ``>=`` the old ones. For a
    Redis hash, ``HINCRBY`` each key by its ``new_trials`` is the same update.
    """
    keys_arr = _check_keys(group_keys, None, unique=False, name="group_keys")
    add = np.asarray(new_trials)
    if add.shape != keys_arr.shape or (add.size and add.dtype.kind not in "iu"):
        raise InvalidParameter(
            f"new_trials = {new_trials!r}: need one integer per group key ({keys_arr.shape[0]})"
        )
    add = add.astype(np.int64)
    if np.any(add < 0):
        raise InvalidParameter(
            "new_trials: must be >= 0; a group's count of published trials never decreases "
            "(a trial once published stays known)"
        )
    ledger = _check_ledger(ledger_keys, ledger_counts, keys_arr)
    if ledger.keys.shape[0] == 0 and keys_arr.shape[0] == 0:
        return ledger
    all_keys = np.concatenate([ledger.keys, keys_arr]) if ledger.keys.size else keys_arr
    all_counts = np.concatenate([ledger.counts, add])
    merged, inverse = np.unique(all_keys, return_inverse=True)
    counts = np.bincount(inverse.ravel(), weights=all_counts, minlength=merged.shape[0])
    return TrialLedger(merged, np.rint(counts).astype(np.int64))


@dataclass(frozen=True)
class SerialRelease:
    r"""One release of :func:`serial_rp_randomize`; row arrays are ``(n,)`` in input order.

    Publish ``(group[i], published[i])`` for every row, shuffled and without keys. Then
    persist ``new_keys``/``new_values`` (sticky state) and ``ledger`` (or ``HINCRBY`` the
    groups by ``fresh``) **together with** the release, or not at all.
    """

    published: NDArray[np.int64]
    """Published code per row."""
    trial: NDArray[np.bool_]
    """True where the row is an independent trial (reused or fresh)."""
    source: NDArray[np.int64]
    """Row whose trial value is published (itself for trials); -1 for noise rows."""
    new_keys: NDArray[Any]
    """Keys of the fresh trials (to add to the sticky state)."""
    new_values: NDArray[np.int64]
    """Their randomized codes."""
    ledger: TrialLedger
    """The trial ledger after this release."""
    group_ids: NDArray[np.int64]
    """(G,) groups of this snapshot, ascending."""
    size: NDArray[np.int64]
    """(G,) ``|g|`` in this snapshot (= published rows of the group)."""
    trials: NDArray[np.int64]
    """(G,) trials present in this release (reused + fresh)."""
    fresh: NDArray[np.int64]
    """(G,) fresh trials drawn in this release."""
    cap: int
    """``floor(s*)``, the data-independent trial cap."""


def serial_rp_randomize(
    group: ArrayLike,
    codes: ArrayLike,
    keys: ArrayLike,
    *,
    p: float,
    epsilon: float,
    delta: float,
    m: int,
    rng: np.random.Generator,
    known_keys: ArrayLike | None = None,
    known_values: ArrayLike | None = None,
    ledger_keys: ArrayLike | None = None,
    ledger_counts: ArrayLike | None = None,
    bound: Bound = "theorem_5_13",
) -> SerialRelease:
    r"""One snapshot of a serial release under Algorithm 1's cap (Theorems 5.13, 5.16, [WHF12]).

    Composes the two serial rules with Algorithm 1's Sampling/Scaling, per micro group ``g``
    and with the data-independent cap ``c = floor(s(f=1))``:

    1. Rows whose key has a sticky value are earlier trials: they stay trials and publish
       that value (rule 1, :func:`sticky_perturb`).
    2. Fresh trials: ``min(c - T_g, min(|g|, c) - reused)`` (at least 0) new rows, chosen
       toward a stratified sample of ``min(|g|, c)`` rows (Sampling's per-value targets by
       systematic rounding); first, one slot for each value that has no trial, even if its
       stratified share rounds to 0 (it would otherwise publish noise), the remaining slots
       in random order. With an empty state and every value's share >= 1 this is Algorithm
       1's stratified sample of ``min(|g|, c)`` rows. Fresh trials are perturbed, stored, and
       added to ``T_g`` (rule 2, :func:`advance_trial_ledger`). Hence ``T_g <= c`` forever
       (given a ledger that started within ``c``), which is Theorem 5.13's condition on
       every trial the adversary has ever seen.
    3. Scaling: every other row publishes a copy of a present trial **with the same original
       code**, round-robin from a random start, so each value's published count is exact;
       a row whose value has no present trial publishes a uniform random code (noise: no
       trial, no information, a bias toward ``1/m``).

    Parameters
    ----------
    group : (n,) int, micro group id per row; groups must mean the same NA tuple in every
        release (keep the ledger at the finest granularity ever published)
    codes : (n,) int, original code per row, ``0 <= code < m``
    keys : (n,) unique record-version keys, see :func:`sticky_perturb`
    p, epsilon, delta, m, rng, bound : as in :func:`rp_randomize`
    known_keys, known_values : sticky state (every trial ever published), see
        :func:`sticky_perturb`
    ledger_keys, ledger_counts : trial ledger (int group keys), see :class:`TrialLedger`

    Returns
    -------
    SerialRelease

    Notes
    -----
    Only the data-independent cap is offered: a per-group cap ``s(f_max)`` falls when a group
    grows more skewed, below trials already published, which cannot be withdrawn.
    Value-matched copies are our online form of [WHF12]'s Sampling/Scaling; they keep every
    published per-value count equal in expectation to plain perturbation's (Fact 4) even
    when the surviving trials are not a stratified sample. If a group holds more reused
    trials than its ledger count, the state is inconsistent (keys not versioned by group,
    or a lost ledger) and InvalidParameter is raised.
    """
    p, epsilon, delta, m, _ = _check_cap_args(p, epsilon, delta, m, 1.0)
    rng = _check_rng(rng)
    bound = _check_choice("bound", bound, BOUNDS)
    cap = math.floor(_check_cap_at_least_one(p, epsilon, delta, m, bound))
    group_arr, codes_arr = _check_rows(group, codes, m)
    n = group_arr.shape[0]
    keys_arr = _check_keys(keys, n, unique=True)
    known_k, known_v = _check_state(known_keys, known_values, m, keys_arr)
    ledger = _check_ledger(ledger_keys, ledger_counts, group_arr)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return SerialRelease(
            published=empty,
            trial=np.zeros(0, dtype=bool),
            source=empty,
            new_keys=keys_arr[:0],
            new_values=empty,
            ledger=ledger,
            group_ids=empty,
            size=empty,
            trials=empty,
            fresh=empty,
            cap=cap,
        )

    found, index = _lookup(keys_arr, known_k)
    # Sort by group, code, reused-first, random: within a run the reused trials come first.
    runs = _runs(group_arr, codes_arr, ~found, rng.random(n))
    n_runs, n_groups = runs.run_len.shape[0], runs.size.shape[0]
    found_sorted = found[runs.order]
    reused_run = np.bincount(runs.row_run[found_sorted], minlength=n_runs)
    reused_group = np.bincount(runs.run_group, weights=reused_run, minlength=n_groups)
    reused_group = np.rint(reused_group).astype(np.int64)
    used = _ledger_counts_for(runs.group_ids, ledger)
    if np.any(reused_group > used):
        bad = int(np.flatnonzero(reused_group > used)[0])
        raise InvalidParameter(
            f"known_keys, ledger_counts: group {runs.group_ids[bad]} has "
            f"{reused_group[bad]} rows with sticky values but a ledger count of {used[bad]}; "
            "keys must name record versions within one group and the ledger must be the one "
            "saved with the sticky state"
        )
    target = np.minimum(runs.size, cap)
    budget = np.maximum(0, cap - used)
    fresh_group = np.minimum(budget, np.maximum(0, target - reused_group))

    # Sampling toward a stratified sample of `target` rows, reused trials counted first.
    want = _systematic(runs.run_len, runs.run_group, runs.size, target, rng)
    need = np.maximum(0, want - reused_run)
    # A value without any trial may take one slot even if its stratified share rounds to 0:
    # copies are value-matched, so trial composition changes variance only, noise adds bias.
    need = np.where(reused_run == 0, np.maximum(need, 1), need)
    fresh_run = _pick_units(need, reused_run, runs.run_group, fresh_group, rng)
    k = reused_run + fresh_run

    position = np.arange(n, dtype=np.int64) - runs.run_start[runs.row_run]
    run_of = runs.row_run
    is_trial = position < k[run_of]
    is_reused = position < reused_run[run_of]
    is_fresh = is_trial & ~is_reused
    codes_sorted = codes_arr[runs.order]
    published_sorted = np.empty(n, dtype=np.int64)
    published_sorted[is_reused] = known_v[index[runs.order[is_reused]]]
    drawn = _perturb(codes_sorted[is_fresh], p, m, rng)
    published_sorted[is_fresh] = drawn
    source_sorted = np.full(n, -1, dtype=np.int64)
    source_sorted[is_trial] = runs.order[is_trial]

    # Scaling: value-matched copies, round-robin over the run's trials from a random start.
    copy = ~is_trial & (k[run_of] > 0)
    start = rng.integers(0, np.maximum(k, 1), dtype=np.int64)
    j = position[copy] - k[run_of[copy]]
    src = runs.run_start[run_of[copy]] + (start[run_of[copy]] + j) % k[run_of[copy]]
    published_sorted[copy] = published_sorted[src]
    source_sorted[copy] = runs.order[src]
    noise = ~is_trial & ~copy
    published_sorted[noise] = rng.integers(0, m, size=int(noise.sum()), dtype=np.int64)

    published = np.empty(n, dtype=np.int64)
    published[runs.order] = published_sorted
    source = np.empty(n, dtype=np.int64)
    source[runs.order] = source_sorted
    trial = np.empty(n, dtype=bool)
    trial[runs.order] = is_trial
    fresh_rows = runs.order[is_fresh]
    fresh_per_group = np.rint(
        np.bincount(runs.run_group, weights=fresh_run, minlength=n_groups)
    ).astype(np.int64)
    grew = fresh_per_group > 0
    new_ledger = advance_trial_ledger(
        runs.group_ids[grew],
        fresh_per_group[grew],
        ledger_keys=ledger.keys,
        ledger_counts=ledger.counts,
    )
    trials_group = np.rint(np.bincount(runs.run_group, weights=k, minlength=n_groups))
    return SerialRelease(
        published=published,
        trial=trial,
        source=source,
        new_keys=keys_arr[fresh_rows],
        new_values=drawn,
        ledger=new_ledger,
        group_ids=runs.group_ids,
        size=runs.size,
        trials=trials_group.astype(np.int64),
        fresh=fresh_per_group,
        cap=cap,
    )


# --- kernels -----------------------------------------------------------------------------------


def _lookup(keys: NDArray[Any], known: NDArray[Any]) -> tuple[NDArray[np.bool_], NDArray[np.intp]]:
    """``found[i]``: ``keys[i]`` is in ``known`` (unique), at ``known[index[i]]``."""
    n = keys.shape[0]
    if known.shape[0] == 0 or n == 0:
        return np.zeros(n, dtype=bool), np.zeros(n, dtype=np.intp)
    order = np.argsort(known, kind="stable")
    ordered = known[order]
    pos = np.minimum(np.searchsorted(ordered, keys), ordered.shape[0] - 1)
    return ordered[pos] == keys, order[pos]


def _ledger_counts_for(keys: NDArray[Any], ledger: TrialLedger) -> NDArray[np.int64]:
    if ledger.keys.shape[0] == 0:
        return np.zeros(keys.shape[0], dtype=np.int64)
    found, index = _lookup(keys, ledger.keys)
    return np.where(found, ledger.counts[index], 0).astype(np.int64)


def _pick_units(
    need: NDArray[np.int64],
    reused_run: NDArray[np.int64],
    run_group: NDArray[np.int64],
    quota: NDArray[np.int64],
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    """Choose ``quota[g]`` of each group's needed trial slots; a value without any trial
    gets its first slot before the rest, which are taken in random order."""
    total = int(need.sum())
    if total == 0:
        return np.zeros(need.shape[0], dtype=np.int64)
    unit_run = np.repeat(np.arange(need.shape[0]), need)
    unit_j = np.arange(total) - np.repeat(np.cumsum(need) - need, need)
    priority = ~((reused_run[unit_run] == 0) & (unit_j == 0))
    unit_group = run_group[unit_run]
    order = np.lexsort((rng.random(total), priority, unit_group))
    per_group = np.bincount(unit_group, minlength=quota.shape[0])
    start = np.cumsum(per_group) - per_group
    rank = np.arange(total) - start[unit_group[order]]
    take = order[rank < quota[unit_group[order]]]
    return np.bincount(unit_run[take], minlength=need.shape[0]).astype(np.int64)


# --- validation ------------------------------------------------------------------------------


def _check_keys(
    keys: ArrayLike, n: int | None, *, unique: bool, name: str = "keys"
) -> NDArray[Any]:
    arr = np.asarray(keys)
    if arr.size == 0 and arr.dtype.kind == "f":
        arr = arr.astype(np.int64)  # a bare [] is float64
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        raise InvalidParameter(f"{name}: need a 1-D array with one key per row ({n})")
    if arr.dtype.kind not in "iuSU":
        raise InvalidParameter(f"{name}: keys must be integers or strings, got dtype {arr.dtype}")
    if unique and arr.shape[0] > 1:
        ordered = np.sort(arr)
        if np.any(ordered[1:] == ordered[:-1]):
            raise InvalidParameter(f"{name}: must be unique, one record version per row")
    return arr


def _same_kind(a: NDArray[Any], b: NDArray[Any]) -> bool:
    return (a.dtype.kind in "iu" and b.dtype.kind in "iu") or a.dtype.kind == b.dtype.kind


def _check_state(
    known_keys: ArrayLike | None, known_values: ArrayLike | None, m: int, keys: NDArray[Any]
) -> tuple[NDArray[Any], NDArray[np.int64]]:
    if known_keys is None and known_values is None:
        return keys[:0], np.zeros(0, dtype=np.int64)
    if known_keys is None or known_values is None:
        raise InvalidParameter("known_keys, known_values: give both or neither")
    k_arr = np.asarray(known_keys)
    if k_arr.size == 0:
        return keys[:0], np.zeros(0, dtype=np.int64)
    k_arr = _check_keys(k_arr, None, unique=True, name="known_keys")
    if not _same_kind(k_arr, keys):
        raise InvalidParameter(
            f"known_keys: dtype {k_arr.dtype} does not match the keys' dtype {keys.dtype}"
        )
    v_arr = _check_codes(known_values, m, "known_values")
    if v_arr.shape != k_arr.shape:
        raise InvalidParameter(
            f"known_values has shape {v_arr.shape} but known_keys has shape {k_arr.shape}"
        )
    return k_arr, v_arr


def _check_ledger(
    ledger_keys: ArrayLike | None, ledger_counts: ArrayLike | None, keys: NDArray[Any]
) -> TrialLedger:
    if ledger_keys is None and ledger_counts is None:
        return TrialLedger(keys[:0], np.zeros(0, dtype=np.int64))
    if ledger_keys is None or ledger_counts is None:
        raise InvalidParameter("ledger_keys, ledger_counts: give both or neither")
    k_arr = np.asarray(ledger_keys)
    if k_arr.size == 0:
        return TrialLedger(keys[:0], np.zeros(0, dtype=np.int64))
    k_arr = _check_keys(k_arr, None, unique=True, name="ledger_keys")
    if not _same_kind(k_arr, keys):
        raise InvalidParameter(
            f"ledger_keys: dtype {k_arr.dtype} does not match the group keys' dtype {keys.dtype}"
        )
    c_arr = _int_array("ledger_counts", ledger_counts)
    if c_arr.shape != k_arr.shape or np.any(c_arr < 0):
        raise InvalidParameter(
            "ledger_counts: need one integer >= 0 per ledger key (trials ever published)"
        )
    order = np.argsort(k_arr, kind="stable")
    return TrialLedger(k_arr[order], c_arr[order])
