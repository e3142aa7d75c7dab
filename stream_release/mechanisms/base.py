"""What every release mechanism gives the publisher (``[mechanism] kind``, docs/contract.md §2).

The publisher (offline ``anonymize`` and the worker alike,
:class:`~stream_release.pipeline.publisher.
Publisher`) hands a mechanism one encoded snapshot, its rows sorted by pseudonym, and gets back
a :class:`MechanismRelease`: which row went to which published group, what each group line says,
the guarantee block of the manifest and the state to commit with the release.

Reproducibility. A mechanism draws every random number from :class:`ReleaseRandomness`, keyed
by a secret derived from the pseudonymisation key: a release cut again after a crash, or by
offline ``anonymize`` on the same snapshot, is the same release byte for byte, and nobody
without the key can predict a draw. Per-row draws that must stay the same across releases
(a row's randomized value is drawn once and reused, papers 002 and 004) are keyed by what they
belong to (``row_uniforms``), not by the release.

State. A mechanism that keeps something across releases (a group's trial count, a person's
budget) reads it through ``load_state`` by byte keys of its choosing (pseudonyms, keyed hashes
of group keys) and returns the changed entries; the publisher commits them in the same
transaction as the release record, so the state and the releases never disagree.

What the manifest may say. A DP guarantee covers the published lines, not figures of the
input next to them: the input's size (``records_in``, ``suppressed``), its sha256, the time
the release took or a query error measured against the input are functions of the input that
the mechanism did not randomise, and publishing them voids the (ε, δ). The publisher
therefore writes them into the manifest only for a release whose
:attr:`MechanismRelease.input_statistics` is true; the private files hold them in every
case.

Registration (:mod:`stream_release.mechanisms`). A mode is one folder ``mechanisms/<kind>/``:
its ``settings`` module holds the section model (a plain pydantic model,
``ConfigDict(extra="forbid", frozen=True)``; the TOML table ``[mechanism.<kind with _ for ->]``),
its ``mechanism`` module a factory (the :class:`Mechanism` class built from the section, or a
function ``(section, settings)`` for a mode that needs the rest of the configuration); one
:class:`Registration` line in ``MECHANISMS`` makes it available. Its audit is a module of its
own, ``mechanisms/<kind>/audit.py`` with ``verify_series(releases) -> list[str]``, that imports
none of the mode's release code (only its ``settings`` module and ``core``; checked by
``tests/unit/test_layers.py``), named in :data:`stream_release.audit.mechanisms.VERIFIERS`.
A section model may define ``check_settings(self, settings) -> None`` (raising ``ValueError``)
to check itself against the rest of the configuration (QID names, hierarchies) when the
configuration is loaded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from stream_release.core.privacy.linkage import HistoryRows
from stream_release.core.table import EncodedTable
from stream_release.history.pseudonym import Pseudonymizer
from stream_release.history.types import HistoryStore
from stream_release.release_format import AnyManifest

RANDOMNESS_PURPOSE = "mechanism"
"""What the mechanisms' secret is derived from the pseudonymisation key for
(:meth:`~stream_release.history.pseudonym.Pseudonymizer.derived_key`)."""

StateLoader = Callable[[Sequence[bytes]], list[bytes | None]]
"""Reads the committed state entries of the given keys (``None``: never written)."""


@dataclass(frozen=True)
class ReleaseRandomness:
    """The random numbers of one release of one mechanism, derived from a secret.

    ``secret``: at least 16 bytes, derived from the pseudonymisation key with the mechanism's
    kind as personalisation (:meth:`derive`); ``sequence``: the release's sequence number.
    """

    secret: bytes
    sequence: int

    @classmethod
    def of_series(cls, pseudonymizer: Pseudonymizer, kind: str, sequence: int) -> ReleaseRandomness:
        """The randomness of release ``sequence`` of a series of ``kind`` whose ids
        ``pseudonymizer`` pseudonymises: keyed by a secret derived from its key for the
        mechanisms (domain-separated from the pseudonyms)."""
        return cls.derive(pseudonymizer.derived_key(RANDOMNESS_PURPOSE), kind, sequence)

    @classmethod
    def derive(cls, key: bytes, kind: str, sequence: int) -> ReleaseRandomness:
        """The randomness of release ``sequence`` of mechanism ``kind`` under ``key``."""
        secret = hashlib.blake2b(
            kind.encode("utf-8"), key=key[:64], digest_size=32, person=b"sr-mechanism"
        ).digest()
        return cls(secret, sequence)

    def generator(self, purpose: str) -> np.random.Generator:
        """A generator for the draws of this release made for ``purpose`` (fresh per
        release: Li, Qardaji and Su's fresh sample per release)."""
        seed = hashlib.blake2b(
            f"{purpose}\x1f{self.sequence}".encode(), key=self.secret, digest_size=32
        ).digest()
        return np.random.default_rng(np.frombuffer(seed, dtype=np.uint64))

    def row_words(self, purpose: str, keys: Sequence[bytes], draws: int = 1) -> NDArray[np.uint64]:
        """(len(keys), draws) uniform 64-bit words, the same for the same key in every release
        (a row's randomized value is drawn once, then reused): BLAKE2b keyed by the secret, of
        ``purpose`` and the key."""
        if draws < 1 or draws > 8:
            raise ValueError(f"draws = {draws}: between 1 and 8 uniforms per key")
        tag = purpose.encode("utf-8") + b"\x1f"
        digests = b"".join(
            hashlib.blake2b(tag + k, key=self.secret, digest_size=8 * draws).digest() for k in keys
        )
        return np.frombuffer(digests, dtype="<u8").reshape(len(keys), draws).astype(np.uint64)

    def row_uniforms(
        self, purpose: str, keys: Sequence[bytes], draws: int = 1
    ) -> NDArray[np.float64]:
        """:meth:`row_words` as uniforms in [0, 1): the top 53 bits of each word."""
        return word_uniforms(self.row_words(purpose, keys, draws))


def word_uniforms(words: NDArray[np.uint64]) -> NDArray[np.float64]:
    """Uniforms in [0, 1) from uniform 64-bit words, of their shape: the top 53 bits of each
    word times ``2^-53`` (every value a multiple of ``2^-53``, each equally likely)."""
    return (words >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


@dataclass(frozen=True)
class MechanismRelease:
    """One release as a mechanism made it.

    Attributes
    ----------
    group : (n,) int64
        Published group of each table row, ``-1`` for a row not published (suppressed, not
        sampled, out of budget). ``assignments-NNNN.csv`` is written from it.
    sizes : (G,) int64
        The ``size`` of each group line.
    qids : list of G dicts
        The ``qid`` object of each group line (JSON-ready).
    sensitive : list of G dicts
        The ``sensitive`` multiset of each group line, as published (e.g. randomized values).
    extra : list of G dicts
        Further fields of each group line (e.g. a scaling ``weight``); empty dicts if none.
    guarantee : dict
        The manifest's ``mechanism`` block: ``kind``, the parameters, the release's guarantee
        and the series' total, each number named after its paper and theorem.
    state : dict of bytes to bytes
        State entries to commit with the release (new or changed only).
    utility : dict
        Mechanism-specific utility figures added to the manifest's ``utility`` block.
    input_statistics : bool
        Whether the manifest may state figures of the input that are not functions of the
        published lines: ``records_in``, ``suppressed``,
        ``elapsed_s``, and the utility report measured against the input (suppression, query
        error). ``False`` (the default) for a differentially private mechanism, whose
        guarantee these figures would void (see the module docstring); a mechanism whose
        guarantee is not about membership (reconstruction privacy) may set it.
    """

    group: NDArray[np.int64]
    sizes: NDArray[np.int64]
    qids: list[dict[str, Any]]
    sensitive: list[dict[str, int]]
    guarantee: dict[str, Any]
    extra: list[dict[str, Any]] = field(default_factory=list)
    state: dict[bytes, bytes] = field(default_factory=dict)
    utility: dict[str, Any] = field(default_factory=dict)
    input_statistics: bool = False


@dataclass(frozen=True, eq=False)
class ReleaseInput:
    """One release to make, as the series hands it to its mechanism (the first stage of a
    release: :class:`ReleaseInput` -> a mechanism's plan -> :class:`ReleaseContent` ->
    the files and the commit).

    ``table`` and ``pseudonyms`` (n,) S16: the snapshot's rows, sorted by pseudonym (a
    release does not depend on the input's row order). ``ids_given``: the pseudonyms came
    with the rows (the service stages them; ``table.ids`` are their hex). ``source``: where
    the snapshot came from (private). ``cut_label``: commit the label with the release (the
    service). ``store``: the series' history, read only (the commit is the publisher's).
    ``randomness``: the release's random numbers, keyed by the series' secret and the kind.
    ``started``: ``time.perf_counter()`` when the release began (its ``elapsed_s``).
    """

    table: EncodedTable
    pseudonyms: NDArray[np.bytes_]
    label: str
    sequence: int
    store: HistoryStore
    randomness: ReleaseRandomness
    started: float
    source: dict[str, Any] | None = None
    ids_given: bool = False
    cut_label: bool = False


@dataclass(frozen=True, eq=False)
class Assignment:
    """Which row went to which published group (``assignments-NNNN.csv``, private): ``ids``,
    their group numbers before a shard's offset (``-1``: in no group) and, with a population
    register, which rows are virtual individuals (``None``: no register)."""

    ids: list[str]
    group: NDArray[np.int64]
    virtual: NDArray[np.bool_] | None = None


@dataclass(frozen=True, eq=False)
class ReleaseCommit:
    """What a release commits with its record: the individuals whose history it replaces
    (``pseudonyms`` (p,) S16 and their new ``history``), the value dictionary, and the
    mechanism's state entries (byte key -> byte value, new or changed only)."""

    pseudonyms: NDArray[np.bytes_]
    history: HistoryRows
    values: tuple[str, ...]
    state: Mapping[bytes, bytes] | None = None

    @classmethod
    def without_history(
        cls, values: tuple[str, ...], state: Mapping[bytes, bytes] | None
    ) -> ReleaseCommit:
        """The commit of a kind that keeps no breach history: no individual, the dictionary
        unchanged, its state entries."""
        return cls(np.zeros(0, dtype="S16"), HistoryRows.empty(0), values, state)


@dataclass(frozen=True, eq=False)
class ReleaseContent:
    """A release as its mechanism renders it: the bytes of its group lines, its manifest,
    what its private record adds to the one every release has, and its commit."""

    lines: bytes
    manifest: AnyManifest
    private: dict[str, Any]
    commit: ReleaseCommit


class PlannedRelease(Protocol):
    """A mechanism's plan of one release (its second stage): the input it was made from."""

    @property
    def inputs(self) -> ReleaseInput: ...


PlanT = TypeVar("PlanT", bound=PlannedRelease)


class ReleaseMechanism(Protocol[PlanT]):
    """What every ``[mechanism] kind`` gives the publisher: a plan step and a render step.

    The split follows ARX's (a privacy model, an algorithm that groups, a metric of the
    result) and diffprivlib's single base class: :meth:`plan` decides everything about the
    release, checking its guarantee (and raises
    :class:`~stream_release.errors.GuaranteeUnsatisfiable` when it cannot be met);
    :meth:`assignment` and :meth:`render` only state what was decided. Nothing is written:
    the publisher renders the files of every kind the same way
    (:func:`~stream_release.pipeline.render.render_release`) and commits them.
    """

    kind: str
    shardable: bool
    """Whether the kind can cut a release on shards (``kafka.partitions > 1``)."""

    def plan(self, release: ReleaseInput) -> PlanT:
        """Plan ``release``."""
        ...

    def assignment(self, planned: PlanT) -> Assignment:
        """The planned release's rows and their groups."""
        ...

    def render(self, planned: PlanT, *, first_group: int = 0) -> ReleaseContent:
        """The group lines (numbered from ``first_group``: a shard's part), the manifest, the
        private record's additions and the commit of ``planned``."""
        ...


class Mechanism(Protocol):
    """A companion kind's release step: everything a kind of
    :class:`~stream_release.mechanisms.companion.CompanionMechanism` implements."""

    kind: str

    def release(
        self,
        table: EncodedTable,
        pseudonyms: NDArray[np.bytes_],
        *,
        sequence: int,
        randomness: ReleaseRandomness,
        load_state: StateLoader,
    ) -> MechanismRelease:
        """Release ``table`` (rows sorted by ``pseudonyms``) as release ``sequence``."""
        ...
