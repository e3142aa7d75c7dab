"""A rejection always fits in one Kafka message (``redaction.fitted``)."""

from __future__ import annotations

from stream_release.stream.messages import RejectReason
from stream_release.stream.redaction import (
    ERROR_CHARS,
    RECORD_OVERHEAD_BYTES,
    SentRejected,
    fitted,
)


def _rejection(raw: str, error: str, key: bytes | None = b"k" * 40) -> SentRejected:
    sent = SentRejected.because(
        RejectReason.HIERARCHY, error=error, topic="sr.records", partition=0, offset=7, raw=raw
    )
    sent._key = key
    return sent


def test_a_small_rejection_is_unchanged() -> None:
    small = _rejection('{"id": "p-1"}', "record: qid.x = 'y' is not a leaf")
    assert fitted(small, 10_000) is small


def test_a_huge_raw_and_error_are_cut_to_fit_and_say_so() -> None:
    raw = '{"qid": {"x": "' + "\u0001" * 50_000 + '"}}'  # escaping makes the JSON 6 x longer
    error = "record: qid.x = '" + "y" * 20_000 + "' is not a leaf"
    out = fitted(_rejection(raw, error), 10_000)
    assert len(out.model_dump_json()) + 40 + RECORD_OVERHEAD_BYTES <= 10_000
    assert out.key == b"k" * 40 and (out.topic, out.partition, out.offset) == ("sr.records", 0, 7)
    assert out.reason is RejectReason.HIERARCHY
    assert raw.startswith(out.raw) and 0 < len(out.raw) < len(raw)
    assert out.error.startswith(error[:ERROR_CHARS])
    assert f"raw shows the first {len(out.raw)} of its {len(raw)} characters" in out.error
