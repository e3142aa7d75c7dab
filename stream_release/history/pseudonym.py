"""Pseudonyms: individuals are stored only under a keyed hash of their id.

``pseudonym(id) = BLAKE2b(utf8(id), key=K, digest_size=16)``. Without the key nobody can
recompute a pseudonym from a known id, so the history store (Redis or a local file) links no
stored entry to a person; with the key, the service finds an individual's history again in
every release.

Where the key comes from (:func:`load_key`), first match wins:

1. ``history.key`` in the configuration, usually given as the ``SR_HISTORY_KEY`` environment
   variable (pydantic-settings maps it there);
2. the contents of ``history.key_file``;
3. offline only (``default_dir`` given): ``default_dir/pseudonym.key``; a new series gets a
   fresh key (32 random bytes written as hex, file mode 0600), written only when its first
   release is committed (:func:`resolve_key`, :func:`write_key_file`), so a run that fails
   leaves no key behind;
4. otherwise :class:`~stream_release.errors.ConfigError`.

The key material is the UTF-8 bytes of the setting or the bytes of the file, with leading and
trailing ASCII whitespace removed (a trailing newline does not change the key). Its strength
is counted in decoded bytes (:func:`key_strength`): 64 hex digits are 32 bytes, not 64; it
must hold at least 16. ``stream-release keygen`` prints a fresh 32-byte key in hex
(:func:`generate_key`). BLAKE2b takes keys of at most 64 bytes: a longer key is first hashed
to 64 bytes (BLAKE2b-512 with personalisation ``sr-pseudonym-key``).

The history remembers its key: every store records the keyed check value
:meth:`Pseudonymizer.key_check` at its first commit and refuses to be written under another
key (:class:`~stream_release.errors.KeyMismatch`), so a lost or changed key stops the series
instead of silently starting every individual's history afresh.

Secrets derived from the key for other uses (:meth:`Pseudonymizer.derived_key`: the release
mechanisms' randomness) are domain-separated from the pseudonyms and from the check value.

Neither keys nor ids are ever logged, printed or put in an exception message.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
from numpy.typing import NDArray

from stream_release.config import HistorySettings
from stream_release.errors import ConfigError
from stream_release.history._blake2b import keyed_digests
from stream_release.history.types import PSEUDONYM_DTYPE

__all__ = [
    "DEFAULT_KEY_FILE",
    "KEYGEN_BYTES",
    "MIN_KEY_BYTES",
    "KeyMaterial",
    "Pseudonymizer",
    "generate_key",
    "key_strength",
    "load_key",
    "resolve_key",
    "write_key_file",
]

MIN_KEY_BYTES = 16
"""Shortest key accepted (128 bits), in decoded bytes (:func:`key_strength`)."""

KEYGEN_BYTES = 32
"""Random bytes of a key made by :func:`generate_key` (``stream-release keygen``)."""

_MAX_BLAKE2B_KEY = 64
_DIGEST_SIZE = PSEUDONYM_DTYPE.itemsize
_DERIVE_PERSON = b"sr-pseudonym-key"
_DERIVED_PERSON = b"sr-derived-key"
_CHECK_PERSON = b"sr-key-check"
_CHECK_MESSAGE = b"stream-release pseudonymisation key check v1"
_HEX = re.compile(rb"[0-9a-fA-F]+")
_BASE64 = re.compile(rb"[A-Za-z0-9+/]+={0,2}|[A-Za-z0-9_-]+={0,2}")

DEFAULT_KEY_FILE = "pseudonym.key"
"""Name of the key file created in the offline store's directory."""

_HOW_TO = (
    "set history.key_file in the configuration (or SR_HISTORY_KEY_FILE) to a file holding the "
    "key, or the SR_HISTORY_KEY environment variable to the key "
    f"(at least {MIN_KEY_BYTES} bytes of secret: `stream-release keygen` prints one)"
)


