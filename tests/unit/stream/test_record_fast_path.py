"""The worker's one-pass read of a record (``RecordValidator.fast_row``) takes a subset of what
the full decode (``decode_snapshot_record`` then ``staged_row``) takes, with the same result,
and every well-formed record whose values pass."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stream_release.config import Settings
from stream_release.stream.intake import RecordValidator
from stream_release.stream.messages import Rejection, decode_snapshot_record

SETTINGS = Settings(
    schema={"qid": ["age", "zip"], "numeric": ["age"]}, kafka={"max_message_bytes": 1024}
)
VALIDATOR = RecordValidator(SETTINGS, {"zip": SimpleNamespace(leaves=["10", "11", "ü"])})  # type: ignore[dict-item]


def full(raw: bytes) -> tuple[str, str, bytes] | None:
    record = decode_snapshot_record(
        raw, SETTINGS.schema, max_bytes=SETTINGS.kafka.max_message_bytes
    )
    if isinstance(record, Rejection):
        return None
    row = VALIDATOR.staged_row(record)
    return None if isinstance(row, Rejection) else (record.release, record.id, row)


scalars = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["10", "11", "ü", "30", "4.5", "nan", " 7 "]),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**63, 2**64, -(2**63) - 1, 10**23, 2**63 - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=2),
    st.dictionaries(st.text(max_size=3), scalars, max_size=2),
)
qids = st.one_of(
    st.fixed_dictionaries({"age": values, "zip": values}),
    st.dictionaries(st.sampled_from(["age", "zip", "sex"]), values, max_size=3),
    values,
)
records = st.one_of(
    st.fixed_dictionaries(
        {"release": values, "id": values, "qid": qids, "sensitive": values},
        optional={"extra": values},
    ),
    st.dictionaries(st.sampled_from(["release", "id", "qid", "sensitive", "x"]), values),
    values,
)


def encodings(document: Any) -> st.SearchStrategy[bytes]:
    text = json.dumps(document, ensure_ascii=False, allow_nan=True)
    return st.sampled_from([text.encode(), json.dumps(document).encode(), text.encode()[:-1]])


@settings(max_examples=2000, deadline=None, derandomize=True, database=None)
@given(records.flatmap(encodings))
def test_the_fast_read_agrees_with_the_full_decode(raw: bytes) -> None:
    fast = VALIDATOR.fast_row(raw)
    if fast is not None:
        assert fast == full(raw)


@settings(max_examples=500, deadline=None, derandomize=True, database=None)
@given(
    st.text(min_size=1, max_size=8),
    st.text(min_size=1, max_size=8).filter(lambda s: s.strip(" \t")),
    st.one_of(
        st.integers(-(2**60), 2**60),
        st.floats(min_value=-(2.0**62), max_value=2.0**62),  # beyond 2^63: the full decode
        st.sampled_from(["30", " 4.5"]),
    ),
    st.sampled_from(["10", "11", "ü"]),
    st.text(min_size=1, max_size=8),
)
def test_every_good_record_takes_the_fast_read(
    release: str, ident: str, age: Any, zip_: str, sensitive: str
) -> None:
    document = {
        "release": release,
        "id": ident,
        "qid": {"age": age, "zip": zip_},
        "sensitive": sensitive,
    }
    raw = json.dumps(document, ensure_ascii=False).encode()
    fast = VALIDATOR.fast_row(raw)
    assert fast is not None and fast == full(raw)
    assert fast[1] == ident.strip(" \t")


def test_what_the_fast_read_leaves_to_the_full_decode() -> None:
    good = {"release": "r", "id": " p-1\t", "qid": {"age": 30, "zip": "10"}, "sensitive": "s"}
    assert VALIDATOR.fast_row(json.dumps(good).encode()) == ("r", "p-1", b'["30","10","s"]')
    for bad in (
        {**good, "qid": {"age": True, "zip": "10"}},  # strict validation refuses a bool
        {**good, "qid": {"age": "old", "zip": "10"}},  # not a number
        {**good, "qid": {"age": 30, "zip": "12"}},  # not a leaf
        {**good, "id": " \t"},
        {**good, "sensitive": ""},
        {**good, "extra": 1},
        {**good, "sensitive": "x" * 1024},  # over kafka.max_message_bytes
    ):
        raw = json.dumps(bad).encode()
        assert VALIDATOR.fast_row(raw) is None and full(raw) is None
    # a number JSON holds but a float cannot: the full decode names it
    assert (
        VALIDATOR.fast_row(
            b'{"release":"r","id":"p","qid":{"age":1e400,"zip":"10"},"sensitive":"s"}'
        )
        is None
    )


def test_integers_beyond_64_bits_take_the_full_decode() -> None:
    """orjson reads them as floats, the full decode as exact integers: the staged row would
    differ, so the one-pass read leaves them alone."""
    for number in ("18446744073709551616", "-9223372036854775809", "100000000000000000000000"):
        raw = (
            '{"release":"r","id":"p","qid":{"age":' + number + ',"zip":"10"},"sensitive":"s"}'
        ).encode()
        assert VALIDATOR.fast_row(raw) is None
        assert full(raw) == ("r", "p", ('["' + number + '","10","s"]').encode())
