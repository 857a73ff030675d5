"""A few rows Spark holds on the driver, written by pyarrow: no Spark write job.

A point MERGE or UPDATE (``few_rows``), an INSERT of a VALUES list, a MERGE from a small local
source: their new rows are a local relation. Spark's write of a local relation still plans a
write command and runs a job with one task per file, which opens a parquet-mr writer each
time. For a point MERGE that was ~150 ms of ~0.5 s; reading the rows into Arrow and writing
the file with pyarrow took ~45 ms (interleaved, one JVM).

``write_local_rows`` takes that route when every leaf of the plan is a local relation and the
rows are at most ``DRIVER_WRITE_ROWS``. The rows are computed by Spark as before: casts, NOT
NULL and CHECK constraints, generated and identity columns all run where Spark hands the rows
over (``few_rows.rows_as_arrow``: no job at all when the optimiser folds the plan into one
local relation of flat columns, else one). Only the Parquet encoding changes hands. It writes
what Spark's writer writes: one file per partition, partition columns only in Hive-style
folders (Spark's escaping), INT64 microsecond timestamps, decimals as INT32 / INT64 up to 18
digits, 3-level lists (tests/spark/test_driver_write.py compares the two). Everything else
takes Spark's writer: column mapping (physical names, field ids), IcebergCompat (partition
values in the files), partition columns of other types than strings, integers, booleans and
dates, and types Arrow does not carry back exactly (``few_rows.arrow_safe``)."""

from __future__ import annotations

import os
import uuid
from typing import Optional

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from isolde.executor import schema as S

DRIVER_WRITE_ROWS = 1000
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
    """Can ``df``'s rows be written by pyarrow for this table (see the module docstring)?"""
    from isolde.executor.few_rows import arrow_safe

    if S.column_mapping_mode(metadata) != "none":
        return False
    conf = getattr(metadata, "configuration", None) or {}
    if any(k.lower().startswith("delta.enableicebergcompat") and str(v).strip().lower() == "true"
           for k, v in conf.items()):
        return False
    fields = {f.name.lower(): f for f in df.schema.fields}
    if len(fields) != len(df.schema.fields) or not all(arrow_safe(f.dataType) for f in df.schema.fields):
        return False
    for p in parts:
        f = fields.get(p.lower())
        if f is None or not isinstance(f.dataType, _PARTITION_TYPES) or isinstance(f.dataType, (T.CharType, T.VarcharType)):
            return False
    return _all_leaves_local(df)


def _partition_text(value) -> Optional[str]:
    """A partition value as the Delta log (and Spark's folder name) holds it; '' is NULL there."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "isoformat"):  # a date
        return value.isoformat()
    text = str(value)
    return text or None


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
    import pyarrow as pa

    from isolde.executor.few_rows import rows_as_arrow
    from isolde.executor.spark import without_adaptive
    from isolde.executor.writer import _adopt_one, _staging, tag_iceberg_compat
    from isolde.executor.log.stats import file_stats_and_tags
    from isolde.executor.log.store import writing
    from isolde.executor.phases import phase
    from isolde.executor.scan import partition_dir

    table_path = os.path.abspath(table_path)
    parts = S.partition_columns(metadata)
    if not eligible(df, metadata, parts):
        return None
    with phase("write"):
        table = rows_as_arrow(without_adaptive(_under_coalesce(df).limit(DRIVER_WRITE_ROWS + 1)))
    if table.num_rows > DRIVER_WRITE_ROWS:
        return None
    by_lower = {name.lower(): name for name in table.column_names}
    part_names = [by_lower[p.lower()] for p in parts]
    data = table.drop_columns(part_names) if part_names else table
    groups: dict = {}
    if part_names:
        keys = list(zip(*[[_partition_text(v) for v in table.column(n).to_pylist()] for n in part_names]))
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
    elif table.num_rows:
        groups[()] = None
    spark = df.sparkSession
    with _staging(table_path) as (staging, result):
        with phase("write"):
            staged = []
            for key, rows in groups.items():
                pvalues = dict(zip(parts, key))
                rel_dir = partition_dir(spark, parts, pvalues) if parts else ""
                name = f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
                folder = os.path.join(staging, rel_dir)
                path = os.path.join(folder, name)
                with writing(path, what="a data file of this write",
                             consequence="Nothing was committed: the table is unchanged."):
                    os.makedirs(folder, exist_ok=True)
                    _write_parquet(data if rows is None else data.take(pa.array(rows, type=pa.int64())), path)
                staged.append((path, rel_dir, name, pvalues))
        with phase("stats"):
            for path, rel_dir, name, pvalues in staged:
                num, stats, tags = file_stats_and_tags(path, frozenset(hidden))
                _adopt_one(path, table_path, rel_dir, name, pvalues, num, stats, result, data_change, tags)
    return tag_iceberg_compat(result, metadata, table_path)


def _write_parquet(table, path: str) -> None:
    """One Parquet file in the encoding Spark's writer uses (see the module docstring)."""
    import pyarrow.parquet as pq

    pq.write_table(table, path, compression="snappy", version="2.6", data_page_version="1.0",
                   store_decimal_as_integer=True, use_compliant_nested_type=True, coerce_timestamps="us",
                   allow_truncated_timestamps=False)
