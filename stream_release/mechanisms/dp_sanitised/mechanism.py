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
mechanisms sharing their uniforms could be combined to cancel the noise.

Budget ledger (digest F2 [X], :func:`~stream_release.core.privacy.dp_budget.ledger_charge_batch`).
State entry per person, key = the pseudonym (16 bytes), value = version byte ``0x01`` then
one 24-byte entry per charged record: its keyed 8-byte digest and its cost (epsilon, delta) as
two little-endian float64. A new record costs the record's (epsilon, delta); a record already
charged costs nothing; a person whose next record would pass the caps
(``epsilon_budget``, ``delta_budget``) is not published in this release (group ``-1``) and
counted in the manifest (``refused_budget``).

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

import hashlib
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.core.privacy.discrete_laplace import GridLaplace
from stream_release.core.privacy.dp_budget import ledger_charge_batch, split_budget
from stream_release.core.privacy.metric_dp import (
    rr_debiased_counts,
)
from stream_release.core.table import EncodedTable
from stream_release.errors import ConfigError, HistoryStoreError, InvalidParameter, SchemaError
from stream_release.mechanisms.base import (
    MechanismRelease,
    ReleaseRandomness,
    StateLoader,
)
from stream_release.mechanisms.dp_sanitised.settings import (
    CAVEAT,
    KIND,
    WHERE,
    DPSanitisedSettings,
    SchemaLike,
    _entry,
    _fingerprint,
    check_hierarchy,
    check_names,
    check_numeric,
    check_schema,
    no_domain,
    numeric_table,
)

__all__ = [
    "CAVEAT",
    "KIND",
    "DPSanitised",
    "DPSanitisedSettings",
    "SchemaLike",
    "make_dp_sanitised",
    "rr_from_uniform",
]

_PAPER = "Holohan, Leith, Mason. Differential Privacy in Metric Spaces. arXiv:1402.6124"
_NEIGHBOURS = "substitution of one record, n public (membership not protected)"
_STATE_VERSION = b"\x01"
_ENTRY = struct.Struct("<8sdd")
_DIGEST = 8
_MAX_DRAWS = 8  # ReleaseRandomness.row_words per call


# --- the plan of one table: which attribute is sanitised how ---------------------------------


@dataclass(frozen=True)
class _Attr:
    """One sanitised attribute: its mechanism and the public entry of the manifest."""

    name: str
    numeric: bool
    epsilon: float
    delta: float
    entry: dict[str, Any]
    table: GridLaplace | None = None
    labels: tuple[str, ...] = ()
    keep: float = 1.0


