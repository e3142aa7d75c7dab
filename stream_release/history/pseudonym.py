"""Pseudonyms: individuals are stored only under a keyed hash of their id.

``pseudonym(id) = BLAKE2b(utf8(id), key=K, digest_size=16)``. Without the key nobody can
recompute a pseudonym from a known id, so the history store (Redis or a local file) links no
stored entry to a person; with the key, the service finds an individual's history again in
every release.

Where the key comes from (:func:`load_key`), first match wins:

1. ``history.key`` in the configuration, usually given as the ``SR_HISTORY_KEY`` environment
   variable (pydantic-settings maps it there);
2. the contents of ``history.key_file``;
3. offline only (``default_dir`` given): ``default_dir/pseudonym.key``, created on first use
   with 32 random bytes written as hex and file mode 0600;
4. otherwise :class:`~stream_release.errors.ConfigError`.

The key material is the UTF-8 bytes of the setting or the bytes of the file, with leading and
trailing ASCII whitespace removed (a trailing newline does not change the key). It must hold at
least 16 bytes. BLAKE2b takes keys of at most 64 bytes: a longer key is first hashed to 64
bytes (BLAKE2b-512 with personalisation ``sr-pseudonym-key``).

Neither keys nor ids are ever logged, printed or put in an exception message.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from stream_release.config import HistorySettings
from stream_release.errors import ConfigError
from stream_release.history.types import PSEUDONYM_DTYPE

__all__ = ["DEFAULT_KEY_FILE", "MIN_KEY_BYTES", "Pseudonymizer", "load_key"]

MIN_KEY_BYTES = 16
"""Shortest key accepted (128 bits)."""

_MAX_BLAKE2B_KEY = 64
_DIGEST_SIZE = PSEUDONYM_DTYPE.itemsize
_DERIVE_PERSON = b"sr-pseudonym-key"
_DERIVED_PERSON = b"sr-derived-key"

DEFAULT_KEY_FILE = "pseudonym.key"
"""Name of the key file created in the offline store's directory."""

_HOW_TO = (
    "set history.key_file in the configuration (or SR_HISTORY_KEY_FILE) to a file holding the "
    "key, or the SR_HISTORY_KEY environment variable to the key "
    f"(at least {MIN_KEY_BYTES} bytes, e.g. the output of `openssl rand -hex 32`)"
)


class Pseudonymizer:
    """Keyed BLAKE2b-128 of ids.

    Parameters
    ----------
    key : bytes
        Secret key, at least :data:`MIN_KEY_BYTES` bytes; keys longer than 64 bytes are hashed
        down to 64 bytes first.

    Raises
    ------
    TypeError
        ``key`` is not bytes.
    ConfigError
        ``key`` is shorter than 16 bytes.
    """

    __slots__ = ("_hasher", "_key")

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes | bytearray):
            raise TypeError(f"Pseudonymizer key must be bytes, not {type(key).__name__}")
        key = bytes(key)
        if len(key) < MIN_KEY_BYTES:
            raise ConfigError(
                f"the pseudonymisation key has {len(key)} bytes; at least {MIN_KEY_BYTES} are "
                f"required: {_HOW_TO}"
            )
        if len(key) > _MAX_BLAKE2B_KEY:
            key = hashlib.blake2b(key, digest_size=_MAX_BLAKE2B_KEY, person=_DERIVE_PERSON).digest()
        # The keyed state after absorbing the key block; copying it skips one compression per id.
        self._hasher = hashlib.blake2b(key=key, digest_size=_DIGEST_SIZE)
        self._key = key

    def __repr__(self) -> str:
        return "Pseudonymizer(key=<hidden>)"

    def pseudonym(self, id_: str) -> bytes:
        """The 16-byte pseudonym of one id."""
        return self.pseudonyms([id_]).tobytes()

    def derived_key(self, purpose: str) -> bytes:
        """A 64-byte secret for ``purpose``, derived from the key:
        ``BLAKE2b-512(utf8(purpose), key=K, person="sr-derived-key")``. Domain-separated from
        the pseudonyms (another digest size and a personalisation), so it reveals neither the
        key nor a pseudonym; the release mechanisms' randomness is keyed by
        ``derived_key("mechanism")`` (:class:`~stream_release.mechanisms.base.ReleaseRandomness`).
        """
        return hashlib.blake2b(
            purpose.encode("utf-8"), key=self._key, digest_size=64, person=_DERIVED_PERSON
        ).digest()

    def keyed_digest(self, data: bytes) -> bytes:
        """The same keyed hash of arbitrary bytes (16 bytes): for the UTF-8 bytes of an id,
        its pseudonym. Used to name a rejected message without showing it
        (:mod:`stream_release.stream.redaction`)."""
        h = self._hasher.copy()
        h.update(data)
        return h.digest()

    def pseudonyms(
        self, ids: Sequence[str] | NDArray[np.object_] | NDArray[np.str_]
    ) -> NDArray[np.bytes_]:
        """Pseudonyms of ``ids``, in order.

        Parameters
        ----------
        ids : (n,) str
            A sequence of str, or a 1-D numpy array of dtype object (holding str) or unicode.

        Returns
        -------
        (n,) S16
            ``out[i] = BLAKE2b(ids[i].encode("utf-8"), key, digest_size=16)``. Note that numpy
            drops trailing NUL bytes when it hands out one ``S16`` element as ``bytes``; use
            ``out[i:i+1].tobytes()`` (or :meth:`pseudonym`) for the exact 16 bytes.

        Raises
        ------
        TypeError
            An element is not a str (the message gives its position, never its content).
        """
        out = np.frombuffer(b"".join(self.digests(ids)), dtype=PSEUDONYM_DTYPE)
        return out.copy()

    def digests(self, ids: Sequence[str] | NDArray[np.object_] | NDArray[np.str_]) -> list[bytes]:
        """Pseudonyms of ``ids``, in order, as a list of exactly 16-byte ``bytes`` (what
        :meth:`pseudonyms` holds, without the array; parameters and errors as there)."""
        items = ids.tolist() if isinstance(ids, np.ndarray) else ids
        if isinstance(items, str):
            raise TypeError("pseudonyms() takes a sequence of ids, not a single str")
        copy = self._hasher.copy
        encode = str.encode
        digests: list[bytes] = []
        append = digests.append
        item: object = None
        try:
            for item in items:
                h = copy()
                h.update(encode(item, "utf-8"))  # type: ignore[arg-type]
                append(h.digest())
        except TypeError:
            kind = type(item).__name__
            raise TypeError(f"ids[{len(digests)}] is a {kind}; every id must be a str") from None
        return digests


