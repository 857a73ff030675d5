"""CONVERT TO DELTA parquet.`/path` [NO STATISTICS] [PARTITIONED BY (col type, ...)].

Builds version 0 of a Delta log over the Parquet files already in the folder; no data is
read or rewritten (pyarrow reads footers only):

* data files: every non-hidden file under the folder (hidden = name starting with ``.`` or
  ``_``, in any folder that is not a partition folder); each must be Parquet;
* schema: the files' schemas unified (a column typed differently in two files is an error),
  then the partition columns with their declared types;
* partitions: with PARTITIONED BY, each file must sit in ``col=value/`` folders in exactly
  the declared order (Hive escaping undone, ``__HIVE_DEFAULT_PARTITION__`` is NULL) and each
  value must fit its type; without it, files in subfolders are an error;
* stats: numRecords / min / max / nullCount from the footers, unless NO STATISTICS;
* properties: the defaults CREATE TABLE uses (isolde's: deletion vectors on; then the session's
  ``spark.databricks.delta.properties.defaults.*``), protocol from the schema and properties.

Operation ``CONVERT`` (parameters numFiles, partitionedBy, collectStats). A folder that is
already a Delta table is left alone (no commit).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import types as T

from isolde.errors import AnalysisError, ExecutionError
from ..catalog import properties as P
from ..catalog import schema as S
from . import executes
from ..log.actions import AddFile, Metadata, Protocol
from ..session.results import QueryResult
from .alter import prepared_log_write
from isolde.grammar import ast

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def arrow_to_spark(t: pa.DataType, name: str = "") -> T.DataType:
    if pa.types.is_dictionary(t):
        return arrow_to_spark(t.value_type, name)
    if pa.types.is_boolean(t):
        return T.BooleanType()
    if pa.types.is_int8(t):
        return T.ByteType()
    if pa.types.is_int16(t) or pa.types.is_uint8(t):
        return T.ShortType()
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return T.IntegerType()
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return T.LongType()
    if pa.types.is_uint64(t):
        return T.DecimalType(20, 0)
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return T.FloatType()
    if pa.types.is_float64(t):
        return T.DoubleType()
    if pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
        return T.StringType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return T.BinaryType()
    if pa.types.is_date(t):
        return T.DateType()
    if pa.types.is_timestamp(t):
        return T.TimestampType() if t.tz is not None else T.TimestampNTZType()
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise AnalysisError(f"Column `{name}`: DECIMAL({t.precision},{t.scale}) is wider than Spark's 38 digits.")
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return T.ArrayType(arrow_to_spark(t.value_type, name), True)
    if pa.types.is_map(t):
        return T.MapType(arrow_to_spark(t.key_type, name), arrow_to_spark(t.item_type, name), True)
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(t.field(i).name, arrow_to_spark(t.field(i).type, name), True)
                             for i in range(t.num_fields)])
    raise AnalysisError(f"Column `{name}` has the Parquet/Arrow type {t}, which Delta cannot store.",
                        error_class="DELTA_UNSUPPORTED_DATA_TYPES", sqlstate="0AKDC")


def _check_partition_value(column: str, dtype: T.DataType, value: str | None, file: str) -> None:
    if value is None:
        return
    try:
        if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
            int(value)
        elif isinstance(dtype, (T.FloatType, T.DoubleType)):
            float(value)
        elif isinstance(dtype, T.DecimalType):
            decimal.Decimal(value)
        elif isinstance(dtype, T.DateType):
            dt.date.fromisoformat(value)
        elif isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
            dt.datetime.fromisoformat(value)
        elif isinstance(dtype, T.BooleanType):
            if value.lower() not in ("true", "false"):
                raise ValueError(value)
    except (ValueError, decimal.InvalidOperation):
        raise AnalysisError(f"Partition value {value!r} of column `{column}` (in {file}) is not a valid "
                            f"{dtype.simpleString().upper()}.", error_class="DELTA_CONVERSION_INVALID_PARTITION")


def _is_hidden(name: str) -> bool:
    return name.startswith((".", "_")) and "=" not in name


def scan_parquet_dir(root: str, partition_cols: list[str]) -> list[tuple[str, dict]]:
    """[(relative path, {partition column: value})] of the data files under ``root``."""
    out = []
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not _is_hidden(d))
        rel_dir = os.path.relpath(current, root)
        segments = [] if rel_dir == "." else rel_dir.split(os.sep)
        for name in sorted(files):
            if name.startswith((".", "_")):
                continue
            rel = os.path.join(*segments, name) if segments else name
            if len(segments) != len(partition_cols):
                if not partition_cols:
                    raise AnalysisError(
                        f"Found the data file {rel} in a subfolder, but no partition columns were given. If the "
                        "folder is partitioned, say so: CONVERT TO DELTA parquet.`path` PARTITIONED BY (col type, ...).",
                        error_class="DELTA_CONVERSION_UNEXPECTED_PARTITION_DIRECTORY")
                raise AnalysisError(
                    f"Expecting {len(partition_cols)} partition column(s) ({', '.join(partition_cols)}) in the folders "
                    f"above {rel}, found {len(segments)}.", error_class="DELTA_CONVERSION_PARTITION_MISMATCH")
            values = {}
            for seg, col in zip(segments, partition_cols):
                key, eq, value = seg.partition("=")
                if not eq or key.lower() != col.lower():
                    raise AnalysisError(
                        f"Expecting partition folder `{col}=...` for {rel}, found `{seg}`: the folders must follow "
                        f"PARTITIONED BY ({', '.join(partition_cols)}) in order.",
                        error_class="DELTA_CONVERSION_PARTITION_MISMATCH")
                value = unquote(value)
                values[col] = None if value == HIVE_NULL else value
            out.append((rel, values))
    return out


def build_conversion(table_path: str, partition_defs, no_statistics: bool = False,
                     configuration: dict | None = None, name: str | None = None):
    """(actions, parameters, metrics) of version 0 for the Parquet folder ``table_path``."""
    root = os.path.abspath(table_path)
    if not os.path.isdir(root):
        raise AnalysisError(f"CONVERT TO DELTA: the folder {table_path} does not exist.",
                            error_class="PATH_NOT_FOUND", sqlstate="42K03")
    part_fields = [S.column_to_field(c) for c in partition_defs]
    part_names = [f.name for f in part_fields]
    if len({n.lower() for n in part_names}) != len(part_names):
        raise AnalysisError("CONVERT TO DELTA: a partition column is listed twice.")
    files = scan_parquet_dir(root, part_names)
    if not files:
        raise AnalysisError(f"CONVERT TO DELTA: {table_path} holds no Parquet data files, so there is no schema to "
                            "convert.", error_class="DELTA_CONVERSION_NO_FILES")
    schemas = []
    footers = {}
    for rel, _ in files:
        full = os.path.join(root, rel)
        try:
            md = pq.read_metadata(full)
        except Exception as e:
            raise ExecutionError(f"CONVERT TO DELTA: {rel} is not a Parquet file ({str(e).splitlines()[0]}).",
                                 error_class="DELTA_CONVERSION_NOT_PARQUET")
        footers[rel] = md
        schemas.append(md.schema.to_arrow_schema().remove_metadata())
    try:
        unified = pa.unify_schemas(schemas)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise AnalysisError(f"CONVERT TO DELTA: the Parquet files have incompatible schemas: {e}",
                            error_class="DELTA_FAILED_TO_MERGE_FIELDS")
    fields = []
    lower_parts = {n.lower() for n in part_names}
    for f in unified:
        if f.name.lower() in lower_parts:
            raise AnalysisError(f"CONVERT TO DELTA: partition column `{f.name}` is also stored in the data files.",
                                error_class="DELTA_CONVERSION_PARTITION_COLUMN_IN_DATA")
        fields.append(T.StructField(f.name, arrow_to_spark(f.type, f.name), True))
    seen = set()
    for f in fields:
        if f.name.lower() in seen:
            raise AnalysisError(f"CONVERT TO DELTA: duplicate column `{f.name}` (names are case-insensitive).")
        seen.add(f.name.lower())
    struct = T.StructType(fields + [T.StructField(f.name, f.dataType, True, f.metadata) for f in part_fields])
    config = P.validate_new_properties(configuration or {}) if configuration else {}
    reader, writer, rf, wf = S.protocol_for(struct, config)
    protocol = Protocol(reader, writer, rf, wf)
    metadata = Metadata(schema_string=S.struct_to_delta(struct), partition_columns=tuple(part_names),
                        configuration=config, name=None)
    adds = []
    total = 0
    types = {f.name: f.dataType for f in part_fields}
    from ..log.stats import stats_from_metadata

    for rel, values in files:
        full = os.path.join(root, rel)
        for col, value in values.items():
            _check_partition_value(col, types[col], value, rel)
        st = os.stat(full)
        stats = None
        if not no_statistics:
            stats = json.dumps(stats_from_metadata(footers[rel]), separators=(",", ":"), ensure_ascii=False)
        adds.append(AddFile(path=P.encode_relative(rel), partition_values=values, size=st.st_size,
                            modification_time=int(st.st_mtime * 1000), data_change=True, stats=stats))
        total += st.st_size
    params = {"numFiles": len(adds), "partitionedBy": part_names, "collectStats": not no_statistics}
    metrics = {"numConvertedFiles": len(adds)}
    return [protocol, metadata, *adds], params, metrics


@executes(ast.ConvertToDelta)
def run(ctx, stmt: ast.ConvertToDelta):
    ref = stmt.table
    if ref.path is None:
        raise AnalysisError(
            f"CONVERT TO DELTA {ref.name}: isolde converts Parquet folders by path only; use "
            "CONVERT TO DELTA parquet.`/path/to/folder`.", error_class="DELTA_CONVERSION_UNSUPPORTED_TABLE")
    from ..catalog.warehouse import local_location

    # parquet.`path` is an explicit path (a relative one is the working directory's, as in Delta);
    # only delta.`...` table references must be absolute
    handle = P.resolve(ctx, ast.TableRef(path=local_location(ref.path)), must_exist=False)
    if handle.exists:
        snap = handle.log.update()
        return QueryResult(columns=[], rows=[],
                           message=f"{ref.path} is already a Delta table (version {snap.version}); nothing to convert.")
    defaults = {}
    if callable(getattr(ctx, "table_defaults", None)):
        try:  # the same defaults CREATE TABLE applies (isolde enables deletion vectors on new tables)
            from .ddl import ISOLDE_DEFAULTS

            defaults.update(ISOLDE_DEFAULTS)
        except ImportError:  # pragma: no cover
            defaults["delta.enableDeletionVectors"] = "true"
        defaults.update(ctx.table_defaults())
    actions, params, metrics = build_conversion(handle.path, stmt.partitioned_by, stmt.no_statistics, defaults)
    txn = ctx.start_transaction(handle.log)
    return prepared_log_write(handle, txn, "CONVERT", actions, params, metrics)


# Pure log work: the session need not wait for Spark to start (no Spark job group).
run.needs_spark = False
