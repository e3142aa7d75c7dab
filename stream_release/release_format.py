"""What a release publishes, typed: its group lines and its manifest (docs/contract.md §4), and
the kinds of mechanism that make them.

These models are the one definition of both: the renderer builds a manifest as one of them
(:mod:`stream_release.mechanisms.global_guarantee.render`), the service sends them (``sr.releases``,
``sr.manifests``), the audit parses the files with them, and ``deploy/schemas/`` is generated
from them (:mod:`stream_release.stream.messages`). A manifest is told apart by
``mechanism.kind``: a companion mechanism states its block (:class:`MechanismManifest`); the
global guarantee's manifest, as published since the first release of the format, has no block,
and reads as ``kind = "global-guarantee"`` (:class:`GuaranteeManifest`, whose ``mechanism``
is never written, so its files are what they always were).

This module is at the package's root: it imports nothing of the package, and every layer
(the audit included) may import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    Tag,
    ValidationInfo,
    model_validator,
)

__all__ = [
    "GLOBAL_GUARANTEE",
    "KINDS",
    "AnyManifest",
    "BreachSummary",
    "CompanionKind",
    "GroupLine",
    "GuaranteeBlock",
    "GuaranteeManifest",
    "Manifest",
    "MechanismBlock",
    "MechanismKind",
    "MechanismManifest",
    "QidValue",
    "SnapshotSchema",
    "StrategyBlock",
    "SuppressedSetSummary",
    "VirtualSummary",
    "manifest_kind",
]

CompanionKind = Literal["sampled-k-anonymity", "reconstruction-private-rr", "dp-sanitised"]
"""The kinds of the companion papers: a manifest's ``mechanism.kind``."""
MechanismKind = Literal["global-guarantee", CompanionKind]
"""Every value of ``[mechanism] kind`` (docs/contract.md §2)."""

KINDS: Final[tuple[str, ...]] = get_args(MechanismKind)

GLOBAL_GUARANTEE: Final = "global-guarantee"
"""The default kind: the global guarantee of R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang,
Y. Xu, Preserving Individual Privacy in Serial Data Publishing, ICDE 2010, configured by
``[privacy]``."""

QidValue = str | int | float

PARSING: Final = "parsing"
"""The validation context's key of a file being parsed (:meth:`Manifest.parse`), not built."""


class _Stated(BaseModel):
    """A part of a published file: every number finite, and in a parsed file (:meth:`Manifest.
    parse`) a field either stated with a value or left out, never stated as ``null`` (but those
    in :attr:`NULLABLE`); the renderer gives ``None`` for a field it does not state."""

    NULLABLE: ClassVar[frozenset[str]] = frozenset()
    """Fields whose ``null`` is a value the format states (e.g. no horizon)."""

    @model_validator(mode="before")
    @classmethod
    def _no_null(cls, data: Any, info: ValidationInfo) -> Any:
        parsing = isinstance(info.context, dict) and info.context.get(PARSING, False)
        if parsing and isinstance(data, dict):
            stated_null = [k for k, v in data.items() if v is None and k not in cls.NULLABLE]
            if stated_null:
                raise ValueError(
                    f"{stated_null[0]} is null: leave the field out, or give it a value"
                )
        return data


class _Published(_Stated):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class GroupLine(_Published):
    """One published group (topic ``sr.releases``; a line of ``release-NNNN.jsonl``)."""

    release: str
    sequence: int = Field(ge=1)
    group: int = Field(ge=0)
    size: int = Field(ge=1)
    qid: dict[str, Any] | None = Field(default=None, description="generalized QIDs")
    members: list[dict[str, QidValue]] | None = Field(
        default=None, description="anatomy format: the members' exact QIDs"
    )
    sensitive: dict[str, Annotated[int, Field(ge=1)]] = Field(
        description="the published multiset: each value's count (a value not held is left out)"
    )
    virtual: int | None = Field(
        default=None,
        ge=0,
        description="a series with a population register: the group's virtual members "
        "(counted in size, holding no value)",
    )
    trials: int | None = Field(
        default=None,
        ge=1,
        description="reconstruction-private-rr: the independent randomization trials in this "
        "release's counts",
    )
    trials_total: int | None = Field(
        default=None,
        ge=1,
        description="reconstruction-private-rr: the trials ever published for this group",
    )
    weight: float | None = Field(
        default=None,
        gt=0,
        description="reconstruction-private-rr: size / trials, the scaling of the counts",
    )

    @classmethod
    def parse(cls, document: dict[str, Any] | bytes | str) -> GroupLine:
        """The group line of a JSON object or its text, as a published file states it (no
        field stated as ``null``, every number finite).

        Raises
        ------
        pydantic.ValidationError
            ``document`` is not a group line of the format.
        """
        if isinstance(document, dict):
            return cls.model_validate(document, context={PARSING: True})
        return cls.model_validate_json(document, context={PARSING: True})


