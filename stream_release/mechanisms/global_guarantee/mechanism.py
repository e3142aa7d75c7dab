"""The global guarantee behind the publisher's protocol
(:class:`~stream_release.mechanisms.base.ReleaseMechanism`): its plan step (the protected
values checked against the release, the virtual candidates joined, the histories loaded, the
release grouped and every bound checked: :func:`~.plan.plan_release`) and its render step
(:func:`~.render.render_guarantee`).

A release cut on shards plans each shard's part (``set_floor``: what every part's suppressed
set must hold), links each part's suppressed rows to the union of every part's
(:meth:`GlobalGuarantee.relink`) and renders the parts with their groups numbered after the
shards before them.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.config import Settings, horizon_of
from stream_release.config.hierarchy import load_hierarchy
from stream_release.core.privacy.breach import RATIO_RTOL, minimum_ratio_from_log_product
from stream_release.core.privacy.linkage import HistoryRows
from stream_release.core.table import EncodedTable
from stream_release.errors import ConfigError, GuaranteeUnsatisfiable
from stream_release.history.pseudonym import Pseudonymizer
from stream_release.mechanisms.base import (
    Assignment,
    ReleaseCommit,
    ReleaseContent,
    ReleaseInput,
)
from stream_release.mechanisms.global_guarantee.candidates import CandidatePool
from stream_release.mechanisms.global_guarantee.plan import (
    ReleasePlan,
    SuppressedUnion,
    plan_release,
    relink_suppressed,
)
from stream_release.mechanisms.global_guarantee.protected import check_protected_present
from stream_release.mechanisms.global_guarantee.render import render_guarantee, suppressed_record
from stream_release.release_format import GLOBAL_GUARANTEE

__all__ = ["GlobalGuarantee", "GuaranteePlan", "where"]


@dataclass(frozen=True, eq=False)
class GuaranteePlan:
    """A release planned under the global guarantee, not yet rendered: ``table`` and
    ``pseudonyms`` in pseudonym order (with any virtual candidates joined), the ``plan``, and
    the rows' ``history`` before the release (what :meth:`GlobalGuarantee.relink` links
    again)."""

    inputs: ReleaseInput
    table: EncodedTable
    pseudonyms: NDArray[np.bytes_]
    plan: ReleasePlan
    history: HistoryRows
    linked_to: SuppressedUnion | None = None
    """The union of the parts' suppressed rows :attr:`plan` links them to (``None``: its own)."""

    @property
    def label(self) -> str:
        return self.inputs.label

    @property
    def sequence(self) -> int:
        return self.inputs.sequence

    @property
    def groups(self) -> int:
        """The number of groups the plan publishes."""
        return int(self.plan.contents.n_groups)

    def suppressed(self) -> SuppressedUnion:
        """This part's suppressed rows: how many hold each value (the shards add them up)."""
        plan, table = self.plan, self.table
        star = (plan.group < 0) & plan.real
        counts = np.bincount(table.sensitive[star], minlength=len(table.sensitive_values))
        values = table.sensitive_values
        held = {values[v]: int(c) for v, c in enumerate(counts.tolist()) if c}
        return SuppressedUnion(held, int(np.count_nonzero(star)))

    def set_needs(self, protected: tuple[str, ...] | list[str]) -> tuple[dict[str, float], float]:
        """What the union of the parts' suppressed sets must hold for every member of this
        part's set: ``(ratios, base)``.

        ``ratios``: value by value, the ratio ``R(S,s)`` this set holds (Wong et al. 2010,
        [WFLWX10] Theorem 1, safe margin included) and what each member not withheld needs for any
        protected value of its history, also one this set does not hold (another part's set
        may bring it): its plan inside the horizon, [WFLWX10] Theorem 1's ratio past it (the set's
        ``keep_plan``). ``base``: what such a member needs for any other protected value (the
        strategy's base ratio, or ``l`` with the safe margin past the horizon), 0 when every
        member is withheld for its history (held to the per-release bound only,
        :mod:`~stream_release.core.grouping.suppressed_set`)."""
        plan, table = self.plan, self.table
        ratios: dict[str, float] = {}
        suppressed = plan.suppressed_set
        for v, r in enumerate(suppressed.ratio.tolist()):
            if r > 0:
                ratios[table.sensitive_values[v]] = float(r)
        star = np.flatnonzero((plan.group < 0) & plan.real)
        free = np.setdiff1d(star, suppressed.exempt_members)
        strategy = plan.strategy
        floor = (
            float(strategy.base_ratio) if suppressed.keep_plan else strategy.ell * (1 + RATIO_RTOL)
        )
        base = floor if free.size else 0.0
        history = self.history
        if free.size == 0 or history.n_entries == 0:
            return ratios, base
        member = np.isin(history.owner(), free)
        log_p, links = history.log_p[member], history.links[member]
        if suppressed.keep_plan:
            need = strategy.required_ratio(log_p, links)
        else:
            need = minimum_ratio_from_log_product(strategy.ell, log_p) * (1 + RATIO_RTOL)
        wanted = set(protected)
        for gid, ratio in zip(history.value[member].tolist(), need.tolist(), strict=True):
            name = plan.values[gid]
            if not wanted or name in wanted:
                ratios[name] = max(ratios.get(name, 0.0), float(ratio))
        return ratios, base


