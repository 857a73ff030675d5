"""Which Parquet filters a scan keeps (executor/rows/scan.py read_plan), without Spark.

The dictionary filter is always off (it tells -0.0 from 0.0). The row-group and page-index
statistics filters stay on; a top-level float column that some file does not vouch for as
NaN-free (isolde's ``isolde.nanFree`` tag; other writers' float maxima leave NaN out) is read
through ``nanvl``, which Spark does not push into the reader. A float nested in a struct, array
or map cannot be guarded that way: the statistics filters are then off for the scan.
"""

from __future__ import annotations

import json

import pytest
from pyspark.sql import types as T

from isolde.executor.rows import scan
from isolde.executor.log.actions import AddFile
from isolde.executor.log.stats import NAN_FREE_TAG


def f(name, dt):
    return T.StructField(name, dt)


def add(nan_free=None, raw=None) -> AddFile:
    tags = {NAN_FREE_TAG: raw if raw is not None else json.dumps(nan_free)} if nan_free is not None or raw else None
    return AddFile("part-0.parquet", {}, 1, 1, tags=tags)


OFF = "statistics filters off"
CASES = [
    ("no floats", [f("k", T.IntegerType()), f("s", T.StringType())], [add(), add()], set()),
    ("no floats, decimals", [f("m", T.DecimalType(10, 2))], [add()], set()),
    ("double, every file tagged", [f("k", T.IntegerType()), f("d", T.DoubleType())], [add(["d"]), add(["d"])],
     set()),
    ("double and float tagged", [f("d", T.DoubleType()), f("x", T.FloatType())], [add(["d", "x"])], set()),
    ("one file untagged", [f("d", T.DoubleType())], [add(["d"]), add()], {"d"}),
    ("a file tagged for another column", [f("d", T.DoubleType()), f("x", T.FloatType())], [add(["d"])], {"x"}),
    ("each column missing from one file", [f("d", T.DoubleType()), f("x", T.FloatType()), f("k", T.LongType())],
     [add(["d"]), add(["x"]), add(["d", "x"])], {"d", "x"}),
    ("an unreadable tag", [f("d", T.DoubleType())], [add(raw="not json")], {"d"}),
    ("a tag that is not a list", [f("d", T.DoubleType())], [add(raw='{"d": 1}')], {"d"}),
    ("a tag naming a non-float column", [f("d", T.DoubleType()), f("k", T.IntegerType())], [add(["k"])], {"d"}),
    ("a float in a struct", [f("s", T.StructType([f("x", T.FloatType())]))], [add(["s"])], OFF),
    ("a double in a map's values", [f("m", T.MapType(T.StringType(), T.ArrayType(T.DoubleType())))], [add()], OFF),
    ("a nested float beside a tagged double", [f("d", T.DoubleType()), f("a", T.ArrayType(T.FloatType()))],
     [add(["d"])], OFF),
    ("no files", [f("d", T.DoubleType())], [], set()),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_read_plan(case):
    _, fields, files, expect = case
    got = scan.read_plan(T.StructType(fields), files)
    assert got.options["parquet.filter.dictionary.enabled"] == "false"
    if expect == OFF:
        assert got.options[scan.STATS_FILTER] == "false" and got.options[scan.PAGE_INDEX_FILTER] == "false"
        assert got.guarded == frozenset()  # nothing left to push into the reader
    else:
        assert got.options == scan.READ_OPTIONS
        assert got.guarded == frozenset(expect)


def test_a_tag_is_parsed_once_per_text():
    from isolde.executor.log import stats

    stats._listed_names.cache_clear()
    files = [add(["d"]) for _ in range(500)]
    assert scan.read_plan(T.StructType([f("d", T.DoubleType())]), files).guarded == frozenset()
    info = stats._listed_names.cache_info()
    assert (info.misses, info.hits) == (1, 499)
