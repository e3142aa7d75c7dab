r"""Mechanism ``dp-sanitised``: every record sanitised once, per-person budget (Holohan, Leith
and Mason 2014).

Product sanitisation of [HLM14] (Eq. 7, Theorem 5): each record is sanitised independently by
a 1-row mechanism that is (epsilon, delta)-DP between *any* two values of the domain, so the
release of n records is (epsilon, delta)-DP for substituting one record, whatever n.
Everything published (group lines, dashboard counts) is computed from the sanitised records
and is post-processing (Theorem 4).

* A numeric QID with configured bounds ``[lo, hi]``: the value is clipped into the bounds
  (never dropped), rounded to the grid of ``resolution`` (default: one step per unit of an
  integer interval, else 256 steps) and moved by a discrete Laplace, clamped into the grid:
  pure epsilon-DP between any two values of the interval (Example 5 with ``delta = 0``, on a
  grid), sampled from 64-bit words by an integer table, so no output's low-order bits depend
  on the input (:mod:`stream_release.core.privacy.discrete_laplace`; Mironov 2012 showed how a
  floating-point Laplace leaks through them).
* A categorical QID (a hierarchy's leaves, or a configured domain list for a ``set``
  attribute) and, by default, the sensitive attribute (a configured domain list): k-ary
  randomised response (Example 6).
* The record's (epsilon, delta) is split over its attributes (equal shares or weights) and
  composes back by basic composition ([X], :func:`~stream_release.core.privacy.dp_budget.
  split_budget`).

Sanitised once, without storing it. A record's noise is a function of 64-bit words
``ReleaseRandomness.row_words("sanitise", key)`` with ``key = pseudonym || parameters ||
record content``: the same record of the same person gets the same sanitised values in every
release (re-serving it is post-processing, free), and nobody without the secret can predict
them. A changed record, or the same record under changed parameters (epsilon, bounds,
domains, scale rule, split), gets fresh independent uniforms and is charged again: two
mechanisms sharing their uniforms could be combined to cancel the noise
(:mod:`~stream_release.mechanisms.dp_sanitised.sanitise`; each table's plan of which attribute
is sanitised how: :mod:`~stream_release.mechanisms.dp_sanitised.plan`).

Budget ledger (digest F2 [X], :func:`~stream_release.core.privacy.dp_budget.ledger_charge_batch`;
:mod:`~stream_release.mechanisms.dp_sanitised.ledger`). State entry per person, key = the
pseudonym (16 bytes), value = version byte ``0x01`` then one 24-byte entry per charged record:
its keyed 8-byte digest and its cost (epsilon, delta) as two little-endian float64. A new
record costs the record's (epsilon, delta); a record already charged costs nothing; a person
whose next record would pass the caps (``epsilon_budget``, ``delta_budget``) is not published
in this release (group ``-1``) and counted in the manifest (``refused_budget``).

Group line: one per distinct sanitised QID row, ``qid`` = the sanitised values (numbers for
numeric QIDs, category labels for categorical ones), ``size``, ``sensitive`` = counts of the
sanitised sensitive values. The manifest's ``mechanism`` block is documented at
:meth:`DPSanitised.release`; :func:`~stream_release.mechanisms.dp_sanitised.audit.
verify_release` audits a release from its files alone.

Configuration and registration. The table ``[mechanism.dp_sanitised]``
(:class:`DPSanitisedSettings`; ``check_settings`` checks it against the schema when the
configuration is loaded), the factory :func:`make_dp_sanitised` ``(section, settings)`` and
the audit :func:`~stream_release.mechanisms.dp_sanitised.audit.verify_release`
``(manifest, lines)`` (module :mod:`~stream_release.mechanisms.dp_sanitised.audit`). The
manifest states no figure of the input outside the mechanism
(``MechanismRelease.input_statistics`` stays false); the ``refused_budget`` count it does
state is ``n - published``, with n public under the paper's neighbours (substitution).

Data-independent domains. The set of categories is part of the mechanism: an output domain
computed from the data (the encoded ``set`` domain or ``sensitive_values``, which hold the
values *present*) differs between neighbouring tables, and a category only one person holds
would appear in the output domain because of that person. So a ``set`` QID and the sensitive
attribute need a configured list (``domains``, ``sensitive_domain``); hierarchy leaves come
from the configured hierarchy; numeric QIDs need configured ``bounds``. Values outside a
configured list refuse the release (:class:`~stream_release.errors.SchemaError`).

Notes
-----
Not protected: membership (substitution neighbours, n public), the number of records, whether
and when a person's record changed (a new version is charged and may be refused for budget;
``refused_budget`` is a count of such people). Several records of one person compose by the
ledger. A numeric attribute's delta share goes unused (its grid Laplace is pure epsilon), so
``scale = "tight"`` changes nothing there; the manifest states Example 5's continuous scales
beside the grid's for reference.

References
----------
.. [HLM14] N. Holohan, D. J. Leith, O. Mason. Differential Privacy in Metric Spaces: Numerical,
   Categorical and Functional Data Under the One Roof. arXiv:1402.6124 (2014).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.config.mechanisms.dp_sanitised import (
    CAVEAT,
    KIND,
    DPSanitisedSettings,
    SchemaLike,
    check_schema,
)
from stream_release.core.privacy.metric_dp_rr import rr_debiased_counts
from stream_release.core.table import EncodedTable
from stream_release.errors import InvalidParameter
from stream_release.mechanisms.base import (
    MechanismRelease,
    ReleaseRandomness,
    StateLoader,
)
from stream_release.mechanisms.dp_sanitised.ledger import charge, record_digests
from stream_release.mechanisms.dp_sanitised.plan import (
    SanitisedAttribute,
    TablePlan,
    make_plan,
    table_signature,
)
from stream_release.mechanisms.dp_sanitised.sanitise import (
    code_maps,
    record_keys,
    record_words,
    sanitise_column,
)
from stream_release.mechanisms.rows import distinct_rows, exact_bytes

__all__ = [
    "CAVEAT",
    "KIND",
    "DPSanitised",
    "DPSanitisedSettings",
    "SchemaLike",
    "make_dp_sanitised",
]

_PAPER = "Holohan, Leith, Mason. Differential Privacy in Metric Spaces. arXiv:1402.6124"
_NEIGHBOURS = "substitution of one record, n public (membership not protected)"


# --- the mechanism ------------------------------------------------------------------------------


class DPSanitised:
    """Mechanism ``dp-sanitised`` (:class:`~stream_release.mechanisms.base.Mechanism`).

    Parameters
    ----------
    settings : DPSanitisedSettings
    schema : optional, the schema (``qid``, ``hierarchies``, ``numeric``; e.g.
        ``config.SchemaSettings``): every QID is then checked now to have a data-independent
        domain (bounds, a hierarchy or a domain list), not only at the first release.

    Raises
    ------
    ConfigError
        A QID without a data-independent domain, a numeric QID without bounds, a setting
        naming an unknown QID, weights that miss a QID.
    """

    kind = KIND

    def __init__(self, settings: DPSanitisedSettings, *, schema: SchemaLike | None = None):
        self.settings = settings
        self._cached: tuple[tuple[Any, ...], TablePlan] | None = None
        if schema is not None:
            check_schema(settings, schema)

    def _plan(self, table: EncodedTable) -> TablePlan:
        """The plan for ``table``'s attributes (checked against the settings; cached)."""
        signature = table_signature(table)
        if self._cached is not None and self._cached[0] == signature:
            return self._cached[1]
        plan = make_plan(self.settings, table)
        self._cached = (signature, plan)
        return plan

    # -- release ----------------------------------------------------------------------------

    def release(
        self,
        table: EncodedTable,
        pseudonyms: NDArray[np.bytes_],
        *,
        sequence: int,
        randomness: ReleaseRandomness,
        load_state: StateLoader,
    ) -> MechanismRelease:
        r"""Sanitise each new record once, charge the ledger, aggregate the sanitised rows.

        Returns a :class:`MechanismRelease` whose ``guarantee`` (the manifest's ``mechanism``
        block) holds: ``kind``, ``paper``, ``neighbours``; the per-record ``epsilon``,
        ``delta``; ``scale`` (the rule); ``split`` (``"equal"`` or ``"weights"``); ``qid``
        (name -> entry) and ``sensitive`` (an entry with ``"sanitised": true``, or
        ``{"sanitised": false}``), each entry with ``type``, ``weight``, the ``epsilon`` and
        ``delta`` shares, then for ``numeric``: ``bounds``, ``resolution`` (configured),
        ``sampler``, ``grid_step``, ``steps``, ``q``, ``epsilon_realized``, ``scale`` (the grid
        Laplace's), ``scale_paper``, ``scale_tight`` (Example 5's, for reference),
        ``expected_error`` (exact, worst input); for ``categorical``: ``domain``, ``source``
        (``hierarchy``/``configured``), ``domain_size``, ``keep``, ``p_other``,
        ``expected_error`` (discrete metric); and ``lower_bound`` with its ``theorem``
        (6 or 7) and ``ratio``; ``composition`` (basic composition of the shares);
        ``budget`` (``epsilon_budget``, ``delta_budget``); ``refused_budget`` (people not
        published: over their caps); ``published``; ``counts`` (``method``, ``n``, and per
        sensitive value the de-biased ``estimate`` and its ``variance``,
        :func:`~stream_release.core.privacy.metric_dp_rr.rr_debiased_counts`); ``caveat``
        (:data:`CAVEAT`); ``parameters_digest``.

        Raises
        ------
        ConfigError
            A QID of the table without a data-independent domain in the settings.
        SchemaError
            A value of a ``set`` QID or of the sensitive attribute outside its configured list.
        HistoryStoreError
            A corrupt ledger entry.
        """
        s = self.settings
        plan = self._plan(table)
        maps = code_maps(table, plan)
        n = table.n_rows
        persons = _pseudonym_bytes(pseudonyms, n)
        keys = record_keys(table, plan, maps, persons)
        digests = record_digests(randomness, keys)

        # ledger: a new record costs (epsilon, delta), a charged one nothing (digest F2)
        granted, state, refused = charge(s, persons, digests, load_state)

        # sanitise the published records from their uniforms
        rows = np.flatnonzero(granted)
        u = record_words(randomness, [keys[i] for i in rows.tolist()], len(plan.sanitised))
        columns = [
            sanitise_column(a, table.attributes[j].domain, maps[j], table.qid[rows, j], u[:, j])
            for j, a in enumerate(plan.qid)
        ]
        if plan.sensitive is not None:
            sens = sanitise_column(plan.sensitive, None, maps[-1], table.sensitive[rows], u[:, -1])
            sens_labels = plan.sensitive.labels
        else:
            sens = table.sensitive[rows].astype(np.int64)
            sens_labels = table.sensitive_values

        # aggregate the distinct sanitised rows
        matrix = np.column_stack([c.astype(np.float64) for c in columns]) + 0.0  # no -0.0
        distinct, inverse = distinct_rows(matrix)
        group = np.full(n, -1, dtype=np.int64)
        group[rows] = inverse
        n_groups = distinct.shape[0]
        k = len(sens_labels)
        sizes = np.bincount(inverse, minlength=n_groups).astype(np.int64)
        counts = np.bincount(inverse * k + sens, minlength=n_groups * k).reshape(n_groups, k)
        sensitive = [{sens_labels[c]: v for c, v in enumerate(row) if v} for row in counts.tolist()]
        guarantee = {
            **_static_guarantee(plan, s),
            "refused_budget": refused,
            "published": int(rows.size),
            "counts": _counts(plan.sensitive, sens, sens_labels),
            "caveat": CAVEAT,
            "parameters_digest": plan.fingerprint.hex(),
        }
        return MechanismRelease(
            group=group,
            sizes=sizes,
            qids=_qid_dicts(plan.qid, distinct),
            sensitive=sensitive,
            guarantee=guarantee,
            extra=[{} for _ in range(n_groups)],
            state=state,
            utility={},
        )


