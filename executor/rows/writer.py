"""Writing data files for a commit, and shaping incoming rows to the table schema.

    conform(df, table_schema, *, columns=(), by_name=False, table_name="", configuration=None,
            identity=True, check=True) -> DataFrame
    write_files(ctx, df, table_path, metadata, *, data_change=True) -> WrittenFiles
    identity_metadata_update(metadata, written) -> Metadata | None

``conform`` maps the incoming columns onto the table's (positionally, by an explicit column
list, or BY NAME), fills missing columns with their DEFAULT / identity / generated value or
NULL, casts with Spark's store-assignment rules (refusing un-castable types at analysis time
with AnalysisError) and adds the row checks that run inside the write job: NOT NULL columns,
CHECK constraints (``delta.constraints.<name>`` in the configuration) and given values of
generated columns. A violation stops the Spark job; the session turns it into
NotNullViolationError / ConstraintViolationError naming the column/constraint and values.

``write_files`` writes the DataFrame as Parquet into its own staging folder inside the table
(``<table>/.isolde-staging-<uuid>/``, hidden from Delta readers and VACUUM's data listing),
then moves every file to its final, unique relative path (Hive-style ``col=value/`` folders,
Spark's escaping) and returns one AddFile per file with stats from the Parquet footer.
Partition columns are not stored in the files. Files with zero rows are dropped.
"""

from __future__ import annotations

import contextlib
import os
from contextlib import contextmanager
import re
import uuid
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence
from urllib.parse import unquote

import sqlglot
import sqlglot.expressions as exp
from pyspark.sql import DataFrame, functions as F
from pyspark.sql import types as T

from isolde.errors import AnalysisError, ColumnNotFoundError, UnsupportedFeatureError
from ..catalog import properties as P
from ..log import table_files
from ..catalog import schema as S
from . import store_assignment as SA
from ..runtime.phases import phase
from .scan import partition_dir
from ..catalog.variant import ensure_unshredded_writes
from isolde.grammar.dialect import DIALECT

VIOLATION_MARK = "ISOLDE_VIOLATION"
SEP = "\u241f"  # a visible unit separator that never appears in SQL text we generate
REPLACE_WHERE_MISMATCH = "DELTA_REPLACE_WHERE_MISMATCH"  # the kind of a row outside INSERT ... REPLACE WHERE


@dataclass
class WrittenFiles:
    adds: list = field(default_factory=list)
    staged_paths: list = field(default_factory=list)
    groups: list = field(default_factory=list)  # write_partition_groups: each add's group index
    num_rows: int = 0
    num_bytes: int = 0

    @property
    def num_files(self) -> int:
        return len(self.adds)


# --------------------------------------------------------------------------- type compatibility


def _numeric(dt) -> bool:
    return isinstance(dt, T.NumericType)


def can_store(src: T.DataType, dst: T.DataType, by_name: bool = False, parse_strings: bool = False) -> bool:
    """Spark's ANSI store assignment (plus strings into dates/timestamps, checked at run time);
    ``by_name``: struct fields matched by name (UPDATE, MERGE), else by position (INSERT);
    ``parse_strings``: strings into numbers and booleans too, parsed as the job runs (SQL's
    INSERT, as Spark and Delta take it; a DataFrame append or COPY INTO refuses them)."""
    if src == dst or isinstance(src, T.NullType):
        return True
    if parse_strings and isinstance(src, T.StringType) and isinstance(dst, (T.NumericType, T.BooleanType)):
        return True  # a malformed string fails as the job runs (CAST_INVALID_INPUT)
    if _numeric(src) and _numeric(dst):
        return True
    if isinstance(dst, T.StringType) and isinstance(src, T.AtomicType):
        return True
    if isinstance(src, T.StringType) and isinstance(dst, (T.DateType, T.TimestampType, T.TimestampNTZType)):
        return True
    if isinstance(src, (T.DateType, T.TimestampType, T.TimestampNTZType)) and \
            isinstance(dst, (T.DateType, T.TimestampType, T.TimestampNTZType)):
        return True
    if isinstance(src, T.ArrayType) and isinstance(dst, T.ArrayType):
        return can_store(src.elementType, dst.elementType, by_name)
    if isinstance(src, T.MapType) and isinstance(dst, T.MapType):
        return can_store(src.keyType, dst.keyType, by_name) and can_store(src.valueType, dst.valueType, by_name)
    if isinstance(src, T.StructType) and isinstance(dst, T.StructType):
        if len(src.fields) != len(dst.fields):
            return False
        if by_name:
            named = {f.name.lower(): f for f in src.fields}
            return all(b.name.lower() in named and can_store(named[b.name.lower()].dataType, b.dataType, True)
                       for b in dst.fields)
        return all(can_store(a.dataType, b.dataType) for a, b in zip(src.fields, dst.fields))
    return False


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _col(name: str):
    return F.col(_q(name))


def _sql_type(dt: T.DataType) -> str:
    return dt.simpleString().upper()


# --------------------------------------------------------------------------- conform


def _violation(kind: str, name: str, text: str):
    """The head of a violation message (the values follow; ``_END`` closes it)."""
    return f"{VIOLATION_MARK}{SEP}{kind}{SEP}{name}{SEP}{text}"


_END = SEP


def _expr_columns(sql: str, struct: T.StructType) -> list[str]:
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except Exception:
        return []
    out = []
    for c in tree.find_all(exp.Column):
        f = S.field_named(struct, c.name)
        if f is not None and f.name not in out:
            out.append(f.name)
    return out


def _values_text(cols: Sequence[str]):
    parts = []
    for c in cols:
        parts += [F.lit(f"\n - {c} : "), F.coalesce(_col(c).cast("string"), F.lit("null"))]
    return parts


