"""What a rejected message shows on ``sr.rejected``: no raw identifier by default.

docs/contract.md §5 gives every rejection a ``raw`` field, "the message as received", and
keys it "as received"; a record's key and its ``id`` field are the individual's identifier,
and a bad message can hold one anywhere. ``service.rejected_raw``
(``SR_SERVICE_REJECTED_RAW``) chooses:

``"redact"`` (default)
    The rejection keeps its fields (``error``, ``topic``, ``partition``, ``offset``, ``raw``)
    but nothing in it, nor its Kafka key, is a raw id:

    - a value that is a JSON object is re-serialised (compact JSON, fields in their order)
      with its ``id`` replaced by ``"pseudonym:<32 hex digits>"``, the keyed pseudonym of the
      id (of its JSON text if it is not a string): the hex of the Redis keys and of the
      private assignments files, so an operator who holds the key can tell which individual
      a rejection is about, and nobody else can. What the wire models declare is kept as
      received, so the record can be fixed: ``release``, ``sensitive``, ``records`` and the
      configured QIDs of ``qid``. Every other value (an undeclared field or QID, which could
      hold an identifier under another name) becomes ``"redacted"``;
    - any other value (not JSON, not UTF-8, over ``kafka.max_message_bytes``, a JSON array,
      string or number) becomes ``{"redacted": true, "bytes": <length>, "pseudonym": "<32
      hex>"}``, the keyed hash of the whole value (a value that is only an id gives that id's
      pseudonym); the message itself stays readable by its coordinates on the input topic.
      An unkeyed hash (SHA-256) would not do: ids are short and guessable, so anyone could
      hash candidate ids until one matches;
    - a redacted object may make the rejection longer than in ``"full"`` mode, by its id's
      pseudonym: a redacted rejection more than :data:`GROWTH_BYTES` longer (many short
      undeclared values, each now ``"redacted"``) shows its value as the item above says, so a
      redacted rejection is never much larger than the full one (``kafka.max_message_bytes``
      bounds the producer's requests);
    - ``error`` quotes no redacted value: a quoted one (``id = 17: Input should be a valid
      string``) becomes ``<redacted>``;
    - the Kafka key becomes ``pseudonym:<32 hex>`` of the received key (none stays none):
      records are keyed by id, and a seal's key (a release label) gets the same treatment so
      that a record sent to the wrong topic leaks nothing.

``"full"``
    ``raw`` is the value as received (UTF-8, invalid bytes replaced) and the key is the one
    received: docs/contract.md §5 to the letter, for a deployment whose ``sr.rejected`` is as
    closed as ``sr.records``.

Either way ``sr.rejected`` is an operator topic, not a publication: a redacted record still
shows one individual's QIDs and sensitive value. The names of undeclared fields stay (in
``raw`` and in ``error``): an id sent as a field name is not hidden.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import PrivateAttr

from stream_release.history.pseudonym import Pseudonymizer
from stream_release.stream.messages import Rejected, RejectReason, Seal, SnapshotRecord

__all__ = [
    "ERROR_CHARS",
    "GROWTH_BYTES",
    "PSEUDONYM_PREFIX",
    "RECORD_OVERHEAD_BYTES",
    "REDACTED",
    "Redactor",
    "SentRejected",
    "fitted",
]

REDACTED = "redacted"
"""What an undeclared value of a rejected JSON object is replaced by."""
PSEUDONYM_PREFIX = "pseudonym:"
"""Prefix of a redacted id or key: ``pseudonym:<32 hex digits>``."""
GROWTH_BYTES = 64
"""How much longer than in ``"full"`` mode a redacted rejection may be (its id's pseudonym
and a ``<redacted>`` in ``error`` take more room than a short id); beyond, ``raw`` is opaque."""
ERROR_CHARS = 1000
"""Longest ``error`` of a rejection that does not fit (an error may quote a huge value)."""
RECORD_OVERHEAD_BYTES = 512
"""Room kept for a Kafka record's framing besides its key and value."""
_QUOTED = "<redacted>"
_DECLARED = (set(SnapshotRecord.model_fields) | set(Seal.model_fields)) - {"id", "qid"}


class SentRejected(Rejected):
    """A :class:`Rejected` with the Kafka key it is sent with (:attr:`key`)."""

    _key: bytes | None = PrivateAttr(default=None)

    @property
    def key(self) -> bytes | None:
        """The key of its ``sr.rejected`` message: the received one, or its pseudonym."""
        return self._key