@dataclass(frozen=True)
class _Plan:
    """The mechanism of every attribute of tables with one signature (names, kinds, leaves)."""

    qid: tuple[_Attr, ...]
    sensitive: _Attr | None
    fingerprint: bytes

    @property
    def sanitised(self) -> tuple[_Attr, ...]:
        return self.qid if self.sensitive is None else (*self.qid, self.sensitive)


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
        self._cached: tuple[tuple[Any, ...], _Plan] | None = None
        if schema is not None:
            check_schema(settings, schema)

    def _plan(self, table: EncodedTable) -> _Plan:
        """The plan for ``table``'s attributes (checked against the settings; cached)."""
        signature = tuple(
            (a.name, a.kind, tuple(a.domain.tolist()) if a.kind == "hierarchy" else None)
            for a in table.attributes
        )
        if self._cached is not None and self._cached[0] == signature:
            return self._cached[1]
        s = self.settings
        check_names(s, table.qid_names)
        specs: list[tuple[str, dict[str, Any]]] = []
        for attribute in table.attributes:
            name = attribute.name
            if attribute.kind == "numeric":
                if name in s.domains:  # detected from the data (schema.numeric unset)
                    raise SchemaError(
                        f"QID {name!r}: every value of this snapshot is a number, so it was "
                        f"encoded as numeric, but {WHERE}.domains lists its categories; "
                        f"declare schema.numeric (without {name!r}) so it stays categorical"
                    )
                check_numeric(s, name)
                spec = {
                    "type": "numeric",
                    "bounds": list(s.bounds[name]),
                    "resolution": s.resolution.get(name),
                }
            elif attribute.kind == "hierarchy":
                check_hierarchy(s, name)
                leaves = [str(v) for v in attribute.domain.tolist()]
                spec = {"type": "categorical", "domain": leaves, "source": "hierarchy"}
            else:
                if name in s.bounds:  # detected from the data (schema.numeric unset)
                    raise SchemaError(
                        f"QID {name!r}: a value of this snapshot is not a number, but "
                        f"{WHERE}.bounds gives it bounds; fix the value, or declare "
                        f"schema.numeric = [{name!r}, ...] so bad values are rejected on input"
                    )
                if name not in s.domains:
                    raise ConfigError(no_domain(name))
                spec = {"type": "categorical", "domain": list(s.domains[name])}
                spec["source"] = "configured"
            spec["weight"] = (s.weights or {}).get(name, 1.0)
            specs.append(("qid", {"name": name, **spec}))
        if s.sanitise_sensitive:
            spec = {"name": "sensitive", "type": "categorical"}
            spec.update(domain=list(s.sensitive_domain or ()), source="configured")
            specs.append(("sensitive", {**spec, "weight": s.sensitive_weight}))
        weights = [spec["weight"] for _, spec in specs]
        if not any(w > 0 for w in weights):
            raise ConfigError(
                f"{WHERE}.weights: every attribute has weight 0; give at least one a "
                "positive weight"
            )
        split = split_budget(s.epsilon, s.delta, weights)
        for (_, spec), e_j, d_j in zip(
            specs, split.epsilon.tolist(), split.delta.tolist(), strict=True
        ):
            spec.update(epsilon=e_j, delta=d_j)
        attrs = [_attr(spec, s) for _, spec in specs]
        sensitive = attrs.pop() if s.sanitise_sensitive else None
        plan = _Plan(tuple(attrs), sensitive, _fingerprint(s.epsilon, s.delta, s.scale, specs))
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
        :func:`~stream_release.core.privacy.metric_dp.rr_debiased_counts`); ``caveat``
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
        maps = _code_maps(table, plan)
        n = table.n_rows
        persons = _pseudonym_bytes(pseudonyms, n)
        keys = _record_keys(table, plan, maps, persons)
        digests = _record_digests(randomness, keys)

        # ledger: a new record costs (epsilon, delta), a charged one nothing (digest F2)
        granted, state, refused = _charge(s, persons, digests, load_state)

        # sanitise the published records from their uniforms
        rows = np.flatnonzero(granted)
        u = _words(randomness, [keys[i] for i in rows.tolist()], len(plan.sanitised))
        columns = [
            _sanitise(a, table.attributes[j].domain, maps[j], table.qid[rows, j], u[:, j])
            for j, a in enumerate(plan.qid)
        ]
        if plan.sensitive is not None:
            sens = _sanitise(plan.sensitive, None, maps[-1], table.sensitive[rows], u[:, -1])
            sens_labels = plan.sensitive.labels
        else:
            sens = table.sensitive[rows].astype(np.int64)
            sens_labels = table.sensitive_values

        # aggregate the distinct sanitised rows
        distinct, inverse = _distinct_rows(columns, rows.size)
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


def _attr(spec: dict[str, Any], s: DPSanitisedSettings) -> _Attr:
    fig = _entry(spec, spec["epsilon"], spec["delta"], s.scale)
    if spec["type"] == "numeric":
        resolution = s.resolution.get(spec["name"])
        head = {"type": "numeric", "bounds": spec["bounds"], "resolution": resolution}
    else:
        head = {"type": "categorical", "domain": spec["domain"], "source": spec["source"]}
    entry = {**head, **{k: spec[k] for k in ("weight", "epsilon", "delta")}, **fig}
    if spec["type"] == "numeric":
        return _Attr(
            spec["name"], True, spec["epsilon"], spec["delta"], entry,
            table=numeric_table(spec, spec["epsilon"]),
        )  # fmt: skip
    return _Attr(
        spec["name"], False, spec["epsilon"], spec["delta"], entry,
        labels=tuple(spec["domain"]), keep=fig["keep"],
    )  # fmt: skip


def _static_guarantee(plan: _Plan, s: DPSanitisedSettings) -> dict[str, Any]:
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


def _code_map(
    what: str, present: Sequence[object], labels: Sequence[str], field: str
) -> NDArray[np.int64]:
    index = {v: i for i, v in enumerate(labels)}
    out = np.fromiter((index.get(str(v), -1) for v in present), dtype=np.int64, count=len(present))
    bad = [str(present[i]) for i in np.flatnonzero(out < 0).tolist()]
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise SchemaError(
            f"{what}: value {bad[0]!r}{more} is not in {WHERE}.{field}; add it to the list "
            "or map it to a listed category before release"
        )
    return out


# --- kernels -----------------------------------------------------------------------------------


def _pseudonym_bytes(pseudonyms: NDArray[Any], n: int) -> list[bytes]:
    arr = np.asarray(pseudonyms)
    if arr.shape != (n,):
        raise InvalidParameter(f"pseudonyms: shape {arr.shape}, need ({n},), one per table row")
    if arr.dtype.kind == "S":  # exact bytes: indexing an S array drops trailing NULs
        size = arr.dtype.itemsize
        raw = np.ascontiguousarray(arr).tobytes()
        return [raw[i * size : (i + 1) * size] for i in range(n)]
    return [bytes(p) for p in arr.tolist()]


