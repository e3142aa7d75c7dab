r"""The analyst's estimator for mode ``reconstruction-private-rr`` [WHF12].

:func:`reconstruct` answers ``COUNT(*) WHERE <QID predicate> AND SA = x`` from the group lines
of one release (Lemma 1, unbiased) with its variance; the mechanism that publishes them is
:mod:`stream_release.mechanisms.reconstruction_rr.mechanism`.

References
----------
.. [WHF12] K. Wang, C. Han, A. W.-C. Fu. Randomization Resilient To Sensitive
   Reconstruction. arXiv:1202.3179, 2012.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stream_release.config.mechanisms.reconstruction_rr import KIND, _block, _field
from stream_release.core.privacy.reconstruction_estimate import CountEstimate, reconstruct_count
from stream_release.errors import InvalidParameter

__all__ = ["Where", "reconstruct"]

Where = Mapping[str, Any] | Callable[[Mapping[str, Any]], bool] | None
"""A QID predicate: ``None`` (every group); a mapping attribute -> value (equality) or -> list
of values (any of them); or a function of a line's ``qid`` object returning a bool."""


def reconstruct(
    lines: Sequence[Mapping[str, Any]],
    manifest: Mapping[str, Any],
    value: str,
    where: Where = None,
) -> CountEstimate:
    r"""Estimated ``COUNT(*) WHERE <where> AND SA = value`` from published group lines.

    Aggregate reconstruction of §3.1 and Lemma 1 of [WHF12] on the groups ``S`` whose exact
    QIDs satisfy ``where``: ``est = (O* - |S| (1-p)/m) / p`` with ``O* = sum_g sensitive_g[value]``
    and ``|S| = sum_g size_g``, unbiased by Theorem 5.18 (unclipped: it can be negative or above
    ``|S|``). The variance is that of :func:`~stream_release.core.privacy.reconstruction_estimate.
    reconstruct_count` with each group's ``trials`` (``Var = sum_g size_g weight_g v(F'_g) /
    p²``); ``p`` and ``m`` come from the manifest.

    Parameters
    ----------
    lines : the group lines of one release (``size``, ``qid``, ``sensitive``, ``trials``)
    manifest : the release's manifest (or its ``mechanism`` block)
    value : a value of the manifest's ``domain``
    where : QID predicate, see :data:`Where`

    Returns
    -------
    CountEstimate (estimate, frequency, observed, size, variance, standard_error)

    Notes
    -----
    Rows whose value had no trial present in their group published uniform noise (only once a
    group's budget is spent): they bias ``est`` toward ``|S|/m`` and the variance misses them.
    Consecutive releases share sticky values: their estimates are correlated, not independent.

    Examples
    --------
    A group of |S| = 100 with p = 0.5, m = 14 and O* = 40:

    >>> block = {"kind": KIND, "p": 0.5, "m": 14, "domain": [f"v{i}" for i in range(14)]}
    >>> line = {"qid": {"a": 1}, "size": 100, "trials": 100, "sensitive": {"v0": 40, "v1": 60}}
    >>> round(reconstruct([line], block, "v0").estimate, 3)
    72.857
    """
    block = _block(manifest)
    if block.get("kind") != KIND:
        raise InvalidParameter(f"manifest: mechanism kind {block.get('kind')!r}, not {KIND!r}")
    domain = list(block.get("domain") or ())
    if value not in domain:
        raise InvalidParameter(
            f"value = {value!r}: not in the release's sensitive domain {domain}; pick one of them"
        )
    p, m = block.get("p"), block.get("m", len(domain))
    if not isinstance(p, (int, float)) or isinstance(p, bool):
        raise InvalidParameter(
            f"manifest: mechanism p = {p!r} is not a number; give the manifest of a "
            f"{KIND!r} release"
        )
    match = _predicate(where)
    chosen = [line for line in lines if match(line.get("qid") or {})]
    if not chosen:
        raise InvalidParameter(
            f"where = {where!r}: no published group matches, so the count has no estimate "
            "(|S| = 0); widen the predicate"
        )
    observed = [int((line.get("sensitive") or {}).get(value, 0)) for line in chosen]
    size = [int(line["size"]) for line in chosen]
    trials = [int(_field(line, "trials") or line["size"]) for line in chosen]
    return reconstruct_count(observed, size, p, m, trials=trials)


def _predicate(where: Where) -> Callable[[Mapping[str, Any]], bool]:
    if where is None:
        return lambda qid: True
    if callable(where):
        return where
    if not isinstance(where, Mapping):
        raise InvalidParameter(
            f"where = {where!r}: give a mapping attribute -> value (or list of values), a "
            "function of the qid object, or None"
        )
    wanted = {
        k: (list(v) if isinstance(v, list | tuple | set | frozenset) else [v])
        for k, v in where.items()
    }

    def match(qid: Mapping[str, Any]) -> bool:
        for name, allowed in wanted.items():
            if name not in qid:
                raise InvalidParameter(
                    f"where: attribute {name!r} is not a QID of the release ({list(qid)})"
                )
            if qid[name] not in allowed:
                return False
        return True

    return match
