"""inline_source's literals without Spark: which types are written, and how (the Spark round
trip of the same values is in tests/executor/rows/test_inline_source.py)."""

from __future__ import annotations

import datetime
import decimal

import pytest
import sqlglot
from pyspark.sql import Row
from pyspark.sql import types as T

from isolde.executor.rows import inline_source as I
from isolde.executor.rows import routes


@pytest.mark.parametrize("value,dtype,text", [
    (5, T.LongType(), "CAST(5 AS bigint)"),
    (-3, T.ByteType(), "CAST(-3 AS tinyint)"),
    (None, T.IntegerType(), "CAST(NULL AS int)"),
    (True, T.BooleanType(), "true"),
    ("a'b", T.StringType(), "CAST(X'612762' AS STRING)"),
    ("", T.StringType(), "CAST(X'' AS STRING)"),
    (datetime.date(99, 1, 2), T.DateType(), "DATE'0099-01-02'"),
    (decimal.Decimal("1E+2"), T.DecimalType(10, 0), "CAST('100' AS decimal(10,0))"),
    (decimal.Decimal("-0.50"), T.DecimalType(5, 2), "CAST('-0.50' AS decimal(5,2))"),
    (float("nan"), T.DoubleType(), "CAST('NaN' AS double)"),
    (float("-inf"), T.FloatType(), "CAST('-Infinity' AS float)"),
    (-0.0, T.DoubleType(), "CAST('-0.0' AS double)"),
])
def test_literal_text(value, dtype, text):
    assert I.literal(value, dtype) == text


@pytest.mark.parametrize("value,dtype", [
    (datetime.datetime(2024, 1, 1), T.TimestampType()),
    (datetime.datetime(2024, 1, 1), T.TimestampNTZType()),
    (b"x", T.BinaryType()),
    ([1], T.ArrayType(T.IntegerType())),
    (None, T.StructType([T.StructField("a", T.IntegerType())])),
    ("x", T.StringType("UNICODE_CI")),
    (True, T.IntegerType()),  # a bool is not an INT's value
    ("1", T.LongType()),
])
def test_types_not_written_here(value, dtype):
    assert I.literal(value, dtype) is None


SCHEMA = T.StructType([T.StructField("id", T.LongType()), T.StructField("odd name", T.StringType())])


def test_lateral_view_text_and_bounds():
    quote = lambda n: "`" + n.replace("`", "``") + "`"  # noqa: E731
    text = I.lateral_view([Row(1, "x"), Row(2, None)], SCHEMA, "s", quote)
    assert text == ("LATERAL VIEW inline(array(named_struct('c0', CAST(1 AS bigint), 'c1', CAST(X'78' AS STRING)), "
                    "named_struct('c0', CAST(2 AS bigint), 'c1', CAST(NULL AS string)))) `s` AS `id`, `odd name`")
    assert I.lateral_view([], SCHEMA, "s", quote) is None
    assert I.lateral_view([Row(i, "x") for i in range(routes.INLINE_ROWS + 1)], SCHEMA, "s", quote) is None
    ts = T.StructType([T.StructField("t", T.TimestampType())])
    assert I.lateral_view([Row(datetime.datetime(2024, 1, 1))], ts, "s", quote) is None


@pytest.mark.parametrize("on,plain", [
    ("t.id = s.id", True),
    ("t.id = s.id AND t.v > 0", True),
    ("t.id = s.id AND rand() < 2", False),
    ("t.id = s.id AND t.id IN (SELECT id FROM x)", False),
    ("t.id = s.id AND EXISTS (SELECT 1)", False),
])
def test_plain_on(on, plain):
    assert I.plain(sqlglot.parse_one(on, read="spark")) is plain