class StrategyBlock(_Published):
    """The global guarantee's setting: the strategy of Wong et al. 2010 (§6.1 constant-ratio
    with ``k_prime``, §6.2 geometric with ``alpha``, or the minimal and localized baselines),
    its base ratio, the protected values and the group-size limits."""

    NULLABLE: ClassVar[frozenset[str]] = frozenset({"horizon"})
    """``horizon: null``: a strategy that plans no horizon (the localized baseline)."""

    name: str
    l: float = Field(gt=1)  # noqa: E741 - the paper's symbol
    base_ratio: float = Field(gt=1)
    k_prime: int | None = Field(default=None, ge=1)
    alpha: float | None = Field(default=None, gt=1)
    protected: list[str] = Field(
        default_factory=list, description="the protected values (none listed: every value)"
    )
    acknowledged: list[str] | None = Field(
        default=None, description="the weakened settings the publisher acknowledged"
    )
    min_group_size: int | None = Field(default=None, ge=1)
    group_size_cap: int | None = Field(default=None, ge=1)
    horizon: int | None = Field(
        default=None, ge=1, description="the releases the series is planned for"
    )


class BreachSummary(_Published):
    """The published individuals' breach probabilities (Wong et al. 2010, Lemma 4)."""

    bound: float
    max: float
    p50: float
    p99: float
    spent: int = Field(
        default=0,
        ge=0,
        description="(individual, protected value) pairs of the release's individuals past the "
        "bound: linked by a suppressed set while spent (not in max)",
    )
    spent_people: int = Field(
        default=0, ge=0, description="the release's individuals with a pair past the bound"
    )

    def described(self) -> str:
        """``breach max 0.4880 <= 0.5000``, or ``BREACH: breach max 1.0000 > 0.5000`` above
        the bound (the localized baseline): a breach reads as one."""
        if self.max > self.bound:
            return f"BREACH: breach max {self.max:.4f} > {self.bound:.4f}"
        return f"breach max {self.max:.4f} <= {self.bound:.4f}"


class SuppressedSetSummary(_Published):
    """The suppressed rows as one more group (all QIDs ``*``)."""

    rows: int = Field(ge=0, description="rows suppressed, withheld for their history or not")
    share_max: float = Field(ge=0, le=1, description="largest share of a protected value")
    share_bound: float = Field(gt=0, le=1, description="1/l: share_max never exceeds it")
    breach_max: float = Field(ge=0, le=1, description="largest breach of its other members")


class VirtualSummary(_Published):
    """A series with a population register: its virtual members and the assumption."""

    members: int = Field(ge=0, description="virtual members in the release's groups")
    assumption: str = Field(min_length=1, description="who the guarantee holds against")


class SnapshotSchema(_Published):
    """The snapshot's column names."""

    id: str
    qid: list[str]
    sensitive: str


class GuaranteeBlock(BaseModel):
    """The global guarantee's ``mechanism``: its kind only (its figures are the manifest's
    ``l``, ``strategy``, ``breach`` and ``suppressed_set``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["global-guarantee"] = GLOBAL_GUARANTEE


class MechanismBlock(BaseModel):
    """What a companion mechanism states about its release: its kind, its parameters and
    what it guarantees (each kind its own fields; the audit recomputes them)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: CompanionKind


