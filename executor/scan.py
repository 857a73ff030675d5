"""Reading a snapshot into a Spark DataFrame, and data skipping.

    scan(ctx, snapshot, table_path, files=None, *, with_row_ids=False) -> DataFrame
    prune_files(snapshot, predicate_sql, files=None, *, alias=None) -> list[AddFile]

``scan`` reads exactly the given AddFiles (default: every live file of the snapshot), so a
DataFrame keeps returning the snapshot it was built from even after the table changes. It
applies deletion vectors (broadcast anti-join on ``_metadata.file_path`` /
``_metadata.row_index``), adds the partition columns from the log's partitionValues (typed by
the schema) and, with ``with_row_ids=True``, the columns ``_isolde_file`` (AddFile.path as
written in the log) and ``_isolde_row`` (the physical row index in that file).

``prune_files`` keeps the files whose partition values and min/max/null-count statistics
may satisfy a predicate (SQL text or a sqlglot tree). Anything it cannot analyse keeps the
file: pruning is always conservative.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
from typing import Iterable, Optional, Sequence
from urllib.parse import unquote, urlparse

import pyarrow as pa
import sqlglot
import sqlglot.expressions as exp
from pyspark.sql import DataFrame, functions as F
from pyspark.sql import types as T

from isolde.executor import schema as S

FILE_COL = "_isolde_file"
ROW_COL = "_isolde_row"
_KEY = "_isolde_key"
MAP_LOOKUP_MAX_FILES = 2000


def _spark(ctx):
    return getattr(ctx, "spark", ctx)


def table_root(table_path: str) -> str:
    if table_path.startswith("file:"):
        return unquote(urlparse(table_path).path)
    return table_path


def file_local_path(table_path: str, add_path: str) -> str:
    """The local path of an AddFile.path (a URI-encoded path relative to the table, or absolute)."""
    if "://" in add_path or add_path.startswith("file:"):
        return unquote(urlparse(add_path).path)
    rel = unquote(add_path)
    if rel.startswith("/"):
        return rel
    return os.path.join(table_root(table_path), rel)


_URI_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-!.~'()*,;:$&+=/@")
_ENCODER_CHECKED: dict = {}


def _python_key(local_path: str) -> str:
    """java.net.URI's quoting of a path (what Hadoop's Path.toUri() produces), in Python."""
    out = []
    for ch in local_path:
        if ch in _URI_SAFE or (ord(ch) > 127 and not ch.isspace() and ch.isprintable()):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "file:" + "".join(out)


class _KeyEncoder:
    """Hadoop's own Path -> URI encoding, which is what ``_metadata.file_path`` shows.

    Computed in Python (one py4j call per file is slow on big tables) after a one-time check
    against the JVM on a tricky sample; falls back to the JVM if they ever disagree.
    """

    SAMPLE = "/t/a b/p=x%3Ay/é ü/q?x#y[z]{w}^`|\\\"<>/\t/\u00a0/a+b&c=d;e,f:g@h!i$j'k(l)m*n~o.parquet"

    def __init__(self, spark):
        self._spark = spark
        ok = _ENCODER_CHECKED.get("ok")
        if ok is None:
            try:
                jvm = self._jvm_key(self.SAMPLE)
                ok = jvm == _python_key(self.SAMPLE)
            except Exception:
                ok = False
            _ENCODER_CHECKED["ok"] = ok
        self.python = ok

    def _jvm_key(self, local_path: str) -> str:
        return self._spark._jvm.org.apache.hadoop.fs.Path("file:" + local_path).toUri().toString()

    def __call__(self, local_path: str) -> str:
        return _python_key(local_path) if self.python else self._jvm_key(local_path)


def _empty(spark, struct: T.StructType, with_row_ids: bool) -> DataFrame:
    if with_row_ids:
        struct = T.StructType(struct.fields + [T.StructField(FILE_COL, T.StringType(), True),
                                               T.StructField(ROW_COL, T.LongType(), True)])
    return spark.createDataFrame([], struct)


def _arrow_df(spark, table: pa.Table) -> DataFrame:
    return spark.createDataFrame(table)


def scan(ctx, snapshot, table_path: Optional[str] = None, files: Optional[Sequence] = None, *,
         with_row_ids: bool = False) -> DataFrame:
    from isolde.executor.log.deletion_vectors import read_deletion_vector
    from isolde.executor.log.features import assert_readable

    spark = _spark(ctx)
    metadata = snapshot.metadata
    table_path = table_path or snapshot.table_path
    if snapshot.protocol is not None:
        assert_readable(snapshot.protocol, metadata, table_path)
    struct = S.metadata_schema(metadata)
    parts = S.partition_columns(metadata)
    part_lower = {p.lower() for p in parts}
    data_struct = T.StructType([f for f in struct.fields if f.name.lower() not in part_lower])
    files = list(snapshot.all_files) if files is None else list(files)
    if not files:
        return _empty(spark, struct, with_row_ids)

    local = [file_local_path(table_path, a.path) for a in files]
    has_dv = any(a.deletion_vector is not None for a in files)
    need_keys = with_row_ids or bool(parts) or has_dv

    mapped = S.column_mapping_mode(metadata) != "none"
    if mapped:
        # files hold physical names: read them, then rename / cast back to the logical schema
        phys = S.physical_struct(data_struct)
        df = spark.read.schema(phys).parquet(*local)
        df = df.select(*[F.col(f"`{p.name}`").cast(f.dataType).alias(f.name) if p.dataType != f.dataType
                         else F.col(f"`{p.name}`").alias(f.name)
                         for p, f in zip(phys.fields, data_struct.fields)],
                       F.col("_metadata"))
    else:
        df = spark.read.schema(data_struct).parquet(*local)
    if not need_keys:
        return df.select(*[F.col(f"`{f.name}`") for f in struct.fields])

    df = df.select("*", F.col("_metadata.file_path").alias(_KEY), F.col("_metadata.row_index").alias(ROW_COL))
    encode = _KeyEncoder(spark)
    keys = [encode(p) for p in local]

    if has_dv:
        dv_keys, dv_rows = [], []
        for key, add in zip(keys, files):
            if add.deletion_vector is None:
                continue
            rows = list(read_deletion_vector(table_path, add.deletion_vector))
            dv_keys.extend([key] * len(rows))
            dv_rows.extend(rows)
        if dv_rows:
            deleted = _arrow_df(spark, pa.table({_KEY: pa.array(dv_keys, pa.string()),
                                                 ROW_COL: pa.array(dv_rows, pa.int64())}))
            df = df.join(F.broadcast(deleted), on=[_KEY, ROW_COL], how="left_anti")

    if parts or with_row_ids:
        physical = S.logical_to_physical(metadata)
        if len(files) <= MAP_LOOKUP_MAX_FILES:
            # a literal map key -> value per column: no join, no extra DataFrame
            def lookup(values):
                pairs = []
                for key, value in zip(keys, values):
                    pairs += [F.lit(key), F.lit(value).cast("string")]
                return F.create_map(*pairs)[F.col(_KEY)]

            extra = []
            if with_row_ids:
                extra.append(lookup([a.path for a in files]).alias(FILE_COL))
            for p in parts:
                key = physical.get(p, p)
                extra.append(lookup([_partition_value(a.partition_values, key) for a in files]).alias("__p_" + p))
            df = df.select("*", *extra)
        else:
            columns = {_KEY: pa.array(keys, pa.string()), FILE_COL: pa.array([a.path for a in files], pa.string())}
            for p in parts:
                columns["__p_" + p] = pa.array([_partition_value(a.partition_values, physical.get(p, p))
                                                for a in files], pa.string())
            mapping = _arrow_df(spark, pa.table(columns))
            df = df.join(F.broadcast(mapping), on=_KEY, how="inner")

    out = []
    for f in struct.fields:
        if f.name.lower() in part_lower:
            source = next(p for p in parts if p.lower() == f.name.lower())
            out.append(_cast_partition(F.col(f"`__p_{source}`"), f.dataType).alias(f.name))
        else:
            out.append(F.col(f"`{f.name}`"))
    if with_row_ids:
        out += [F.col(FILE_COL), F.col(ROW_COL)]
    return df.select(*out)


def _partition_value(values: dict, column: str) -> Optional[str]:
    if column in values:
        return values[column]
    for k, v in values.items():
        if k.lower() == column.lower():
            return v
    return None


def _cast_partition(col, dtype: T.DataType):
    if isinstance(dtype, T.StringType):
        return col
    if isinstance(dtype, T.BinaryType):
        return F.encode(col, "UTF-8")
    return col.try_cast(dtype) if hasattr(col, "try_cast") else col.cast(dtype)


# --------------------------------------------------------------------------- data skipping

_MISSING = object()


def _to_python(value, dtype: T.DataType):
    """A comparable Python value of ``value`` (string from the log / stats / literal) for ``dtype``."""
    if value is None:
        return None
    try:
        if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
            if isinstance(value, bool):
                return _MISSING
            d = decimal.Decimal(str(value))
            return d
        if isinstance(dtype, (T.FloatType, T.DoubleType, T.DecimalType)):
            if isinstance(value, bool):
                return _MISSING
            return decimal.Decimal(str(value))
        if isinstance(dtype, T.StringType):
            return str(value)
        if isinstance(dtype, T.BooleanType):
            if isinstance(value, bool):
                return value
            s = str(value).lower()
            return True if s == "true" else False if s == "false" else _MISSING
        if isinstance(dtype, T.DateType):
            if isinstance(value, dt.date):
                return value if not isinstance(value, dt.datetime) else value.date()
            return dt.date.fromisoformat(str(value).strip()[:10])
        if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
            if isinstance(value, dt.datetime):
                return value.replace(tzinfo=None)
            s = str(value).strip().replace("T", " ").rstrip("Z")
            if len(s) == 10:
                s += " 00:00:00"
            if "+" in s[10:]:
                base, _, off = s.rpartition("+")
                stamp = dt.datetime.fromisoformat(base)
                h, _, m = off.partition(":")
                return stamp - dt.timedelta(hours=int(h), minutes=int(m or 0))
            return dt.datetime.fromisoformat(s)
    except (ValueError, decimal.InvalidOperation, TypeError):
        return _MISSING
    return _MISSING


def _literal(node: exp.Expression):
    """(python value, kind) of a literal node, or _MISSING."""
    if isinstance(node, exp.Paren):
        return _literal(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else decimal.Decimal(node.this)
    if isinstance(node, exp.Neg):
        inner = _literal(node.this)
        return -inner if isinstance(inner, decimal.Decimal) else _MISSING
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal):
        return node.this.this if node.this.is_string else decimal.Decimal(node.this.this)
    if isinstance(node, (exp.TsOrDsToDate, exp.StrToDate)) and isinstance(node.this, exp.Literal):
        return node.this.this
    return _MISSING


class _FileView:
    """Per-file facts: typed partition values and min/max/nullCount stats."""

    def __init__(self, add, struct: T.StructType, parts_lower: set[str], physical: Optional[dict] = None):
        self.add = add
        self.physical = physical or {}
        self.struct = struct
        self.parts_lower = parts_lower
        stats = add.parsed_stats if hasattr(add, "parsed_stats") else None
        self.stats = stats or {}
        self.num_records = self.stats.get("numRecords")

    def field(self, name: str) -> Optional[T.StructField]:
        return S.field_named(self.struct, name)

    def partition(self, name: str):
        value = _partition_value(self.add.partition_values, self.physical.get(name, name))
        return value

    def stat(self, kind: str, name: str):
        name = self.physical.get(name, name)
        d = self.stats.get(kind) or {}
        if name in d:
            return d[name]
        for k, v in d.items():
            if k.lower() == name.lower():
                return v
        return _MISSING


_FLIP = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE, exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}
_NEGATE = {exp.GT: exp.LTE, exp.GTE: exp.LT, exp.LT: exp.GTE, exp.LTE: exp.GT, exp.EQ: exp.NEQ, exp.NEQ: exp.EQ}


def _compare(op, a, b) -> bool:
    if op is exp.EQ:
        return a == b
    if op is exp.NEQ:
        return a != b
    if op is exp.LT:
        return a < b
    if op is exp.LTE:
        return a <= b
    if op is exp.GT:
        return a > b
    return a >= b


class _Pruner:
    def __init__(self, struct: T.StructType, parts: Sequence[str], aliases: Iterable[str] = ()):
        self.struct = struct
        self.parts_lower = {p.lower() for p in parts}
        self.aliases = {a.lower() for a in aliases if a}

    def column(self, node) -> Optional[T.StructField]:
        if not isinstance(node, exp.Column):
            return None
        if node.table and node.table.lower() not in self.aliases:
            return None
        return S.field_named(self.struct, node.name)

    def may_match(self, node: exp.Expression, f: _FileView) -> bool:
        try:
            return self._may(node, f)
        except Exception:
            return True

    def _may(self, node, f: _FileView) -> bool:
        if isinstance(node, exp.Paren):
            return self._may(node.this, f)
        if isinstance(node, exp.And):
            return self._may(node.left, f) and self._may(node.right, f)
        if isinstance(node, exp.Or):
            return self._may(node.left, f) or self._may(node.right, f)
        if isinstance(node, exp.Not):
            inner = node.this
            while isinstance(inner, exp.Paren):
                inner = inner.this
            if type(inner) in _NEGATE:
                return self._cmp(_NEGATE[type(inner)], inner.left, inner.right, f)
            if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
                return self._is_null(inner.this, f, negate=True)
            if isinstance(inner, exp.Not):
                return self._may(inner.this, f)
            return True
        if type(node) in _FLIP:
            return self._cmp(type(node), node.left, node.right, f)
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            return self._is_null(node.this, f, negate=False)
        if isinstance(node, exp.In) and not node.args.get("query") and not node.args.get("unnest"):
            return any(self._cmp(exp.EQ, node.this, v, f) for v in node.expressions)
        if isinstance(node, exp.Between):
            return self._cmp(exp.GTE, node.this, node.args["low"], f) and \
                self._cmp(exp.LTE, node.this, node.args["high"], f)
        if isinstance(node, exp.Boolean):
            return bool(node.this)
        return True

    def _is_null(self, col_node, f: _FileView, negate: bool) -> bool:
        fld = self.column(col_node)
        if fld is None:
            return True
        if fld.name.lower() in self.parts_lower:
            value = f.partition(fld.name)
            return (value is not None) if negate else (value is None)
        nulls = f.stat("nullCount", fld.name)
        if nulls is _MISSING or not isinstance(nulls, int) or f.num_records is None:
            return True
        return (nulls < f.num_records) if negate else (nulls > 0)

    def _cmp(self, op, left, right, f: _FileView) -> bool:
        fld = self.column(left)
        lit = _literal(right)
        if fld is None:
            fld = self.column(right)
            lit = _literal(left)
            op = _FLIP[op]
            if fld is None:
                return True
        if lit is _MISSING:
            return True
        if lit is None:
            return False  # comparison with NULL is never true
        value = _to_python(lit, fld.dataType)
        if value is _MISSING:
            return True
        if fld.name.lower() in self.parts_lower:
            raw = f.partition(fld.name)
            if raw is None:
                return False
            have = _to_python(raw, fld.dataType)
            if have is _MISSING:
                return True
            return _compare(op, have, value)
        if f.num_records == 0:
            return False
        lo, hi = f.stat("minValues", fld.name), f.stat("maxValues", fld.name)
        nulls = f.stat("nullCount", fld.name)
        if isinstance(nulls, int) and f.num_records is not None and nulls == f.num_records:
            return False  # all values null: no comparison is true
        if lo is _MISSING or hi is _MISSING or lo is None or hi is None:
            return True
        if isinstance(fld.dataType, T.StringType) and isinstance(value, str):
            lo_v, hi_v = str(lo), str(hi)
        else:
            lo_v, hi_v = _to_python(lo, fld.dataType), _to_python(hi, fld.dataType)
        if lo_v is _MISSING or hi_v is _MISSING:
            return True
        if isinstance(fld.dataType, (T.TimestampType, T.TimestampNTZType)):
            # stats are truncated to milliseconds: widen by 1 ms each way
            lo_v -= dt.timedelta(milliseconds=1)
            hi_v += dt.timedelta(milliseconds=1)
        if op is exp.EQ:
            return lo_v <= value <= hi_v
        if op is exp.NEQ:
            return not (lo_v == hi_v == value)
        if op is exp.LT:
            return lo_v < value
        if op is exp.LTE:
            return lo_v <= value
        if op is exp.GT:
            return hi_v > value
        return hi_v >= value


def parse_predicate(predicate) -> Optional[exp.Expression]:
    if predicate is None:
        return None
    if isinstance(predicate, exp.Expression):
        return predicate
    text = getattr(predicate, "sql", predicate)
    tree = getattr(predicate, "tree", None)
    if isinstance(tree, exp.Expression):
        return tree
    return sqlglot.parse_one(text, read="databricks")


def prune_files(snapshot, predicate_sql, files: Optional[Sequence] = None, *, alias: Optional[str] = None,
                table_name: Optional[str] = None) -> list:
    """The AddFiles that may hold rows satisfying ``predicate_sql`` (partition values, then stats).

    Column references may be unqualified or qualified by ``alias`` / ``table_name``.
    """
    files = list(snapshot.all_files) if files is None else list(files)
    tree = parse_predicate(predicate_sql)
    if tree is None or not files:
        return files
    struct = S.metadata_schema(snapshot.metadata)
    parts = S.partition_columns(snapshot.metadata)
    aliases = [alias, table_name]
    if table_name and "." in table_name:
        aliases.append(table_name.rsplit(".", 1)[1])
    pruner = _Pruner(struct, parts, aliases)
    physical = S.logical_to_physical(snapshot.metadata)
    physical = {k: v for k, v in physical.items() if k != v}
    return [a for a in files if pruner.may_match(tree, _FileView(a, struct, pruner.parts_lower, physical))]
