"""Release files: the record kept with the history holds exactly the published bytes."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
from hypothesis import given, settings
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


@settings(deadline=None)  # the first call compiles the kernel
@given(
    st.lists(
        st.tuples(
            st.text(alphabet=st.sampled_from('ab7,"\r\n xé\x1f'), min_size=1, max_size=6),
            st.integers(-1, 10**6),
            st.booleans(),
        ),
        max_size=30,
    ),
    st.booleans(),
)
def test_assignments_are_what_csv_writer_writes(
    rows: list[tuple[str, int, bool]], with_virtual: bool
) -> None:
    """With and without ids that need quoting or are not ASCII (the kernel is taken only for
    ASCII ids that need none), with and without the virtual column."""
    expected = io.StringIO()
    writer = csv.writer(expected)
    if with_virtual:
        writer.writerow(["id", "group", "virtual"])
        writer.writerows((i, "" if g < 0 else g, int(v)) for i, g, v in rows)
    else:
        writer.writerow(["id", "group"])
        writer.writerows((i, "" if g < 0 else g) for i, g, _ in rows)
    data = assignments_csv(
        [i for i, _, _ in rows],
        np.array([g for _, g, _ in rows], dtype=np.int64),
        virtual=[v for _, _, v in rows] if with_virtual else None,
    )
    assert data == expected.getvalue().encode("utf-8")
    parsed = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))[1:]
    assert [row[:2] for row in parsed] == [[i, "" if g < 0 else str(g)] for i, g, _ in rows]