def conform(df: DataFrame, table_schema: T.StructType, *, columns: Sequence[str] = (), by_name: bool = False,
            table_name: str = "", configuration: Optional[dict] = None, identity: bool = True,
            check: bool = True, only_where=None, write: str = "insert", parse_strings: bool = False) -> DataFrame:
    """``df`` reshaped to ``table_schema`` (see the module docstring). ``only_where``: a
    boolean Column over the result's columns; the rows it is not TRUE for are reshaped but
    neither checked nor given generated values (a MERGE's deleted pairs, carried beside its
    updated rows). ``write``: "insert" or "update" (a MERGE's inserted rows), the store
    assignment's kind (store_assignment.py); ``parse_strings``: see ``can_store``."""
    configuration = configuration or {}
    where = f"`{table_name}`" if table_name else "the table"
    fields = list(table_schema.fields)
    names_lower = {f.name.lower(): f for f in fields}
    src_cols = list(df.columns)
    src_types = [f.dataType for f in df.schema.fields]

    # --- which source column feeds which table column
    mapping: dict[str, int] = {}  # table column -> source column index
    if columns:
        if len(columns) != len(src_cols):
            raise AnalysisError(
                f"Cannot write to {where}: the column list names {len(columns)} column(s) but the data has "
                f"{len(src_cols)}.", error_class="INSERT_COLUMN_ARITY_MISMATCH", sqlstate="21S01")
        for source, target in enumerate(columns):
            f = names_lower.get(target.lower())
            if f is None:
                raise ColumnNotFoundError(target, table_name or None, [x.name for x in fields])
            if f.name in mapping:
                raise AnalysisError(f"Column `{f.name}` is listed twice in the INSERT column list.",
                                    error_class="COLUMN_ALREADY_EXISTS", sqlstate="42711")
            mapping[f.name] = source
    elif by_name:
        for source, src_name in enumerate(src_cols):
            f = names_lower.get(src_name.lower())
            if f is None:
                raise ColumnNotFoundError(src_name, table_name or None, [x.name for x in fields])
            if f.name in mapping:
                raise AnalysisError(f"Column `{f.name}` appears twice in the data.",
                                    error_class="COLUMN_ALREADY_EXISTS", sqlstate="42711")
            mapping[f.name] = source
    else:
        if len(src_cols) == len(fields):
            targets = fields
        else:
            user = [f for f in fields if not S.is_generated(f) and not S.is_identity(f)]
            if len(src_cols) > len(fields):
                raise AnalysisError(
                    f"Cannot write to {where}: too many data columns; the table has {len(fields)} column(s) "
                    f"({', '.join(f.name for f in fields)}) but the data has {len(src_cols)}. To add the extra "
                    "columns to the table, SET spark.databricks.delta.schema.autoMerge.enabled = true first.",
                    error_class="INSERT_COLUMN_ARITY_MISMATCH.TOO_MANY_DATA_COLUMNS", sqlstate="21S01")
            if len(src_cols) == len(user):
                targets = user
            else:
                raise AnalysisError(
                    f"Cannot write to {where}: not enough data columns; the table has {len(fields)} column(s) "
                    f"({', '.join(f.name for f in fields)}) but the data has {len(src_cols)}. Name the columns "
                    "you insert: INSERT INTO t (a, b) ...", error_class="INSERT_COLUMN_ARITY_MISMATCH.NOT_ENOUGH_DATA_COLUMNS",
                    sqlstate="21S01")
        for source, f in enumerate(targets):
            mapping[f.name] = source

    # --- type checks (analysis time)
    for f in fields:
        source = mapping.get(f.name)
        if source is None:
            continue
        if S.is_identity(f) and not f.metadata.get(S.IDENTITY_ALLOW_EXPLICIT, False):
            raise AnalysisError(
                f"Providing values for GENERATED ALWAYS AS IDENTITY column `{f.name}` is not supported.",
                error_class="DELTA_IDENTITY_COLUMNS_EXPLICIT_INSERT_NOT_SUPPORTED", sqlstate="42808")
        st = src_types[source]
        if not can_store(st, f.dataType, by_name=write == SA.UPDATE, parse_strings=parse_strings):
            raise AnalysisError(
                f"Cannot write incompatible data to {where}: cannot safely cast column `{f.name}` from "
                f"{_sql_type(st)} to {_sql_type(f.dataType)}.",
                error_class="INCOMPATIBLE_DATA_FOR_TABLE.CANNOT_SAFELY_CAST", sqlstate="KD000")

    # --- already the table's columns, in order and types, with nothing to fill or check: as is
    # (a per-partition rewrite conforms each partition's rows; the full build costs ~0.1 s of
    # py4j calls every time)
    if (len(src_cols) == len(fields) and all(mapping.get(f.name) == i for i, f in enumerate(fields))
            and all(src_types[i] == f.dataType for i, f in enumerate(fields))
            and not any(S.is_generated(f) or (identity and S.is_identity(f)) for f in fields)
            and not (check and (any(not f.nullable or SA.length_limit(f) for f in fields) or any(
                k.lower().startswith(S.CONSTRAINT_PREFIX) for k in configuration)))):
        if src_cols == [f.name for f in fields]:
            return df
        # renamed by position: select items may share a name (``SELECT CAST(id AS INT),
        # CAST(id AS STRING)``, ``SELECT 7, 7``), which a select by name finds ambiguous
        return df.toDF(*[f.name for f in fields])

    # --- build the columns: given, default, null; then identity; then generated
    tmp = [f"__isolde_src_{i}" for i in range(len(src_cols))]
    renamed = df.toDF(*tmp)
    exprs = []
    for f in fields:
        source = mapping.get(f.name)
        if source is not None:  # Delta's store assignment (store_assignment.py)
            stored = SA.stored_sql(_q(tmp[source]), src_types[source], f.dataType, column=f.name, write=write)
            if stored == _q(tmp[source]):  # (a cast only makes nested fields nullable, as declared)
                value = F.col(tmp[source]) if src_types[source] == f.dataType else \
                    F.col(tmp[source]).cast(S.nullable_type(f.dataType))
            else:
                value = F.expr(stored)
            exprs.append(value.alias(f.name))
        elif S.is_identity(f) or S.is_generated(f):
            exprs.append(F.lit(None).cast(f.dataType).alias(f.name))
        elif S.default_expression(f) is not None:
            exprs.append(F.expr(S.default_expression(f)).cast(f.dataType).alias(f.name))
        else:
            exprs.append(F.lit(None).cast(f.dataType).alias(f.name))
    out = renamed.select(*exprs)

    generated = None
    if identity:
        out = _fill_identity(out, fields, mapping)
        generated = getattr(out, IDENTITY_GENERATED, None)

    checks = []  # (violation condition, message column parts)
    for f in fields:
        if S.is_generated(f):
            gen = F.expr(f.metadata[S.GENERATION_EXPRESSION]).cast(f.dataType)
            if only_where is not None:
                gen = F.when(only_where, gen)
            if f.name in mapping:
                ok = _col(f.name).eqNullSafe(gen)
                checks.append((~ok, [F.lit(_violation(
                    "generated", f.name, f"CHECK constraint Generated Column ({_q(f.name)} <=> "
                    f"{f.metadata[S.GENERATION_EXPRESSION]}) violated by row with values:"))] +
                    _values_text([f.name] + _expr_columns(f.metadata[S.GENERATION_EXPRESSION], table_schema))))
            else:
                out = out.withColumn(f.name, gen)
    if check:
        for f in fields:
            if not f.nullable:
                checks.append((_col(f.name).isNull(), [F.lit(_violation(
                    "notnull", f.name, f"NOT NULL constraint violated for column: {f.name}."))] +
                    _values_text([x.name for x in fields if x.name != f.name][:8])))
            for path in _nested_not_null(f.dataType, (f.name,)):  # s.a NOT NULL: only where s is not null
                name = ".".join(path)
                parent = F.col(".".join(_q(p) for p in path[:-1]))
                value = F.col(".".join(_q(p) for p in path))
                checks.append((parent.isNotNull() & value.isNull(), [F.lit(_violation(
                    "notnull", name, f"NOT NULL constraint violated for column: {name}."))] +
                    _values_text([x.name for x in fields if x.name != f.name][:8])))
        for f in fields:  # CHAR(n) / VARCHAR(n): Delta's length invariant
            limit = SA.length_limit(f)
            if limit is not None:
                n, failed = limit
                checks.append((_col(f.name).isNotNull() & (F.length(_col(f.name)) > F.lit(n)), [
                    F.lit(_violation(SA.LENGTH_CLASS, f.name, 'Value "')), _col(f.name),
                    F.lit(f'" exceeds char/varchar type length limitation. Failed check: {failed}.')]))
        for key, sql in sorted(configuration.items()):
            if key.lower().startswith(S.CONSTRAINT_PREFIX):
                name = key[len(S.CONSTRAINT_PREFIX):]
                cond = F.expr(sql)
                checks.append(((~cond) | cond.isNull(), [F.lit(_violation(
                    "check", name, f"CHECK constraint {name} ({sql}) violated by row with values:"))] +
                    _values_text(_expr_columns(sql, table_schema))))
    if checks:
        guard = None
        if only_where is not None:
            checks = [(only_where & cond, parts) for cond, parts in checks]
        for cond, parts in checks:
            parts = parts + [F.lit(_END)]
            err = F.raise_error(F.concat(*parts))
            guard = F.when(cond, err) if guard is None else guard.when(cond, err)
        out = out.filter(guard.otherwise(F.lit(True)).cast("boolean"))
    out = out.select(*[_col(f.name) for f in fields])
    if generated is not None:
        setattr(out, IDENTITY_GENERATED, generated)
    return out