def _code_maps(table: EncodedTable, plan: _Plan) -> list[NDArray[np.int64] | None]:
    """Per sanitised attribute: table code -> index in its domain (``None`` for numeric).

    Raises SchemaError for a value outside a configured list."""
    maps: list[NDArray[np.int64] | None] = []
    for attribute, a in zip(table.attributes, plan.qid, strict=True):
        if a.numeric:
            maps.append(None)
        elif attribute.kind == "hierarchy":  # codes are leaf indices of the hierarchy
            maps.append(np.arange(len(a.labels), dtype=np.int64))
        else:
            present = attribute.domain.tolist()
            maps.append(_code_map(f"QID {a.name!r}", present, a.labels, f"domains.{a.name}"))
    if plan.sensitive is not None:
        present = list(table.sensitive_values)
        maps.append(
            _code_map("the sensitive attribute", present, plan.sensitive.labels, "sensitive_domain")
        )
    return maps


def _record_keys(
    table: EncodedTable,
    plan: _Plan,
    maps: Sequence[NDArray[np.int64] | None],
    persons: Sequence[bytes],
) -> list[bytes]:
    """``pseudonym || parameters digest || content``; content = each sanitised attribute's raw
    value: float64 for a numeric QID, uint32 domain index for a categorical one."""
    n = table.n_rows
    parts: list[NDArray[np.uint8]] = []
    for j, (a, code_map) in enumerate(zip(plan.sanitised, maps, strict=True)):
        codes = table.qid[:, j] if j < len(plan.qid) else table.sensitive
        if a.numeric:
            col = np.asarray(table.attributes[j].domain, dtype="<f8")[codes]
        else:
            assert code_map is not None
            col = code_map[codes].astype("<u4")
        parts.append(np.ascontiguousarray(col).view(np.uint8).reshape(n, col.itemsize))
    content = np.ascontiguousarray(np.concatenate(parts, axis=1))
    width = content.shape[1]
    raw = content.tobytes()
    head = plan.fingerprint
    return [p + head + raw[i * width : (i + 1) * width] for i, p in enumerate(persons)]


def _record_digests(randomness: ReleaseRandomness, keys: Sequence[bytes]) -> list[bytes]:
    """Keyed 8-byte digest of each record key: stable across releases, opaque without the
    secret (a small domain of values could otherwise be tested against the ledger)."""
    secret = randomness.secret
    return [
        hashlib.blake2b(b"record\x1f" + k, key=secret, digest_size=_DIGEST).digest() for k in keys
    ]


def _words(randomness: ReleaseRandomness, keys: Sequence[bytes], draws: int) -> NDArray[np.uint64]:
    """(len(keys), draws) keyed 64-bit words, at most 8 per ``row_words`` call."""
    if draws == 0 or not keys:
        return np.zeros((len(keys), draws), dtype=np.uint64)
    chunks = []
    for c, start in enumerate(range(0, draws, _MAX_DRAWS)):
        purpose = "sanitise" if c == 0 else f"sanitise/{c}"
        chunks.append(randomness.row_words(purpose, keys, min(_MAX_DRAWS, draws - start)))
    return np.concatenate(chunks, axis=1)


def rr_from_uniform(
    codes: NDArray[np.int64], u: NDArray[np.float64], domain_size: int, keep: float
) -> NDArray[np.int64]:
    r"""k-ary randomised response (Example 6 of [HLM14]) from one uniform per code.

    ``u < keep``: the code itself; otherwise ``(code + 1 + j) mod K`` with
    ``j = floor((u - keep) / (1 - keep) m)``, uniform over the ``m = K - 1`` other codes.
    """
    c = codes.astype(np.int64)
    if domain_size == 1:
        return c.copy()
    m = domain_size - 1
    kept = u < keep
    j = np.minimum(np.floor(np.maximum(u - keep, 0.0) / (1.0 - keep) * m), m - 1).astype(np.int64)
    return np.where(kept, c, (c + 1 + j) % domain_size)


