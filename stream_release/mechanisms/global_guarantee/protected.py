"""Refuse a release whose protected values do not name its data (issue 26, item 4: no silent
weakening).

``privacy.protected`` lists values; a value spelled otherwise than the data's protects no one
and, before this check, nothing said so (``protected = ["adm-clerical", "Sales "]`` on Adult,
whose values are ``Adm-clerical`` and ``Sales``: 4,015 people past 1/2). Each release is
checked before it is planned, offline and in the worker alike (:class:`~stream_release.
pipeline.publisher.Publisher` runs it for every release of the global guarantee). A protected
value ``v`` that no row of the release holds is refused when an unprotected value ``w`` of
the release is

1. the same as ``v`` up to case and surrounding blanks (:func:`~stream_release.config.
   same_value`): always, since ``w``'s rows are the ones ``v`` meant, whatever the history
   or a hierarchy says (unless the sensitive hierarchy lists ``w`` as a value of its own);
2. close to ``v`` (:func:`~stream_release.config.closest_match`, difflib's ratio at least
   0.6), unless ``v`` is known to be a value: a leaf of the sensitive attribute's hierarchy
   (the configuration's declared domain, which every protected value must then belong to:
   :func:`~stream_release.config._protected.check_protected_leaves`) or a value some row of
   an earlier release of the series held (the history's value dictionary, which keeps every
   value a release held). A value absent from this release but held in an earlier one is
   therefore real: its absence now is no misspelling.

A protected value nothing is close to is accepted: it protects whoever holds it later. A value
legitimately absent that rule 2 refuses is declared by giving the sensitive attribute a
hierarchy listing its domain (``value;*`` per line). A release cut on shards checks each
shard's part against that part's rows and the shard's history.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from stream_release.config import closest_match, corrected, describe_misses, same_value
from stream_release.errors import GuaranteeUnsatisfiable

__all__ = ["check_protected_present", "protected_misses"]


def protected_misses(
    present: Sequence[str],
    protected: Sequence[str],
    *,
    seen: Collection[str] = (),
    declared: Collection[str] | None = None,
) -> list[tuple[str, str]]:
    """The protected values the module docstring's rules refuse, each with the value of the
    release it most likely means, in ``protected``'s order.

    Parameters
    ----------
    present : the distinct sensitive values of the release's rows
    protected : ``privacy.protected`` (empty: every value, nothing to check)
    seen : the values rows of earlier releases held (the history's dictionary)
    declared : the leaves of the sensitive attribute's hierarchy, or ``None`` without one
    """
    held, wanted = set(present), set(protected)
    unprotected = [w for w in present if w not in wanted]
    known = set(seen) | set(declared or ())
    misses: list[tuple[str, str]] = []
    for value in protected:
        if value in held:
            continue
        same = [
            w
            for w in unprotected
            if same_value(w, value) and (declared is None or w not in declared)
        ]
        if same:
            misses.append((value, same[0]))
            continue
        if value in known:
            continue
        match = closest_match(value, unprotected)
        if match is not None:
            misses.append((value, match))
    return misses


def check_protected_present(
    present: Sequence[str],
    protected: Sequence[str],
    *,
    seen: Collection[str] = (),
    declared: Collection[str] | None = None,
    sensitive: str,
    where: str,
) -> None:
    """Refuse the release when :func:`protected_misses` finds a protected value that names
    no value of it (see the module docstring); ``where`` names the release (and its file).

    Raises
    ------
    GuaranteeUnsatisfiable
        ``public``: one line naming ``privacy.protected``, each refused value with the
        release's value it most likely means, the corrected setting and how to declare a
        value that is legitimately absent. It names only settings and values the release
        holds (its value counts are the adversary's knowledge already; no id, no QID).
    """
    misses = protected_misses(present, protected, seen=seen, declared=declared)
    if not misses:
        return
    raise GuaranteeUnsatisfiable(
        f"{where}: privacy.protected names values no row of the release holds, but the "
        "release holds an unprotected value the same up to case and blanks or close to it, "
        f"whose rows would go unprotected: {describe_misses(misses)}; write each as the data "
        f"does ({corrected(protected, misses)}). A value legitimately absent (no value of the "
        "release the same up to case and blanks) is accepted once an earlier release held it "
        "or the sensitive attribute has a hierarchy listing its domain: [schema.hierarchies] "
        f'"{sensitive}" = "FILE", one line \'value;*\' per value; nothing was published',
        public=True,
    )