def make_dp_sanitised(section: DPSanitisedSettings, settings: Any) -> DPSanitised:
    """The mechanism of ``section`` for the configuration ``settings`` (the registered
    factory, ``pass_settings``): checks the schema's QIDs now (:class:`DPSanitised`)."""
    return DPSanitised(section, schema=settings.schema)


def _static_guarantee(plan: TablePlan, s: DPSanitisedSettings) -> dict[str, Any]:
    if plan.sensitive is not None:
        sensitive: dict[str, Any] = {"sanitised": True, **plan.sensitive.entry}
    else:
        sensitive = {"sanitised": False, "note": "published exactly: not protected"}
    return {
        "kind": KIND,
        "paper": _PAPER,
        "neighbours": _NEIGHBOURS,
        "epsilon": s.epsilon,
        "delta": s.delta,
        "scale": s.scale,
        "split": "equal" if s.weights is None else "weights",
        "qid": {a.name: dict(a.entry) for a in plan.qid},
        "sensitive": sensitive,
        "composition": {
            "epsilon": math.fsum(a.epsilon for a in plan.sanitised),
            "delta": math.fsum(a.delta for a in plan.sanitised),
            "rule": "basic",
        },
        "budget": {"epsilon_budget": s.epsilon_budget, "delta_budget": s.delta_budget},
    }