def _nested_not_null(dt: T.DataType, path: tuple) -> list[tuple]:
    """Paths of NOT NULL fields nested in structs (not inside arrays or maps), as Delta's
    nested NOT NULL invariants: each holds where its parent struct is not null."""
    out = []
    if isinstance(dt, T.StructType):
        for f in dt.fields:
            if not f.nullable:
                out.append((*path, f.name))
            out += _nested_not_null(f.dataType, (*path, f.name))
    return out


IDENTITY_GENERATED = "_isolde_identity_generated"  # DataFrame attribute: {column: the last value it generated}


def _fill_identity(df: DataFrame, fields, mapping) -> DataFrame:
    """Identity values for the rows that have none. For a BY DEFAULT column the high-water mark
    must advance past the values generated only -- never past a value given explicitly, or one
    an updated row carries, as in Delta (SYNC IDENTITY moves it to the data's values) -- so its
    generated values are counted once, over the rows materialised (one job; the write reads
    them); an ALWAYS column holds generated values only, and the written files' statistics
    tell its mark."""
    ident = [f for f in fields if S.is_identity(f)]
    if not ident:
        return df
    nparts = max(df.rdd.getNumPartitions(), 1)
    pid = F.spark_partition_id().cast("long")
    # row number inside the Spark partition: monotonically_increasing_id = (pid << 33) + index
    index = F.monotonically_increasing_id() - F.shiftleft(pid, 33)
    k = index * F.lit(nparts) + pid
    counted = []  # BY DEFAULT columns: (name, the aggregate of their generated values)
    for f in ident:
        start = int(f.metadata[S.IDENTITY_START])
        step = int(f.metadata[S.IDENTITY_STEP])
        hwm = f.metadata.get(S.IDENTITY_HWM)
        first = start if hwm is None else int(hwm) + step
        generated = (F.lit(first) + k * F.lit(step)).cast("long")
        value = generated
        if f.name in mapping:  # BY DEFAULT with a given column: keep the given non-null values
            value = F.coalesce(_col(f.name), generated)
            generated = F.when(_col(f.name).isNull(), generated)
        if f.metadata.get(S.IDENTITY_ALLOW_EXPLICIT, False):
            df = df.withColumn(f"__isolde_gen_{f.name}", generated)
            counted.append((f.name, (F.max if step > 0 else F.min)(_col(f"__isolde_gen_{f.name}")).alias(f.name)))
        df = df.withColumn(f.name, value.cast("long"))
    if not counted:
        return df
    df = df.localCheckpoint(eager=True)  # the values are generated once: counted, then written
    row = df.agg(*[agg for _, agg in counted]).first()
    df = df.drop(*[f"__isolde_gen_{name}" for name, _ in counted])
    setattr(df, IDENTITY_GENERATED, {name: row[name] for name, _ in counted})
    return df


