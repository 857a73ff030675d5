"""The curve expressions Spark evaluates agree with their Python references on random data:
range ids (Spark's ordering: NaN largest, -0.0 = 0.0, NULL first, strings sharing a long
prefix, dates, timestamps, decimals), Z-order and Hilbert keys, per-group cut points."""

from __future__ import annotations

import datetime as dt
import decimal
import random

import numpy as np
import pytest
from pyspark.sql import types as T

from isolde.executor.jobs import curve_keys as K
from isolde.executor.jobs import curves as C

pytestmark = pytest.mark.spark


def _values(kind: str, rng: random.Random, n: int) -> list:
    def one():
        if rng.random() < 0.05:
            return None
        if kind == "double":
            return rng.choice([float("nan"), -0.0, 0.0, float("inf"), -float("inf"), rng.uniform(-1e6, 1e6)])
        if kind == "string":
            return "customer-region-" + rng.choice(["", "é", "z"]) + f"{rng.randrange(10 ** 8):08d}"
        if kind == "date":
            return dt.date(2000, 1, 1) + dt.timedelta(days=rng.randrange(20000))
        if kind == "timestamp":
            return dt.datetime(2000, 1, 1) + dt.timedelta(microseconds=rng.randrange(10 ** 15))
        if kind == "decimal":
            return decimal.Decimal(rng.randrange(-10 ** 12, 10 ** 12)).scaleb(-4)
        return rng.randrange(-(1 << 62), 1 << 62)
    return [one() for _ in range(n)]


TYPES = {"double": T.DoubleType(), "string": T.StringType(), "date": T.DateType(), "timestamp": T.TimestampType(),
         "decimal": T.DecimalType(20, 4), "long": T.LongType()}


def _spark_sorted(values):
    return sorted((v for v in values if v is not None), key=lambda v: (1, 0) if v != v else (0, v))


@pytest.mark.parametrize("kind", list(TYPES))
def test_range_ids_match_the_reference(spark, kind):
    rng = random.Random(kind)
    values = _values(kind, rng, 400)
    cuts = C.quantile_boundaries(_spark_sorted(rng.sample(values, 120)), 31)
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)],
                               T.StructType([T.StructField("i", T.IntegerType()), T.StructField("v", TYPES[kind])]))
    got = {r.i: r.rid for r in C.with_range_ids(df, ["v"], [[cuts]], ["rid"]).select("i", "rid").collect()}
    # the reference on the values as Spark holds them (timestamps come back in the session zone)
    back = {r.i: r.v for r in df.collect()}
    assert got == {i: C.range_id(back[i], cuts) for i in back}


def test_grouped_cut_points(spark):
    rows = [(g, v) for g in range(3) for v in range(0, 100, 7)]
    df = spark.createDataFrame(rows, "g INT, v INT")
    cuts = [[[10, 50]], [[30]], [[]]]
    got = sorted((r.g, r.v, r.rid) for r in C.with_range_ids(df, ["v"], cuts, ["rid"], group_column="g").collect())
    assert got == sorted((g, v, C.range_id(v, cuts[g][0])) for g, v in rows)


@pytest.mark.parametrize("n, bits", [(2, 10), (3, 6), (4, 5)])
def test_zorder_and_hilbert_keys_match_the_numpy_keys(spark, n, bits):
    rng = np.random.default_rng(n * bits)
    ids = rng.integers(0, 1 << bits, size=(500, n), dtype=np.int64)
    names = [f"r{j}" for j in range(n)]
    df = spark.createDataFrame([tuple(int(x) for x in row) + (i,) for i, row in enumerate(ids)],
                               ", ".join(f"{c} INT" for c in names) + ", i INT")
    z = df.withColumn("k", C.zorder_key(names, bits))
    h = K.with_hilbert_key(df, names, bits, "k")
    assert [r.k for r in z.orderBy("i").collect()] == K.zorder_keys(ids, bits).tolist()
    assert [r.k for r in h.orderBy("i").collect()] == K.hilbert_keys(ids, bits).tolist()