class Redactor:
    """Builds rejections as ``service.rejected_raw`` says (see the module docstring).

    Parameters
    ----------
    mode : "redact" or "full"
    pseudonymizer : Pseudonymizer
        The service's: a redacted id is the pseudonym its history is stored under.
    qid : sequence of str
        The configured QIDs (``schema.qid``): their values are kept in ``raw``.
    """

    def __init__(self, mode: str, pseudonymizer: Pseudonymizer, qid: tuple[str, ...]) -> None:
        if mode not in ("redact", "full"):
            raise ValueError(f"service.rejected_raw = {mode!r}: expected 'redact' or 'full'")
        self.mode = mode
        self._pseudonymizer = pseudonymizer
        self._qid = frozenset(qid)

    def __repr__(self) -> str:
        return f"Redactor(mode={self.mode!r})"

    def rejection(self, rejected: Rejected, value: bytes, key: bytes | None) -> SentRejected:
        """``rejected`` (built with ``raw`` as received) of the message ``value`` received
        with ``key``, as it is sent: unchanged in ``"full"`` mode, redacted otherwise."""
        fields = rejected.model_dump()
        if self.mode == "redact":
            hidden: list[Any]
            if rejected.reason is RejectReason.OVERSIZE:
                raw, hidden = self._opaque(value), []
            else:
                raw, hidden = self._redacted_raw(value)
            full_size = len(orjson.dumps(fields))
            fields["raw"] = raw
            fields["error"] = _unquote(rejected.error, hidden)
            if len(orjson.dumps(fields)) > full_size + GROWTH_BYTES:
                fields["raw"] = self._opaque(value)
            key = None if key is None else self._pseudonym(key).encode("ascii")
        sent = SentRejected.because(rejected.reason, **fields)
        sent._key = key
        return sent

    def _redacted_raw(self, value: bytes) -> tuple[str, list[Any]]:
        """``raw`` for ``value`` and the values it hides (for :func:`_unquote`)."""
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return self._opaque(value), []
        if not isinstance(parsed, dict):
            return self._opaque(value), [parsed]
        hidden: list[Any] = []
        out: dict[str, Any] = {}
        for name, field in parsed.items():
            if name == "id":
                text = field if isinstance(field, str) else orjson.dumps(field).decode()
                out[name] = self._pseudonym(text.encode("utf-8"))
                hidden.append(field)
            elif name == "qid" and isinstance(field, dict):
                out[name] = {q: self._keep(q in self._qid, v, hidden) for q, v in field.items()}
            else:
                out[name] = self._keep(name in _DECLARED, field, hidden)
        return orjson.dumps(out).decode(), hidden

    @staticmethod
    def _keep(declared: bool, field: Any, hidden: list[Any]) -> Any:
        if declared:
            return field
        hidden.append(field)
        return REDACTED

    def _opaque(self, value: bytes) -> str:
        digest = self._pseudonymizer.keyed_digest(value).hex()
        return orjson.dumps({"redacted": True, "bytes": len(value), "pseudonym": digest}).decode()

    def _pseudonym(self, data: bytes) -> str:
        return PSEUDONYM_PREFIX + self._pseudonymizer.keyed_digest(data).hex()


def _unquote(error: str, hidden: list[Any]) -> str:
    """``error`` without the ``= <repr>`` quotes of ``hidden`` values (or of their parts)."""
    stack = list(hidden)
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        error = error.replace(f"= {value!r}", f"= {_QUOTED}")
    return error


def fitted(rejected: SentRejected, max_bytes: int) -> SentRejected:
    """``rejected``, shortened if needed so that it and its key fit in one Kafka message of
    ``max_bytes`` (``kafka.max_message_bytes``, the producer's limit): a rejection the
    producer refused would be retried forever and hold up every message after it.

    ``error`` is cut to :data:`ERROR_CHARS` characters, then ``raw`` is halved until the
    whole fits; ``error`` then says how much of ``raw`` is shown. The message itself stays
    readable on its input topic at the rejection's coordinates.
    """
    budget = max_bytes - len(rejected.key or b"") - RECORD_OVERHEAD_BYTES
    if len(rejected.model_dump_json()) <= budget:
        return rejected
    fields = rejected.model_dump()
    error, raw = fields["error"], fields["raw"]
    if len(error) > ERROR_CHARS:
        error = error[:ERROR_CHARS] + " [...]"
    shown = raw
    while True:
        note = (
            ""
            if shown == raw
            else (f" (raw shows the first {len(shown)} of its {len(raw)} characters)")
        )
        fields["error"], fields["raw"] = error + note, shown
        candidate = SentRejected.because(rejected.reason, **fields)
        if len(candidate.model_dump_json()) <= budget or not shown:
            candidate._key = rejected.key
            return candidate
        shown = shown[: len(shown) // 2]
