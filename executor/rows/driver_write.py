"""A few rows Spark holds on the driver, written by pyarrow: no Spark write job.

A point MERGE or UPDATE (``few_rows``), an INSERT of a VALUES list, a MERGE from a small local
source: their new rows are a local relation. Spark's write of a local relation still plans a
write command and runs a job with one task per file, which opens a parquet-mr writer each
time. For a point MERGE that was ~150 ms of ~0.5 s; reading the rows into Arrow and writing
the file with pyarrow took ~45 ms (interleaved, one JVM).

``write_local_rows`` takes that route when every leaf of the plan is a local relation and the
rows are at most ``routes.DRIVER_WRITE_ROWS``. The rows are computed by Spark as before: casts, NOT
NULL and CHECK constraints, generated and identity columns all run where Spark hands the rows
over (``few_rows.rows_as_arrow``: no job at all when the optimiser folds the plan into one
local relation of flat columns, else one). Only the Parquet encoding changes hands. It writes
what Spark's writer writes: one file per partition, partition columns only in Hive-style
folders (Spark's escaping), INT64 microsecond timestamps, decimals as INT32 / INT64 up to 18
digits, 3-level lists (tests/executor/rows/test_driver_write.py compares the two). Everything else
takes Spark's writer: column mapping (physical names, field ids), IcebergCompat (partition
values in the files), partition columns of other types than strings, integers, booleans and
dates, and types Arrow does not carry back exactly (``few_rows.arrow_safe``).

``write_counted_rows`` takes the same route for rows of any plan that the statement has
counted before it writes them: a deletion-vector UPDATE's changed rows and a MERGE's changed
and new rows (at most ``routes.COUNTED_ROWS`` and, by their types' sizes, ``COUNTED_BYTES``). Spark
computes them in one job into Arrow, with no shuffle to gather each partition's rows into one
task and no write job. The 10M-row benchmark's UPDATE of 100k rows: write 0.42-0.74 ->
0.21-0.28 s; its MERGE of 50k updated and 50k new rows: 0.65-0.83 -> 0.27-0.40 s
(interleaved, one JVM). Those are bounded, already computed rows: the data work stays in
Spark, and a statement that changes more rows writes them with Spark's writer. The bound was
262,144 rows and 64 MB until the 50M-row benchmark's UPDATE of 500k rows (~72 MB in Arrow)
passed it: with the row bound alone raised (a stopped bounded job, a checkpoint and bitmaps
behind a shuffle, then the driver's write) it took 6.95-9.23 s, fully bounded 5.83-5.93 s
(three interleaved pairs; docs/DECISIONS.md "Session 29" has the old bound's figures too)."""

from __future__ import annotations

import os
import uuid
from typing import Optional

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..catalog import schema as S
from . import routes

# bytes a value of a variable-length type (strings, binary) is assumed to take, beside its offset
_VARIABLE_BYTES = 32
# partition column types whose folder value Python writes exactly as Spark's cast to STRING does
_PARTITION_TYPES = (T.StringType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.BooleanType, T.DateType)


def _all_leaves_local(df: DataFrame) -> bool:
    """Is every leaf of ``df``'s analysed plan a local relation (VALUES, a DataFrame made from
    rows or Arrow on the driver)? Then its rows are bounded by data the driver already holds."""
    try:
        leaves = df._jdf.queryExecution().analyzed().collectLeaves()
        n = leaves.size()
        return n > 0 and all(leaves.apply(i).getClass().getSimpleName() == "LocalRelation" for i in range(n))
    except Exception:  # noqa: BLE001 - a shortcut only: Spark's writer is always correct
        return False


def eligible(df: DataFrame, metadata, parts: list) -> bool:
    """Can ``df``'s rows be written by pyarrow for this table, unseen (see the module docstring)?"""
    return writable(df, metadata, parts) and _all_leaves_local(df)


def writable(df: DataFrame, metadata, parts: list) -> bool:
    """Does pyarrow write ``df``'s columns for this table as Spark's writer does?"""
    return writable_schema(df.schema, metadata, parts)


def writable_schema(schema: T.StructType, metadata, parts: list) -> bool:
    """``writable`` for rows of this Spark schema."""
    from .few_rows import arrow_safe

    if S.column_mapping_mode(metadata) != "none":
        return False
    conf = getattr(metadata, "configuration", None) or {}
    if any(k.lower().startswith("delta.enableicebergcompat") and str(v).strip().lower() == "true"
           for k, v in conf.items()):
        return False
    fields = {f.name.lower(): f for f in schema.fields}
    if len(fields) != len(schema.fields) or not all(arrow_safe(f.dataType) for f in schema.fields):
        return False
    for p in parts:
        f = fields.get(p.lower())
        if f is None or not isinstance(f.dataType, _PARTITION_TYPES) or isinstance(f.dataType, (T.CharType, T.VarcharType)):
            return False
    return True


