"""A plain look at a table, answered on the driver while Spark starts.

A fresh REPL's first statement is often ``SELECT * FROM t LIMIT 10``. Spark needs seconds
before it can answer (JVM, SparkContext, SparkSession, the first job's code generation);
delta-rs answers the same read in a tenth of a second because it needs none of that. While
Spark is not up yet, and only then, a session that asks for it (``Session.driver_reads``: the
REPL and scripts) answers such a read here: the snapshot from the log, the first data files'
rows read with pyarrow (column mapping by name, partition values, deletion vectors applied),
turned into Rows the way Spark's ``collect()`` turns its rows (``StructType.fromInternal`` of
the same internal values). Anything else waits for Spark, and once Spark is up every read is
Spark's: the driver never becomes a second query engine.

A plain read (``plain_read``) is one table (a name or ``delta.`/p` ``, ``VERSION AS OF`` allowed),
``*`` or bare column names (aliases allowed), and ``LIMIT n`` with n <= ``DRIVER_ROWS`` (or no
LIMIT when the log's statistics count at most ``DRIVER_ROWS`` live rows): no WHERE, join,
aggregate, ORDER BY, DISTINCT, CTE, hint or subquery. Its table qualifies (``_columns``) when
its columns are of types whose values pyarrow reads exactly as Spark does: numbers, strings,
binary, dates and timestamps at the top level, and structs / arrays / maps of numbers and
strings; no CHAR / VARCHAR (Spark pads CHAR on read), variant, widened column, or column
mapping by id; partition columns of string, integer, boolean or date type. A column the files
hold under another letter case also sends the read to Spark (its reader matches names
case-insensitively).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import sqlglot.expressions as exp

from isolde.grammar import ast

#: the most rows a driver read returns (a look at a table, not an export)
DRIVER_ROWS = 10_000

_CHAR_VARCHAR = "__CHAR_VARCHAR_TYPE_STRING"
_TYPE_CHANGES = "delta.typeChanges"


@dataclass(frozen=True)
class PlainRead:
    """``SELECT <columns> FROM <table> [LIMIT n]``: ``columns`` is None for ``*``, else
    (column name as written, output name) pairs."""

    table: exp.Table
    columns: Optional[tuple[tuple[str, str], ...]]
    limit: Optional[int]


def plain_read(stmt) -> Optional[PlainRead]:
    """The plain read ``stmt`` is, or None (the module docstring says which reads are)."""
    query = getattr(stmt, "query", None)
    tree = getattr(query, "tree", None)
    if not isinstance(stmt, ast.Select) or not isinstance(tree, exp.Select):
        return None
    if any(value for key, value in tree.args.items() if key not in ("expressions", "from_", "limit")):
        return None
    source = tree.args.get("from_")
    table = source.this if isinstance(source, exp.From) else None
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        return None
    if any(table.args.get(k) for k in ("when", "changes", "joins", "laterals", "pivots", "hints", "sample")):
        return None
    version = table.args.get("version")
    if version is not None and (str(version.this).upper() != "VERSION"
                                or not isinstance(version.expression, exp.Literal)
                                or version.expression.is_string):
        return None  # TIMESTAMP AS OF evaluates an expression: Spark's job
    alias = table.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.args.get("columns"):
        return None
    names = {n.lower() for n in (table.alias_or_name, table.name) if n}
    limit = _limit(tree.args.get("limit"))
    if limit is False:
        return None
    items = tree.expressions
    if len(items) == 1 and isinstance(items[0], exp.Star):
        return PlainRead(table, None, limit)
    columns = []
    for item in items:
        output = None
        if isinstance(item, exp.Alias) and isinstance(item.args.get("alias"), exp.Identifier):
            output, item = item.alias, item.this
        if not isinstance(item, exp.Column) or not isinstance(item.this, exp.Identifier):
            return None
        if item.args.get("db") or item.args.get("catalog") or (item.table and item.table.lower() not in names):
            return None
        columns.append((item.name, output or item.name))
    return PlainRead(table, tuple(columns), limit)


def _limit(node) -> "Optional[int] | bool":
    """The LIMIT's row count, None without one, False for one this module does not take."""
    if node is None:
        return None
    if not isinstance(node, exp.Limit) or node.args.get("offset") or not isinstance(node.expression, exp.Literal) \
            or node.expression.is_string:
        return False
    try:
        n = int(node.expression.this)
    except ValueError:
        return False
    return n if 0 <= n <= DRIVER_ROWS else False