def _query_error(utility: dict[str, Any]) -> str:
    """The query error as ``median 0.38 trimmed 0.70 mean 1.02`` (the mean swings with tiny
    true counts), or ``none`` without a query."""
    if utility.get("query_error") is None:
        return "none (no query)"
    return (
        f"median {utility['query_error_median']:.3f} trimmed "
        f"{utility['query_error_trimmed']:.3f} mean {utility['query_error']:.3f}"
    )


def _not_stated(model: BaseModel) -> dict[str, Any]:
    """The fields of ``model`` and of the models in it that hold ``None`` (not stated; but a
    ``null`` the format states, :attr:`_Stated.NULLABLE`), as pydantic's ``exclude``."""
    out: dict[str, Any] = {}
    nullable: frozenset[str] = getattr(model, "NULLABLE", frozenset())
    for name in type(model).model_fields:
        value = getattr(model, name)
        if value is None and name not in nullable:
            out[name] = True
        elif isinstance(value, BaseModel):
            inner = _not_stated(value)
            if inner:
                out[name] = inner
    return out


class _Manifest(_Stated):
    if TYPE_CHECKING:  # the fields every kind's manifest has (each model states them in order)
        release: str
        sequence: int
        published: int
        groups: int
        utility: dict[str, Any]
        mechanism: GuaranteeBlock | MechanismBlock

    def document(self) -> dict[str, Any]:
        """The manifest as published: the fields it was given, but those that hold ``None``
        (not stated), in the order of the format."""
        return self.model_dump(
            mode="json", by_alias=True, exclude_unset=True, exclude=_not_stated(self)
        )

    @property
    def kind(self) -> str:
        """``mechanism.kind``: which mechanism made the release."""
        return self.mechanism.kind

    def summary(self) -> str:
        """One line about the release for a person (``stream-release anonymize``)."""
        raise NotImplementedError

    def logged(self) -> dict[str, Any]:
        """The release's figures a worker logs when it commits it (``event: committed``):
        what the manifest publishes, never more."""
        raise NotImplementedError

    def _head(self) -> str:
        return f"release {self.sequence:>4} {self.release}: "

    def _sizes(self) -> str:
        u = self.utility
        return (
            f"{self.groups} groups (avg {u.get('avg_group_size', 0.0):.2f}, "
            f"max {u.get('max_group_size', 0)})"
        )


class GuaranteeManifest(_Manifest):
    """The manifest of a release under the global guarantee (``[mechanism] kind =
    "global-guarantee"``, the default): its breach bound and figures."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, strict=True, allow_inf_nan=False
    )

    release: str
    sequence: int = Field(ge=1)
    records_in: int = Field(ge=0)
    published: int = Field(ge=0)
    suppressed: int = Field(ge=0)
    groups: int = Field(ge=0)
    l: float = Field(gt=1)  # noqa: E741 - the paper's symbol
    strategy: StrategyBlock
    format: Literal["generalized", "anatomy"] = "generalized"
    schema_: SnapshotSchema | None = Field(default=None, alias="schema")
    breach: BreachSummary
    suppressed_set: SuppressedSetSummary | None = None
    utility: dict[str, Any]
    elapsed_s: float = Field(ge=0)
    past_horizon: bool = Field(
        default=False,
        description="the release lies past the horizon (strategy.horizon): individuals "
        "withheld for their history are held to the per-release bound only",
    )
    first_group: int | None = Field(
        default=None,
        ge=1,
        description="a shard's part of a release (never published as it is): its first "
        "group's number",
    )
    virtual: VirtualSummary | None = None
    mechanism: GuaranteeBlock = Field(
        default=GuaranteeBlock(),
        exclude=True,
        description="never written: a manifest without a mechanism block is the global guarantee's",
    )

    def summary(self) -> str:
        """``release    2 t02: 980 published, 20 suppressed, 140 groups (avg 7.00, max 12),
        breach max 0.4880 <= 0.5000, 0 people past 1/l, query error median ...``."""
        return (
            f"{self._head()}{self.published} published, {self.suppressed} suppressed, "
            f"{self._sizes()}, {self.breach.described()}, {self.described_spent()}, "
            f"query error {_query_error(self.utility)}"
        )

    def described_spent(self) -> str:
        """``0 people past 1/l``, or ``3 people past 1/l (7 pairs), past the horizon of 4``:
        the release's individuals whose cumulative breach passed the bound (held to the
        per-release bound past the series' horizon), next to ``breach.max``."""
        people, pairs = self.breach.spent_people, self.breach.spent
        text = f"{people} people past 1/l" + (f" ({pairs} pairs)" if pairs else "")
        if self.past_horizon:
            text += f", past the horizon of {self.strategy.horizon}"
        return text

    def logged(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "published": self.published,
            "suppressed": self.suppressed,
            "groups": self.groups,
            "breach_max": self.breach.max,
        }