def _sanitise(
    a: _Attr,
    domain: NDArray[Any] | None,
    code_map: NDArray[np.int64] | None,
    codes: NDArray[np.integer],
    words: NDArray[np.uint64],
) -> NDArray[Any]:
    """Sanitised column from one 64-bit word per row: float64 grid values in ``[lo, hi]``
    (numeric: the grid Laplace) or int64 domain indices (categorical: randomised response
    from the word's top 53 bits as a uniform in [0, 1))."""
    if not a.numeric:
        assert code_map is not None
        u = (words >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
        return rr_from_uniform(code_map[codes], u, len(a.labels), a.keep)
    assert domain is not None and a.table is not None
    x = np.asarray(domain, dtype=np.float64)[codes]
    if a.table.steps == 0:
        return np.full(x.shape, a.table.lo)
    return a.table.sample(x, words)


def _distinct_rows(
    columns: Sequence[NDArray[Any]], n: int
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Distinct rows of the sanitised columns in lexicographic order, and each row's index."""
    matrix = np.column_stack([c.astype(np.float64) for c in columns]) + 0.0  # no -0.0
    if n == 0:
        return matrix, np.empty(0, dtype=np.int64)
    order = np.lexsort(matrix.T[::-1])
    ordered = matrix[order]
    new = np.ones(n, dtype=bool)
    new[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse


def _qid_dicts(attrs: Sequence[_Attr], distinct: NDArray[np.float64]) -> list[dict[str, Any]]:
    cols: list[list[Any]] = []
    for j, a in enumerate(attrs):
        col = distinct[:, j].tolist()
        cols.append(col if a.numeric else [a.labels[int(v)] for v in col])
    names = [a.name for a in attrs]
    return [dict(zip(names, row, strict=True)) for row in zip(*cols, strict=True)]


def _counts(
    sensitive: _Attr | None, sens: NDArray[np.int64], labels: Sequence[str]
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


# --- ledger -------------------------------------------------------------------------------------


def _charge(
    s: DPSanitisedSettings,
    persons: Sequence[bytes],
    digests: Sequence[bytes],
    load_state: StateLoader,
) -> tuple[NDArray[np.bool_], dict[bytes, bytes], int]:
    """Charge each row's record to its person (``ledger_charge_batch``'s rules).

    Returns ``granted`` (n,), the changed state entries and the number of people refused.
    Two cases are settled here without the general function, by its rules: a person's only
    row whose digest is already charged (cached: granted, free) and a person's only row with
    no ledger yet (charged (epsilon, delta), within any cap the settings accept). Everything
    else (a new record of a person with a ledger, several rows of one person) goes through
    :func:`~stream_release.core.privacy.dp_budget.ledger_charge_batch`.
    """
    n = len(persons)
    unique = list(dict.fromkeys(persons))
    stored = dict(zip(unique, load_state(unique), strict=True))
    rows_of: dict[bytes, int] = {}
    for p in persons:
        rows_of[p] = rows_of.get(p, 0) + 1
    granted = np.zeros(n, dtype=bool)
    state: dict[bytes, bytes] = {}
    first = _ENTRY.pack(b"\0" * _DIGEST, s.epsilon, s.delta)[_DIGEST:]  # one record's cost
    general: list[int] = []
    for i, (p, d) in enumerate(zip(persons, digests, strict=True)):
        value = stored[p]
        if value is not None and (value[:1] != _STATE_VERSION or (len(value) - 1) % _ENTRY.size):
            _decode_ledger(value)  # raises: a corrupt entry
        if rows_of[p] > 1:
            general.append(i)
        elif value is None:
            granted[i] = True
            state[p] = _STATE_VERSION + d + first
        elif _has_digest(value, d):
            granted[i] = True
        else:
            general.append(i)
    if general:
        people = {
            persons[i].hex(): _decode_ledger(stored[persons[i]])
            for i in general
            if stored[persons[i]] is not None
        }
        ledger = {"epsilon_cap": s.epsilon_budget, "delta_cap": s.delta_budget, "people": people}
        batch = ledger_charge_batch(
            ledger,
            [persons[i].hex() for i in general],
            [digests[i].hex() for i in general],
            s.epsilon,
            s.delta,
        )
        granted[general] = batch.granted
        for i in np.asarray(general)[batch.granted & ~batch.cached].tolist():
            state[persons[i]] = _encode_ledger(batch.state["people"][persons[i].hex()])
    refused = len({persons[i] for i in np.flatnonzero(~granted).tolist()})
    return granted, state, refused


def _has_digest(value: bytes, digest: bytes) -> bool:
    """Whether a ledger entry (``_encode_ledger``) holds ``digest``."""
    return any(value[k : k + _DIGEST] == digest for k in range(1, len(value), _ENTRY.size))


# --- ledger state encoding ---------------------------------------------------------------------


def _decode_ledger(value: bytes) -> dict[str, list[float]]:
    body = value[1:]
    if value[:1] != _STATE_VERSION or len(body) % _ENTRY.size:
        raise HistoryStoreError(
            f"dp-sanitised ledger entry of {len(value)} bytes is corrupt (version "
            f"{value[:1]!r}, need 0x01 then 24-byte entries); restore the state store"
        )
    return {digest.hex(): [eps, dlt] for digest, eps, dlt in _ENTRY.iter_unpack(body)}


def _encode_ledger(records: Mapping[str, Sequence[float]]) -> bytes:
    return _STATE_VERSION + b"".join(
        _ENTRY.pack(bytes.fromhex(d), float(c[0]), float(c[1])) for d, c in records.items()
    )
