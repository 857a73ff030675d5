"""Which statements may bring their rows to the driver (executor/rows/few_rows.py), without Spark:
the types that survive an Arrow round trip (which scans are small enough to try: test_routes.py)."""

from __future__ import annotations

from pyspark.sql import types as T

from isolde.executor.rows import few_rows


def test_which_types_are_arrow_safe():
    nested = T.StructType([T.StructField("m", T.MapType(T.StringType(), T.ArrayType(T.DecimalType(10, 2))))])
    assert few_rows.arrow_safe(nested)
    assert few_rows.arrow_safe(T.TimestampNTZType()) and few_rows.arrow_safe(T.BinaryType())
    assert not few_rows.arrow_safe(T.ArrayType(T.CharType(3)))
    assert not few_rows.arrow_safe(T.VarcharType(3))
    assert not few_rows.arrow_safe(T.DayTimeIntervalType())
    assert not few_rows.arrow_safe(T.StructType([T.StructField("v", T.VariantType())]))


def test_same_types_ignores_nullability_only():
    a = T.StructType([T.StructField("x", T.ArrayType(T.LongType(), False), False)])
    b = T.StructType([T.StructField("x", T.ArrayType(T.LongType(), True), True)])
    assert few_rows.same_types(a, b)
    assert not few_rows.same_types(a, T.StructType([T.StructField("y", T.ArrayType(T.LongType()))]))
    assert not few_rows.same_types(T.StructType([T.StructField("t", T.TimestampNTZType())]),
                                   T.StructType([T.StructField("t", T.TimestampType())]))
