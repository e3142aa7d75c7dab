"""The settings a global-guarantee manifest states, against the configuration and the papers.

A manifest states the ``l``, the protected values, the strategy and the group-size cap it was
planned with; the audit needs them (``1/l`` is the bound, the cap decides which pairs a
forced member may take past it). Taken from the manifest under audit alone they prove
nothing: a manifest could name no real value protected, or a cap of 2. So they are checked:

* always, against the papers: ``l > 1``; the base ratio at least ``l`` and, for the
  constant-ratio strategy, at least ``n_c = 1 / (1 - (1 - 1/l)^{1/k'})`` ([WFLWX10] §6.1),
  for the geometric one ``alpha l`` (§6.2); the cap at least ``max(base, k)``;
* with ``--config``, against the configuration: ``l``, strategy, ``k_prime`` or ``alpha``,
  the protected values, ``min_group_size`` and ``cap = ceil(max(base, k) max_group_factor)``.

A weakened setting (the ``localized`` baseline, a bound ``1/l`` above :data:`WEAK_BOUND`) must
be stated: the manifest's ``strategy.acknowledged`` lists the configuration's acknowledgement
keys (``acknowledge_localized``, ``acknowledge_weak_l``), so that a reader of the public files
sees it. And a protected value must name a value: one that no row of the release holds while
an unprotected value of it is the same up to case and surrounding blanks protected no one
(issue 26: ``"adm-clerical"`` for ``Adm-clerical``); the release's values are its published
counts and, with the private record, its suppressed ones.

Standard library only; the defaults are :mod:`stream_release.config`'s (a test keeps them
equal) so that the audit imports nothing from the planning code.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from stream_release.audit.files import AuditInputError, read_toml

RATIO_SLACK = 1e-12
"""Relative rounding a stated base ratio may lie below the closed form (the safe side: the
planner rounds its margins up, never down by more than a float's error)."""


WEAK_BOUND = Fraction(9, 10)
"""A bound ``1/l`` above this is weakened (``acknowledge_weak_l``); the configuration's
:data:`stream_release.config._sections.WEAK_BOUND` (a test keeps them equal)."""


@dataclass(frozen=True)
class ConfiguredPrivacy:
    """``[privacy]`` and ``[grouping]`` of a configuration file, with the service defaults."""

    ell: float = 2.0
    strategy: str = "constant-ratio"
    k_prime: int = 20
    alpha: float = 2.0
    protected: tuple[str, ...] = ()
    min_group_size: int = 2
    max_group_factor: float = 2.0


def read_privacy(config: Path) -> ConfiguredPrivacy:
    """The privacy settings of a configuration file (TOML)."""
    data = read_toml(config)
    privacy = _table(data, "privacy", config)
    grouping = _table(data, "grouping", config)
    default = ConfiguredPrivacy()
    protected = privacy.get("protected", [])
    if not isinstance(protected, list) or not all(isinstance(v, str) for v in protected):
        raise AuditInputError(f"{config}: privacy.protected must be a list of strings")
    return ConfiguredPrivacy(
        ell=_number(privacy, "l", default.ell, config),
        strategy=str(privacy.get("strategy", default.strategy)),
        k_prime=int(_number(privacy, "k_prime", default.k_prime, config)),
        alpha=_number(privacy, "alpha", default.alpha, config),
        protected=tuple(protected),
        min_group_size=int(_number(privacy, "min_group_size", default.min_group_size, config)),
        max_group_factor=_number(grouping, "max_group_factor", default.max_group_factor, config),
    )


@dataclass(frozen=True)
class ConfiguredOutput:
    """What the utility figures of a manifest were computed with: ``[output] queries`` and
    ``query_seed`` (the count-query workload) and ``[schema] numeric`` (the numeric QIDs;
    ``None``: those whose every value is a number), with the service defaults."""

    queries: int = 5000
    query_seed: int = 0
    numeric: tuple[str, ...] | None = None


def read_output(config: Path) -> ConfiguredOutput:
    """The query workload and numeric QIDs of a configuration file (TOML)."""
    data = read_toml(config)
    output = _table(data, "output", config)
    schema = _table(data, "schema", config)
    default = ConfiguredOutput()
    numeric = schema.get("numeric")
    if numeric is not None and (
        not isinstance(numeric, list) or not all(isinstance(v, str) for v in numeric)
    ):
        raise AuditInputError(f"{config}: schema.numeric must be a list of strings")
    queries = _number(output, "queries", default.queries, config)
    seed = _number(output, "query_seed", default.query_seed, config)
    if queries != int(queries) or queries < 0 or seed != int(seed):
        raise AuditInputError(f"{config}: output.queries and output.query_seed must be integers")
    return ConfiguredOutput(
        queries=int(queries),
        query_seed=int(seed),
        numeric=None if numeric is None else tuple(numeric),
    )


def check_settings(
    manifest: dict[str, Any], configured: ConfiguredPrivacy | None, problems: list[str]
) -> None:
    """The manifest's ``l``, ``strategy`` and cap against the papers and, when given, the
    configuration (see the module docstring). The fields' types were checked on reading."""
    strategy = manifest["strategy"]
    ell = float(manifest["l"])
    base = float(strategy.get("base_ratio", ell))
    k = int(strategy.get("min_group_size", 1))
    cap = strategy.get("group_size_cap")
    name = str(strategy.get("name"))
    floor = _paper_ratio(name, ell, strategy)
    if base < floor * (1 - RATIO_SLACK):
        problems.append(
            f"manifest strategy.base_ratio = {base:.6g} is below the {name} strategy's "
            f"{floor:.6g} for l = {ell:g}"
        )
    if isinstance(cap, int) and cap < max(math.ceil(base), k):
        problems.append(
            f"manifest strategy.group_size_cap = {cap} is below max(base ratio, min_group_size)"
        )
    stated_ack = set(strategy.get("acknowledged") or [])
    for key, weakened in (
        ("acknowledge_localized", f"strategy.name = {name!r}" if name == "localized" else ""),
        ("acknowledge_weak_l", f"l = {ell:g}" if Fraction(ell) < 1 / WEAK_BOUND else ""),
    ):
        if weakened and key not in stated_ack:
            problems.append(
                f"manifest {weakened} is a weakened setting, but strategy.acknowledged does not "
                f"state {key}: every manifest of a weakened series says so"
            )
    if configured is None:
        return
    stated = {
        "l": ell,
        "strategy.name": name,
        "strategy.protected": sorted(strategy.get("protected") or []),
        "strategy.min_group_size": k,
    }
    wanted: dict[str, object] = {
        "l": configured.ell,
        "strategy.name": configured.strategy,
        "strategy.protected": sorted(configured.protected),
        "strategy.min_group_size": configured.min_group_size,
    }
    if name == "constant-ratio":
        stated["strategy.k_prime"] = strategy.get("k_prime")
        wanted["strategy.k_prime"] = configured.k_prime
    if name == "geometric":
        stated["strategy.alpha"] = strategy.get("alpha")
        wanted["strategy.alpha"] = configured.alpha
    if cap is not None:
        stated["strategy.group_size_cap"] = cap
        wanted["strategy.group_size_cap"] = math.ceil(
            max(base, configured.min_group_size) * configured.max_group_factor
        )
    for key, value in stated.items():
        if value != wanted[key]:
            problems.append(
                f"manifest {key} = {value!r} but the configuration gives {wanted[key]!r}"
            )


def check_protected_named(
    manifest: dict[str, Any],
    lines: list[dict[str, Any]],
    record: dict[str, Any] | None,
    problems: list[str],
) -> None:
    """Each protected value of the manifest that no row of the release holds, while an
    unprotected value of the release is the same up to case and surrounding blanks, is a
    problem: its holders were not protected. The release's values: the group lines' counts
    and, with the private record, the suppressed rows' (:func:`same_value`)."""
    protected = (manifest.get("strategy") or {}).get("protected") or []
    if not protected:
        return
    held: set[str] = set()
    for line in lines:
        held.update(str(v) for v, c in (line.get("sensitive") or {}).items() if c)
    suppressed = (record or {}).get("suppressed")
    if isinstance(suppressed, dict) and isinstance(suppressed.get("sensitive"), dict):
        held.update(str(v) for v, c in suppressed["sensitive"].items() if c)
    wanted = set(protected)
    unprotected = sorted(held - wanted)
    for value in protected:
        if value in held:
            continue
        same = [w for w in unprotected if same_value(w, value)]
        if same:
            problems.append(
                f"manifest strategy.protected names {value!r}, which no row of the release "
                f"holds, while {same[0]!r} (the same up to case and blanks) is not protected: "
                "its holders were not protected"
            )


def same_value(a: str, b: str) -> bool:
    """``a`` and ``b`` equal once surrounding blanks are trimmed and case is folded (the
    configuration's rule, :func:`stream_release.config.same_value`; a test keeps them equal)."""
    return a.strip(" \t\r\n").casefold() == b.strip(" \t\r\n").casefold()


def _paper_ratio(name: str, ell: float, strategy: dict[str, Any]) -> float:
    """The least base ratio the papers allow the strategy (``l`` for the others)."""
    k_prime, alpha = strategy.get("k_prime"), strategy.get("alpha")
    if name == "constant-ratio" and isinstance(k_prime, int) and k_prime >= 1:
        return -1.0 / math.expm1(math.log1p(-1.0 / ell) / k_prime)
    if name == "geometric" and isinstance(alpha, int | float) and alpha > 1:
        return float(alpha) * ell
    return ell


def _table(data: dict[str, Any], name: str, config: Path) -> dict[str, Any]:
    table = data.get(name) or {}
    if not isinstance(table, dict):
        raise AuditInputError(f"{config}: [{name}] must be a table")
    return table


def _number(table: dict[str, Any], key: str, default: float, config: Path) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AuditInputError(f"{config}: {key} = {value!r} is not a number")
    return float(value)