def key_strength(material: bytes) -> int:
    """Bytes of secret the key material holds, as decoded.

    Hex text (an even number of hex digits) counts half its length; base64 text (standard or
    URL-safe alphabet, a multiple of 4 characters with its padding) counts its decoded
    length; anything else (a passphrase, binary) counts its bytes.

    >>> key_strength(b"00" * 32), key_strength(b"0123456789abcdef")
    (32, 8)
    """
    if len(material) % 2 == 0 and _HEX.fullmatch(material):
        return len(material) // 2
    if len(material) % 4 == 0 and _BASE64.fullmatch(material):
        try:
            return len(base64.b64decode(material.replace(b"-", b"+").replace(b"_", b"/")))
        except (binascii.Error, ValueError):
            pass
    return len(material)


def generate_key() -> str:
    """A fresh key: :data:`KEYGEN_BYTES` random bytes (``secrets``) as 64 hex digits."""
    return secrets.token_hex(KEYGEN_BYTES)


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

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes | bytearray):
            raise TypeError(f"Pseudonymizer key must be bytes, not {type(key).__name__}")
        key = bytes(key)
        if key_strength(key) < MIN_KEY_BYTES:
            raise ConfigError(
                f"the pseudonymisation key holds {key_strength(key)} bytes of secret; at least "
                f"{MIN_KEY_BYTES} are required: {_HOW_TO}"
            )
        if len(key) > _MAX_BLAKE2B_KEY:
            key = hashlib.blake2b(key, digest_size=_MAX_BLAKE2B_KEY, person=_DERIVE_PERSON).digest()
        self._key = key

    def __repr__(self) -> str:
        return "Pseudonymizer(key=<hidden>)"

    def pseudonym(self, id_: str) -> bytes:
        """The 16-byte pseudonym of one id."""
        return self.pseudonyms([id_]).tobytes()

    def key_check(self) -> bytes:
        """The key's 16-byte check value, recorded by the history store at its first commit:
        ``BLAKE2b-128("stream-release pseudonymisation key check v1", key=K,
        person="sr-key-check")``. Keyed and domain-separated (its own personalisation and
        message), it tells whether a key is the series' key and reveals nothing else."""
        return hashlib.blake2b(
            _CHECK_MESSAGE, key=self._key, digest_size=16, person=_CHECK_PERSON
        ).digest()

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
        return hashlib.blake2b(data, key=self._key, digest_size=_DIGEST_SIZE).digest()

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
        items = ids.tolist() if isinstance(ids, np.ndarray) else ids
        if isinstance(items, str):
            raise TypeError("pseudonyms() takes a sequence of ids, not a single str")
        if not isinstance(items, list | tuple):
            items = list(items)
        if not items:
            return np.empty(0, dtype=PSEUDONYM_DTYPE)
        data, offsets = _utf8_packed(items)
        digests = keyed_digests(self._key, _DIGEST_SIZE, data, offsets)
        return digests.reshape(-1).view(PSEUDONYM_DTYPE)

    def digests(self, ids: Sequence[str] | NDArray[np.object_] | NDArray[np.str_]) -> list[bytes]:
        """Pseudonyms of ``ids``, in order, as a list of exactly 16-byte ``bytes`` (what
        :meth:`pseudonyms` holds, without the array; parameters and errors as there)."""
        packed = self.pseudonyms(ids).tobytes()
        return [packed[at : at + _DIGEST_SIZE] for at in range(0, len(packed), _DIGEST_SIZE)]


def _utf8_packed(items: Sequence[object]) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    """The UTF-8 bytes of ``items`` one after the other, and the (n + 1,) offsets of each.

    Raises
    ------
    TypeError
        An item is not a str (the message gives its position, never its content).
    UnicodeEncodeError
        An item holds a lone surrogate, as ``str.encode`` does.
    """
    texts = cast("Sequence[str]", items)
    try:
        joined = "".join(texts)  # refuses any item that is not a str
    except TypeError:
        position, item = next((i, x) for i, x in enumerate(items) if not isinstance(x, str))
        kind = type(item).__name__
        raise TypeError(f"ids[{position}] is a {kind}; every id must be a str") from None
    if joined.isascii():  # one byte per character
        data = joined.encode("ascii")
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    else:
        encoded = [text.encode("utf-8") for text in texts]
        data = b"".join(encoded)
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(texts))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.frombuffer(data, dtype=np.uint8), offsets


