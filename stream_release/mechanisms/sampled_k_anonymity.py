r"""Mode ``sampled-k-anonymity``: random sampling + safe k-anonymization is (ε, δ)-DP [LQS12]_.

Each release runs ``SDGS(D; g, k, beta)`` (Algorithm 4 of [LQS11]_; Theorem 3.9 of [LQS12]_)
on its snapshot ``D``:

1. *Sample.* Keep each row independently with probability ``beta`` (Bernoulli sampling
   :math:`\Lambda_\beta`, :func:`~stream_release.privacy.sampling_dp.sample_mask`): one coin
   per row, drawn from ``randomness.generator("sample")`` over the rows in pseudonym order.
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
   (:func:`~stream_release.privacy.sampling_dp.safe_k_anonymize_mask`).

**The sensitive value is part of the tuple.** Both papers prove the theorem for the
strengthened k-anonymity in which *every* attribute is a quasi-identifier ([LQS12]_ Def. 3.6,
[LQS11]_ Def. 3; digest §2 D4): the output is the multiset of generalized tuples, and the
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
  (Theorem 1 of [LQS11]_), computed exactly (:func:`~stream_release.privacy.sampling_dp.
  calc_delta`), for any configured :math:`\epsilon \ge -\ln(1-\beta)`; also its decimal log,
  the worst cell size, the Chernoff bound of Theorem 6 of [LQS11]_ and the floor
  :math:`\beta^k`.
* ``series``: releases 1..sequence each draw a fresh sample, so by basic composition
  ([LQS12]_ §2.7) a record present in all of them is protected by
  :math:`(\sum_j \epsilon_j, \sum_j \delta_j)`, summed over the releases' own parameters
  (kept in the mechanism's committed state, so a parameter change between releases is
  accounted exactly).

Only functions of the output are published: the manifest omits the input's size, the source
file's hash, the time taken and any utility measured against the input
(:attr:`~stream_release.mechanisms.base.MechanismRelease.input_statistics` is false), since
these are statistics of ``D`` outside the mechanism ([LQS12]_ §2.6; digest §9.1).

Scope: guarantees are per record; an individual has at most one row per snapshot (CONTRACT
§1), so per person per release. The sample is used for nothing else.

References
----------
.. [LQS12] N. Li, W. Qardaji, D. Su. On Sampling, Anonymization, and Differential Privacy: Or,
   k-Anonymization Meets Differential Privacy. ASIACCS 2012 (arXiv:1101.2604).
.. [LQS11] N. Li, W. Qardaji, D. Su. Provably Private Data Anonymization: Or, k-Anonymity
   Meets Differential Privacy. arXiv:1101.2604v1.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from numpy.typing import NDArray
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from stream_release.errors import ConfigError, InvalidParameter, SchemaError
from stream_release.mechanisms.base import MechanismRelease, ReleaseRandomness, StateLoader
from stream_release.privacy.sampling_dp import (
    calc_delta,
    compose_basic,
    safe_k_anonymize_mask,
    sample_mask,
)
from stream_release.table import Attribute, EncodedTable

if TYPE_CHECKING:
    from stream_release.config import Settings

__all__ = [
    "KIND",
    "SERIES_STATE_KEY",
    "SampledKAnonymity",
    "SampledKAnonymitySettings",
    "accounting",
    "make_sampled_k_anonymity",
    "verify_release",
    "verify_series",
]

KIND = "sampled-k-anonymity"

SERIES_STATE_KEY = b"sampled-k-anonymity:series"
"""State entry holding the series' running total: JSON ``{"releases", "epsilon",
"log_delta"}`` (natural log; the sum of deltas in log space, exact where deltas underflow)."""

REFERENCE = (
    "Li, Qardaji, Su, On Sampling, Anonymization, and Differential Privacy, ASIACCS 2012 "
    "(arXiv:1101.2604): Theorem 3.9 (delta = d(k, beta, epsilon)), Definition 3 (DPS needs "
    "beta > delta), section 2.7 (fresh samples compose); Chernoff bound: Theorem 6 of arXiv:"
    "1101.2604v1"
)

_REL_TOL = 1e-9
"""Relative tolerance of the audit's comparisons of recomputed figures."""