def identity_metadata_update(metadata, written: "WrittenFiles", observed=None):
    """A copy of ``metadata`` with identity high-water marks advanced past the values the write
    generated, or None when the table has no identity column or nothing was written.
    ``observed``: the conformed DataFrame written, whose BY DEFAULT columns' generated values
    ``_fill_identity`` counted (``IDENTITY_GENERATED``); an ALWAYS column's mark comes from the
    written files' statistics (it holds generated values only)."""
    struct = S.metadata_schema(metadata)
    ident = [f for f in struct.fields if S.is_identity(f)]
    if not ident or not written.adds:
        return None
    generated = getattr(observed, IDENTITY_GENERATED, None) if observed is not None else None
    changed = False
    new_fields = []
    for f in struct.fields:
        if not S.is_identity(f):
            new_fields.append(f)
            continue
        step = int(f.metadata[S.IDENTITY_STEP])
        key = S.physical_name(f)  # statistics are keyed by physical names under column mapping
        values = []
        if generated is not None and f.name in generated:
            if generated[f.name] is not None:
                values.append(int(generated[f.name]))
        elif not f.metadata.get(S.IDENTITY_ALLOW_EXPLICIT, False):
            for add in written.adds:
                st = add.parsed_stats or {}
                bound = (st.get("maxValues") if step > 0 else st.get("minValues")) or {}
                if bound.get(key) is not None:
                    values.append(int(bound[key]))
        if not values:
            new_fields.append(f)
            continue
        best = max(values) if step > 0 else min(values)
        old = f.metadata.get(S.IDENTITY_HWM)
        if old is not None:
            best = max(best, int(old)) if step > 0 else min(best, int(old))
        if old is None or int(old) != best:
            changed = True
        meta = dict(f.metadata)
        meta[S.IDENTITY_HWM] = best
        new_fields.append(T.StructField(f.name, f.dataType, f.nullable, meta))
    if not changed:
        return None
    return replace(metadata, schema_string=S.struct_to_delta(T.StructType(new_fields)))


# --------------------------------------------------------------------------- files


def _hive_unescape(text: str) -> str:
    return unquote(text)


def _rel_to_add_path(rel: str) -> str:
    return P.encode_relative(rel)


FIELD_ID_WRITE = "spark.sql.parquet.fieldId.write.enabled"


def check_mapped_write(spark, metadata) -> None:
    """Refuse a write whose files would lack the Parquet field ids an id-mode table is read by:
    readers match its columns by id only, and a file without them reads as all NULLs or is
    refused. Spark writes the ids of ``parquet.field.id`` metadata unless the session turned
    ``spark.sql.parquet.fieldId.write.enabled`` off; it never writes ids for array elements or
    map keys and values (``delta.columnMapping.nested.ids``, icebergCompatV2): ``stamp_nested_ids``
    adds those to the written files."""
    mode = S.column_mapping_mode(metadata)
    if mode == "none":
        return
    if mode == "id" and str(spark.conf.get(FIELD_ID_WRITE, "true")).strip().lower() == "false":
        raise UnsupportedFeatureError(
            f"Cannot write to a table with column mapping in 'id' mode while {FIELD_ID_WRITE} is false: its "
            "readers find columns by Parquet field id. SET it to true.",
            error_class="DELTA_UNSUPPORTED_FEATURES_FOR_WRITE")


def _physical_frame(df: DataFrame, metadata, parts: list, hidden: Sequence[str] = ()) -> tuple[DataFrame, list]:
    """``df`` with the column names / types the data files hold, and the partition columns' names
    (``hidden`` columns, already physical -- materialised row ids --, pass through)."""
    if S.column_mapping_mode(metadata) != "none":
        check_mapped_write(df.sparkSession, metadata)
        # data files hold physical names (nested too) and the column ids as Parquet field ids
        struct = S.metadata_schema(metadata)
        phys = S.physical_struct(struct)
        by_lower = {c.lower(): c for c in df.columns}
        cols = []
        for f, p in zip(struct.fields, phys.fields):
            src = F.col("`" + by_lower.get(f.name.lower(), f.name).replace("`", "``") + "`")
            if p.dataType != f.dataType:
                src = src.cast(S.nullable_type(p.dataType))
            cols.append(src.alias(p.name, metadata=p.metadata) if p.metadata else src.alias(p.name))
        df = df.select(*cols, *[F.col(_q(h)) for h in hidden])
        mapping = S.logical_to_physical(metadata)
        parts = [mapping.get(p, p) for p in parts]
    return _utc_timestamp_partitions(df, parts), parts


# --------------------------------------------------------------------------- nested field ids


def _nested_ids_type(t, field, path: str, logical):
    """Arrow type ``t`` (of Delta field ``field``, at ``path`` relative to it) with the ids of
    ``field``'s ``delta.columnMapping.nested.ids`` on list elements and map keys / values, and
    struct children treated the same way; ``logical``: the Delta type at this point."""
    import pyarrow as pa

    ids = (field.metadata or {}).get(S.NESTED_IDS) or {}

    def child(f, key, sub_logical):
        meta = dict(f.metadata or {})
        if key in ids:
            meta[b"PARQUET:field_id"] = str(int(ids[key])).encode()
        return f.with_type(_nested_ids_type(f.type, field, key, sub_logical)).with_metadata(meta or None)

    if pa.types.is_struct(t):
        return pa.struct([stamp_field(t.field(i), logical) for i in range(t.num_fields)])
    if pa.types.is_list(t):
        return pa.list_(child(t.value_field, f"{path}.element", logical.elementType))
    if pa.types.is_map(t):
        key = child(t.key_field, f"{path}.key", logical.keyType)
        item = child(t.item_field, f"{path}.value", logical.valueType)
        return pa.map_(key, item, keys_sorted=t.keys_sorted)
    return t


def stamp_field(f, struct: T.StructType):
    """Arrow field ``f`` of a data file whose Delta struct is ``struct``, with nested ids added."""
    by_physical = {S.physical_name(d): d for d in struct.fields}
    d = by_physical.get(f.name)
    if d is None:  # a materialised row-tracking column
        return f
    return f.with_type(_nested_ids_type(f.type, d, S.physical_name(d), d.dataType))


