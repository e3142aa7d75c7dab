r"""Mode ``sampled-k-anonymity``: random sampling + safe k-anonymization is (ε, δ)-DP [LQS12]_.

Each release runs ``SDGS(D; g, k, beta)`` (Algorithm 4 of [LQS11]_; Theorem 3.9 of [LQS12]_)
on its snapshot ``D``:

1. *Sample.* Keep each row independently with probability ``beta`` (Bernoulli sampling
   :math:`\Lambda_\beta`, :func:`~stream_release.core.privacy.sampling_dp_release.
   sample_mask`): one coin per row, drawn from ``randomness.generator("sample")`` over the rows
   in pseudonym order.
   The generator is keyed by the pseudonymisation key and the release's sequence, so every
   release draws a fresh sample (what the series total below needs), a release cut again
   (after a crash, or offline on the same snapshot) draws the same one, and nobody without
   the key can predict a coin.
2. *Generalize* every kept row with ``g``, fixed by the configuration before any data is seen
   (*strongly safe*, Definition 3.7 of [LQS12]_): each QID to its configured level,

   * a QID with a hierarchy: its ancestor at ``levels[qid]`` (0 = the leaf itself; the
     hierarchy's last level is ``*``);
   * a numeric QID without one: ``widths[qid] = w`` bins ``[lo, hi]`` with
     ``lo = w * floor(v / w)`` and ``hi = lo + w - 1`` (the integers of the bin; a
     non-integer ``v`` lies in ``lo <= v < hi + 1``), or ``levels[qid]`` 0 (the exact value)
     or 1 (``*``);
   * any other QID: ``levels[qid]`` 0 (the exact value) or 1 (``*``).

   Nothing of ``g`` is derived from the data (no ranges, quantiles or detected types:
   the configuration must declare numeric QIDs in ``schema.numeric``).
3. *Suppress* every generalized tuple occurring fewer than ``k`` times
   (:func:`~stream_release.core.privacy.sampling_dp_release.safe_k_anonymize_mask`).

**The sensitive value is part of the tuple.** Both papers prove the theorem for the
strengthened k-anonymity in which *every* attribute is a quasi-identifier ([LQS12]_ Def. 3.6,
[LQS11]_ Def. 3): the output is the multiset of generalized tuples, and the
proof's ratio is about the multiplicity of the target's whole cell. Here the published tuple
is (generalized QIDs, exact sensitive value), so what is suppressed is every
(generalized QID tuple, sensitive value) pair held by fewer than ``k`` sampled rows. (Suppressing
by QID cell alone would publish a pair held by a single row, a cell of size one, which the
theorem does not cover.)

Group lines
-----------
One line per distinct generalized QID tuple among the kept rows, in ascending order of the
generalized codes (a canonical, data-independent order): ``size`` = its kept rows, ``qid`` =
the generalized values, ``sensitive`` = the kept pairs' counts, each ``>= k``. This is the
multiset ``Apply(g, T, k)`` of [LQS12]_ §3.2 written per QID cell (post-processing, Theorem 2
of [LQS12]_). The private assignments give each kept row its line; a row not sampled or
suppressed has no group.

The guarantee (manifest ``mechanism`` block)
--------------------------------------------
* ``epsilon``, ``delta``: the release is :math:`(\epsilon, \delta)`-DP for neighbours that add
  or remove one record, with :math:`\delta = d(k, \beta, \epsilon)` of Theorem 3.9 of [LQS12]_
  (Theorem 1 of [LQS11]_), computed exactly (:func:`~stream_release.core.privacy.
  sampling_dp_calculators.calc_delta`), for any configured :math:`\epsilon \ge -\ln(1-\beta)`;
  also its decimal log, the worst cell size, the Chernoff bound of Theorem 6 of [LQS11]_ and
  the floor :math:`\beta^k`.
* ``series``: releases 1..sequence each draw a fresh sample, so by basic composition
  ([LQS12]_ §2.7) a record present in all of them is protected by
  :math:`(\sum_j \epsilon_j, \sum_j \delta_j)`, summed over the releases' own parameters
  (kept in the mechanism's committed state, so a parameter change between releases is
  accounted exactly).

Only functions of the output are published: the manifest omits the input's size, the source
file's hash, the time taken and any utility measured against the input
(:attr:`~stream_release.mechanisms.base.MechanismRelease.input_statistics` is false), since
these are statistics of ``D`` outside the mechanism ([LQS12]_ §2.6).

Scope: guarantees are per record; an individual has at most one row per snapshot (docs/contract.md
§1), so per person per release. The sample is used for nothing else.

References
----------
.. [LQS12] N. Li, W. Qardaji, D. Su. On Sampling, Anonymization, and Differential Privacy: Or,
   k-Anonymization Meets Differential Privacy. ASIACCS 2012 (arXiv:1101.2604).
.. [LQS11] N. Li, W. Qardaji, D. Su. Provably Private Data Anonymization: Or, k-Anonymity
   Meets Differential Privacy. arXiv:1101.2604v1.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from stream_release.config.hierarchy import load_hierarchies
from stream_release.config.mechanisms.sampled_k_anonymity import (
    KIND,
    REFERENCE,
    SERIES_STATE_KEY,
    SampledKAnonymitySettings,
    accounting,
)
from stream_release.core.privacy.sampling_dp_budget import compose_basic
from stream_release.core.privacy.sampling_dp_release import safe_k_anonymize_mask, sample_mask
from stream_release.core.table import Attribute, EncodedTable
from stream_release.errors import ConfigError, InvalidParameter, SchemaError
from stream_release.mechanisms.base import MechanismRelease, ReleaseRandomness, StateLoader

if TYPE_CHECKING:
    from stream_release.config import Settings

__all__ = [
    "KIND",
    "SERIES_STATE_KEY",
    "SampledKAnonymity",
    "SampledKAnonymitySettings",
    "accounting",
    "make_sampled_k_anonymity",
]

# --- the mechanism -----------------------------------------------------------------------------


def make_sampled_k_anonymity(
    section: SampledKAnonymitySettings, settings: Settings
) -> SampledKAnonymity:
    """The mechanism of ``section`` for ``settings`` (the registered factory).

    Raises
    ------
    ConfigError
        A level above the height of its QID's hierarchy (the hierarchy files are read here).
    """
    hierarchies = load_hierarchies(settings.schema)
    for name, hierarchy in hierarchies.items():
        level = section.levels.get(name)
        if level is not None and level >= hierarchy.height:
            raise ConfigError(
                f"config mechanism.sampled_k_anonymity.levels.{name} = {level}: the hierarchy "
                f"{hierarchy.source!r} of {name!r} has levels 0..{hierarchy.height - 1} (0 = "
                f"the value, {hierarchy.height - 1} = {hierarchy.labels[-1][0]!r}); use one of "
                "those"
            )
    return SampledKAnonymity(section, tuple(settings.schema.qid))


class SampledKAnonymity:
    """``sampled-k-anonymity``: ``SDGS(D; g, k, beta)`` per release (see the module docstring).

    Parameters
    ----------
    settings : the validated section
    qid : the QID names, in ``schema.qid`` order (the table's column order)
    """

    kind: str = KIND

    def __init__(self, settings: SampledKAnonymitySettings, qid: Sequence[str]) -> None:
        if not isinstance(settings, SampledKAnonymitySettings):
            raise InvalidParameter(
                f"settings = {settings!r}: must be a SampledKAnonymitySettings "
                "(e.g. SampledKAnonymitySettings(k=20, beta=0.1, epsilon=1.0, levels={...}))"
            )
        missing = [q for q in qid if q not in settings.levels and q not in settings.widths]
        if missing:
            raise InvalidParameter(
                f"qid = {list(qid)}: no level or width for {missing}; configure every QID"
            )
        self.settings = settings
        self.qid = tuple(qid)
        self.figures = accounting(settings.k, settings.beta, settings.epsilon)

    def release(
        self,
        table: EncodedTable,
        pseudonyms: NDArray[np.bytes_],
        *,
        sequence: int,
        randomness: ReleaseRandomness,
        load_state: StateLoader,
    ) -> MechanismRelease:
        """Release ``table`` (rows sorted by ``pseudonyms``) as release ``sequence``.

        Raises
        ------
        SchemaError
            The table's QIDs are not ``schema.qid``, or a QID configured with a width is not
            numeric in the table.
        """
        s = self.settings
        if table.qid_names != self.qid:
            raise SchemaError(
                f"the snapshot's QIDs {list(table.qid_names)} are not the configured "
                f"{list(self.qid)}"
            )
        n = table.n_rows
        sampled = np.flatnonzero(sample_mask(n, s.beta, randomness.generator("sample")))
        cells = np.empty((sampled.shape[0], len(self.qid) + 1), dtype=np.int64)
        for j, attribute in enumerate(table.attributes):
            cells[:, j] = self._generalize(attribute, table.qid[sampled, j])
        cells[:, -1] = table.sensitive[sampled]
        keep = safe_k_anonymize_mask(cells, s.k)
        kept, cells = sampled[keep], cells[keep]

        group = np.full(n, -1, dtype=np.int64)
        if kept.size:
            groups, inverse = np.unique(cells[:, :-1], axis=0, return_inverse=True)
            group_of = inverse.reshape(-1).astype(np.int64)
        else:
            groups = np.zeros((0, len(self.qid)), dtype=np.int64)
            group_of = np.zeros(0, dtype=np.int64)
        group[kept] = group_of
        n_groups = groups.shape[0]
        sizes = np.bincount(group_of, minlength=n_groups).astype(np.int64)
        pairs, counts = np.unique(
            np.stack([group_of, cells[:, -1]], axis=1), axis=0, return_counts=True
        )
        sensitive: list[dict[str, int]] = [{} for _ in range(n_groups)]
        names = table.sensitive_values
        for (g, value), count in zip(pairs.tolist(), counts.tolist(), strict=True):
            sensitive[g][names[value]] = count
        qids = [
            dict(zip(self.qid, labels, strict=True))
            for labels in zip(
                *(
                    self._labels(attribute, groups[:, j])
                    for j, attribute in enumerate(table.attributes)
                ),
                strict=True,
            )
        ]
        guarantee, state = self._guarantee(sequence, load_state)
        return MechanismRelease(
            group=group,
            sizes=sizes,
            qids=qids,
            sensitive=sensitive,
            guarantee=guarantee,
            extra=[],
            state=state,
            utility={"cells": int(pairs.shape[0])},
            input_statistics=False,
        )

    # -- g, fixed before the data -------------------------------------------------------------

    def _generalize(self, attribute: Attribute, codes: NDArray[np.int32]) -> NDArray[np.int64]:
        """(m,) int64 code of each value's generalized value (order-preserving)."""
        name = attribute.name
        width = self.settings.widths.get(name)
        if width is not None:
            if attribute.kind != "numeric":
                raise SchemaError(
                    f"QID {name!r} is {attribute.kind!r} in the snapshot, but "
                    f"mechanism.sampled_k_anonymity.widths.{name} needs a numeric QID; declare "
                    "it in schema.numeric"
                )
            values = np.asarray(attribute.domain, dtype=np.float64)[codes]
            return np.floor(values / width).astype(np.int64)
        level = self.settings.levels[name]
        if attribute.kind == "hierarchy" and attribute.levels is not None:
            if level >= attribute.levels.shape[1]:
                raise SchemaError(
                    f"mechanism.sampled_k_anonymity.levels.{name} = {level}, but the hierarchy "
                    f"of {name!r} has levels 0..{attribute.levels.shape[1] - 1}"
                )
            generalized: NDArray[np.int64] = attribute.levels[codes, level].astype(np.int64)
            return generalized
        if level == 0:
            return codes.astype(np.int64)
        return np.zeros(codes.shape[0], dtype=np.int64)

    def _labels(self, attribute: Attribute, gen: NDArray[np.int64]) -> list[Any]:
        """The published value of each generalized code of :meth:`_generalize`."""
        name = attribute.name
        width = self.settings.widths.get(name)
        if width is not None:
            return [[int(b) * width, int(b) * width + width - 1] for b in gen.tolist()]
        level = self.settings.levels[name]
        if attribute.kind == "hierarchy" and attribute.labels is not None:
            labels = attribute.labels[level]
            return [labels[i] for i in gen.tolist()]
        if level != 0:
            return ["*"] * gen.shape[0]
        if attribute.kind == "numeric":
            domain = np.asarray(attribute.domain, dtype=np.float64)
            return [_number(x) for x in domain[gen].tolist()]
        return [str(attribute.domain[i]) for i in gen.tolist()]

    # -- the guarantee ------------------------------------------------------------------------

    def _guarantee(
        self, sequence: int, load_state: StateLoader
    ) -> tuple[dict[str, Any], dict[bytes, bytes]]:
        """The manifest's ``mechanism`` block and the new series state."""
        s, f = self.settings, self.figures
        (previous,) = load_state([SERIES_STATE_KEY])
        total = _parse_series(previous)
        releases = total["releases"] + 1
        if releases != sequence:
            raise SchemaError(
                f"the mechanism state counts {total['releases']} earlier sampled releases but "
                f"this is release {sequence}: the series' state is inconsistent (was the "
                "series started under another mechanism.kind?)"
            )
        epsilon, _ = compose_basic([(total["epsilon"], 0.0), (s.epsilon, 0.0)])
        log_delta = float(np.logaddexp(total["log_delta"], float(f["log_delta"])))
        state = {
            SERIES_STATE_KEY: json.dumps(
                {"releases": releases, "epsilon": epsilon, "log_delta": log_delta},
                sort_keys=True,
            ).encode()
        }
        guarantee: dict[str, Any] = {
            "kind": KIND,
            "k": s.k,
            "beta": s.beta,
            "epsilon": s.epsilon,
            "delta": f["delta"],
            "log10_delta": f["log10_delta"],
            "delta_chernoff": f["delta_chernoff"],
            "delta_floor": f["delta_floor"],
            "worst_group_size": f["argmax_n"],
            "epsilon_min": f["epsilon_min"],
            "dps": f["dps"],
            "neighbours": "add or remove one record",
            "generalization": s.rules(),
            "sensitive_in_cell": True,
            "series": {
                "releases": releases,
                "epsilon": epsilon,
                "delta": math.exp(log_delta),
                "log10_delta": log_delta / math.log(10.0),
                "composition": "basic, fresh sample per release",
            },
            "reference": REFERENCE,
        }
        return guarantee, state


def _parse_series(raw: bytes | None) -> dict[str, Any]:
    if raw is None:
        return {"releases": 0, "epsilon": 0.0, "log_delta": -math.inf}
    try:
        data = json.loads(raw)
        return {
            "releases": int(data["releases"]),
            "epsilon": float(data["epsilon"]),
            "log_delta": float(data["log_delta"]),
        }
    except (ValueError, KeyError, TypeError):
        raise SchemaError(
            f"the mechanism state {SERIES_STATE_KEY.decode()!r} is not the series total this "
            "version writes: the history store is corrupt"
        ) from None


def _number(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)