@dataclass(frozen=True)
class KeyMaterial:
    """A resolved key: its material, and the default key file to create at the first commit
    (``None``: the key came from the configuration or an existing file)."""

    key: bytes = b""
    new_file: Path | None = None

    def __repr__(self) -> str:
        return f"KeyMaterial(key=<hidden>, new_file={self.new_file!r})"


def resolve_key(settings: HistorySettings, *, default_dir: Path | None = None) -> KeyMaterial:
    """The pseudonymisation key the configuration designates (see the module docstring),
    without writing anything.

    Parameters
    ----------
    settings : HistorySettings
        ``key`` (``SR_HISTORY_KEY``) wins over ``key_file``.
    default_dir : Path or None
        The offline file store's directory: if no key is configured, the key of
        ``default_dir/pseudonym.key``; when that file does not exist, a fresh key with
        ``new_file`` set (write it with :func:`write_key_file` before the first commit).
        ``None`` (the service with Redis): a key must be configured.

    Raises
    ------
    ConfigError
        No key is configured and there is no ``default_dir``; the key file cannot be read;
        the key holds fewer than 16 bytes of secret (:func:`key_strength`).
    """
    if settings.key is not None:
        return KeyMaterial(
            _checked(settings.key.encode("utf-8").strip(), "SR_HISTORY_KEY / history.key")
        )
    if settings.key_file is not None:
        path = Path(settings.key_file)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"history.key_file = {str(path)!r} cannot be read ({exc.strerror or exc}): "
                "point it to a readable file holding the key"
            ) from None
        return KeyMaterial(_checked(data.strip(), f"history.key_file = {str(path)!r}"))
    if default_dir is None:
        raise ConfigError(f"no pseudonymisation key for the history: {_HOW_TO}")
    path = Path(default_dir) / DEFAULT_KEY_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return KeyMaterial(generate_key().encode("ascii"), new_file=path)
    except OSError as exc:
        raise ConfigError(
            f"cannot read the default pseudonymisation key {str(path)!r} "
            f"({exc.strerror or exc}): {_HOW_TO}"
        ) from None
    return KeyMaterial(_checked(data.strip(), repr(str(path))))


def load_key(settings: HistorySettings, *, default_dir: Path | None = None) -> bytes:
    """The key material of :func:`resolve_key`; a new default key file is written at once
    (:func:`write_key_file`). Returns at least 16 bytes of secret."""
    material = resolve_key(settings, default_dir=default_dir)
    if material.new_file is not None:
        return write_key_file(material.new_file, material.key)
    return material.key


def _checked(key: bytes, source: str) -> bytes:
    strength = key_strength(key)
    if strength < MIN_KEY_BYTES:
        raise ConfigError(
            f"the pseudonymisation key from {source} holds {strength} bytes of secret "
            f"({len(key)} characters); at least {MIN_KEY_BYTES} are required: {_HOW_TO}"
        )
    return key


def write_key_file(path: Path, key: bytes) -> bytes:
    """Create the key file ``path`` (mode 0600) holding ``key`` and a newline, unless it
    exists; returns the key the file holds (another process may have created it first).

    The key is written to a private temporary file first and hard-linked into place, so that a
    concurrent reader sees either no file or the whole key, and two creators agree on one key.

    Raises
    ------
    ConfigError
        The directory or the file cannot be created or read.
    """
    path = Path(path)
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            tmp = directory / f".{path.name}.{secrets.token_hex(8)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                try:
                    os.fchmod(fd, 0o600)  # the umask only removes bits; make the mode exact
                    os.write(fd, key + b"\n")
                    os.fsync(fd)
                finally:
                    os.close(fd)
                with contextlib.suppress(FileExistsError):  # another process created it first
                    os.link(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
        return _checked(path.read_bytes().strip(), repr(str(path)))
    except OSError as exc:
        raise ConfigError(
            f"cannot create or read the default pseudonymisation key {str(path)!r} "
            f"({exc.strerror or exc}): {_HOW_TO}"
        ) from None