def stamp_nested_ids(folder: str, metadata) -> None:
    """Rewrite the Parquet files Spark wrote under ``folder`` with the field ids of array elements
    and map keys / values that ``delta.columnMapping.nested.ids`` assigns (icebergCompatV2): Delta
    writes them through its own Parquet write support, Spark's writer never does. Rows and row
    groups stay as they are (one row group in memory at a time); INT96 timestamps become INT64
    microseconds (the same instants)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if metadata is None or S.column_mapping_mode(metadata) == "none":
        return
    struct = S.data_schema(metadata)
    if not S.fields_with_nested_ids(struct):
        return
    if table_files.is_remote(folder):
        raise AnalysisError("Writing to a table with nested column-mapping ids (UniForm / IcebergCompatV2) on "
                            "S3 is not supported yet: its files would lack the ids Iceberg readers need.",
                            error_class="UNSUPPORTED_FEATURE", sqlstate="0A000")
    for root, dirs, names in os.walk(folder):
        for name in names:
            if name.startswith((".", "_")) or not name.endswith(".parquet"):
                continue
            path = os.path.join(root, name)
            source = pq.ParquetFile(path, coerce_int96_timestamp_unit="us")
            schema = source.schema_arrow
            stamped = pa.schema([stamp_field(schema.field(i), struct) for i in range(len(schema))], schema.metadata)
            with pq.ParquetWriter(path + ".tmp", stamped, compression="snappy", coerce_timestamps="us",
                                  store_decimal_as_integer=True) as out:
                for group in range(source.metadata.num_row_groups):
                    out.write_table(source.read_row_group(group).cast(stamped))
            source.close()
            os.replace(path + ".tmp", path)


UTC_PARTITION_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"


def _utc_timestamp_partitions(df: DataFrame, parts: list) -> DataFrame:
    """TIMESTAMP partition columns as UTC text with a 'Z' (PROTOCOL.md's ISO-8601 form): Spark
    would name the folder, and so the partition value, in the writer's session time zone, which
    no reader knows; a value with its offset means the same instant in every session."""
    lower = {p.lower() for p in parts}
    stamps = [f.name for f in df.schema.fields if f.name.lower() in lower and isinstance(f.dataType, T.TimestampType)]
    if not stamps:
        return df
    q = lambda n: "`" + n.replace("`", "``") + "`"  # noqa: E731
    return df.select(*[
        F.expr(f"date_format(to_utc_timestamp({q(c)}, current_timezone()), \"{UTC_PARTITION_FORMAT}\")").alias(c)
        if c in stamps else F.col(q(c)) for c in df.columns])


def _adopt_files(staging: str, table_path: str, parts: list, result: "WrittenFiles", data_change: bool,
                 rel_dir_of=None, pvalues_of=None, group_of=None, hidden: frozenset = frozenset()) -> None:
    """Move the Parquet files Spark wrote under ``staging`` into the table; one AddFile each.

    By default the Hive-style folders under ``staging`` give the partition values; a group
    write passes ``rel_dir_of`` / ``pvalues_of`` (staging sub-folder -> table folder / values).
    """
    from ..log.stats import file_stats_and_tags

    files = table_files.files_for(staging)
    for entry in files.walk(staging):
        name, rel_dir = entry.name, entry.rel_dir
        # Spark's hidden folders (_temporary, .spark-staging): skipped; a partition folder of a
        # column whose name starts with '_' (`_p=1`) holds rows
        if any(d.startswith(".") or (d.startswith("_") and "=" not in d) for d in rel_dir.split("/") if d):
            continue
        if name.startswith((".", "_")) or not name.endswith(".parquet"):
            continue
        src = table_files.join(staging, rel_dir, name)
        group_dir = rel_dir
        if rel_dir_of is not None:
            pvalues = dict(pvalues_of(rel_dir))
            rel_dir = rel_dir_of(rel_dir)
        else:
            pvalues = {}
            if rel_dir:
                for seg in rel_dir.split("/"):
                    key, _, value = seg.partition("=")
                    key, value = _hive_unescape(key), _hive_unescape(value)  # Spark escapes both (a:b -> a%3Ab)
                    pvalues[key] = None if value == "__HIVE_DEFAULT_PARTITION__" else value
            pvalues = {p: pvalues.get(p, pvalues.get(next((k for k in pvalues if k.lower() == p.lower()), p)))
                       for p in parts}
        if files is table_files.LOCAL:
            num, stats, tags = file_stats_and_tags(src, hidden)
        else:
            with files.open_input(src) as fh:
                num, stats, tags = file_stats_and_tags(fh, hidden)
        if num == 0:
            continue
        _adopt_one(src, table_path, rel_dir, name, pvalues, num, stats, result, data_change, tags)
        if group_of is not None:
            result.groups.append(group_of(group_dir))


def _adopt_one(src: str, table_path: str, rel_dir: str, name: str, pvalues: dict, num, stats,
               result: "WrittenFiles", data_change: bool, tags: dict | None = None) -> None:
    """Move one written file to ``<table>/<rel_dir>/<name>`` and record its AddFile."""
    from ..log.actions import AddFile

    dest = table_files.join(table_path, rel_dir, name)
    table_files.move(src, dest)
    result.staged_paths.append(dest)
    size, mtime = table_files.files_for(dest).stat(dest)
    rel = f"{rel_dir.replace(os.sep, '/')}/{name}" if rel_dir else name
    result.adds.append(AddFile(
        path=_rel_to_add_path(rel),
        partition_values=pvalues,
        size=size,
        modification_time=mtime,
        data_change=data_change,
        stats=stats,
        tags=dict(tags) if tags else None,
    ))
    result.num_rows += num or 0
    result.num_bytes += size


ICEBERG_COMPAT_TAG = "ICEBERG_COMPAT_VERSION"


def tag_iceberg_compat(result: "WrittenFiles", metadata, table_path: str) -> "WrittenFiles":
    """On an IcebergCompatV2 (UniForm) table every new file gets its partition values as columns
    (Delta forces writePartitionColumns: "Iceberg spec requires partition columns in data files")
    and the tag ``ICEBERG_COMPAT_VERSION = 2``, as Delta's TransactionalWrite does (REORG ...
    UPGRADE UNIFORM rewrites the files lacking it). The stats stay those of the data columns."""
    conf = getattr(metadata, "configuration", None) or {}
    if result is None or not any(k.lower() == "delta.enableicebergcompatv2" and str(v).strip().lower() == "true"
                                 for k, v in conf.items()):
        return result
    if table_files.is_remote(table_path) and S.partition_columns(metadata):
        raise AnalysisError("Writing to a partitioned UniForm (IcebergCompatV2) table on S3 is not supported yet.",
                            error_class="UNSUPPORTED_FEATURE", sqlstate="0A000")
    adds = []
    for a in result.adds:
        changes = {"tags": {**(a.tags or {}), ICEBERG_COMPAT_TAG: "2"}}
        if S.partition_columns(metadata):
            path = os.path.join(table_path, unquote(a.path))
            grown = materialize_partition_values(path, metadata, a.partition_values or {})
            if grown is not None:
                result.num_bytes += grown - int(a.size or 0)
                changes.update(size=grown, modification_time=int(os.stat(path).st_mtime * 1000))
        adds.append(replace(a, **changes))
    result.adds = adds
    return result


_ARROW_OF = {"ByteType": "int8", "ShortType": "int16", "IntegerType": "int32", "LongType": "int64",
             "FloatType": "float32", "DoubleType": "float64", "StringType": "string", "BinaryType": "binary",
             "BooleanType": "bool_", "DateType": "date32"}


def _arrow_type(dt):
    import pyarrow as pa

    if isinstance(dt, T.TimestampType):
        return pa.timestamp("us", tz="UTC")
    if isinstance(dt, T.TimestampNTZType):
        return pa.timestamp("us")
    if isinstance(dt, T.DecimalType):
        return pa.decimal128(dt.precision, dt.scale)
    return getattr(pa, _ARROW_OF[type(dt).__name__])()


def materialize_partition_values(path: str, metadata, partition_values: dict) -> Optional[int]:
    """Append the partition columns (physical name, Parquet field id, real type, the file's
    constant value) to the data file at ``path`` when it lacks them; returns its new size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    struct = S.metadata_schema(metadata)
    parts = {p.lower() for p in S.partition_columns(metadata)}
    source = pq.ParquetFile(path, coerce_int96_timestamp_unit="us")
    schema = source.schema_arrow
    present = set(schema.names)
    extra = []
    for f in struct.fields:
        if f.name.lower() not in parts:
            continue
        phys = S.physical_name(f) if S.column_mapping_mode(metadata) != "none" else f.name
        if phys in present:
            continue
        meta = {}
        if (f.metadata or {}).get(S.COLUMN_ID) is not None:
            meta[b"PARQUET:field_id"] = str(int(f.metadata[S.COLUMN_ID])).encode()
        raw = partition_values.get(phys, partition_values.get(f.name))
        extra.append((pa.field(phys, _arrow_type(f.dataType), True, meta or None), raw))
    if not extra:
        source.close()
        return None

    def column(field, raw, n):
        if raw is None:
            return pa.nulls(n, field.type)
        if pa.types.is_binary(field.type):
            return pa.array([raw.encode("utf-8")] * n, field.type)
        if pa.types.is_timestamp(field.type) and field.type.tz is None:
            raw = raw.replace("T", " ")
        return pa.array([raw] * n, pa.string()).cast(field.type)

    out_schema = pa.schema(list(schema) + [f for f, _ in extra], schema.metadata)
    tmp = path + ".tmp"
    with pq.ParquetWriter(tmp, out_schema, compression="snappy", coerce_timestamps="us",
                          store_decimal_as_integer=True) as out:
        for group in range(source.metadata.num_row_groups):
            t = source.read_row_group(group)
            for f, raw in extra:
                t = t.append_column(f, column(f, raw, t.num_rows))
            out.write_table(t.cast(out_schema))
    source.close()
    os.replace(tmp, path)
    return os.path.getsize(path)