class GlobalGuarantee:
    """``[mechanism] kind = "global-guarantee"`` of a series configured by ``settings``;
    ``pseudonymizer`` pseudonymises the population register's ids (``[virtual] registry``),
    which is read at the first release that uses it."""

    kind = GLOBAL_GUARANTEE
    shardable = True

    @staticmethod
    def on_shards(mechanism: object) -> GlobalGuarantee:
        """``mechanism`` as the kind that runs on shards.

        Raises
        ------
        ConfigError
            It is another kind (a companion kind's state is one per series).
        """
        if not isinstance(mechanism, GlobalGuarantee):
            kind = getattr(mechanism, "kind", type(mechanism).__name__)
            raise ConfigError(
                f"mechanism.kind = {kind!r} cannot run on shards (kafka.partitions > 1): its "
                "state is one per series; use kafka.partitions = 1"
            )
        return mechanism

    def __init__(self, settings: Settings, pseudonymizer: Pseudonymizer) -> None:
        self.settings = settings
        self.pseudonymizer = pseudonymizer
        self.strategy = settings.privacy.make_strategy()
        """The strategy of ``[privacy]`` (built once for the series)."""
        self.horizon = horizon_of(settings.privacy, settings.grouping)
        """The series' horizon: the releases it is planned for (``strategy.horizon``)."""
        self.candidates: CandidatePool | None = None
        """The population register of virtual individuals, once read."""
        self.sensitive_leaves: frozenset[str] | None = None
        """The leaves of the sensitive attribute's hierarchy, once read (``None``: none)."""

    def plan(
        self, release: ReleaseInput, *, set_floor: Mapping[str, float] | None = None
    ) -> GuaranteePlan:
        """Check the protected values against the release, join the virtual candidates, load
        the histories and plan (``set_floor``: the least ratio the suppressed set must hold
        per value, a shard's part; :func:`~.plan.plan_release`).

        Raises
        ------
        GuaranteeUnsatisfiable
            The release cannot be made; offline, the message names the release and its file.
        """
        self.check_protected(release)
        table, pseudonyms, virtual = release.table, release.pseudonyms, None
        register = self.settings.virtual.registry
        if register is not None:
            if self.candidates is None:
                schema = self.settings.schema
                self.candidates = CandidatePool.read(register, schema, self.pseudonymizer)
            table, pseudonyms, virtual = self.candidates.join_absent(
                table, pseudonyms, release.ids_given
            )
        store = release.store
        history = store.load(pseudonyms)
        privacy, grouping = self.settings.privacy, self.settings.grouping
        try:
            plan = plan_release(
                table,
                history,
                store.values(),
                self.strategy,
                protected=privacy.protected,
                min_group_size=privacy.min_group_size,
                grouping=grouping,
                virtual=virtual,
                set_floor=set_floor,
                rng=release.randomness.generator("decoys"),
                past_horizon=self.horizon.past(release.sequence),
            )
        except GuaranteeUnsatisfiable as exc:
            if release.source is None:  # the worker's status message and log name the release
                raise
            # offline: name the release and the file the refusal is about
            raise GuaranteeUnsatisfiable(
                f"{where(release.label, release.source)}: {exc}", public=exc.public
            ) from exc
        return GuaranteePlan(release, table, pseudonyms, plan, history)

    def check_protected(self, release: ReleaseInput) -> None:
        """Refuse a release whose protected values do not name its values (:mod:`.protected`):
        before anything is planned or written.

        Raises
        ------
        GuaranteeUnsatisfiable
            ``public``; names the release (and its file), each value and its closest match.
        """
        privacy, schema = self.settings.privacy, self.settings.schema
        if not privacy.protected:
            return
        if self.sensitive_leaves is None and schema.sensitive in schema.hierarchies:
            hierarchy = load_hierarchy(schema.hierarchies[schema.sensitive], schema.sensitive)
            self.sensitive_leaves = frozenset(hierarchy.leaves)
        check_protected_present(
            release.table.sensitive_values,
            privacy.protected,
            seen=release.store.values(),
            declared=self.sensitive_leaves,
            sensitive=schema.sensitive,
            where=where(release.label, release.source),
        )

    def relink(self, planned: GuaranteePlan, union: SuppressedUnion) -> GuaranteePlan:
        """``planned`` with its suppressed rows linked to the ``union`` of every shard's
        (:func:`~.plan.relink_suppressed`); unchanged when the union is its own suppressed
        rows or already linked to it (a part confirmed, then committed).

        Raises
        ------
        GuaranteeUnsatisfiable
            A suppressed member's breach would pass the bound with the union's linkages.
        """
        own = planned.suppressed()
        if own.size == 0 or own == union or planned.linked_to == union:
            return planned
        plan = relink_suppressed(
            planned.table, planned.history, planned.plan, union, self.settings.privacy.protected
        )
        return replace(planned, plan=plan, linked_to=union)

    def assignment(self, planned: GuaranteePlan) -> Assignment:
        """The rows in the release: every real row (in a group or suppressed) and the virtual
        candidates a group took."""
        plan, table = planned.plan, planned.table
        listed = plan.real | (plan.group >= 0)
        virtual = None if plan.virtual is None else plan.virtual[listed]
        return Assignment(table.ids[listed].tolist(), plan.group[listed], virtual)

    def render(self, planned: GuaranteePlan, *, first_group: int = 0) -> ReleaseContent:
        """The group lines and manifest (:func:`~.render.render_guarantee`), the private
        record's suppressed set (and register), and the commit of the rows' new histories."""
        inputs, table, plan = planned.inputs, planned.table, planned.plan
        lines, manifest = render_guarantee(
            table,
            plan,
            label=inputs.label,
            sequence=inputs.sequence,
            settings=self.settings,
            horizon=self.horizon,
            started=inputs.started,
            first_group=first_group,
        )
        private: dict[str, Any] = {"suppressed": suppressed_record(table, plan)}
        if self.candidates is not None:
            private["registry"] = self.candidates.registry.source
        commit = ReleaseCommit(planned.pseudonyms[plan.committed], plan.history, plan.values)
        return ReleaseContent(lines, manifest, private, commit)


def where(label: str, source: dict[str, Any] | None) -> str:
    """``release 't01' (snapshot 't01.csv')``: what a refusal is about (the file when known)."""
    text = f"release {label!r}"
    if source is not None and "file" in source:
        text += f" (snapshot {str(source['file'])!r})"
    return text
