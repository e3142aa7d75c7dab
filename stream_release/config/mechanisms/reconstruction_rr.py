"""Parameters of mode ``reconstruction-private-rr``: its configuration table, the names its
manifests and lines use, and the helpers its audit and estimator read them with. Shared by the
mechanism (:mod:`stream_release.mechanisms.reconstruction_rr.mechanism`), its audit
(:mod:`stream_release.mechanisms.reconstruction_rr.audit`) and its estimator, which import
nothing else of each other.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

from stream_release.config.hierarchy import load_hierarchy
from stream_release.core.privacy.reconstruction import Bound, rp_cap
from stream_release.core.privacy.validation import check_open_probability, check_positive
from stream_release.errors import InvalidParameter, SchemaError

__all__ = ["KIND", "ReconstructionRRSettings"]

KIND = "reconstruction-private-rr"

PAPER = (
    "K. Wang, C. Han, A. W.-C. Fu. Randomization Resilient To Sensitive Reconstruction. "
    "arXiv:1202.3179"
)
SERIAL_RULE = (
    "A row's randomized value is drawn once per (person, sensitive value), keyed by the "
    "pseudonym, and reused in every later release; a micro group's count of published trials "
    "(trials_total) never decreases and never exceeds max_trials, so every trial an adversary "
    "has seen across the series counts toward the cap of Theorem 5.13/5.11."
)
SCALING = (
    "Each micro group publishes all its rows: its trials with their randomized values, every "
    "other row as a copy of a present trial with the same original value (Algorithm 1's "
    "Scaling, value-matched), and a uniform random value for a row whose value has no present "
    "trial (only once the group's trial budget is spent). A group with no trial present is "
    "suppressed."
)
ESTIMATOR = (
    "Lemma 1: over the lines matching a QID predicate, est = (O* - |S| (1-p)/m) / p with O* the "
    "published count of the value and |S| the summed sizes; Var(est) = sum_g size_g weight_g "
    "v(F'_g) / p^2 with v(f) = f q1 (1-q1) + (1-f) q0 (1-q0), q1 = p + (1-p)/m, q0 = (1-p)/m."
)

_LEDGER = b"g"
_TRIAL = b"t"
_PARAMS = b"p"
_DIGEST = 16
_SEP = b"\x1f"


# --- settings ------------------------------------------------------------------------------


class ReconstructionRRSettings(BaseModel):
    """Parameters of ``reconstruction-private-rr`` (the ``[mechanism]`` keys of this mode).

    Attributes
    ----------
    p : retention probability of uniform perturbation (Eq. 1), ``0 < p < 1``
    epsilon : relative reconstruction error, ``0 < ε <= 1 + (1-p)/(m p)`` (Corollary 4.10)
    delta : floor on the Chernoff tail bounds, ``0 < δ < 1`` (Definition 3)
    bound : ``"theorem_5_13"`` (Eq. 10, the paper's algorithm; default) or
        ``"theorem_5_11"`` (Eq. 9, full Chernoff bounds, a smaller cap)
    domain : the full sensitive domain, every value the attribute can take (absent ones
        included), in a fixed order; ``m = len(domain) >= 2``
    domain_hierarchy : instead of ``domain``, an ARX hierarchy file (``leaf;...;*``) whose leaves,
        in depth-first order, are the domain; read when the settings are validated. A relative
        path is taken from the validation context's ``base_dir`` (``model_validate(raw,
        context={"base_dir": config_dir})``), else from the working directory.

    The cap at ``f = 1`` must be at least 1, so that a one-row group can be published.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    p: float
    epsilon: float
    delta: float
    bound: Bound = "theorem_5_13"
    domain: tuple[str, ...] = ()
    domain_hierarchy: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _load_domain(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, Mapping) or data.get("domain_hierarchy") is None:
            return data
        path = Path(str(data["domain_hierarchy"]))
        base = (info.context or {}).get("base_dir")
        if base is not None and not path.is_absolute():
            path = Path(base) / path
        leaves = _hierarchy_leaves(path)
        given = data.get("domain")
        if given and tuple(given) != leaves:
            raise ValueError(
                f"domain = {list(given)!r} differs from the leaves of domain_hierarchy = "
                f"{str(path)!r} ({list(leaves)!r}): give one of them"
            )
        return {**data, "domain": leaves, "domain_hierarchy": path}

    @model_validator(mode="after")
    def _check(self) -> ReconstructionRRSettings:
        try:
            _check_domain(self.domain)
            check_open_probability(self.p, "p")
            check_positive(self.epsilon, "epsilon")
            check_open_probability(self.delta, "delta")
            cap = rp_cap(self.p, self.epsilon, self.delta, self.m, 1.0, bound=self.bound)
        except InvalidParameter as exc:
            raise ValueError(str(exc)) from None
        if cap < 1.0:
            raise ValueError(
                f"p = {self.p}, epsilon = {self.epsilon}, delta = {self.delta}, m = {self.m}: "
                f"the cap of {self.bound} at f = 1 is {cap:.4g} < 1, so not even a one-row "
                "group can be published; lower p, epsilon or delta"
            )
        return self

    @property
    def m(self) -> int:
        """``m``, the size of the full sensitive domain."""
        return len(self.domain)

    @property
    def caps(self) -> dict[str, float]:
        """``s(f = 1)`` under Theorem 5.13 (Eq. 10) and Theorem 5.11 (Eq. 9)."""
        args = (self.p, self.epsilon, self.delta, self.m, 1.0)
        return {
            "theorem_5_13": rp_cap(*args, bound="theorem_5_13"),
            "theorem_5_11": rp_cap(*args, bound="theorem_5_11"),
        }

    @property
    def max_trials(self) -> int:
        """``floor(s*)`` of the configured bound: the most trials a micro group ever publishes."""
        return math.floor(self.caps[self.bound])

    def parameters(self) -> dict[str, Any]:
        """The parameters a series must keep: ``p, epsilon, delta, bound, domain``."""
        return {
            "p": self.p,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "bound": self.bound,
            "domain": list(self.domain),
        }


def _hierarchy_leaves(path: Path) -> tuple[str, ...]:
    try:
        return load_hierarchy(path, "sensitive domain").leaves
    except SchemaError as exc:
        raise ValueError(f"domain_hierarchy = {str(path)!r}: {exc}") from None


def _check_domain(domain: tuple[str, ...]) -> None:
    if len(domain) < 2:
        raise InvalidParameter(
            f"domain = {list(domain)!r}: list the full sensitive domain, at least 2 values, "
            "absent ones included (or set domain_hierarchy to the attribute's ARX file); m is "
            "fixed by it, never by the data"
        )
    if any(not v for v in domain):
        raise InvalidParameter(f"domain = {list(domain)!r}: a value is empty; remove it")
    twice = sorted(v for v, count in Counter(domain).items() if count > 1)
    if twice:
        raise InvalidParameter(f"domain: values {twice} are listed twice; list each value once")


def _canonical(qid: Mapping[str, Any]) -> bytes:
    """A group line's QID object as canonical JSON (attribute order kept): the identity of a
    micro group across releases for the audit."""
    return orjson.dumps([[k, v] for k, v in qid.items()])


# --- shared with the audit and the estimator ------------------------------------------------


def _block(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = manifest.get("mechanism")
    return inner if isinstance(inner, Mapping) else manifest


def _field(line: Mapping[str, Any], name: str) -> Any:
    if name in line:
        return line[name]
    extra = line.get("extra")
    return extra.get(name) if isinstance(extra, Mapping) else None
