"""A statement's pairs brought to the driver when there are few of them.

A point MERGE's pass 1 (the target rows its ON condition pairs with source rows) used to be
materialised by a lazy checkpoint and read by a bitmap aggregate (two stages, a shuffle) for
the deletion vectors; the write then read the checkpoint. Checkpointing costs a planning pass
of its own (analysis, adaptive execution, the RDD's closure check): about a third of a point
MERGE's driver time. When the source has few rows, ``collect_few`` instead runs pass 1 once
into Arrow (at most ``routes.FEW_ROWS`` + 1 rows, so a key that is not unique in the target cannot
flood the driver: then the caller takes its usual route); the deletion vectors' positions are
counted on the driver from those rows, and the write reads them back as a local relation,
which Spark scans without a job of its own (and ``driver_write`` hands to pyarrow, no write
job either). A point UPDATE takes the same route when its candidate files are small
(``routes.FIND``).
"""

from __future__ import annotations

from typing import Optional

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..catalog.schema import nested_types
from . import routes


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


def collect_few(df: DataFrame, limit: Optional[int] = None, files=None) -> Optional[tuple]:
    """``(Arrow table, local DataFrame)`` of ``df``'s rows when it has at most ``limit``, in one
    Spark job (its limit stops each task after ``limit`` + 1 rows); None when it has more, or a
    column's type does not survive the round trip (the caller then materialises ``df`` in Spark).
    ``files``: the AddFiles ``df`` scans; when they hold at most ``routes.INTERPRETED_ROWS`` rows
    the job runs without generated code (``spark.without_adaptive``)."""
    from ..runtime.spark import without_adaptive

    limit = routes.FEW_ROWS if limit is None else limit
    if not all(arrow_safe(f.dataType) for f in df.schema.fields):
        return None
    interpreted = files is not None and routes.interpreted(files) and _no_subquery(df)
    table = without_adaptive(df.limit(limit + 1), interpreted=interpreted).toArrow()
    if table.num_rows > limit:
        return None
    local = df.sparkSession.createDataFrame(table, schema=df.schema)
    if not same_types(local.schema, df.schema):
        return None
    # one partition: Spark spreads a local relation's rows over a task per core, and each task
    # writes a file of its own (two files for two updated rows)
    return table, local.coalesce(1)


def _no_subquery(df: DataFrame) -> bool:
    """Is ``df``'s analysed plan free of subqueries (whose tables ``files`` does not bound)?"""
    try:
        return bool(df._jdf.queryExecution().analyzed().subqueriesAll().isEmpty())
    except Exception:  # noqa: BLE001 - then it keeps generated code
        return False


# a bounded collection stops its job with this error when a task yields more than its share
_TOO_MANY = "isolde: more rows than this statement brings to the driver"
_ROW_IN_TASK = (1 << 33) - 1  # monotonically_increasing_id's lower bits: the row's place in its task


def collect_bounded(df: DataFrame, limit: int, tasks: int):
    """``df``'s rows as an Arrow table when there are at most ``limit`` of them, in one Spark job
    and without ``limit()``'s shuffle into one task: each of the job's ``tasks``
    (``scan_tasks``) stops the job once it yields more than its share of ``limit``. So a
    statement that finds many rows loses a fraction of one scan and takes its Spark route, and
    the driver never holds more than ``limit`` rows. None then, or when a column's type does
    not survive Arrow, or the rows are so unevenly spread that one task holds more than its
    share. Any other error of the job (a constraint the rows violate) is raised."""
    if not all(arrow_safe(f.dataType) for f in df.schema.fields):
        return None
    share = limit // max(tasks, 1)
    guarded = _guarded(df, share)
    # rows that come out of a shuffle (a subquery's join) come in its partitions' tasks: the
    # share must hold for each of those (the plan is kept for the job: no second planning)
    shuffled = shuffle_tasks(guarded._jdf.queryExecution().executedPlan().toString())
    if shuffled > tasks:
        share = limit // shuffled
        guarded = _guarded(df, share)
    if share < 1:
        return None
    try:
        table = guarded.toArrow()
    except Exception as e:  # noqa: BLE001 - only the guard's own stop is expected here
        if _TOO_MANY in str(e):
            return None
        raise
    return table if table.num_rows <= limit else None


def _guarded(df: DataFrame, share: int) -> DataFrame:
    """``df`` planned without adaptive execution, each task failing the job with ``_TOO_MANY``
    once it yields more than ``share`` rows (``monotonically_increasing_id`` counts a task's rows
    in its lower bits)."""
    from pyspark.sql import functions as F

    from ..runtime.spark import without_adaptive

    return without_adaptive(df.filter(F.expr(f"IF((monotonically_increasing_id() & {_ROW_IN_TASK}) >= {share}, "
                                             f"raise_error('{_TOO_MANY}'), true)")))


def shuffle_tasks(plan: str) -> int:
    """The most partitions a shuffle of this physical plan (its tree string) writes: its output
    comes in that many tasks. 0 without a shuffle (a broadcast is not one)."""
    import re

    most = 0
    for line in plan.splitlines():
        if re.search(r"(?<!Broadcast)Exchange (hashpartitioning|rangepartitioning|RoundRobinPartitioning)", line):
            numbers = re.findall(r"(\d+)\)", line)
            most = max([most] + [int(n) for n in numbers[-1:]])
        elif re.search(r"(?<!Broadcast)Exchange SinglePartition", line):
            most = max(most, 1)
    return most


def scan_tasks(spark, sizes: list) -> int:
    """The tasks Spark reads files of these byte sizes with: each file cut into splits of
    ``maxSplitBytes``, the splits packed largest first into tasks of at most that many bytes
    (each file also costing ``openCostInBytes``), as Spark's FilePartition does."""
    from .dml import _bytes_conf

    conf = spark.conf
    max_bytes = _bytes_conf(conf.get("spark.sql.files.maxPartitionBytes", "128m"))
    open_cost = _bytes_conf(conf.get("spark.sql.files.openCostInBytes", "4m"))
    cores = int(conf.get("spark.sql.files.minPartitionNum", None) or spark.sparkContext.defaultParallelism)
    total = sum(size + open_cost for size in sizes)
    split = max(1, min(max_bytes, max(open_cost, total // max(cores, 1))))
    pieces = sorted((min(split, size - start) for size in sizes for start in range(0, max(size, 1), split)),
                    reverse=True)
    tasks, current = 0, 0
    for piece in pieces:
        if current and current + piece > split:
            tasks, current = tasks + 1, 0
        current += piece + open_cost
    return tasks + (1 if current else 0)


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
    try:
        rows = df.collect()
    except ValueError:  # a date Python cannot hold (past year 9999): Arrow carries it exactly
        return df.toArrow()
    strings = [i for i, f in enumerate(fields) if isinstance(f.dataType, T.StringType)]
    if any(isinstance(r[i], str) and "\ufffd" in r[i] for r in rows for i in strings):
        # bytes that are not UTF-8 come back to Python replaced (U+FFFD): Arrow carries Spark's bytes
        return df.toArrow()
    types = [to_arrow_type(f.dataType) for f in fields]
    arrays = [pa.array([r[i] for r in rows], type=types[i]) for i in range(len(fields))]
    schema = pa.schema([pa.field(f.name, ty, nullable=f.nullable) for f, ty in zip(fields, types)])
    return pa.Table.from_arrays(arrays, schema=schema)
