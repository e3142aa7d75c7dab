"""``privacy.protected`` against the sensitive attribute's domain: a protected value must name a
value, or it protects nothing (issue 26: ``protected = ["adm-clerical", "Sales "]`` on Adult,
whose values are ``Adm-clerical`` and ``Sales``, protected no one and 4,015 people passed 1/2).

Where the sensitive attribute has a hierarchy (``[schema.hierarchies]`` names
``schema.sensitive``: its leaves are the attribute's domain), a protected value that is not a
leaf is refused when the configuration is loaded (:func:`check_protected_leaves`). Without
one, each release checks its values (:func:`stream_release.mechanisms.global_guarantee.protected.
check_protected_present`), with the spelling rules of this module: :func:`same_value` and
:func:`closest_match`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from pathlib import Path

from stream_release.config.hierarchy import load_hierarchy
from stream_release.errors import SchemaError

CLOSE_CUTOFF = 0.6
"""The similarity (:class:`difflib.SequenceMatcher` ratio) from which a value is a close match
of a protected one (difflib's default)."""

_BLANKS = " \t\r\n"


def same_value(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are the same value written differently: equal once surrounding
    blanks are trimmed and case is folded (``"Sales "`` and ``"sales"``)."""
    return a.strip(_BLANKS).casefold() == b.strip(_BLANKS).casefold()


def closest_match(value: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``value`` most likely means: one equal to it up to case and surrounding
    blanks (:func:`same_value`), else the closest by :func:`difflib.get_close_matches` at
    :data:`CLOSE_CUTOFF`; ``None`` when none is close. ``value`` itself is never returned."""
    others = [c for c in candidates if c != value]
    for candidate in others:
        if same_value(candidate, value):
            return candidate
    near = difflib.get_close_matches(value, others, n=1, cutoff=CLOSE_CUTOFF)
    return near[0] if near else None


def describe_misses(misses: Sequence[tuple[str, str | None]]) -> str:
    """``'adm-clerical' (closest: 'Adm-clerical'), 'x' (nothing close)``."""
    return ", ".join(
        f"{value!r} ({'nothing close' if match is None else f'closest: {match!r}'})"
        for value, match in misses
    )


def corrected(protected: Sequence[str], misses: Sequence[tuple[str, str | None]]) -> str:
    """The ``protected = [...]`` line with every miss replaced by its closest match (dropped
    when nothing is close), in TOML."""
    fix = dict(misses)
    kept = [fix.get(v, v) for v in protected]
    items = ", ".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in kept if v)
    return f"protected = [{items}]"


def check_protected_leaves(
    protected: Sequence[str], sensitive: str, hierarchy: Path, base_dir: Path | None
) -> None:
    """Every protected value is a leaf of the sensitive attribute's hierarchy.

    ``hierarchy``: the file ``[schema.hierarchies]`` gives ``sensitive`` (relative to
    ``base_dir``, the configuration file's directory, or the working directory).

    Raises
    ------
    ValueError
        One line for the configuration error: ``privacy.protected``, each value that is not
        a leaf with its closest leaf, and the fix; or the hierarchy file's own problem.
    """
    path = hierarchy if hierarchy.is_absolute() or base_dir is None else base_dir / hierarchy
    try:
        leaves = load_hierarchy(path, sensitive).leaves
    except SchemaError as exc:
        raise ValueError(str(exc)) from None
    known = set(leaves)
    misses = [(v, closest_match(v, leaves)) for v in protected if v not in known]
    if not misses:
        return
    raise ValueError(
        f"privacy.protected names values that are not leaves of the hierarchy of the "
        f"sensitive attribute {sensitive!r} ({str(path)!r}), so they would protect no one: "
        f"{describe_misses(misses)}; write each as the hierarchy does "
        f"({corrected(protected, misses)}), or add a value the data may hold to the hierarchy"
    )