def remove_written(result: "WrittenFiles") -> None:
    """Delete the files of a write that will not be committed."""
    for p in result.staged_paths:
        table_files.files_for(p).delete(p)


@contextmanager
def _staging(table_path: str, *, on_local_disk: bool = False):
    """``(staging folder, WrittenFiles)`` for one write: on an error every file already moved
    into the table is removed; the staging folder is removed either way. ``on_local_disk``: a
    table on S3 gets a local temporary folder (the driver's pyarrow writer writes local files,
    uploaded as they are adopted)."""
    if on_local_disk and table_files.is_remote(table_path):
        import tempfile

        staging = tempfile.mkdtemp(prefix="isolde-staging-")
    else:
        staging = table_files.join(table_path, f".isolde-staging-{uuid.uuid4().hex}")
    result = WrittenFiles(staged_paths=[staging])
    if "://" not in table_path or table_path.startswith("file:"):
        # a folder the writer may not write in: say so now (Hadoop's task error says "Mkdirs failed")
        from ..log.store import writing

        local = staging.removeprefix("file:")
        with writing(local, what="the staging folder of this write's data files",
                     consequence="Nothing was written: the table is unchanged."):
            os.makedirs(local)
            os.rmdir(local)
    try:
        yield staging, result
    except BaseException:
        remove_written(result)
        raise
    finally:
        with contextlib.suppress(OSError):  # best effort: an orphan staging folder is VACUUM's
            table_files.files_for(staging).delete(staging)
        result.staged_paths = [p for p in result.staged_paths if p != staging]


def write_files(ctx, df: DataFrame, table_path: str, metadata, *, data_change: bool = True,
                max_records_per_file: Optional[int] = None, hidden: Sequence[str] = ()) -> WrittenFiles:
    """Write ``df`` (already conformed: the table's columns in order, then the ``hidden``
    physical columns -- materialised row ids --) as new data files."""
    table_path = table_files.absolute(table_path)
    if not max_records_per_file:  # (on S3 too: written locally by pyarrow, then one PUT per file)
        from .driver_write import write_local_rows

        written = write_local_rows(ctx, df, table_path, metadata, data_change, hidden)
        if written is not None:
            return written
    ensure_unshredded_writes(df.sparkSession)
    df, parts = _physical_frame(df, metadata, S.partition_columns(metadata), hidden)
    writer = df.write.mode("errorifexists").format("parquet").option("compression", "snappy")
    if max_records_per_file:
        writer = writer.option("maxRecordsPerFile", int(max_records_per_file))
    if parts:
        col_names = {c.lower(): c for c in df.columns}
        writer = writer.partitionBy(*[col_names.get(p.lower(), p) for p in parts])
    with _staging(table_path) as (staging, result):
        with phase("write"):
            writer.save(staging)
        stamp_nested_ids(staging, metadata)
        with phase("stats"):
            _adopt_files(staging, table_path, parts, result, data_change, hidden=frozenset(hidden))
    return tag_iceberg_compat(result, metadata, table_path)


