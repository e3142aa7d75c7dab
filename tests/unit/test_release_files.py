"""Release files: the record kept with the history holds exactly the published bytes."""

from __future__ import annotations

import json

from stream_release.io.release_files import decode_record, encode_lines, encode_record


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