def load_key(settings: HistorySettings, *, default_dir: Path | None = None) -> bytes:
    """The pseudonymisation key the configuration designates (see the module docstring).

    Parameters
    ----------
    settings : HistorySettings
        ``key`` (``SR_HISTORY_KEY``) wins over ``key_file``.
    default_dir : Path or None
        The offline file store's directory: if no key is configured, the key is read from
        ``default_dir/pseudonym.key``, which is created (mode 0600, 32 random bytes as hex) when
        missing. ``None`` (the service with Redis): a key must be configured.

    Returns
    -------
    bytes
        The key material, at least 16 bytes.

    Raises
    ------
    ConfigError
        No key is configured and there is no ``default_dir``; the key file cannot be read; the
        key is shorter than 16 bytes.
    """
    if settings.key is not None:
        return _checked(settings.key.encode("utf-8").strip(), "SR_HISTORY_KEY / history.key")
    if settings.key_file is not None:
        path = Path(settings.key_file)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"history.key_file = {str(path)!r} cannot be read ({exc.strerror or exc}): "
                "point it to a readable file holding the key"
            ) from None
        return _checked(data.strip(), f"history.key_file = {str(path)!r}")
    if default_dir is None:
        raise ConfigError(f"no pseudonymisation key for the history: {_HOW_TO}")
    return _checked(
        _default_key(Path(default_dir)), f"{str(Path(default_dir) / DEFAULT_KEY_FILE)!r}"
    )


def _checked(key: bytes, source: str) -> bytes:
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(
            f"the pseudonymisation key from {source} has {len(key)} bytes; at least "
            f"{MIN_KEY_BYTES} are required: {_HOW_TO}"
        )
    return key


def _default_key(directory: Path) -> bytes:
    """Read ``directory/pseudonym.key``, creating it (mode 0600) if it does not exist.

    The key is written to a private temporary file first and hard-linked into place, so that a
    concurrent reader sees either no file or the whole key, and two creators agree on one key.
    """
    path = directory / DEFAULT_KEY_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            tmp = directory / f".{DEFAULT_KEY_FILE}.{secrets.token_hex(8)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                try:
                    os.fchmod(fd, 0o600)  # the umask only removes bits; make the mode exact
                    os.write(fd, secrets.token_hex(32).encode("ascii") + b"\n")
                    os.fsync(fd)
                finally:
                    os.close(fd)
                with contextlib.suppress(FileExistsError):  # another process created it first
                    os.link(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
        return path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(
            f"cannot create or read the default pseudonymisation key {str(path)!r} "
            f"({exc.strerror or exc}): {_HOW_TO}"
        ) from None
