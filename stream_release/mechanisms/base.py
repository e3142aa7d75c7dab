"""What every release mechanism gives the publisher (``[mechanism] kind``, CONTRACT §2).

The publisher (offline ``anonymize`` and the worker alike, :class:`~stream_release.series.
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
the mechanism did not randomise, and publishing them voids the (ε, δ) (the digest of papers
000/001, §9.1 "must not emit"). The publisher therefore writes them into the manifest only
for a release whose :attr:`MechanismRelease.input_statistics` is true; the private
``assignments-NNNN.csv`` holds them in every case.

Registration (:mod:`stream_release.mechanisms`). A mode is one module holding its section
model (a plain pydantic model, ``ConfigDict(extra="forbid", frozen=True)``; the TOML table
``[mechanism.<kind with _ for ->]``), a factory (the :class:`Mechanism` class built from the
section, or a function ``(section, settings)`` for a mode that needs the rest of the
configuration) and ``verify_release(manifest, lines) -> list[str]`` for the audit (or the
audit in a module of its own, named by ``verify_module``); one :class:`Registration` line
in ``MECHANISMS`` makes it available. A section model may define ``check_settings(self,
settings) -> None`` (raising ``ValueError``) to check itself against the rest of the
configuration (QID names, hierarchies) when the configuration is loaded.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import NDArray

from stream_release.table import EncodedTable

if TYPE_CHECKING:
    from pydantic import BaseModel

    from stream_release.config import Settings

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
    def derive(cls, key: bytes, kind: str, sequence: int) -> ReleaseRandomness:
        """The randomness of release ``sequence`` of mechanism ``kind`` under ``key``."""
        secret = hashlib.blake2b(
            kind.encode("utf-8"), key=key[:64], digest_size=32, person=b"sr-mechanism"
        ).digest()
        return cls(secret, sequence)

    def generator(self, purpose: str) -> np.random.Generator:
        """A generator for the draws of this release made for ``purpose`` (fresh per
        release: paper 000's fresh sample per release)."""
        seed = hashlib.blake2b(
            f"{purpose}\x1f{self.sequence}".encode(), key=self.secret, digest_size=32
        ).digest()
        return np.random.default_rng(np.frombuffer(seed, dtype=np.uint64))

    def row_uniforms(
        self, purpose: str, keys: Sequence[bytes], draws: int = 1
    ) -> NDArray[np.float64]:
        """(len(keys), draws) uniforms in [0, 1), the same for the same key in every release
        (a row's randomized value is drawn once, then reused): BLAKE2b keyed by the secret, of
        ``purpose`` and the key, 53 bits per uniform."""
        if draws < 1 or draws > 8:
            raise ValueError(f"draws = {draws}: between 1 and 8 uniforms per key")
        tag = purpose.encode("utf-8") + b"\x1f"
        digests = b"".join(
            hashlib.blake2b(tag + k, key=self.secret, digest_size=8 * draws).digest() for k in keys
        )
        words = np.frombuffer(digests, dtype="<u8").reshape(len(keys), draws)
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


class Mechanism(Protocol):
    """A release mechanism other than the global guarantee's grouping."""

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


Verifier = Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]]], list[str]]
"""``verify_release(manifest, lines) -> problems``: the audit of one release of a mode from
its published files alone (an empty list when it passes)."""

SeriesVerifier = Callable[
    [Sequence[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]]], list[str]
]
"""``verify_series([(manifest, lines), ...]) -> problems``: checks across a whole series."""


@dataclass(frozen=True)
class Registration:
    """Where a mode lives: one line of :data:`stream_release.mechanisms.MECHANISMS`.

    Names are resolved on first use (importing the module then), so the configuration can
    name every kind without importing every mode, and a module that imports
    :mod:`stream_release.config` causes no import cycle.

    Attributes
    ----------
    module : str
        Dotted module path, e.g. ``"stream_release.mechanisms.sampled_k_anonymity"``.
    settings : str
        Name of the section model in the module.
    factory : str
        Name of what builds the :class:`Mechanism`: called as ``factory(section)`` or, with
        ``pass_settings``, ``factory(section, settings)`` (the whole :class:`~stream_release.
        config.Settings`).
    verify : str or None
        Name of ``verify_release(manifest, lines) -> list[str]`` (:data:`Verifier`).
    verify_series : str or None
        Name of an optional :data:`SeriesVerifier`.
    pass_settings : bool
        See ``factory``.
    verify_module : str or None
        Dotted module path holding ``verify`` and ``verify_series`` when they live outside
        ``module`` (e.g. ``"stream_release.mechanisms.dp_sanitised_audit"``); ``None``: in
        ``module``.
    """

    module: str
    settings: str
    factory: str
    verify: str | None = "verify_release"
    verify_series: str | None = None
    pass_settings: bool = False
    verify_module: str | None = None

    def _attr(self, name: str, module: str | None = None) -> Any:
        return getattr(importlib.import_module(module or self.module), name)

    def settings_model(self) -> type[BaseModel]:
        """The section model (a pydantic model class)."""
        model: type[BaseModel] = self._attr(self.settings)
        return model

    def make(self, section: BaseModel, settings: Settings) -> Mechanism:
        """The mechanism for a validated ``section`` of ``settings``."""
        factory = self._attr(self.factory)
        mechanism: Mechanism = (
            factory(section, settings) if self.pass_settings else factory(section)
        )
        return mechanism

    def verifier(self) -> Verifier | None:
        """The mode's ``verify_release``, if it has one."""
        return None if self.verify is None else self._attr(self.verify, self.verify_module)

    def series_verifier(self) -> SeriesVerifier | None:
        """The mode's ``verify_series``, if it has one."""
        if self.verify_series is None:
            return None
        return self._attr(self.verify_series, self.verify_module)