def needs_spark(stmt, session=None) -> bool:
    """Does this SELECT wait for Spark? Not a plain read of a qualifying table that a
    driver-reading session gets while Spark is still starting, outside a transaction (whose
    reads are recorded and pinned); nor one whose table does not exist (said at once)."""
    if not (session is not None and getattr(session, "driver_reads", False) and not session.ready
            and session.active_transaction is None and plain_read(stmt) is not None):
        return True
    from isolde.errors import IsoldeError
    from ..catalog.views import expand_views
    from ..session.context import ExecutionContext

    ctx = ExecutionContext(session, stmt)
    try:
        return _source(ctx, expand_views(ctx, stmt)) is None
    except IsoldeError:  # an unknown table, an unreadable protocol: run() raises it without Spark
        return False
    except Exception:  # noqa: BLE001 - anything else: Spark's route reports it
        return True


def run(ctx, stmt) -> "Optional[object]":
    """The QueryResult of a plain read from the driver, or None when its table or files do not
    qualify (the caller then runs the statement on Spark)."""
    source = _source(ctx, stmt)
    if source is None:
        return None
    table = _read_rows(*source)
    return None if table is None else _result(table, source[2])


def _source(ctx, stmt) -> Optional[tuple]:
    """(table path, files, _Plan, limit) of a plain read whose table qualifies, else None."""
    read = plain_read(stmt)
    if read is None:
        return None
    from isolde.planner.resolve import table_ref_of

    from ..log import type_widening

    ref = table_ref_of(read.table)
    if ref is None:
        return None
    handle = ctx.resolve(ref)  # an unknown table: the binder's own error, at once
    if handle.timestamp is not None:
        return None  # (delta.`/p@yyyyMMddHHmmssSSS`: a timestamp, resolved by Spark's rules)
    snapshot = ctx.snapshot(handle)
    snapshot.assert_readable()
    type_widening.check_readable(_schema_json(snapshot.metadata))
    plan = _columns(snapshot.metadata, read)
    if plan is None:
        return None
    files = list(snapshot.all_files)
    if read.limit is None and not _few_rows(files):
        return None
    return handle.path, files, plan, read.limit


@dataclass(frozen=True)
class _Plan:
    """What to read: the table's columns (arrow_files.Column), their Arrow types, and which of
    them each output column is."""

    columns: list
    arrow_schema: object
    struct: object  # the table's StructType
    picks: list  # (index into columns, output name)


def _schema_json(metadata) -> dict:
    import json

    text = getattr(metadata, "schema_string", None) or getattr(metadata, "schemaString")
    return json.loads(text) if isinstance(text, str) else text


def _columns(metadata, read: PlainRead) -> Optional[_Plan]:
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    from ..catalog import schema as S
    from ..streaming.arrow_files import columns_of

    configuration = S.configuration(metadata)
    if str(configuration.get("delta.columnMapping.mode", "none")).lower() not in ("none", "name"):
        return None
    struct = S.metadata_schema(metadata)
    parts = {p.lower() for p in S.partition_columns(metadata)}
    for f in struct.fields:
        if not _readable(f, f.name.lower() in parts):
            return None
    columns = columns_of(_schema_json(metadata), S.partition_columns(metadata), configuration)
    by_name = {f.name.lower(): i for i, f in enumerate(struct.fields)}
    if read.columns is None:
        picks = [(i, f.name) for i, f in enumerate(struct.fields)]
    else:
        picks = []
        for name, output in read.columns:
            i = by_name.get(name.lower())
            if i is None:
                return None  # Spark says what the column may have meant
            picks.append((i, output))
    try:
        arrow_schema = to_arrow_schema(struct, timezone="UTC", prefers_large_types=False)
    except Exception:  # noqa: BLE001 - a type Arrow cannot hold: Spark reads it
        return None
    return _Plan(columns, arrow_schema, struct, picks)


