"""Parameters of mode ``sampled-k-anonymity``: its configuration table, its accounting of
(epsilon, delta) (Theorem 3.9 of [LQS12]) and the names its manifests use. Shared by the
mechanism (:mod:`stream_release.mechanisms.sampled_k_anonymity.mechanism`) and its audit
(:mod:`stream_release.mechanisms.sampled_k_anonymity.audit`), which import nothing else of
each other.

References
----------
.. [LQS12] N. Li, W. Qardaji, D. Su. On Sampling, Anonymization, and Differential Privacy
   (or, K-Anonymization Meets Differential Privacy). ASIACCS 2012 (arXiv:1101.2604).
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from stream_release.errors import InvalidParameter

if TYPE_CHECKING:
    from stream_release.config._sections import ConfiguredSections, SchemaSettings

__all__ = [
    "KIND",
    "REFERENCE",
    "SERIES_STATE_KEY",
    "SampledKAnonymitySettings",
    "accounting",
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

_WHERE = "mechanism.sampled_k_anonymity"
"""The section's name in the configuration, which its errors start with."""


# --- the configuration -------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def accounting(k: int, beta: float, epsilon: float) -> dict[str, float | int | bool]:
    """:func:`~stream_release.core.privacy.sampling_dp_calculators.calc_delta` (Theorem 3.9 of
    [LQS12]_), cached: the configuration, every release and the audit ask for the same few
    triples."""
    # imported here: it loads scipy.stats (about half a second), and every start of the
    # worker or a command loads this module with the configuration
    from stream_release.core.privacy.sampling_dp_calculators import calc_delta

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

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

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

    def check_settings(self, settings: ConfiguredSections) -> None:
        """Check the section against ``schema`` and ``output`` (called when the configuration
        is loaded). Raises ``ValueError`` naming the key, the value and the fix."""
        schema = settings.schema
        qids = list(schema.qid)
        if settings.output.format != "generalized":
            raise ValueError(
                f"{_WHERE}: output.format = {settings.output.format!r}, but this mode publishes "
                "generalized cells; set output.format = 'generalized'"
            )
        self._check_names(qids)
        for name in qids:
            self._check_one_rule(name)
            if name in self.widths:
                self._check_width_rule(name, schema)
            else:
                self._check_level_rule(name, schema)

    def _check_names(self, qids: list[str]) -> None:
        """Check that every name in ``levels`` and ``widths`` is one of ``qids``."""
        for table in ("levels", "widths"):
            for name, value in getattr(self, table).items():
                if name not in qids:
                    raise ValueError(
                        f"{_WHERE}.{table}.{name} = {value}: {name!r} is not a QID (schema.qid = "
                        f"{qids}); remove it or fix the name"
                    )

    def _check_one_rule(self, name: str) -> None:
        """Check that QID ``name`` is in exactly one of ``levels`` and ``widths``."""
        in_levels, in_widths = name in self.levels, name in self.widths
        if in_levels == in_widths:
            raise ValueError(
                f"{_WHERE}: QID {name!r} needs exactly one of levels.{name} and "
                f"widths.{name} ({'both are' if in_levels else 'neither is'} set); the "
                "generalization must be fixed before any data is seen"
            )

    def _check_width_rule(self, name: str, schema: SchemaSettings) -> None:
        """Check that QID ``name``, binned by ``widths``, has no hierarchy and is declared
        numeric."""
        if name in schema.hierarchies:
            raise ValueError(
                f"{_WHERE}.widths.{name} = {self.widths[name]}: {name!r} has a hierarchy "
                f"(schema.hierarchies); generalize it with levels.{name} instead"
            )
        if schema.numeric is None or name not in schema.numeric:
            raise ValueError(
                f"{_WHERE}.widths.{name} = {self.widths[name]}: bins need {name!r} declared "
                "numeric in schema.numeric (its type may not be detected from the data, or "
                "the generalization would depend on it)"
            )

    def _check_level_rule(self, name: str, schema: SchemaSettings) -> None:
        """Check that QID ``name``, generalized by ``levels`` without a hierarchy, is at level 0
        or 1, and at level 0 (published exactly) of a declared type."""
        if name in schema.hierarchies:
            return
        if self.levels[name] > _TOP:
            raise ValueError(
                f"{_WHERE}.levels.{name} = {self.levels[name]}: {name!r} has no hierarchy, so "
                f"its levels are 0 (the exact value) and 1 ('*'); use one of those, "
                f"widths.{name} (numeric), or give it a hierarchy"
            )
        if self.levels[name] == 0 and schema.numeric is None:
            raise ValueError(
                f"{_WHERE}.levels.{name} = 0 publishes {name!r} exactly, so its type must be "
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