_TOP = 1
"""``levels[qid]`` of ``*`` for a QID without a hierarchy (0 = the exact value)."""


# --- the configuration -------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def accounting(k: int, beta: float, epsilon: float) -> dict[str, float | int | bool]:
    """:func:`~stream_release.privacy.sampling_dp.calc_delta` (Theorem 3.9 of [LQS12]_),
    cached: the configuration, every release and the audit ask for the same few triples."""
    return calc_delta(k, beta, epsilon)


def _check_level(level: int) -> int:
    if level < 0:
        raise ValueError("a level is >= 0 (0 = the exact value, higher = coarser)")
    return level


def _check_width(width: int) -> int:
    if width < 1:
        raise ValueError("a bin width is an integer >= 1 (e.g. 10)")
    return width


class SampledKAnonymitySettings(BaseModel):
    """``[mechanism.sampled_k_anonymity]``.

    Attributes
    ----------
    k : int
        Suppression threshold, ``>= 2`` (``k = 1`` gives :math:`\\delta \\ge \\beta`: no
        protection beyond sampling).
    beta : float
        Sampling probability, ``0 < beta < 1``.
    epsilon : float
        The release's :math:`\\epsilon`, ``>= -ln(1 - beta)`` (Theorem 3.9 of [LQS12]_); the
        resulting :math:`\\delta = d(k, \\beta, \\epsilon)` must be below ``beta``
        (Definition 3 of [LQS12]_).
    levels : dict of QID -> int
        Generalization level of each QID (see the module docstring).
    widths : dict of QID -> int
        Bin width (>= 1) of each numeric QID without a hierarchy, instead of a level.

    Every QID of ``schema.qid`` must be in exactly one of ``levels`` and ``widths``
    (:meth:`check_settings`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    k: int
    beta: float
    epsilon: float
    levels: dict[str, Annotated[int, AfterValidator(_check_level)]] = Field(default_factory=dict)
    widths: dict[str, Annotated[int, AfterValidator(_check_width)]] = Field(default_factory=dict)

    @field_validator("k")
    @classmethod
    def _check_k(cls, k: int) -> int:
        if k < 2:
            raise ValueError(
                "a cell of one record is published whenever it is sampled, so k = 1 gives "
                "delta >= beta (no protection beyond sampling; Definition 3 of Li-Qardaji-Su "
                "needs beta > delta); use k >= 2 (e.g. k = 20)"
            )
        return k

    @field_validator("beta")
    @classmethod
    def _check_beta(cls, beta: float) -> float:
        if not 0.0 < beta < 1.0:
            raise ValueError(
                "the sampling probability must satisfy 0 < beta < 1 (beta = 1 publishes "
                "without sampling, which Proposition 1 of Li-Qardaji-Su shows is not DP for "
                "any delta < 1); e.g. beta = 0.1"
            )
        return beta

    @field_validator("epsilon")
    @classmethod
    def _check_epsilon(cls, epsilon: float, info: ValidationInfo) -> float:
        if not (math.isfinite(epsilon) and epsilon > 0.0):
            raise ValueError("must be a finite number > 0 (e.g. epsilon = 1.0)")
        k, beta = info.data.get("k"), info.data.get("beta")
        if k is None or beta is None:  # reported on their own keys
            return epsilon
        epsilon_min = -math.log1p(-beta)
        if epsilon < epsilon_min:
            raise ValueError(
                f"Theorem 3.9 of Li-Qardaji-Su needs epsilon >= -ln(1 - beta) = "
                f"{epsilon_min:.6g} for beta = {beta!r} (a suppressed cell's probability ratio "
                f"can be as low as 1 - beta); use epsilon >= {_ceil6(epsilon_min)} or a smaller "
                "beta"
            )
        try:
            figures = accounting(k, beta, epsilon)
        except InvalidParameter as exc:
            raise ValueError(str(exc)) from None
        if not figures["dps"]:
            raise ValueError(
                f"delta = d(k={k}, beta={beta!r}, epsilon={epsilon!r}) = "
                f"{figures['delta']:.4g} is not below beta, a vacuous guarantee (Definition 3 of "
                "Li-Qardaji-Su); raise k or epsilon"
            )
        return epsilon

    def check_settings(self, settings: Settings) -> None:
        """Check the section against ``schema`` and ``output`` (called when the configuration
        is loaded). Raises ``ValueError`` naming the key, the value and the fix."""
        where = "mechanism.sampled_k_anonymity"
        schema = settings.schema
        qids = list(schema.qid)
        if settings.output.format != "generalized":
            raise ValueError(
                f"{where}: output.format = {settings.output.format!r}, but this mode publishes "
                "generalized cells; set output.format = 'generalized'"
            )
        for table in ("levels", "widths"):
            for name, value in getattr(self, table).items():
                if name not in qids:
                    raise ValueError(
                        f"{where}.{table}.{name} = {value}: {name!r} is not a QID (schema.qid = "
                        f"{qids}); remove it or fix the name"
                    )
        for name in qids:
            in_levels, in_widths = name in self.levels, name in self.widths
            if in_levels == in_widths:
                raise ValueError(
                    f"{where}: QID {name!r} needs exactly one of levels.{name} and "
                    f"widths.{name} ({'both are' if in_levels else 'neither is'} set); the "
                    "generalization must be fixed before any data is seen"
                )
            hierarchy = name in schema.hierarchies
            declared = schema.numeric is not None
            numeric = declared and name in (schema.numeric or ())
            if in_widths and hierarchy:
                raise ValueError(
                    f"{where}.widths.{name} = {self.widths[name]}: {name!r} has a hierarchy "
                    f"(schema.hierarchies); generalize it with levels.{name} instead"
                )
            if in_widths and not numeric:
                raise ValueError(
                    f"{where}.widths.{name} = {self.widths[name]}: bins need {name!r} declared "
                    "numeric in schema.numeric (its type may not be detected from the data, or "
                    "the generalization would depend on it)"
                )
            if in_levels and not hierarchy and self.levels[name] > _TOP:
                raise ValueError(
                    f"{where}.levels.{name} = {self.levels[name]}: {name!r} has no hierarchy, so "
                    f"its levels are 0 (the exact value) and 1 ('*'); use one of those, "
                    f"widths.{name} (numeric), or give it a hierarchy"
                )
            if in_levels and not hierarchy and self.levels[name] == 0 and not declared:
                raise ValueError(
                    f"{where}.levels.{name} = 0 publishes {name!r} exactly, so its type must be "
                    "declared: list the numeric QIDs in schema.numeric (an empty list if none), "
                    "or the published form would depend on the data"
                )

    def rules(self) -> dict[str, dict[str, int]]:
        """The generalization as published in the manifest: QID -> ``{"level": h}`` or
        ``{"width": w}``."""
        out = {name: {"level": level} for name, level in self.levels.items()}
        out.update({name: {"width": width} for name, width in self.widths.items()})
        return out


def _ceil6(x: float) -> float:
    """``x`` rounded up to 6 significant digits (a suggestion that is itself valid)."""
    scale = 10.0 ** (5 - math.floor(math.log10(abs(x))))
    return math.ceil(x * scale) / scale


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
    # imported here: stream_release.grouping.encoding imports stream_release.config
    from stream_release.grouping.encoding import load_hierarchies

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
            return attribute.levels[codes, level].astype(np.int64)
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


# --- the audit, from the published files alone -------------------------------------------------


def verify_release(manifest: Mapping[str, Any], lines: Sequence[Mapping[str, Any]]) -> list[str]:
    """Problems of one ``sampled-k-anonymity`` release, from its published files alone.

    Recomputes :math:`\\delta = d(k, \\beta, \\epsilon)` (Theorem 3.9 of [LQS12]_), the
    Chernoff bound, the floor and the worst cell size from the manifest's ``k, beta,
    epsilon`` and checks the manifest states them; checks that the parameters are valid
    (``epsilon >= -ln(1-beta)``, ``delta < beta``), that every published (generalized QID
    tuple, sensitive value) count is ``>= k``, that counts sum to each line's size, that QID
    cells are distinct, in canonical order, and generalized as the manifest's
    ``generalization`` says (``*`` for the top level of a QID without a hierarchy, a
    ``[lo, hi]`` bin of the stated width), and that ``published`` and ``groups`` match the
    lines. A series of one release must state its own figures as the series' total (later
    releases: :func:`verify_series`).

    Returns
    -------
    list of str, one line per problem; empty when the release passes.
    """
    block = _mapping(manifest.get("mechanism"))
    if block.get("kind") != KIND:
        return [f"mechanism kind is {block.get('kind')!r}, not {KIND!r}"]
    k, beta, epsilon = block.get("k"), block.get("beta"), block.get("epsilon")
    try:
        section = SampledKAnonymitySettings(
            k=k, beta=beta, epsilon=epsilon, **_generalization(block.get("generalization"))
        )
    except (ValueError, TypeError) as exc:
        return [f"manifest parameters are invalid: {' '.join(str(exc).split())}"]
    problems: list[str] = []
    figures = accounting(section.k, section.beta, section.epsilon)
    for key, name in (
        ("delta", "delta"),
        ("log10_delta", "log10_delta"),
        ("delta_chernoff", "delta_chernoff"),
        ("delta_floor", "delta_floor"),
        ("worst_group_size", "argmax_n"),
    ):
        stated, value = block.get(key), figures[name]
        if not _close(stated, value):
            problems.append(f"manifest mechanism.{key} = {stated!r}, recomputed {value!r}")
    if block.get("sensitive_in_cell") is not True:
        problems.append("manifest does not state sensitive_in_cell = true")
    problems += _check_lines(section, manifest, lines)
    series = block.get("series")
    if not isinstance(series, Mapping):
        problems.append("manifest mechanism.series is missing")
    elif manifest.get("sequence") == 1:
        problems += _check_series(series, 1, float(epsilon), float(figures["log_delta"]))
    return problems


def verify_series(
    releases: Sequence[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]],
) -> list[str]:
    """Problems of a series: :func:`verify_release` of each release (each prefixed
    ``release N:``), then its ``series`` total against basic composition of the per-release
    ``(epsilon, delta)`` of releases 1..N ([LQS12]_ §2.7), summed in log space for delta."""
    problems: list[str] = []
    epsilon, log_delta = 0.0, -math.inf
    for count, (manifest, lines) in enumerate(releases, start=1):
        label = f"release {manifest.get('sequence', count)}"
        problems.extend(f"{label}: {p}" for p in verify_release(manifest, lines))
        block = manifest.get("mechanism")
        if not isinstance(block, Mapping) or block.get("kind") != KIND:
            continue
        try:
            own_log = float(
                accounting(int(block["k"]), float(block["beta"]), float(block["epsilon"]))[
                    "log_delta"
                ]
            )
        except (KeyError, TypeError, ValueError):
            continue  # reported by verify_release
        epsilon, _ = compose_basic([(epsilon, 0.0), (float(block["epsilon"]), 0.0)])
        log_delta = float(np.logaddexp(log_delta, own_log))
        series = block.get("series")
        if isinstance(series, Mapping) and count > 1:
            problems.extend(
                f"{label}: {p}" for p in _check_series(series, count, epsilon, log_delta)
            )
    return problems


def _generalization(raw: Any) -> dict[str, dict[str, int]]:
    """``levels`` and ``widths`` from the manifest's ``generalization`` block."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"generalization = {raw!r} is not an object QID -> rule")
    levels, widths = {}, {}
    for name, rule in raw.items():
        if isinstance(rule, Mapping) and set(rule) == {"level"}:
            levels[name] = rule["level"]
        elif isinstance(rule, Mapping) and set(rule) == {"width"}:
            widths[name] = rule["width"]
        else:
            raise ValueError(f"generalization.{name} = {rule!r}: need {{level}} or {{width}}")
    return {"levels": levels, "widths": widths}


