"""A statement's pairs brought to the driver when there are few of them.

A point MERGE's pass 1 (the target rows its ON condition pairs with source rows) used to be
materialised by a lazy checkpoint and read by a bitmap aggregate (two stages, a shuffle) for
the deletion vectors; the write then read the checkpoint. Checkpointing costs a planning pass
of its own (analysis, adaptive execution, the RDD's closure check): about a third of a point
MERGE's driver time. When the source has few rows, ``collect_few`` instead runs pass 1 once
into Arrow (at most ``FEW_ROWS`` + 1 rows, so a key that is not unique in the target cannot
flood the driver: then the caller takes its usual route); the deletion vectors' positions are
counted on the driver from those rows, and the write reads them back as a local relation,
which Spark scans without a job of its own (and ``driver_write`` hands to pyarrow, no write
job either). A point UPDATE takes the same route when its candidate files are small
(``small_scan``).
"""

from __future__ import annotations

from typing import Optional

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from isolde.executor.schema import nested_types

FEW_ROWS = 1000  # rows a statement may bring to the driver this way
# An UPDATE does not know beforehand how many rows its condition selects: it tries this route
# only when its candidate files hold at most this many rows, so a try that finds more than
# FEW_ROWS costs at most one scan of a small set of files.
SMALL_SCAN_ROWS = 250_000


_ARROW_SAFE = (T.StructType, T.ArrayType, T.MapType, T.BooleanType, T.ByteType, T.ShortType, T.IntegerType,
               T.LongType, T.FloatType, T.DoubleType, T.DecimalType, T.StringType, T.BinaryType, T.DateType,
               T.TimestampType, T.TimestampNTZType)


def arrow_safe(dt) -> bool:
    """Does a value of this Spark type go through Arrow and back to the same type and value?"""
    return all(isinstance(t, _ARROW_SAFE) and not isinstance(t, (T.CharType, T.VarcharType))
               for t in nested_types(dt))


def same_types(a: T.StructType, b: T.StructType) -> bool:
    """The same column names and types, nullability aside (an Arrow round trip may widen it)."""
    return [(f.name, f.dataType.simpleString()) for f in a.fields] == \
        [(f.name, f.dataType.simpleString()) for f in b.fields]


def collect_few(df: DataFrame, limit: Optional[int] = None) -> Optional[tuple]:
    """``(Arrow table, local DataFrame)`` of ``df``'s rows when it has at most ``limit``, in one
    Spark job (its limit stops each task after ``limit`` + 1 rows); None when it has more, or a
    column's type does not survive the round trip (the caller then materialises ``df`` in Spark)."""
    from isolde.executor.spark import without_adaptive

    limit = FEW_ROWS if limit is None else limit
    if not all(arrow_safe(f.dataType) for f in df.schema.fields):
        return None
    table = without_adaptive(df.limit(limit + 1)).toArrow()
    if table.num_rows > limit:
        return None
    local = df.sparkSession.createDataFrame(table, schema=df.schema)
    if not same_types(local.schema, df.schema):
        return None
    # one partition: Spark spreads a local relation's rows over a task per core, and each task
    # writes a file of its own (two files for two updated rows)
    return table, local.coalesce(1)


def small_scan(files) -> bool:
    """Do the files (AddFiles) hold at most SMALL_SCAN_ROWS rows by their statistics?"""
    total = 0
    for add in files:
        if add.num_records is None:
            return False
        total += add.num_records
    return total <= SMALL_SCAN_ROWS


_FLAT_TYPES = (T.BooleanType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType,
               T.DecimalType, T.StringType, T.BinaryType, T.DateType)


def rows_as_arrow(df: DataFrame):
    """``df``'s rows as an Arrow table. Flat columns of types whose Python values are exact (no
    TIMESTAMP: those come back in the Python process's zone) are collected as Rows, which a
    local relation hands over without a Spark job; else ``toArrow`` (one job)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    fields = df.schema.fields
    if not all(isinstance(f.dataType, _FLAT_TYPES) and not isinstance(f.dataType, (T.CharType, T.VarcharType))
               for f in fields):
        return df.toArrow()
    rows = df.collect()
    types = [to_arrow_type(f.dataType) for f in fields]
    arrays = [pa.array([r[i] for r in rows], type=types[i]) for i in range(len(fields))]
    schema = pa.schema([pa.field(f.name, ty, nullable=f.nullable) for f, ty in zip(fields, types)])
    return pa.Table.from_arrays(arrays, schema=schema)
