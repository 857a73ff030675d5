"""Which files OPTIMIZE / REORG PURGE rewrite together (``plan_bins``), table-driven, no Spark."""

from __future__ import annotations

import json

import pytest

from isolde.errors import AnalysisError
from isolde.executor.jobs.optimize import parse_size, plan_bins
from isolde.executor.log.actions import AddFile
from isolde.executor.log.deletion_vectors import inline_descriptor

NEEDS_SPARK = False


def f(name, size, part=None, deleted=0, rows=100):
    dv = inline_descriptor(range(deleted)) if deleted else None
    return AddFile(name, {"d": part} if part is not None else {}, size, 0, True,
                   stats=json.dumps({"numRecords": rows}), deletion_vector=dv)


def names(bins):
    return [[x.path for x in b] for b in bins]


CASES = [
    # (files, target, purge, expected bins by name)
    ([f("a", 10), f("b", 20), f("c", 30)], 100, False, [["a", "b", "c"]]),
    ([f("a", 10), f("b", 20), f("c", 30), f("d", 45)], 60, False, [["a", "b", "c"]]),  # d alone: left
    ([f("a", 40), f("b", 40), f("c", 40), f("d", 40)], 100, False, [["a", "b"], ["c", "d"]]),
    ([f("big", 500), f("a", 10), f("b", 10)], 100, False, [["a", "b"]]),  # large files are left alone
    ([f("a", 10)], 100, False, []),  # one small file: nothing to gain
    ([f("a", 10, deleted=1)], 100, False, [["a"]]),  # ... unless it has a vector to purge
    ([f("big", 500, deleted=1)], 100, False, []),  # 1% deleted: below the 5% threshold
    ([f("big", 500, deleted=10)], 100, False, [["big"]]),  # 10% deleted: rewritten
    ([f("a", 10, "x"), f("b", 10, "y"), f("c", 10, "x")], 100, False, [["a", "c"]]),  # per partition
    ([f("a", 10, "x"), f("b", 10, None), f("c", 10, None)], 100, False, [["b", "c"]]),  # NULL partition
    ([f("a", 10), f("b", 10, deleted=1), f("big", 500, deleted=1)], 1000, True, [["b", "big"]]),  # purge: DVs only
    ([f("a", 10), f("b", 20)], 100, True, []),
]


@pytest.mark.parametrize("files, target, purge, expected", CASES)
def test_plan_bins(files, target, purge, expected):
    assert names(plan_bins(files, target, purge=purge)) == expected


@pytest.mark.parametrize("text, size", [("1024", 1024), ("128mb", 128 << 20), ("1g", 1 << 30), (" 2 KB ", 2048)])
def test_sizes(text, size):
    assert parse_size(text, "x") == size


@pytest.mark.parametrize("text", ["", "0", "-5", "12 parsecs", "1.5g"])
def test_bad_sizes(text):
    with pytest.raises(AnalysisError, match="positive size in bytes"):
        parse_size(text, "x")