class MechanismManifest(_Manifest):
    """The manifest of a release made by a companion ``[mechanism] kind``: no breach bound
    (the mechanism states its own guarantee under ``mechanism``)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, strict=True, allow_inf_nan=False
    )

    release: str
    sequence: int = Field(ge=1)
    records_in: int | None = Field(
        default=None, ge=0, description="a mechanism that states its input figures: rows in"
    )
    published: int = Field(ge=0)
    suppressed: int | None = Field(default=None, ge=0, description="and rows suppressed")
    groups: int = Field(ge=0)
    format: Literal["generalized", "anatomy"] = "generalized"
    schema_: SnapshotSchema | None = Field(default=None, alias="schema")
    mechanism: MechanismBlock
    utility: dict[str, Any]
    elapsed_s: float | None = Field(default=None, ge=0)

    def summary(self) -> str:
        """``release    1 t01: 950 published, 120 groups (avg 7.92, max 15),
        dp-sanitised: epsilon 1, delta 1e-06 (series: epsilon 3, delta 3e-06)``: the guarantee
        block's ``epsilon``/``delta`` (and the series') when it states them."""
        block = self.mechanism.model_dump()
        text = f"{self._head()}{self.published} published, {self._sizes()}, {self.kind}"
        if "epsilon" in block and "delta" in block:
            text += f": epsilon {block['epsilon']:g}, delta {block['delta']:.3g}"
            series = block.get("series")
            if isinstance(series, dict) and "epsilon" in series and "delta" in series:
                text += f" (series: epsilon {series['epsilon']:g}, delta {series['delta']:.3g})"
        return text

    def logged(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "published": self.published,
            "groups": self.groups,
            "mechanism": self.kind,
        }


AnyManifest = GuaranteeManifest | MechanismManifest


def manifest_kind(document: Any) -> str:
    """``mechanism.kind`` of a manifest (a model or its JSON object): the global guarantee's
    when it states no block."""
    block = (
        document.get("mechanism")
        if isinstance(document, dict)
        else getattr(document, "mechanism", None)
    )
    if isinstance(block, dict):
        kind = block.get("kind", GLOBAL_GUARANTEE)
    else:
        kind = getattr(block, "kind", GLOBAL_GUARANTEE)
    return str(kind)


def _tag(document: Any) -> str:
    return "guarantee" if manifest_kind(document) == GLOBAL_GUARANTEE else "mechanism"


class Manifest(
    RootModel[
        Annotated[
            Annotated[GuaranteeManifest, Tag("guarantee")]
            | Annotated[MechanismManifest, Tag("mechanism")],
            Discriminator(_tag),
        ]
    ]
):
    """A release's manifest of any kind (topic ``sr.manifests``, after all its groups; file
    ``manifest-NNNN.json``), told apart by ``mechanism.kind``."""

    model_config = ConfigDict(frozen=True)

    @classmethod
    def parse(cls, document: dict[str, Any] | bytes | str) -> AnyManifest:
        """The manifest of a JSON object or its text.

        Raises
        ------
        pydantic.ValidationError
            ``document`` is not a manifest of the format.
        """
        if isinstance(document, dict):
            return cls.model_validate(document, context={PARSING: True}).root
        return cls.model_validate_json(document, context={PARSING: True}).root
