"""Release files: the record kept with the history holds exactly the published bytes."""

from __future__ import annotations

import csv
import io
import json

from hypothesis import given
from hypothesis import strategies as st

from stream_release.io.release_files import (
    assignments_csv,
    decode_record,
    encode_lines,
    encode_record,
)


def test_record_round_trips_the_published_groups() -> None:
    lines = [
        {
            "release": "r",
            "sequence": 1,
            "group": 0,
            "size": 2,
            "qid": {"age": [30, 34]},
            "sensitive": {"flu": 1, "fièvre": 1},
        },
        {
            "release": "r",
            "sequence": 1,
            "group": 1,
            "size": 1,
            "qid": {"age": 40},
            "sensitive": {"x": 1},
        },
    ]
    groups = encode_lines(lines)
    assert [json.loads(x) for x in groups.decode().splitlines()] == lines
    manifest, again = decode_record(encode_record(groups, {"sequence": 1, "l": 2.0}))
    assert manifest == {"sequence": 1, "l": 2.0}
    assert again == groups


@given(
    st.lists(
        st.tuples(
            st.text(alphabet=st.sampled_from('ab7,"\r\n x'), min_size=1, max_size=6),
            st.integers(-1, 10**6),
        ),
        max_size=30,
    )
)
def test_assignments_are_what_csv_writer_writes(rows: list[tuple[str, int]]) -> None:
    """With and without ids that need quoting (the fast path is taken only without)."""
    expected = io.StringIO()
    writer = csv.writer(expected)
    writer.writerow(["id", "group"])
    writer.writerows((i, "" if g < 0 else g) for i, g in rows)
    text = assignments_csv([i for i, _ in rows], [g for _, g in rows])
    assert text == expected.getvalue()
    parsed = list(csv.reader(io.StringIO(text, newline="")))[1:]
    assert parsed == [[i, "" if g < 0 else str(g)] for i, g in rows]