def _readable(field, partition: bool) -> bool:
    from pyspark.sql import types as T

    from ..catalog.schema import nested_types

    metadata = field.metadata or {}
    if _CHAR_VARCHAR in metadata or _TYPE_CHANGES in metadata:
        return False
    dt = field.dataType
    if partition:
        return isinstance(dt, (T.StringType, T.BooleanType, T.ByteType, T.ShortType, T.IntegerType, T.LongType,
                               T.DateType))
    leaf = (T.BooleanType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType,
            T.StringType, T.DecimalType)
    if isinstance(dt, leaf + (T.BinaryType, T.DateType, T.TimestampType, T.TimestampNTZType)):
        return not isinstance(dt, (T.CharType, T.VarcharType))
    if isinstance(dt, (T.StructType, T.ArrayType, T.MapType)):
        return all(isinstance(t, leaf + (T.StructType, T.ArrayType, T.MapType))
                   and not isinstance(t, (T.CharType, T.VarcharType))
                   for t in nested_types(dt))
    return False


def _few_rows(files) -> bool:
    """Do the log's statistics count at most DRIVER_ROWS live rows (every file counted)?"""
    total = 0
    for add in files:
        n = (add.parsed_stats or {}).get("numRecords")
        if not isinstance(n, int):
            return False
        total += n - (add.deletion_vector.cardinality if add.deletion_vector is not None else 0)
        if total > DRIVER_ROWS:
            return False
    return True


def _read_rows(table_path: str, files, plan: _Plan, limit: Optional[int]):
    """The first ``limit`` live rows (all without a limit) as one Arrow table, or None when a
    file holds a column under another letter case than the table's."""
    import pyarrow as pa

    from ..log.deletion_vectors import read_deleted_rows
    from ..streaming.arrow_files import conform_array, local_path

    wanted = sorted({i for i, _ in plan.picks})
    schema = plan.arrow_schema
    pieces = []
    have = 0
    for add in files:
        if limit is not None and have >= limit:
            break
        data = _open(local_path(table_path, add.path))
        physical = {plan.columns[i].physical for i in wanted if not plan.columns[i].partition}
        names = set(data.schema_arrow.names)
        lower = {n.lower(): n for n in names}
        if any(p not in names and p.lower() in lower for p in physical):
            return None
        deleted = read_deleted_rows(table_path, add.deletion_vector) if add.deletion_vector is not None else set()
        position = 0
        for n, batch in _batches(data, [p for p in sorted(physical) if p in names], limit):
            arrays = {}
            for i in wanted:
                column, target = plan.columns[i], schema.field(i)
                if column.partition:
                    arrays[i] = _partition(add.partition_values or {}, column, target.type, n)
                    if arrays[i] is None:
                        return None
                elif column.physical in names:
                    arrays[i] = conform_array(batch.column(column.physical), column, target.type)
                else:  # added to the table after this file was written
                    arrays[i] = pa.nulls(n, target.type)
            piece = pa.table([arrays[i] for i in wanted], names=[str(i) for i in wanted])
            if deleted:
                keep = [position + r not in deleted for r in range(n)]
                piece = piece.filter(pa.array(keep, pa.bool_()))
            position += n
            if limit is not None:
                piece = piece.slice(0, limit - have)
            pieces.append(piece)
            have += piece.num_rows
            if limit is not None and have >= limit:
                break
    if not pieces:
        return pa.table({str(i): pa.array([], schema.field(i).type) for i in wanted})
    return pa.concat_tables(pieces)