def _check_series(
    series: Mapping[str, Any], releases: int, epsilon: float, log_delta: float
) -> list[str]:
    problems = []
    if series.get("releases") != releases:
        problems.append(f"series.releases = {series.get('releases')!r}, expected {releases}")
    if not _close(series.get("epsilon"), epsilon):
        problems.append(
            f"series.epsilon = {series.get('epsilon')!r} but basic composition gives {epsilon!r}"
        )
    log10 = log_delta / math.log(10.0)
    if not _close(series.get("log10_delta"), log10):
        problems.append(
            f"series.log10_delta = {series.get('log10_delta')!r} but basic composition gives "
            f"{log10!r}"
        )
    if not _close(series.get("delta"), math.exp(log_delta)):
        problems.append(
            f"series.delta = {series.get('delta')!r} but basic composition gives "
            f"{math.exp(log_delta)!r}"
        )
    return problems


def _check_lines(
    section: SampledKAnonymitySettings,
    manifest: Mapping[str, Any],
    lines: Sequence[Mapping[str, Any]],
) -> list[str]:
    problems: list[str] = []
    k = section.k
    schema = _mapping(manifest.get("schema"))
    qids = list(schema.get("qid") or section.rules())
    if set(qids) != set(section.rules()):
        problems.append(f"schema.qid {qids} differ from the generalization's QIDs")
    seen: set[str] = set()
    published = 0
    for g, line in enumerate(lines):
        where = f"group {g}"
        counts = line.get("sensitive")
        size = line.get("size")
        if not isinstance(counts, Mapping) or not _is_int(size):
            problems.append(f"{where}: size or sensitive missing or malformed")
            continue
        small = {v: c for v, c in counts.items() if not _is_int(c) or c < k}
        if small:
            value, count = next(iter(small.items()))
            problems.append(
                f"{where}: sensitive value {value!r} is published {count!r} times, below k = {k} "
                f"({len(small)} such values)"
            )
        if sum(c for c in counts.values() if _is_int(c)) != size:
            problems.append(f"{where}: size {size} but its sensitive counts sum differently")
        published += int(size)
        qid = line.get("qid")
        if not isinstance(qid, Mapping) or list(qid) != qids:
            problems.append(f"{where}: qid {qid!r} does not list the QIDs {qids} in order")
            continue
        key = json.dumps(qid, sort_keys=True)
        if key in seen:
            problems.append(f"{where}: the QID cell {dict(qid)} appears on two lines")
        seen.add(key)
        for name, value in qid.items():
            problem = _check_value(section, name, value)
            if problem:
                problems.append(f"{where}: {problem}")
                break
    for key, value in (("published", published), ("groups", len(lines))):
        if key in manifest and manifest[key] != value:
            problems.append(f"manifest {key} = {manifest[key]!r} but the lines give {value}")
    return problems


def _check_value(section: SampledKAnonymitySettings, name: str, value: Any) -> str | None:
    """Why a published QID value does not fit the stated generalization (None if it fits)."""
    width = section.widths.get(name)
    if width is not None:
        ok = (
            isinstance(value, list)
            and len(value) == 2
            and all(_is_int(v) for v in value)
            and value[0] % width == 0
            and value[1] - value[0] == width - 1
        )
        return None if ok else f"{name} = {value!r} is not a bin [lo, lo + {width - 1}]"
    if isinstance(value, list):
        return f"{name} = {value!r}: a level publishes one value or label, not a list"
    return None


def _close(stated: Any, value: float | int | bool) -> bool:
    if isinstance(stated, bool) or not isinstance(stated, numbers.Real):
        return False
    if math.isinf(value) or math.isinf(stated):
        return stated == value
    return math.isclose(float(stated), float(value), rel_tol=_REL_TOL, abs_tol=0.0) or (
        value == 0 and stated == 0
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
