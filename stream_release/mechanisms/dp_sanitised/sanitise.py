r"""The sampling of mode ``dp-sanitised``: each record's sanitised values from its keyed words.

Sanitised once, without storing it. A record's noise is a function of 64-bit words
``ReleaseRandomness.row_words("sanitise", key)`` with ``key = pseudonym || parameters ||
record content`` (:func:`record_keys`): the same record of the same person gets the same
sanitised values in every release, and nobody without the secret can predict them. Each
attribute takes one word (:func:`record_words`): a numeric one through its grid Laplace
(:meth:`~stream_release.core.privacy.discrete_laplace.GridLaplace.sample`), a categorical one
through k-ary randomised response from the word's top 53 bits as a uniform
(:func:`~stream_release.core.privacy.metric_dp_rr.rr_from_uniform`, Example 6 of [HLM14]).

[HLM14]: N. Holohan, D. J. Leith, O. Mason, Differential Privacy in Metric Spaces,
arXiv:1402.6124 (2014); full reference and digest in :mod:`stream_release.core.privacy.metric_dp`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.config.mechanisms.dp_sanitised import WHERE
from stream_release.core.privacy.metric_dp_rr import rr_from_uniform
from stream_release.core.table import EncodedTable
from stream_release.errors import SchemaError
from stream_release.mechanisms.base import ReleaseRandomness, word_uniforms
from stream_release.mechanisms.dp_sanitised.plan import SanitisedAttribute, TablePlan

__all__ = ["code_maps", "record_keys", "record_words", "sanitise_column"]

_MAX_DRAWS = 8  # ReleaseRandomness.row_words per call


def code_maps(table: EncodedTable, plan: TablePlan) -> list[NDArray[np.int64] | None]:
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


def record_keys(
    table: EncodedTable,
    plan: TablePlan,
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


def record_words(
    randomness: ReleaseRandomness, keys: Sequence[bytes], draws: int
) -> NDArray[np.uint64]:
    """(len(keys), draws) keyed 64-bit words, at most 8 per ``row_words`` call."""
    if draws == 0 or not keys:
        return np.zeros((len(keys), draws), dtype=np.uint64)
    chunks = []
    for c, start in enumerate(range(0, draws, _MAX_DRAWS)):
        purpose = "sanitise" if c == 0 else f"sanitise/{c}"
        chunks.append(randomness.row_words(purpose, keys, min(_MAX_DRAWS, draws - start)))
    return np.concatenate(chunks, axis=1)


def sanitise_column(
    a: SanitisedAttribute,
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
        return rr_from_uniform(code_map[codes], word_uniforms(words), len(a.labels), a.keep)
    assert domain is not None and a.table is not None
    return a.table.sample(np.asarray(domain, dtype=np.float64)[codes], words)