_CANONICAL = {"int": re.compile(r"-?[0-9]{1,19}"), "date": re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}"),
              "bool": re.compile(r"true|false")}


def _partition(values: dict, column, arrow_type, n: int):
    """``n`` copies of a file's partition value typed as the column, as the Spark scan gives it
    (the string itself, '' included; the key matched case-insensitively as a fallback), or None
    when the text is not in the one form whose meaning is certain here (Spark's casts accept
    more: those values are its to read)."""
    import pyarrow as pa

    value = values.get(column.physical, values.get(column.name))
    if value is None and column.physical not in values and column.name not in values:
        value = next((v for k, v in values.items() if k.lower() in (column.physical.lower(), column.name.lower())),
                     None)
    if value is None:
        return pa.nulls(n, arrow_type)
    if pa.types.is_string(arrow_type):
        return pa.repeat(pa.scalar(value, arrow_type), n)
    kind = "date" if pa.types.is_date32(arrow_type) else "bool" if pa.types.is_boolean(arrow_type) else "int"
    if not _CANONICAL[kind].fullmatch(value):
        return None
    try:
        typed = pa.array([value], pa.string()).cast(arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # out of the type's range: Spark's try_cast says NULL
    return pa.repeat(typed[0], n)


def _batches(data, columns: list, limit: Optional[int]):
    """(row count, batch) pairs of a ParquetFile's ``columns`` in file order (the row count
    from the footer when no data column is wanted: only partition columns were selected)."""
    if not columns:
        for k in range(data.metadata.num_row_groups):
            yield data.metadata.row_group(k).num_rows, None
        return
    for batch in data.iter_batches(batch_size=max(1024, min(limit or 65536, 65536)), columns=columns):
        yield batch.num_rows, batch


def _open(path: str):
    import pyarrow.parquet as pq

    from ..log import table_files

    if table_files.is_remote(path):
        return pq.ParquetFile(table_files.files_for(path).open_input(path), coerce_int96_timestamp_unit="us")
    return pq.ParquetFile(path, coerce_int96_timestamp_unit="us")


def _result(table, plan: _Plan):
    """A QueryResult with Spark's Rows: each value in Spark's internal form, then
    ``fromInternal`` (what ``collect()`` does with the rows the JVM sends)."""
    from pyspark.sql import types as T

    from ..session.results import QueryResult

    fields = []
    columns = []
    for i, output in plan.picks:
        f = plan.struct.fields[i]
        fields.append(T.StructField(output, f.dataType, f.nullable))
        columns.append(_internal_values(table.column(str(i)), f.dataType))
    out = T.StructType(fields)
    rows = [out.fromInternal(values) for values in zip(*columns)] if columns else []
    return QueryResult(columns=[f.name for f in fields], rows=rows, schema=out)


def _internal_values(column, dt) -> list:
    """One Arrow column as Spark's internal Python values of type ``dt``."""
    import pyarrow as pa
    from pyspark.sql import types as T

    if isinstance(dt, T.DateType):
        return column.cast(pa.int32()).to_pylist()  # days since the epoch
    if isinstance(dt, (T.TimestampType, T.TimestampNTZType)):
        return column.cast(pa.int64()).to_pylist()  # microseconds since the epoch
    values = column.to_pylist()  # (binary as bytes, as Spark 4's collect gives it)
    if isinstance(dt, (T.StructType, T.ArrayType, T.MapType)):
        return [_internal(v, dt) for v in values]
    return values


def _internal(value, dt):
    """A nested value from ``to_pylist`` (structs as dicts, maps as pairs) in Spark's form."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(dt, T.StructType):
        return tuple(_internal(value.get(f.name), f.dataType) for f in dt.fields)
    if isinstance(dt, T.ArrayType):
        return [_internal(v, dt.elementType) for v in value]
    if isinstance(dt, T.MapType):
        pairs = value.items() if isinstance(value, dict) else value
        return {_internal(k, dt.keyType): _internal(v, dt.valueType) for k, v in pairs}
    return value
