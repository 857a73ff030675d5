"""Which Parquet filters a scan keeps (executor/scan.py read_options), without Spark.

The dictionary filter is always off (it tells -0.0 from 0.0). The row-group and page-index
statistics filters stay on only when every floating-point column of every file is known to hold
no NaN (isolde's ``isolde.nanFree`` tag): other writers' float maxima leave NaN out.
"""

from __future__ import annotations

import json

import pytest
from pyspark.sql import types as T

from isolde.executor import scan
from isolde.executor.log.actions import AddFile
from isolde.executor.log.stats import NAN_FREE_TAG


def f(name, dt):
    return T.StructField(name, dt)


def add(nan_free=None, raw=None) -> AddFile:
    tags = {NAN_FREE_TAG: raw if raw is not None else json.dumps(nan_free)} if nan_free is not None or raw else None
    return AddFile("part-0.parquet", {}, 1, 1, tags=tags)


KEEP = "keep the statistics filters"
OFF = "statistics filters off"
CASES = [
    ("no floats", [f("k", T.IntegerType()), f("s", T.StringType())], [add(), add()], KEEP),
    ("no floats, decimals", [f("m", T.DecimalType(10, 2))], [add()], KEEP),
    ("double, every file tagged", [f("k", T.IntegerType()), f("d", T.DoubleType())], [add(["d"]), add(["d"])], KEEP),
    ("double and float tagged", [f("d", T.DoubleType()), f("x", T.FloatType())], [add(["d", "x"])], KEEP),
    ("one file untagged", [f("d", T.DoubleType())], [add(["d"]), add()], OFF),
    ("a file tagged for another column", [f("d", T.DoubleType()), f("x", T.FloatType())], [add(["d"])], OFF),
    ("an unreadable tag", [f("d", T.DoubleType())], [add(raw="not json")], OFF),
    ("a tag that is not a list", [f("d", T.DoubleType())], [add(raw='{"d": 1}')], OFF),
    ("a float in a struct", [f("s", T.StructType([f("x", T.FloatType())]))], [add(["s"])], OFF),
    ("a double in a map's values", [f("m", T.MapType(T.StringType(), T.ArrayType(T.DoubleType())))], [add()], OFF),
    ("no files", [f("d", T.DoubleType())], [], KEEP),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_read_options(case):
    _, fields, files, expect = case
    got = scan.read_options(T.StructType(fields), files)
    assert got["parquet.filter.dictionary.enabled"] == "false"
    if expect == KEEP:
        assert got == scan.READ_OPTIONS
    else:
        assert got[scan.STATS_FILTER] == "false" and got[scan.PAGE_INDEX_FILTER] == "false"
