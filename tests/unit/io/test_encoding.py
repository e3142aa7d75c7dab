"""Reading snapshots (stream_release.io.snapshot_csv), ARX hierarchies and encoding.

Real data: the ARX Adult extract and its hierarchies in /work/shared/data (README §1). Adult has
no id column, so the tests write a copy with ``id`` prepended (byte-for-byte otherwise: ``;``,
CRLF).
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from stream_release.config import SchemaSettings
from stream_release.config.hierarchy import Hierarchy, load_hierarchies, load_hierarchy
from stream_release.core.grouping.layout import leaf_range, lowest_common_ancestor
from stream_release.core.table import EncodedTable
from stream_release.errors import ConfigError, SchemaError
from stream_release.io.encoding import encode
from stream_release.io.snapshot import RawSnapshot, snapshot_from_columns
from stream_release.io.snapshot_csv import read_snapshot

DATA = Path(os.environ.get("SR_SHARED_DATA", "/work/shared/data"))
ADULT_QID = ("age", "sex", "race", "marital-status", "education", "native-country", "workclass")

# README §1: leaves and levels (leaf and root included) of every Adult hierarchy.
ADULT_HIERARCHIES = {
    "age": (100, 5),
    "education": (16, 4),
    "marital-status": (7, 3),
    "native-country": (41, 3),
    "occupation": (14, 3),
    "race": (5, 2),
    "salary-class": (2, 2),
    "sex": (2, 2),
    "workclass": (8, 3),
}


def hierarchy_path(name: str) -> Path:
    return DATA / f"adult_hierarchy_{name}.csv"


def adult_schema(*, age_hierarchy: bool = False, **extra: object) -> SchemaSettings:
    names = [a for a in ADULT_QID if age_hierarchy or a != "age"]
    return SchemaSettings(
        id="id",
        sensitive="occupation",
        qid=ADULT_QID,
        hierarchies={a: hierarchy_path(a) for a in names},
        **extra,
    )


@pytest.fixture(scope="module")
def adult_lines() -> list[str]:
    """adult.csv split into lines (CRLF removed), header first."""
    text = (DATA / "adult.csv").read_bytes().decode("utf-8")
    return text.split("\r\n")[:-1] if text.endswith("\r\n") else text.split("\r\n")


@pytest.fixture(scope="module")
def adult_with_ids(tmp_path_factory: pytest.TempPathFactory, adult_lines: list[str]) -> Path:
    path = tmp_path_factory.mktemp("adult") / "adult-ids.csv"
    rows = [f"id;{adult_lines[0]}"] + [f"p{i};{line}" for i, line in enumerate(adult_lines[1:])]
    path.write_bytes(("\r\n".join(rows) + "\r\n").encode("utf-8"))
    return path


def write(path: Path, text: str, *, bom: bool = False, newline: str = "\n") -> Path:
    data = text.replace("\n", newline).encode("utf-8")
    path.write_bytes((codecs.BOM_UTF8 if bom else b"") + data)
    return path


SMALL_SCHEMA = SchemaSettings(id="id", sensitive="disease", qid=("age", "city"))
SMALL = "id;age;city;disease\np1;30;Paris;flu\np2;41;Lyon;cold\np3;30;Nice;flu\n"


# -- hierarchies -------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "shape"), sorted(ADULT_HIERARCHIES.items()))
def test_adult_hierarchy_shapes(name: str, shape: tuple[int, int]) -> None:
    hierarchy = load_hierarchy(hierarchy_path(name), name)
    assert (hierarchy.size, hierarchy.height) == shape
    assert hierarchy.labels[-1] == ("*",)
    levels = hierarchy.levels
    assert levels.dtype == np.int32
    assert np.array_equal(levels[:, 0], np.arange(hierarchy.size))
    assert np.all(levels[:, -1] == 0)
    # depth-first: ids of every level are non-decreasing, so each node's leaves are contiguous,
    # and numbered 0..k-1 in order of appearance
    for h in range(hierarchy.height):
        column = levels[:, h]
        assert np.all(np.diff(column) >= 0)
        assert np.array_equal(np.unique(column), np.arange(len(hierarchy.labels[h])))
    # a node's children all share the node's parent: the hierarchy is a tree
    for h in range(hierarchy.height - 1):
        parents = {}
        for child, parent in zip(levels[:, h].tolist(), levels[:, h + 1].tolist(), strict=True):
            assert parents.setdefault(child, parent) == parent


def test_adult_hierarchy_labels_match_the_file() -> None:
    hierarchy = load_hierarchy(hierarchy_path("age"), "age")
    with open(hierarchy_path("age"), encoding="utf-8", newline="") as handle:
        lines = {row[0]: row for row in csv.reader(handle, delimiter=";")}
    assert sorted(hierarchy.leaves, key=int) == [str(a) for a in range(1, 101)]
    for code, leaf in enumerate(hierarchy.leaves):
        path = [hierarchy.labels[h][hierarchy.levels[code, h]] for h in range(hierarchy.height)]
        assert path == lines[leaf]
    assert hierarchy.labels[1][hierarchy.levels[hierarchy.leaves.index("22"), 1]] == "20-24"


def test_education_depth_first_order_keeps_siblings_adjacent_in_file_order() -> None:
    hierarchy = load_hierarchy(hierarchy_path("education"), "education")
    assert hierarchy.leaves == (
        "Bachelors", "Some-college",  # Undergraduate
        "Prof-school", "Assoc-acdm", "Assoc-voc",  # Professional Education
        "Masters", "Doctorate",  # Graduate
        "11th", "HS-grad", "9th", "7th-8th", "12th", "10th",  # High School
        "1st-4th", "5th-6th", "Preschool",  # Primary School
    )  # fmt: skip
    assert hierarchy.labels[1] == (
        "Undergraduate", "Professional Education", "Graduate", "High School", "Primary School",
    )  # fmt: skip
    assert hierarchy.labels[2] == ("Higher education", "Secondary education", "Primary education")


@pytest.mark.parametrize(
    ("a", "b", "expected", "leaves"),
    [
        ("Bachelors", "Bachelors", "Bachelors", 1),
        ("Bachelors", "Some-college", "Undergraduate", 2),
        ("Bachelors", "Masters", "Higher education", 7),
        ("Prof-school", "Doctorate", "Higher education", 7),
        ("11th", "10th", "High School", 6),
        ("Masters", "9th", "*", 16),
        ("1st-4th", "Preschool", "Primary School", 3),
    ],
)
def test_lowest_common_ancestor_of_two_leaves(a: str, b: str, expected: str, leaves: int) -> None:
    schema = SchemaSettings(
        id="id",
        sensitive="s",
        qid=("education",),
        hierarchies={"education": hierarchy_path("education")},
    )
    raw = snapshot_from_columns(["x", "y"], {"education": [a, b]}, ["u", "v"])
    table = encode(raw, schema, load_hierarchies(schema))
    attribute = table.attributes[0]
    codes = table.qid[:, 0]
    lo, hi = np.array([codes.min()]), np.array([codes.max()])
    level, node = lowest_common_ancestor(attribute, lo, hi)
    assert attribute.labels is not None
    assert attribute.labels[int(level[0])][int(node[0])] == expected
    first, last = leaf_range(attribute, level, node)
    assert int(last[0] - first[0] + 1) == leaves
    assert first[0] <= lo[0] and hi[0] <= last[0]


def test_ragged_hierarchy_names_attribute_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "edu.csv", "a;x;*\nb;x;*\n\nc;*\n")
    with pytest.raises(SchemaError, match=r"'education'.*line 4: 2 levels where line 1 has 3"):
        load_hierarchy(path, "education")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a;x;*\na;y;*\n", r"line 2: leaf 'a' already appears on line 1"),
        ("a;x;*\nb;y;root\n", r"2 labels .*one root"),
        ("a;x;g1;*\nb;x;g2;*\n", r"label 'x' of level 1 has parent 'g2' here but 'g1' on line 1"),
        ("a;;*\n", r"line 1: level 1 is empty"),
        ("a\nb\n", r"a single level"),
        ("\n\n", r"is empty"),
    ],
)
def test_malformed_hierarchies_are_rejected(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "h.csv", text)
    with pytest.raises(SchemaError, match=message) as info:
        load_hierarchy(path, "city")
    assert "'city'" in str(info.value) and str(path) in str(info.value)


def test_missing_hierarchy_file(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match=r"does not exist; check schema.hierarchies"):
        load_hierarchy(tmp_path / "nope.csv", "city")


def test_hierarchy_with_bom_crlf_and_blanks(tmp_path: Path) -> None:
    path = write(tmp_path / "h.csv", " b ; X ;*\na;Y;*\nc; X;*\n", bom=True, newline="\r\n")
    hierarchy = load_hierarchy(path, "city")
    assert isinstance(hierarchy, Hierarchy)
    assert hierarchy.leaves == ("b", "c", "a")
    assert hierarchy.labels[1] == ("X", "Y")
    assert hierarchy.levels[:, 1].tolist() == [0, 0, 1]


# -- reading snapshots -------------------------------------------------------------------------


def test_read_adult(adult_with_ids: Path, adult_lines: list[str]) -> None:
    raw = read_snapshot(adult_with_ids, adult_schema())
    rows = [line.split(";") for line in adult_lines[1:]]
    header = adult_lines[0].split(";")
    assert raw.n_rows == len(rows) == 30162
    assert raw.ids.tolist() == [f"p{i}" for i in range(len(rows))]
    for name in ADULT_QID:
        j = header.index(name)
        assert raw.qid[name].tolist() == [row[j] for row in rows]
    assert raw.sensitive.tolist() == [row[header.index("occupation")] for row in rows]
    assert list(raw.qid) == list(ADULT_QID)
    assert raw.lines[:3].tolist() == [2, 3, 4] and int(raw.lines[-1]) == 30163
    assert raw.sha256 == hashlib.sha256(adult_with_ids.read_bytes()).hexdigest()
    assert raw.source == str(adult_with_ids)
    column = raw.qid_columns["education"]
    assert column.decode().tolist() == raw.qid["education"].tolist()
    assert [int(column.first[i]) for i in range(3)] == [
        raw.qid["education"].tolist().index(v) for v in column.values[:3]
    ]


@pytest.mark.parametrize("age_hierarchy", [False, True])
def test_encode_adult_decodes_back_to_the_raw_values(
    adult_with_ids: Path, age_hierarchy: bool
) -> None:
    schema = adult_schema(age_hierarchy=age_hierarchy)
    raw = read_snapshot(adult_with_ids, schema)
    table = encode(raw, schema, load_hierarchies(schema))
    assert table.qid.shape == (30162, 7) and table.qid.dtype == np.int32
    assert table.sensitive.dtype == np.int32
    assert table.qid_names == ADULT_QID
    assert table.ids is raw.ids
    for j, attribute in enumerate(table.attributes):
        raw_values = raw.qid[attribute.name].tolist()
        decoded = attribute.domain[table.qid[:, j]].tolist()
        if attribute.kind == "numeric":
            assert [float(v) for v in raw_values] == decoded
            assert np.all(np.diff(attribute.domain) > 0)
        else:
            assert decoded == raw_values
        if attribute.kind == "hierarchy":
            assert attribute.size == ADULT_HIERARCHIES[attribute.name][0]
            hierarchy = load_hierarchy(hierarchy_path(attribute.name), attribute.name)
            assert attribute.domain.tolist() == list(hierarchy.leaves)
            assert attribute.labels == hierarchy.labels
    kinds = {a.name: a.kind for a in table.attributes}
    assert kinds["age"] == ("hierarchy" if age_hierarchy else "numeric")
    assert kinds["education"] == "hierarchy"
    assert list(table.sensitive_values) == sorted(set(raw.sensitive.tolist()))
    assert len(table.sensitive_values) == 14
    assert [table.sensitive_values[c] for c in table.sensitive] == raw.sensitive.tolist()


def test_unknown_hierarchy_value_names_value_line_and_file(
    tmp_path: Path, adult_lines: list[str]
) -> None:
    rows = [f"id;{adult_lines[0]}"] + [f"p{i};{line}" for i, line in enumerate(adult_lines[1:40])]
    row = rows[16].split(";")  # line 17 of the file
    row[5] = "Bachelor"
    rows[16] = ";".join(row)
    path = write(tmp_path / "a.csv", "\n".join(rows) + "\n")
    schema = adult_schema()
    raw = read_snapshot(path, schema)
    with pytest.raises(SchemaError) as info:
        encode(raw, schema, load_hierarchies(schema))
    message = str(info.value)
    assert "attribute 'education' value 'Bachelor' (line 17) is not a leaf of hierarchy" in message
    assert str(hierarchy_path("education")) in message and str(path) in message
    assert "add it to the hierarchy or fix the value" in message


def test_missing_column_lists_the_columns_found(tmp_path: Path) -> None:
    path = write(tmp_path / "s.csv", "id;age;town;disease\np1;30;Paris;flu\n")
    with pytest.raises(SchemaError) as info:
        read_snapshot(path, SMALL_SCHEMA)
    message = str(info.value)
    assert "has no column 'city' (schema.qid)" in message
    assert "columns found: 'id', 'age', 'town', 'disease'" in message
    assert str(path) in message


def test_duplicate_ids_say_how_many_and_where(tmp_path: Path) -> None:
    text = SMALL + "p2;50;Paris;cold\np4;50;Paris;cold\np1;50;Paris;cold\np3;20;Lyon;flu\n"
    path = write(tmp_path / "s.csv", text)
    with pytest.raises(SchemaError) as info:
        read_snapshot(path, SMALL_SCHEMA)
    message = str(info.value)
    assert "3 id(s) appear more than once" in message
    assert "the first 'p2' on lines 3 and 5" in message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "id;age;city;disease\np1;30;Paris;flu\np2;41;Lyon\n",
            r"line 3: 3 field\(s\) where the header has 4",
        ),
        ("id;age;city;disease\np1;30;Paris;flu\n\np2;41;Lyon;cold;x\n", r"line 4: 5 field"),
        (
            "id;age;city;disease\np1;30;Paris;flu\n ;41;Lyon;cold\n",
            r"line 3: the id \(column 'id'\) is empty",
        ),
        (
            "id;age;city;disease\np1;30;Paris;\n",
            r"line 2: the sensitive value \(column 'disease'\) is empty",
        ),
        ("", r"is empty or its first line is blank"),
        ("\nid;age;city;disease\n", r"is empty or its first line is blank"),
        ('id;age;city;disease\np1;30;"Par;is";flu\np2;30;"x";flu;y\n', r"line 3: 5 field"),
        ("id;age;id;city;disease\n", r"column 'id' \(schema.id\) appears 2 times"),
    ],
)
def test_malformed_snapshots(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "s.csv", text)
    with pytest.raises(SchemaError, match=message):
        read_snapshot(path, SMALL_SCHEMA)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_bytes(b"id;age;city;disease\np1;30;Par\xe9s;flu\n")
    with pytest.raises(SchemaError, match=r"line 2: the value b'Par\\xe9s' is not UTF-8"):
        read_snapshot(path, SMALL_SCHEMA)
    path.write_bytes(b'id;age;city;disease\np1;30;"Par\xe9s";flu\n')
    with pytest.raises(SchemaError, match=r"line 2: the bytes .* are not UTF-8"):
        read_snapshot(path, SMALL_SCHEMA)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match=r"does not exist; check the path"):
        read_snapshot(tmp_path / "none.csv", SMALL_SCHEMA)


def _content(raw: RawSnapshot) -> tuple[list[str], dict[str, list[str]], list[str], list[int]]:
    return (
        raw.ids.tolist(),
        {k: v.tolist() for k, v in raw.qid.items()},
        raw.sensitive.tolist(),
        raw.lines.tolist(),
    )


@pytest.mark.parametrize(
    ("text", "bom", "newline"),
    [
        (SMALL, False, "\n"),
        (SMALL, False, "\r\n"),
        (SMALL, False, "\r"),
        (SMALL, True, "\r\n"),
        (SMALL.replace(";", ","), False, "\n"),
        (SMALL.replace(";", ","), True, "\r\n"),
        (SMALL.replace(";", " ; ").replace("\n", " \t\n"), False, "\n"),  # blanks around fields
        (
            '"id";age;city;disease\np1;"30";"Paris";flu\n"p2";41;Lyon;cold\np3;30;Nice;"flu"\n',
            False,
            "\n",
        ),
        (SMALL.replace(";", ",").replace("Paris", ' "Paris" '), False, "\r\n"),
    ],
)
def test_dialects_give_the_same_snapshot(
    tmp_path: Path, text: str, bom: bool, newline: str
) -> None:
    expected = (
        ["p1", "p2", "p3"],
        {"age": ["30", "41", "30"], "city": ["Paris", "Lyon", "Nice"]},
        ["flu", "cold", "flu"],
        [2, 3, 4],
    )
    raw = read_snapshot(write(tmp_path / "s.csv", text, bom=bom, newline=newline), SMALL_SCHEMA)
    assert _content(raw) == expected


def test_quoted_fields_may_hold_the_delimiter_and_newlines(tmp_path: Path) -> None:
    text = 'id,age,city,disease\np1,30,"Paris, France",flu\np2,41,"Ly""on\nsud",cold\np3,1,x,flu\n'
    raw = read_snapshot(write(tmp_path / "s.csv", text), SMALL_SCHEMA)
    assert raw.qid["city"].tolist() == ["Paris, France", 'Ly"on\nsud', "x"]
    assert raw.lines.tolist() == [2, 3, 5]


def test_blank_lines_are_skipped_and_line_numbers_kept(tmp_path: Path) -> None:
    text = "id;age;city;disease\n\np1;30;Paris;flu\n  \t\np2;41;Lyon;cold\n\n"
    raw = read_snapshot(write(tmp_path / "s.csv", text), SMALL_SCHEMA)
    assert raw.ids.tolist() == ["p1", "p2"]
    assert raw.lines.tolist() == [3, 5]
    assert raw.locate(1) == "line 5"


def test_a_header_without_rows_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match=r"has a header but no rows"):
        read_snapshot(write(tmp_path / "s.csv", "id;age;city;disease\n"), SMALL_SCHEMA)
    with pytest.raises(SchemaError, match=r"has a header but no rows"):
        read_snapshot(write(tmp_path / "t.csv", "id;age;city;disease"), SMALL_SCHEMA)


def test_an_empty_in_memory_snapshot_encodes_to_an_empty_table() -> None:
    raw = snapshot_from_columns([], {"age": [], "city": []}, [])
    assert raw.n_rows == 0
    table = encode(raw, SMALL_SCHEMA, {})
    assert table.qid.shape == (0, 2) and table.sensitive_values == ()


def test_extra_columns_are_ignored_and_order_is_free(tmp_path: Path) -> None:
    text = "disease;x;city;age;id\nflu;1;Paris;30;p1\ncold;2;Lyon;41;p2\n"
    raw = read_snapshot(write(tmp_path / "s.csv", text), SMALL_SCHEMA)
    assert raw.ids.tolist() == ["p1", "p2"]
    assert raw.qid["age"].tolist() == ["30", "41"]


# -- in-memory snapshots -----------------------------------------------------------------------


def test_snapshot_from_columns() -> None:
    raw = snapshot_from_columns(
        ["a", " b", 3], {"age": [30, 41.5, "30"], "city": ["Paris", None, "x "]}, ["s", "t", "s"]
    )
    assert raw.ids.tolist() == ["a", "b", "3"]
    assert raw.qid["age"].tolist() == ["30", "41.5", "30"]
    assert raw.qid["city"].tolist() == ["Paris", "", "x"]
    assert raw.lines.tolist() == [1, 2, 3] and raw.row_label == "record"
    assert raw.source == "<memory>"
    city = ["Paris", "", "x"]
    again = snapshot_from_columns(
        ["a", "b", "3"], {"age": ["30", "41.5", "30"], "city": city}, "sts"
    )
    assert again.sha256 == raw.sha256
    other = snapshot_from_columns(
        ["a", "b", "3"], {"age": ["30", "41.5", "31"], "city": city}, "sts"
    )
    assert other.sha256 != raw.sha256


@pytest.mark.parametrize(
    ("ids", "qid", "sensitive", "message"),
    [
        (
            ["a", "b"],
            {"age": [1]},
            ["s", "t"],
            r"different lengths \(id: 2, sensitive: 2, qid 'age': 1\)",
        ),
        (
            ["a", "a", "b", "b"],
            {"age": [1, 2, 3, 4]},
            list("stuv"),
            r"2 id\(s\) .* 'a' on records 1 and 2",
        ),
        (["a", ""], {"age": [1, 2]}, ["s", "t"], r"record 2: the id .* is empty"),
        (["a", "b"], {"age": [1, 2]}, ["s", None], r"record 2: the sensitive value .* is empty"),
    ],
)
def test_snapshot_from_columns_errors(
    ids: list[object], qid: dict[str, list[object]], sensitive: list[object], message: str
) -> None:
    with pytest.raises(SchemaError, match=message):
        snapshot_from_columns(ids, qid, sensitive, source="kafka batch")


# -- attribute kinds ---------------------------------------------------------------------------


def _encode(columns: dict[str, list[object]], **schema: object) -> tuple[RawSnapshot, EncodedTable]:
    n = len(next(iter(columns.values())))
    raw = snapshot_from_columns([f"p{i}" for i in range(n)], columns, ["s"] * n)
    settings = SchemaSettings(id="id", sensitive="s", qid=tuple(columns), **schema)
    return raw, encode(raw, settings, load_hierarchies(settings))


def test_numeric_detection() -> None:
    _, table = _encode(
        {"a": ["30", "1e1", "30.0", "-2.5"], "b": ["1", "x", "2", "3"], "c": ["1", "nan", "2", "3"]}
    )
    kinds = [(a.name, a.kind) for a in table.attributes]
    assert kinds == [("a", "numeric"), ("b", "set"), ("c", "set")]
    a = table.attributes[0]
    assert a.domain.dtype == np.float64 and a.domain.tolist() == [-2.5, 10.0, 30.0]
    assert table.qid[:, 0].tolist() == [2, 1, 2, 0]  # "30" and "30.0" share a code
    b = table.attributes[1]
    assert b.domain.tolist() == ["1", "2", "3", "x"]
    assert table.qid[:, 1].tolist() == [0, 3, 1, 2]


def test_schema_numeric_overrides_detection() -> None:
    _, table = _encode({"a": ["3", "20", "100"], "b": ["3", "20", "100"]}, numeric=("a",))
    assert [a.kind for a in table.attributes] == ["numeric", "set"]
    assert table.attributes[1].domain.tolist() == ["100", "20", "3"]  # sorted as strings


def test_schema_numeric_rejects_a_non_number() -> None:
    with pytest.raises(SchemaError) as info:
        _encode({"a": ["3", "20", "?", "x"]}, numeric=("a",))
    message = str(info.value)
    assert "attribute 'a' is listed in schema.numeric but value '?' (record 3)" in message
    assert "remove 'a' from schema.numeric" in message


def test_hierarchy_wins_over_numeric_and_covers_every_leaf(tmp_path: Path) -> None:
    path = write(tmp_path / "h.csv", "3;low;*\n20;high;*\n1;low;*\n100;high;*\n")
    _, table = _encode({"a": ["20", "1", "20"]}, numeric=("a",), hierarchies={"a": path})
    attribute = table.attributes[0]
    assert attribute.kind == "hierarchy"
    assert attribute.domain.tolist() == ["3", "1", "20", "100"]  # all leaves, depth-first
    assert table.qid[:, 0].tolist() == [2, 1, 2]
    assert attribute.levels is not None and attribute.levels[:, 1].tolist() == [0, 0, 1, 1]


def test_missing_hierarchy_in_the_mapping_is_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path / "h.csv", "a;*\n")
    schema = SchemaSettings(id="id", sensitive="s", qid=("x",), hierarchies={"x": path})
    raw = snapshot_from_columns(["p"], {"x": ["a"]}, ["s"])
    with pytest.raises(ConfigError, match=r"no hierarchy was loaded"):
        encode(raw, schema, {})