def _pseudonym_bytes(pseudonyms: NDArray[Any], n: int) -> list[bytes]:
    arr = np.asarray(pseudonyms)
    if arr.shape != (n,):
        raise InvalidParameter(f"pseudonyms: shape {arr.shape}, need ({n},), one per table row")
    if arr.dtype.kind == "S":
        return exact_bytes(arr)
    return [bytes(p) for p in arr.tolist()]


# --- aggregation of the sanitised rows ----------------------------------------------------------


def _qid_dicts(
    attrs: Sequence[SanitisedAttribute], distinct: NDArray[np.float64]
) -> list[dict[str, Any]]:
    cols: list[list[Any]] = []
    for j, a in enumerate(attrs):
        col = distinct[:, j].tolist()
        cols.append(col if a.numeric else [a.labels[int(v)] for v in col])
    names = [a.name for a in attrs]
    return [dict(zip(names, row, strict=True)) for row in zip(*cols, strict=True)]


def _counts(
    sensitive: SanitisedAttribute | None, sens: NDArray[np.int64], labels: Sequence[str]
) -> dict[str, Any]:
    """Dashboard counts of the sensitive values (post-processing of the sanitised column)."""
    n = int(sens.size)
    raw = np.bincount(sens, minlength=len(labels)).astype(np.float64)
    if sensitive is None:
        return {
            "method": "exact (sensitive attribute not sanitised)",
            "n": n,
            "estimate": dict(zip(labels, raw.tolist(), strict=True)),
            "variance": dict.fromkeys(labels, 0.0),
        }
    if len(labels) < 2 or (sensitive.epsilon == 0.0 and sensitive.delta == 0.0):
        return {
            "method": "none (one category, or no budget: nothing to estimate)",
            "n": n,
            "estimate": dict(zip(labels, raw.tolist(), strict=True)),
            "variance": dict.fromkeys(labels, 0.0),
        }
    est = rr_debiased_counts(sens, len(labels), sensitive.epsilon, sensitive.delta)
    return {
        "method": "rr-debiased",
        "n": n,
        "estimate": dict(zip(labels, est.estimate.tolist(), strict=True)),
        "variance": dict(zip(labels, est.variance.tolist(), strict=True)),
    }
