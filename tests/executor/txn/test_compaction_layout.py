"""Where a compacted input's rows land in the output (executor/txn/compaction.py)."""

from __future__ import annotations

import json

import pytest
from pyroaring import BitMap64

from isolde.executor.log.actions import AddFile
from isolde.executor.log.deletion_vectors import inline_descriptor
from isolde.executor.txn.compaction import LAYOUT_TAG, Layout, layout_tag, layouts_in
from isolde.executor.txn.row_level import TableFiles


def _input(path, rows, deleted=()):
    dv = inline_descriptor(deleted) if deleted else None
    return AddFile(path, {}, 100, 0, True, stats=json.dumps({"numRecords": rows}), deletion_vector=dv)


INPUTS = [_input("a", 3, deleted=[1]), _input("b", 2), _input("c", 4, deleted=[0, 3])]
# live rows in output order: a0 a2 | b0 b1 | c1 c2  ->  output positions 0..5


@pytest.fixture
def layout(tmp_path):
    out = AddFile("out", {}, 100, 0, False, stats=json.dumps({"numRecords": 6}), tags={LAYOUT_TAG: layout_tag(INPUTS)})
    got = Layout.of(out, TableFiles(str(tmp_path), None))
    assert got is not None
    return got


@pytest.mark.parametrize("path, positions, expected", [
    ("a", [0], [0]), ("a", [2], [1]), ("a", [0, 2], [0, 1]),
    ("b", [0], [2]), ("b", [1], [3]),
    ("c", [1], [4]), ("c", [2], [5]), ("c", [1, 2], [4, 5]),
    ("a", [1], None),  # deleted before the compaction: not in the output
    ("c", [3], None), ("b", [2], None),  # past the live rows
    ("z", [0], None),  # not an input
])
def test_positions_map_to_the_output(layout, path, positions, expected):
    got = layout.to_output(path, BitMap64(positions))
    assert (None if got is None else list(got)) == expected


def test_only_compaction_outputs_with_a_readable_tag_count(tmp_path):
    files = TableFiles(str(tmp_path), None)
    tag = {LAYOUT_TAG: layout_tag(INPUTS)}
    out = AddFile("out", {}, 1, 0, False, tags=tag)
    assert set(layouts_in([out], files)) == {"a", "b", "c"}
    assert layouts_in([AddFile("out", {}, 1, 0, True, tags=tag)], files) == {}  # a data change is not one
    assert layouts_in([AddFile("out", {}, 1, 0, False, tags={LAYOUT_TAG: "not json"})], files) == {}
    bad = json.dumps([{"path": "a", "numRecords": None, "deletionVector": None}])
    assert layouts_in([AddFile("out", {}, 1, 0, False, tags={LAYOUT_TAG: bad})], files) == {}