class BackgroundWrite:
    """``write_files`` in its own thread, beside another Spark job of the same statement: its
    planning overlaps that job, and its tasks take the cores the other job's last wave leaves
    idle. ``result()`` waits (and raises the write's error); ``discard()`` waits and removes
    whatever it wrote (the statement failed elsewhere)."""

    def __init__(self, ctx, df: DataFrame, table_path: str, metadata, *, data_change: bool = True):
        from concurrent.futures import ThreadPoolExecutor

        from pyspark.util import inheritable_thread_target

        spark = getattr(ctx, "spark", ctx)
        pool = ThreadPoolExecutor(1, thread_name_prefix="isolde-write")
        # inheritable: the job joins the statement's job group (cancelled with it)
        self._future = pool.submit(inheritable_thread_target(spark)(write_files), ctx, df, table_path, metadata,
                                   data_change=data_change)
        pool.shutdown(wait=False)

    def result(self) -> "WrittenFiles":
        return self._future.result()

    def discard(self) -> None:
        if self._future.exception() is None:
            remove_written(self._future.result())


def write_partition_groups(ctx, groups: Sequence[tuple], table_path: str, metadata, *,
                           data_change: bool = True, hidden: Sequence[str] = ()) -> WrittenFiles:
    """Write rows already known to belong to one partition per group, without a partitionBy sort.

    ``groups``: (partitionValues as in the log, keyed by physical column name; DataFrame -- or
    a function returning it -- conformed to the table's columns, every row holding exactly
    those partition values). Each
    group is one Spark job writing into a literal partition folder (no shuffle, no sort); the
    jobs run two per core at a time so every core stays busy, and they inherit the caller's job group
    (cancellation). The AddFiles carry the given partition values unchanged.
    """
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.util import inheritable_thread_target

    spark = getattr(ctx, "spark", ctx)
    ensure_unshredded_writes(spark)
    table_path = table_files.absolute(table_path)
    parts = S.partition_columns(metadata)
    if S.column_mapping_mode(metadata) != "none":
        mapping = S.logical_to_physical(metadata)
        parts = [mapping.get(p, p) for p in parts]
    jobs = [(f"g{i}", dict(pvalues), partition_dir(spark, parts, pvalues) if parts else "", df)
            for i, (pvalues, df) in enumerate(groups)]
    failed = []

    def run(job):
        sub, _, _, df = job
        if failed:
            return
        try:
            # built here, in the worker thread: planning the groups overlaps too
            df, parts = _physical_frame(df() if callable(df) else df, metadata, S.partition_columns(metadata), hidden)
            lower = {p.lower() for p in parts}
            data = df.select(*[F.col(_q(c)) for c in df.columns if c.lower() not in lower])
            data.write.mode("errorifexists").format("parquet").option("compression", "snappy") \
                .save(table_files.join(staging, sub))
        except BaseException as e:
            failed.append(e)
            raise

    with _staging(table_path) as (staging, result):
        # twice the cores: while a thread plans its next group (py4j round trips), the others'
        # jobs keep every core busy (plain Spark, 10 groups on 2 cores: 8.6 s with 2 threads,
        # 8.4 s with 4, against 8.1 s for one balanced unpartitioned job)
        workers = max(1, min(len(jobs), 2 * max(1, spark.sparkContext.defaultParallelism)))
        with phase("write"):
            if workers == 1:
                for job in jobs:
                    run(job)
            else:
                with ThreadPoolExecutor(workers, thread_name_prefix="isolde-write") as pool:
                    target = inheritable_thread_target(spark)(run)
                    futures = [pool.submit(target, job) for job in jobs]
                    for fut in futures:
                        fut.exception()
        if failed:
            raise failed[0]
        stamp_nested_ids(staging, metadata)
        by_sub = {sub: (rel, pv) for sub, pv, rel, _ in jobs}
        with phase("stats"):
            _adopt_files(staging, table_path, [], result, data_change,
                         rel_dir_of=lambda d: by_sub[d.split("/")[0]][0],
                         pvalues_of=lambda d: by_sub[d.split("/")[0]][1],
                         group_of=lambda d: int(d.split("/")[0][1:]), hidden=frozenset(hidden))
    return tag_iceberg_compat(result, metadata, table_path)


# --------------------------------------------------------------------------- one job, a folder per partition

# physical operators a partition slice's rows pass through without leaving their Spark task
# (the stream side of a broadcast join included): below the union they keep a task's rows in
# one slice, above it they keep the union's task order
_ROW_LOCAL_NODES = frozenset({"WholeStageCodegenExec", "InputAdapter", "ProjectExec", "FilterExec",
                              "ColumnarToRowExec", "BroadcastHashJoinExec", "BroadcastNestedLoopJoinExec"})
_TASK_FILE = re.compile(r"^part-(\d+)-")


# join types whose output rows all come from streamed rows, by the side that is broadcast
# (an outer join on the broadcast side would also emit its unmatched rows, in no streamed task)
_STREAMED_JOINS = {"BuildRight": ("Inner", "LeftOuter", "LeftSemi", "LeftAnti", "ExistenceJoin"),
                   "BuildLeft": ("Inner", "RightOuter")}


def _stream_child(node):
    """The child carrying the rows of a row-local operator (a broadcast join's streamed side);
    None when the operator also makes rows of its own."""
    name = node.getClass().getSimpleName()
    if name in ("BroadcastHashJoinExec", "BroadcastNestedLoopJoinExec"):
        side = node.buildSide().toString()
        if not node.joinType().toString().startswith(_STREAMED_JOINS.get(side, ())):
            return None
        return node.left() if side == "BuildRight" else node.right()
    children = node.children()
    return children.head() if children.size() == 1 else None


def _through(node):
    """Down through row-local operators; None at anything that moves rows between tasks."""
    while True:
        name = node.getClass().getSimpleName()
        if name == "AdaptiveSparkPlanExec":
            node = node.executedPlan()
        elif name in _ROW_LOCAL_NODES:
            node = _stream_child(node)
            if node is None:
                return None
        else:
            return node


