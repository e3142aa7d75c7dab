r"""Mode ``reconstruction-private-rr``: reconstruction-private randomized response [WHF12].

Every row's sensitive value is published through uniform perturbation (Eq. 1: kept with
probability ``p``, otherwise replaced by a uniform draw from the configured domain of ``m``
values), and each *micro group* (the rows equal on every QID, published with their exact QID
values) contributes at most ``floor(s*)`` independent randomization trials, ever, where
``s* = s(f = 1)`` is the data-independent cap of Theorem 5.13 (Eq. 10) or Theorem 5.11 (Eq. 9).
A group larger than the cap is Sampled, Perturbed and Scaled back to its size (Algorithm 1),
so every group of every release is (ε,δ)-reconstruction-private (Theorem 5.16) and aggregate
counts keep their expectation (Theorem 5.18). The math is :mod:`stream_release.core.privacy.
reconstruction`; this module binds it to the :class:`~stream_release.mechanisms.base.Mechanism`
interface, its keyed randomness and its committed state.

What is fixed data-independently
--------------------------------
* ``m`` and the code of every value: the configured ``domain`` (or the leaves of the ARX file
  ``domain_hierarchy``, e.g. ``adult_hierarchy_occupation.csv``), never the values seen so far.
  A snapshot value outside the domain is refused (:class:`~stream_release.errors.SchemaError`).
* The cap: ``f = 1`` for every group (``cap_policy = "worst_case"`` of :func:`~stream_release.
  core.privacy.reconstruction_algorithm.rp_randomize`); a per-group ``s(f_max)`` would leak
  ``f_max`` through the published counts and fall below trials already published when a group
  drifts.

Serial rules (what keeps [WHF12]'s one-shot guarantee across releases)
----------------------------------------------------------------------
1. *Sticky values.* A row's randomized value is a keyed function of (pseudonym, true value):
   ``ReleaseRandomness.row_uniforms("perturb", pseudonym + 0x1f + value)``, two uniforms: keep
   if ``u0 < p``, else ``floor(u1 m)``. The same person with the same value publishes the same
   randomized value in every release, without storing it; a changed value is a new record.
2. *Trial ledger.* ``T_g``, the number of distinct trials ever published for micro group ``g``,
   never decreases; fresh trials are drawn only while ``T_g < floor(s*)``. A row that was a
   trial of ``g`` before stays its trial (it adds nothing new).

State (committed with the release through ``load_state`` / ``MechanismRelease.state``)
--------------------------------------------------------------------------------------
* ``b"g" + H(qid)``: ``T_g`` as ASCII decimal. ``H(qid)`` is BLAKE2b-128 keyed by the
  mechanism's secret of the QID names and the group's exact QID values as JSON: it reveals
  nothing without the key.
* ``b"t" + H(H(qid) + pseudonym + 0x1f + value)``: a trial marker (value: ASCII sequence of its
  first release), one per (group, person, value) ever published as a trial; it says which rows
  are reused trials. Entries are never removed (a returning person must find their trial).
* ``b"p"``: the canonical JSON of ``p, epsilon, delta, bound, domain``, written by the first
  release; a later release under other parameters is refused (:class:`~stream_release.errors.
  ConfigError`), since it would redraw sticky values and re-read the ledger under another cap.

Group lines
-----------
One line per micro group that has at least one trial in this release::

    {"group": 0, "size": 12, "qid": {"age": 39, "sex": "Male", ...},
     "sensitive": {"Adm-clerical": 5, "Sales": 7},
     "trials": 12, "trials_total": 12, "weight": 1.0}

* ``size`` = ``|g|``, every row of the micro group in this snapshot (NA-only counts are exact).
* ``sensitive`` = the published (randomized) values of all ``|g|`` rows, Algorithm 1's ``g2*``:
  each trial publishes its own randomized value; every other row publishes a copy of a present
  trial *with the same original value* (Scaling), or, when its value has no
  present trial (the budget is spent), a uniform random value (noise). Counts sum to ``size``.
* ``trials`` = ``n_g``, the independent trials present in this release; ``trials_total`` =
  ``T_g`` after it; ``weight`` = ``|g| / n_g`` (Scaling's ``b'``). Both depend on group sizes
  and membership history only, never on sensitive values, so they are safe to publish; the
  estimator needs them for its variance and the audit for the cap.

``group`` of :class:`~stream_release.mechanisms.base.MechanismRelease` (the private
assignments) maps every row to its micro group's line, whether the row is a trial, a copy or
noise. It is ``-1`` only for the rows of a micro group with no trial in this release: its
ledger is full and none of its earlier trials is still present, so nothing about its values
can be published (the line would be pure noise); those rows are counted as suppressed.

Analysts
--------
:func:`~stream_release.mechanisms.reconstruction_rr.estimate.reconstruct` answers
``COUNT(*) WHERE <QID predicate> AND SA = x`` from the group lines (Lemma 1, unbiased) with its
variance; :func:`~stream_release.mechanisms.reconstruction_rr.audit.verify_release` audits one
release from its files alone and :func:`~stream_release.mechanisms.reconstruction_rr.audit.
verify_series` the never-decreasing ledger across releases.

References
----------
.. [WHF12] K. Wang, C. Han, A. W.-C. Fu. Randomization Resilient To Sensitive
   Reconstruction. arXiv:1202.3179, 2012.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import orjson
from numpy.typing import NDArray

from stream_release.config.mechanisms.reconstruction_rr import (
    _DIGEST,
    _LEDGER,
    _PARAMS,
    _SEP,
    _TRIAL,
    ESTIMATOR,
    KIND,
    PAPER,
    SCALING,
    SERIAL_RULE,
    ReconstructionRRSettings,
)
from stream_release.core.grouping.generalize import generalize_groups
from stream_release.core.privacy.reconstruction import perturb_from_uniforms
from stream_release.core.privacy.reconstruction_serial import serial_rp_randomize
from stream_release.core.table import EncodedTable
from stream_release.errors import (
    NEW_SERIES_CAVEAT,
    ConfigError,
    GuaranteeUnsatisfiable,
    HistoryStoreError,
    InvalidParameter,
    SchemaError,
)
from stream_release.mechanisms.base import MechanismRelease, ReleaseRandomness, StateLoader
from stream_release.mechanisms.rows import distinct_rows, exact_bytes

__all__ = [
    "KIND",
    "ReconstructionRR",
    "ReconstructionRRSettings",
]

# --- the mechanism -------------------------------------------------------------------------


class ReconstructionRR:
    """``reconstruction-private-rr``: Algorithm 1 of [WHF12] under the serial rules.

    See the module docstring for the group lines, the state and the guarantee block.
    """

    kind: str = KIND

    def __init__(self, settings: ReconstructionRRSettings) -> None:
        if not isinstance(settings, ReconstructionRRSettings):
            raise InvalidParameter(
                f"settings = {settings!r}: must be a ReconstructionRRSettings "
                "(e.g. ReconstructionRRSettings(p=0.5, epsilon=0.5, delta=0.3, domain=[...]))"
            )
        self.settings = settings
        self._code = {v: i for i, v in enumerate(settings.domain)}
        self._value_bytes = [v.encode("utf-8") for v in settings.domain]
        self._params = orjson.dumps(settings.parameters(), option=orjson.OPT_SORT_KEYS)

    def release(
        self,
        table: EncodedTable,
        pseudonyms: NDArray[np.bytes_],
        *,
        sequence: int,
        randomness: ReleaseRandomness,
        load_state: StateLoader,
    ) -> MechanismRelease:
        """Release ``table`` as release ``sequence`` (see the module docstring).

        Raises
        ------
        SchemaError : a sensitive value outside the configured domain
        ConfigError : the series was started under other parameters
        GuaranteeUnsatisfiable : a group's ledger already exceeds the cap (never on a state
            this mechanism wrote)
        HistoryStoreError : a state entry that cannot be parsed

        Notes
        -----
        Cost: two keyed BLAKE2b per row and one per micro group, and one ``load_state`` of
        ``1 + G + n`` keys. A synthetic 10^6-row snapshot whose QID tuples are nearly all
        distinct (980,256 micro groups) takes about 8 s on one core, mostly hashing and the
        group lines' Python objects.
        """
        s = self.settings
        n = table.n_rows
        pseudonyms = np.asarray(pseudonyms)
        if pseudonyms.shape != (n,):
            raise InvalidParameter(
                f"pseudonyms: shape {pseudonyms.shape}, need one per table row ({n})"
            )
        codes = self._domain_codes(table)
        micro = _micro_groups(table.qid)
        n_micro = int(micro.max()) + 1 if n else 0
        qids = generalize_groups(table, micro)
        keyed = _keyed_hash(randomness.secret)
        names = orjson.dumps(list(table.qid_names))
        group_hash = [keyed(names + orjson.dumps(list(q.values()))) for q in qids]
        row_keys = self._row_keys(pseudonyms, codes)
        sticky = self._sticky(randomness, row_keys, codes)
        trial_keys = [
            _TRIAL + keyed(group_hash[g] + k) for g, k in zip(micro.tolist(), row_keys, strict=True)
        ]
        ledger_keys = [_LEDGER + h for h in group_hash]
        state, used, known = self._load_ledger(load_state, ledger_keys, trial_keys)
        cap = s.max_trials
        if np.any(used > cap):
            g = int(np.argmax(used))
            raise GuaranteeUnsatisfiable(
                f"micro group {qids[g]} has published {used[g]} trials, above max_trials = {cap} "
                f"of {s.bound} at p = {s.p}, epsilon = {s.epsilon}, delta = {s.delta}, "
                f"m = {s.m}; the guarantee cannot be restored (keep the series' parameters)"
            )

        keys_arr = np.array(trial_keys, dtype=f"S{1 + _DIGEST}")
        ledger_idx = np.flatnonzero(used > 0)
        serial = serial_rp_randomize(
            micro,
            codes,
            keys_arr,
            p=s.p,
            epsilon=s.epsilon,
            delta=s.delta,
            m=s.m,
            rng=randomness.generator("sampling"),
            known_keys=keys_arr[known],
            known_values=sticky[known],
            ledger_keys=ledger_idx,
            ledger_counts=used[ledger_idx],
            bound=s.bound,
        )
        # Trials and copies publish the sticky value of their trial row (the library drew its
        # own coins for fresh trials; these keyed ones replace them, same distribution); noise
        # rows keep the library's uniform draw.
        source = serial.source
        published = np.where(source >= 0, sticky[np.maximum(source, 0)], serial.published)
        trials = np.zeros(n_micro, dtype=np.int64)
        fresh = np.zeros(n_micro, dtype=np.int64)
        trials[serial.group_ids] = serial.trials
        fresh[serial.group_ids] = serial.fresh
        total = used + fresh
        sizes_all = np.bincount(micro, minlength=n_micro).astype(np.int64)
        if np.any(total > cap) or np.any(trials > total) or np.any(trials > sizes_all):
            raise GuaranteeUnsatisfiable(
                "a micro group would exceed its trial cap; nothing is released (a bug: report it)"
            )

        keep = trials > 0
        renumber = np.cumsum(keep) - 1
        group = np.where(keep[micro], renumber[micro], -1).astype(np.int64)
        kept = np.flatnonzero(keep)
        sizes = sizes_all[kept]
        sensitive = self._counts(group[group >= 0], published[group >= 0], kept.shape[0])
        extra = [
            {"trials": t, "trials_total": tt, "weight": sz / t}
            for t, tt, sz in zip(
                trials[kept].tolist(), total[kept].tolist(), sizes.tolist(), strict=True
            )
        ]
        state.update(_ledger_entries(ledger_keys, fresh, total))
        state.update(_trial_markers(trial_keys, serial.trial & ~known, sequence))
        return MechanismRelease(
            group=group,
            sizes=sizes,
            qids=[qids[g] for g in kept.tolist()],
            sensitive=sensitive,
            guarantee=self._guarantee(trials, fresh, total, kept, sizes, n),
            extra=extra,
            state=state,
            utility=_utility(n_micro, trials[kept], sizes),
        )

    def _row_keys(self, pseudonyms: NDArray[np.bytes_], codes: NDArray[np.int64]) -> list[bytes]:
        """Each row's ``pseudonym + 0x1f + value``, the key of its sticky value and its trial.

        Raises
        ------
        InvalidParameter : a pseudonym occurs twice
        """
        person = exact_bytes(pseudonyms)
        if len(set(person)) != len(person):
            raise InvalidParameter("pseudonyms: a pseudonym occurs twice; one row per individual")
        return [
            ps + _SEP + self._value_bytes[c] for ps, c in zip(person, codes.tolist(), strict=True)
        ]

    def _load_ledger(
        self, load_state: StateLoader, ledger_keys: list[bytes], trial_keys: list[bytes]
    ) -> tuple[dict[bytes, bytes], NDArray[np.int64], NDArray[np.bool_]]:
        """The series' parameters, trial ledger and trial markers, in one ``load_state``.

        Returns
        -------
        state : the entries to commit so far (the parameters, on the series' first release)
        used : (G,) ``T_g`` of each micro group before this release
        known : (n,) whether each row is already a trial of its micro group

        Raises
        ------
        ConfigError : the series was started under other parameters
        HistoryStoreError : a wrong number of entries, or a ledger entry that is not a count
        """
        n_micro, n = len(ledger_keys), len(trial_keys)
        entries = load_state([_PARAMS, *ledger_keys, *trial_keys])
        if len(entries) != 1 + n_micro + n:
            raise HistoryStoreError(
                f"load_state returned {len(entries)} entries for {1 + n_micro + n} keys"
            )
        state: dict[bytes, bytes] = {}
        if entries[0] is None:
            state[_PARAMS] = self._params
        elif entries[0] != self._params:
            raise ConfigError(
                f"mechanism parameters {self._params.decode()} differ from those this series "
                f"started with, {entries[0].decode(errors='replace')}: a series keeps its p, "
                "epsilon, delta, bound and domain (to change them, start a new history: "
                f"{NEW_SERIES_CAVEAT})"
            )
        used = np.array([_parse_count(e) for e in entries[1 : 1 + n_micro]], dtype=np.int64)
        known = np.array([e is not None for e in entries[1 + n_micro :]], dtype=bool)
        return state, used, known

    def _guarantee(
        self,
        trials: NDArray[np.int64],
        fresh: NDArray[np.int64],
        total: NDArray[np.int64],
        kept: NDArray[np.intp],
        sizes: NDArray[np.int64],
        n_rows: int,
    ) -> dict[str, Any]:
        """The manifest's guarantee block: the parameters, both caps and this release's trials.

        ``trials``, ``fresh`` and ``total`` are per micro group (``n_g``, the fresh trials,
        ``T_g`` after the release), ``kept`` the micro groups published and ``sizes`` their
        sizes.
        """
        s = self.settings
        caps = s.caps
        return {
            "kind": KIND,
            "paper": PAPER,
            "definition": "(epsilon, delta)-reconstruction-privacy of every micro group "
            "(Definition 3), by Theorem 5.16 for Algorithm 1 with the cap of "
            + ("Theorem 5.13 (Eq. 10)" if s.bound == "theorem_5_13" else "Theorem 5.11 (Eq. 9)"),
            **s.parameters(),
            "m": s.m,
            "f": 1.0,
            "cap": {
                "theorem_5_13": caps["theorem_5_13"],
                "theorem_5_11": caps["theorem_5_11"],
            },
            "max_trials": s.max_trials,
            "groups": int(kept.shape[0]),
            "trials": int(trials.sum()),
            "fresh_trials": int(fresh.sum()),
            "largest_trials": int(trials.max()) if trials.size else 0,
            "largest_trials_total": int(total[kept].max()) if kept.size else 0,
            "rows_published": int(sizes.sum()),
            "rows_suppressed": int(n_rows - sizes.sum()),
            "serial_rule": SERIAL_RULE,
            "scaling": SCALING,
            "estimator": ESTIMATOR,
        }

    def _domain_codes(self, table: EncodedTable) -> NDArray[np.int64]:
        remap = np.array([self._code.get(v, -1) for v in table.sensitive_values], dtype=np.int64)
        unknown = [v for v, c in zip(table.sensitive_values, remap.tolist(), strict=True) if c < 0]
        if unknown:
            raise SchemaError(
                f"sensitive value {unknown[0]!r} is not in the mechanism's domain"
                + (f" (nor are {len(unknown) - 1} others)" if len(unknown) > 1 else "")
                + "; add it to [mechanism] domain (the full domain fixes m and must not depend "
                "on the data)"
            )
        if table.n_rows == 0:
            return np.zeros(0, dtype=np.int64)
        return remap[table.sensitive]

    def _sticky(
        self, randomness: ReleaseRandomness, row_keys: Sequence[bytes], codes: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        """Eq. (1) with keyed uniforms: keep if ``u0 < p``, else ``floor(u1 m)``
        (:func:`~stream_release.core.privacy.reconstruction.perturb_from_uniforms`)."""
        if not row_keys:
            return np.zeros(0, dtype=np.int64)
        u = randomness.row_uniforms("perturb", row_keys, draws=2)
        return perturb_from_uniforms(codes, u, self.settings.p, self.settings.m)

    def _counts(
        self, group: NDArray[np.int64], published: NDArray[np.int64], n_groups: int
    ) -> list[dict[str, int]]:
        m = self.settings.m
        cells, counts = np.unique(group * m + published, return_counts=True)
        out: list[dict[str, int]] = [{} for _ in range(n_groups)]
        domain = self.settings.domain
        for cell, count in zip(cells.tolist(), counts.tolist(), strict=True):
            g, c = divmod(cell, m)
            out[g][domain[c]] = count
        return out


def _ledger_entries(
    ledger_keys: Sequence[bytes], fresh: NDArray[np.int64], total: NDArray[np.int64]
) -> dict[bytes, bytes]:
    """The ledger entries to commit: ``T_g`` after the release, of each micro group that drew
    fresh trials."""
    return {ledger_keys[g]: str(int(total[g])).encode() for g in np.flatnonzero(fresh > 0).tolist()}


def _trial_markers(
    trial_keys: Sequence[bytes], fresh_rows: NDArray[np.bool_], sequence: int
) -> dict[bytes, bytes]:
    """The trial markers to commit: one per row that is a fresh trial, holding this release's
    sequence."""
    marker = str(int(sequence)).encode()
    return {trial_keys[i]: marker for i in np.flatnonzero(fresh_rows).tolist()}


def _utility(n_micro: int, trials: NDArray[np.int64], sizes: NDArray[np.int64]) -> dict[str, Any]:
    """The release's utility figures from the published groups' ``trials`` and ``sizes``."""
    return {
        "micro_groups": n_micro,
        "capped_groups": int(np.count_nonzero(trials < sizes)),
        "mean_weight": float(np.mean(sizes / trials)) if sizes.size else 0.0,
    }


def _micro_groups(qid: NDArray[np.int32]) -> NDArray[np.int64]:
    """(n,) micro group id per row: rows equal on every QID code share one id; ids ascend in
    lexicographic order of the code tuples."""
    n = qid.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if qid.ndim != 2 or qid.shape[1] == 0:
        return np.zeros(n, dtype=np.int64)
    return distinct_rows(qid)[1]


def _keyed_hash(secret: bytes) -> Callable[[bytes], bytes]:
    """BLAKE2b-128 keyed by ``secret`` (personalised ``sr-rr``); the keyed state is set up once
    and copied per message, which halves the cost of a hash."""
    base = hashlib.blake2b(key=secret[:64], digest_size=_DIGEST, person=b"sr-rr")

    def digest(data: bytes) -> bytes:
        h = base.copy()
        h.update(data)
        return h.digest()

    return digest


def _parse_count(entry: bytes | None) -> int:
    if entry is None:
        return 0
    try:
        value = int(entry)
    except ValueError:
        value = -1
    if value < 0:
        raise HistoryStoreError(
            f"a trial ledger entry holds {entry[:32]!r}, not a count >= 0; the mechanism state "
            "is corrupt"
        )
    return value