def arrow_bytes(dt) -> int:
    """About how many bytes a value of this Spark type takes in Arrow (variable-length values
    ``_VARIABLE_BYTES``, a list or map four elements)."""
    if isinstance(dt, T.StructType):
        return sum(arrow_bytes(f.dataType) for f in dt.fields) + 1
    if isinstance(dt, T.ArrayType):
        return 4 + 4 * arrow_bytes(dt.elementType)
    if isinstance(dt, T.MapType):
        return 4 + 4 * (arrow_bytes(dt.keyType) + arrow_bytes(dt.valueType))
    if isinstance(dt, (T.StringType, T.BinaryType)):
        return 8 + _VARIABLE_BYTES
    if isinstance(dt, T.DecimalType):
        return 16
    if isinstance(dt, (T.BooleanType, T.ByteType)):
        return 1
    if isinstance(dt, T.ShortType):
        return 2
    if isinstance(dt, (T.IntegerType, T.FloatType, T.DateType)):
        return 4
    return 8


#: the folder name of a NULL partition value: Spark's writer, and Delta-Spark's log, read the
#: string itself as NULL too, so every route does (writer._adopt_files)
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def _partition_text(value) -> Optional[str]:
    """A partition value as the Delta log (and Spark's folder name) holds it; '' and the string
    ``__HIVE_DEFAULT_PARTITION__`` are NULL there, as when Spark's writer writes them."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "isoformat"):  # a date
        return value.isoformat()
    text = str(value)
    return None if not text or text == HIVE_NULL else text


def _under_coalesce(df: DataFrame) -> DataFrame:
    """``df``, or the local relation its optimised plan coalesces into one partition (few_rows
    coalesces its rows for Spark's writer: one task, one file). Spark runs a job to coalesce;
    the local relation's rows need none."""
    try:
        plan = df._jdf.queryExecution().optimizedPlan()
        if plan.getClass().getSimpleName() != "Repartition" or plan.shuffle() or \
                plan.child().getClass().getSimpleName() != "LocalRelation":
            return df
        session = df.sparkSession
        return DataFrame(session._jvm.org.apache.spark.sql.classic.Dataset.ofRows(session._jsparkSession, plan.child()),
                         session)
    except Exception:  # noqa: BLE001 - a job saved, never needed for correctness
        return df


def write_local_rows(ctx, df: DataFrame, table_path: str, metadata, data_change: bool, hidden=()):
    """``write_files`` for a DataFrame whose rows are few and on the driver: a ``WrittenFiles``,
    or None when ``df`` does not qualify (nothing written; the caller uses Spark's writer).
    ``hidden``: physical columns outside the schema (materialised row ids), written as they are
    and left out of the statistics, as Spark's route does."""
    from .few_rows import rows_as_arrow
    from ..runtime.phases import phase
    from ..runtime.spark import without_adaptive

    parts = S.partition_columns(metadata)
    if not eligible(df, metadata, parts):
        return None
    with phase("write"):
        table = rows_as_arrow(without_adaptive(_under_coalesce(df).limit(routes.DRIVER_WRITE_ROWS + 1)))
    if table.num_rows > routes.DRIVER_WRITE_ROWS:
        return None
    return _write_table(df.sparkSession, table, table_path, metadata, data_change, hidden)


def write_counted_rows(ctx, df: DataFrame, table_path: str, metadata, data_change: bool, hidden=(),
                       *, rows_at_most: int, with_rows=None):
    """``write_files`` for rows the statement has counted (``rows_at_most`` is a true upper
    bound): Spark computes them into Arrow (one job), pyarrow writes them, after ``with_rows``
    (an Arrow table of more rows with the same columns, already on the driver) when given. A
    ``WrittenFiles``, or None when they are too many or too big for the driver, or the table's
    columns need Spark's writer (nothing written; the caller uses Spark's writer)."""
    from .few_rows import rows_as_arrow
    from ..runtime.phases import phase
    from ..runtime.spark import without_adaptive

    parts = S.partition_columns(metadata)
    row_bytes = sum(arrow_bytes(f.dataType) for f in df.schema.fields)
    rows_at_most += with_rows.num_rows if with_rows is not None else 0
    if not routes.driver_writes(rows_at_most, row_bytes) or not writable(df, metadata, parts):
        return None
    with phase("write"):
        # a few rows of a local relation (a point statement's) come as Rows with no job at all;
        # more would cost more as Python objects than toArrow's job
        few_local = rows_at_most <= routes.DRIVER_WRITE_ROWS and _all_leaves_local(df)
        table = rows_as_arrow(without_adaptive(_under_coalesce(df))) if few_local else df.toArrow()
    if with_rows is not None:
        import pyarrow as pa

        table = pa.concat_tables([with_rows, table.select(with_rows.column_names)], promote_options="permissive")
    return _write_table(df.sparkSession, table, table_path, metadata, data_change, hidden)


def write_arrow_rows(ctx, table, table_path: str, metadata, data_change: bool, hidden=()):
    """``write_files`` for rows Spark already computed into an Arrow table on the driver (the
    table's columns in order, then ``hidden``; ``writable_schema`` held for their Spark types)."""
    return _write_table(ctx.spark, table, table_path, metadata, data_change, hidden)


def _partition_groups(table, part_names: list) -> dict:
    """Partition values (as the log holds them) -> the row indices of ``table`` in that
    partition (None: every row, when the table is not partitioned)."""
    import pyarrow as pa

    if not part_names:
        return {(): None} if table.num_rows else {}
    index = pa.array(range(table.num_rows), type=pa.int64())
    grouped = table.select(part_names).append_column("__isolde_i", index) \
        .group_by(part_names, use_threads=False).aggregate([("__isolde_i", "list")])
    groups: dict = {}
    columns = [grouped.column(n).to_pylist() for n in part_names]
    lists = grouped.column("__isolde_i_list").combine_chunks()
    for i in range(grouped.num_rows):
        key = tuple(_partition_text(c[i]) for c in columns)
        rows = lists[i].values
        # (two values with one folder text cannot happen for these types; joined if they did)
        groups[key] = pa.concat_arrays([groups[key], rows]) if key in groups else rows
    return groups


def _write_table(spark, table, table_path: str, metadata, data_change: bool, hidden):
    """Write an Arrow table of the table's columns (then ``hidden``) as one new file per
    partition (pyarrow encodes them in threads: it releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    from .writer import _adopt_one, _staging, tag_iceberg_compat
    from ..log import table_files
    from ..log.stats import file_stats_and_tags
    from ..log.store import writing
    from ..runtime.phases import phase
    from .scan import partition_dir

    table_path = table_files.absolute(table_path)
    parts = S.partition_columns(metadata)
    by_lower = {name.lower(): name for name in table.column_names}
    part_names = [by_lower[p.lower()] for p in parts]
    data = table.drop_columns(part_names) if part_names else table
    groups = _partition_groups(table, part_names)
    with _staging(table_path, on_local_disk=True) as (staging, result):
        staged = []
        for key, rows in groups.items():
            pvalues = dict(zip(parts, key))
            rel_dir = partition_dir(spark, parts, pvalues) if parts else ""
            name = f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
            staged.append((os.path.join(staging, rel_dir, name), rel_dir, name, pvalues, rows))

        def write_one(item):
            path, _, _, _, rows = item
            with writing(path, what="a data file of this write",
                         consequence="Nothing was committed: the table is unchanged."):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                part = data if rows is None else data.take(rows)
                return _write_parquet(part, path), part

        def each(fn, items):
            if len(items) < 2:
                return [fn(item) for item in items]
            with ThreadPoolExecutor(min(len(items), os.cpu_count() or 1)) as pool:
                return list(pool.map(fn, items))

        with phase("write"):
            footers = each(write_one, staged)
        with phase("stats"):
            described = [file_stats_and_tags(item[0], frozenset(hidden), written=footer)
                         for item, footer in zip(staged, footers)]
            for (path, rel_dir, name, pvalues, _), (num, stats, tags) in zip(staged, described):
                _adopt_one(path, table_path, rel_dir, name, pvalues, num, stats, result, data_change, tags)
    return tag_iceberg_compat(result, metadata, table_path)


def _write_parquet(table, path: str):
    """One Parquet file in the encoding Spark's writer uses (see the module docstring); returns
    its footer (``pq.FileMetaData``), as the writer wrote it."""
    import pyarrow.parquet as pq

    writer = pq.ParquetWriter(path, table.schema, compression="snappy", version="2.6", data_page_version="1.0",
                              store_decimal_as_integer=True, use_compliant_nested_type=True, coerce_timestamps="us",
                              allow_truncated_timestamps=False)
    try:
        writer.write_table(table)
    finally:
        writer.close()
    return writer.writer.metadata