def slice_tasks(df: DataFrame, slices: Sequence, table_path: str) -> Optional[list]:
    """Spark task index ranges of each slice of a ``scan_by_partition`` read, from the physical
    plan of ``df``: ``[(slice index, number of tasks, file)]`` in task order (``file``: the
    local path the tasks read when the scan has a task per file, else None), or None when a
    row may leave its task's slice (a shuffle, a coalesce, a sort-merge join, ...) or a task
    reads files of two slices."""
    top = _through(df._jdf.queryExecution().executedPlan())
    if top is None:
        return None
    if top.getClass().getSimpleName() == "UnionExec":
        children = top.children()
        children = [children.apply(k) for k in range(children.size())]
    else:
        children = [top]  # one scan
    slice_of = {os.path.normpath(path): i for i, s in enumerate(slices) for path in s.local_paths(table_path)}
    out = []
    for child in children:
        leaf = _through(child)
        if leaf is None or leaf.getClass().getSimpleName() != "FileSourceScanExec":
            return None
        roots = leaf.relation().location().rootPaths()
        found = {slice_of.get(os.path.normpath(roots.apply(j).toUri().getPath())) for j in range(roots.size())}
        if None in found:
            return None
        if len(found) == 1:
            out.append((found.pop(), int(leaf.inputRDD().getNumPartitions()), None))
            continue
        # one scan over several slices (``scan_file_per_task``): each task's files, one slice each
        tasks = leaf.inputRDD().filePartitions()
        for k in range(tasks.size()):
            files = tasks.apply(k).files()
            paths = {os.path.normpath(files[j].toPath().toUri().getPath()) for j in range(len(files))}
            if len(paths) != 1 or None in (found := {slice_of.get(p) for p in paths}):
                return None
            out.append((found.pop(), 1, paths.pop()))
    return out


@dataclass
class SliceWrite:
    """A ``write_partition_slices`` job, planned: the rows to write (data columns, physical
    names), the slices they come from and each slice's partition folder."""

    data: DataFrame
    slices: list
    dirs: list
    metadata: object = None


def plan_partition_slices(ctx, df: DataFrame, slices: Sequence, metadata) -> SliceWrite:
    """Shape the (conformed) rows of a ``scan_by_partition`` union for ``write_partition_slices``."""
    spark = getattr(ctx, "spark", ctx)
    df, parts = _physical_frame(df, metadata, S.partition_columns(metadata))
    lower = {p.lower() for p in parts}
    data = df.select(*[F.col(_q(c)) for c in df.columns if c.lower() not in lower])
    dirs = [partition_dir(spark, parts, s.partition_values) if parts else "" for s in slices]
    return SliceWrite(data, list(slices), dirs, metadata)


def _read_layout(plan: SliceWrite, table_path: str) -> Optional[list]:
    try:
        return slice_tasks(plan.data, plan.slices, table_path)
    except Exception:  # a plan node this Spark version names or shapes differently: refuse
        return None


def write_partition_slices(ctx, plan: SliceWrite, expected_rows: Sequence[int], table_path: str, *,
                           data_change: bool = True, on_submit=None,
                           expected_file_rows: Optional[dict] = None) -> Optional[WrittenFiles]:
    """Write a planned ``scan_by_partition`` read in ONE Spark job without a partitionBy:
    every task's file lands in its slice's partition folder. Returns None, having written
    nothing to the table, when the plan could move rows between slices, when a slice's new
    files do not hold exactly ``expected_rows[i]`` rows or, where the tasks read a file each,
    when the tasks of a file wrote other than ``expected_file_rows[local path]`` rows (a task
    map that swapped two files shows there even when their partitions' totals agree); the
    caller then writes another way.

    A partitionBy write would compute and compare every row's partition values and copy the
    row without them (measured 10M rows / 10 partitions: 5.9 s against 5.1 s flat); a job per
    partition pays planning and job start-up per partition.

    ``on_submit()`` is called once, as the job is about to start (to start other work beside it).
    """
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.util import inheritable_thread_target

    from ..log.stats import file_stats_and_tags

    spark = getattr(ctx, "spark", ctx)
    ensure_unshredded_writes(spark)
    table_path = os.path.abspath(table_path)
    slices = plan.slices
    with _staging(table_path) as (staging, result):
        # the task map is only needed once the files exist: read it from the plan while the
        # job runs (~0.2-0.3 s of planning off the critical path). A refused plan wastes the job.
        with ThreadPoolExecutor(1, thread_name_prefix="isolde-plan") as pool:
            planned = pool.submit(inheritable_thread_target(spark)(_read_layout), plan, table_path)
            if on_submit is not None:
                on_submit()
            with phase("write"):
                plan.data.write.mode("errorifexists").format("parquet").option("compression", "snappy").save(staging)
            layout = planned.result()
        if layout is None:
            return None
        stamp_nested_ids(staging, plan.metadata)
        task_slice = [i for i, n, _ in layout for _ in range(n)]
        task_file = [path for _, n, path in layout for _ in range(n)]
        files, rows, file_rows = [], [0] * len(slices), {}
        for name in sorted(os.listdir(staging)):
            if name.startswith((".", "_")) or not name.endswith(".parquet"):
                continue
            m = _TASK_FILE.match(name)
            task = int(m.group(1)) if m else -1
            if not 0 <= task < len(task_slice):
                return None
            num, stats, tags = file_stats_and_tags(os.path.join(staging, name))
            rows[task_slice[task]] += num or 0
            file_rows[task_file[task]] = file_rows.get(task_file[task], 0) + (num or 0)
            files.append((name, task_slice[task], num, stats, tags))
        if rows != list(expected_rows):
            return None
        if expected_file_rows is not None and any(
                file_rows.get(path, 0) != expected_file_rows.get(path) for path in set(task_file) if path is not None):
            return None
        for name, i, num, stats, tags in files:
            if not num:
                continue
            _adopt_one(os.path.join(staging, name), table_path, plan.dirs[i], name, dict(slices[i].partition_values),
                       num, stats, result, data_change, tags)
    return tag_iceberg_compat(result, plan.metadata, table_path)
