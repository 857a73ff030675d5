"""SHOW DATABASES | SCHEMAS, SHOW COLUMNS, SHOW CREATE TABLE: pure catalog / log reads, no Spark.

* ``SHOW {DATABASES | SCHEMAS} [[LIKE] 'pattern']`` -- one column ``namespace``, sorted; the
  pattern as Spark's SHOW TABLES LIKE ('*' any, '|' alternatives, case-insensitive).
* ``SHOW COLUMNS {IN | FROM} t [{IN | FROM} db]`` -- one column ``col_name``, in table order,
  for tables (``delta.`/path``` too) and views (temporary ones included). A database both in
  the name and in the IN clause that differ is Spark's SHOW_COLUMNS_WITH_CONFLICT_NAMESPACE.
* ``SHOW CREATE TABLE t`` -- one row, column ``createtab_stmt``, laid out as Spark's
  ShowCreateTableExec prints a Delta table::

      CREATE TABLE spark_catalog.db.t (
        id BIGINT NOT NULL GENERATED ALWAYS AS IDENTITY (START WITH 1 INCREMENT BY 1) COMMENT 'x',
        ...)
      USING delta
      PARTITIONED BY (p)          -- or CLUSTER BY (a, b)
      COMMENT 'table comment'
      LOCATION 'file:/...'        -- external tables only
      TBLPROPERTIES (
        'k' = 'v', ...)

  TBLPROPERTIES are what Delta's Snapshot.getProperties lists (the configuration, the protocol
  versions as ``delta.minReaderVersion`` / ``delta.minWriterVersion`` and every supported feature
  as ``delta.feature.X = 'supported'``), sorted by key, so running the text re-creates the same
  protocol. CHECK constraints stay ``'delta.constraints.name' = 'expr'`` entries (CREATE TABLE
  takes them back). Left out: values the engine assigns to a table and that a new table must not
  inherit -- ``delta.columnMapping.maxColumnId`` and the row-tracking materialised column names.
  Column mapping physical names / ids and identity high-water marks are not DDL and never shown.
  A persistent view prints ``CREATE VIEW `db`.`v` (`col` COMMENT '...', ...) COMMENT ...
  TBLPROPERTIES (...) AS <query text>`` as Spark's ShowCreateTableCommand does; a temporary
  view is Spark's UNSUPPORTED_SHOW_CREATE_TABLE.ON_TEMPORARY_VIEW.
"""

from __future__ import annotations

import re
from typing import Optional

from pyspark.sql import types as T

from isolde.errors import AnalysisError, TableNotFoundError
from ..catalog import properties as P
from ..catalog import schema as S
from ..catalog import views
from . import executes
from .database import _like
from ..session.results import QueryResult
from isolde.grammar import ast

#: configuration keys the engine assigns to a table; a re-created table gets its own
ENGINE_ASSIGNED_PROPERTIES = frozenset({
    "delta.columnmapping.maxcolumnid",
    "delta.rowtracking.materializedrowidcolumnname",
    "delta.rowtracking.materializedrowcommitversioncolumnname",
})

_PLAIN = re.compile(r"^[A-Za-z0-9_]+$")


# --------------------------------------------------------------------------- SHOW DATABASES


@executes(ast.ShowDatabases)
def run_show_databases(ctx, stmt: ast.ShowDatabases) -> QueryResult:
    names = sorted(ctx.catalog.list_databases())
    if stmt.pattern is not None:
        names = [n for n in names if _like(n, stmt.pattern)]
    return QueryResult(columns=["namespace"], rows=[(n,) for n in names])


# --------------------------------------------------------------------------- SHOW COLUMNS


def _columns_ref(stmt: ast.ShowColumns) -> ast.TableRef:
    """The table SHOW COLUMNS names, with the IN / FROM database folded in (Spark's rule: a
    database both in the name and in the clause must be the same one, compared case-insensitively)."""
    ref = stmt.table
    if stmt.database is None or ref.path is not None:
        return ref
    parts = tuple(ref.parts)
    if len(parts) == 1:
        return ast.TableRef(parts=(stmt.database, parts[0]), version=ref.version, timestamp=ref.timestamp)
    named = parts[-2]
    if named.lower() != stmt.database.lower():
        raise AnalysisError(f"SHOW COLUMNS with conflicting namespaces: `{stmt.database}` != `{named}`.",
                            error_class="SHOW_COLUMNS_WITH_CONFLICT_NAMESPACE", sqlstate="42K05")
    return ref


@executes(ast.ShowColumns)
def run_show_columns(ctx, stmt: ast.ShowColumns) -> QueryResult:
    ref = _columns_ref(stmt)
    view = views.lookup(ctx, ref)
    if view is not None:
        names = [name for name, _ in view.schema]
    else:
        handle = P.resolve(ctx, ref)
        snap = P.snapshot_of(ctx, handle, ref)
        names = [f.name for f in S.metadata_schema(snap.metadata).fields]
    return QueryResult(columns=["col_name"], rows=[(n,) for n in names])


# --------------------------------------------------------------------------- SHOW CREATE TABLE


def quote_if_needed(name: str) -> str:
    """Spark's QuotingUtils.quoteIfNeeded: backquotes unless the name is letters, digits and '_'
    (and not only digits)."""
    if _PLAIN.match(name) and not name.isdigit():
        return name
    return quote(name)


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """A single-quoted SQL string literal (Spark's escapeSingleQuotedString)."""
    return "'" + str(text).replace("\\", "\\\\").replace("'", "\\'") + "'"


def type_sql(dt: T.DataType) -> str:
    """Spark's ``DataType.sql``: ``BIGINT``, ``DECIMAL(10,2)``, ``ARRAY<STRING>``,
    ``MAP<STRING, INT>``, ``STRUCT<a: INT NOT NULL, `b c`: STRING>`` (field names keep their case)."""
    if isinstance(dt, T.ArrayType):
        return f"ARRAY<{type_sql(dt.elementType)}>"
    if isinstance(dt, T.MapType):
        return f"MAP<{type_sql(dt.keyType)}, {type_sql(dt.valueType)}>"
    if isinstance(dt, T.StructType):
        inner = ", ".join(f"{quote_if_needed(f.name)}: {type_sql(f.dataType)}{'' if f.nullable else ' NOT NULL'}"
                          + (f" COMMENT {sql_string(f.metadata['comment'])}" if (f.metadata or {}).get("comment")
                             else "")
                          for f in dt.fields)
        return f"STRUCT<{inner}>"
    if isinstance(dt, T.NullType):
        return "VOID"
    return dt.simpleString().upper()


def column_ddl(f: T.StructField) -> str:
    """One column as Spark's StructField.toDDL writes it, with Delta's generated and identity
    clauses: ``name TYPE [NOT NULL] [DEFAULT expr] [GENERATED ...] [COMMENT '...']``."""
    meta = f.metadata or {}
    out = f"{quote_if_needed(f.name)} {type_sql(f.dataType)}"
    if not f.nullable:
        out += " NOT NULL"
    if S.CURRENT_DEFAULT in meta:
        out += f" DEFAULT {meta[S.CURRENT_DEFAULT]}"
    if S.GENERATION_EXPRESSION in meta:
        out += f" GENERATED ALWAYS AS ({meta[S.GENERATION_EXPRESSION]})"
    if S.IDENTITY_START in meta:
        kind = "BY DEFAULT" if meta.get(S.IDENTITY_ALLOW_EXPLICIT, False) else "ALWAYS"
        out += (f" GENERATED {kind} AS IDENTITY (START WITH {int(meta[S.IDENTITY_START])} "
                f"INCREMENT BY {int(meta.get(S.IDENTITY_STEP, 1))})")
    if meta.get("comment") is not None:
        out += f" COMMENT {sql_string(meta['comment'])}"
    return out


def _multi_lines(items) -> str:
    """Spark's concatByMultiLines: ``(\\n  a,\\n  b)\\n``."""
    return "(\n  " + ",\n  ".join(items) + ")\n"


def shown_properties(snap) -> list[tuple[str, str]]:
    """The TBLPROPERTIES SHOW CREATE TABLE prints (Delta's Snapshot.getProperties minus the values
    the engine assigns), sorted by key."""
    meta, proto = snap.metadata, snap.protocol
    props: dict[str, str] = {}
    for key, value in (meta.configuration or {}).items():
        if key == "path" or key.lower() in ENGINE_ASSIGNED_PROPERTIES:
            continue
        props[key] = str(value)
    props["delta.minReaderVersion"] = str(proto.min_reader_version)
    props["delta.minWriterVersion"] = str(proto.min_writer_version)
    if proto.reader_features is not None or proto.writer_features is not None:
        for feature in sorted(set(proto.reader_features or ()) | set(proto.writer_features or ())):
            props[f"delta.feature.{feature}"] = "supported"
    return sorted(props.items())


def _display_name(handle) -> str:
    if handle.by_path or handle.database is None:
        return handle.name
    return ".".join(quote_if_needed(p) for p in ("spark_catalog", handle.database, handle.table))


def create_table_statement(handle, snap) -> str:
    meta = snap.metadata
    struct = S.metadata_schema(meta)
    out = f"CREATE TABLE {_display_name(handle)} "
    out += _multi_lines([column_ddl(f) for f in struct.fields]) if struct.fields else "()\n"
    out += "USING delta\n"
    if meta.partition_columns:
        out += f"PARTITIONED BY ({', '.join(quote_if_needed(c) for c in meta.partition_columns)})\n"
    clustering = P.clustering_columns(snap)
    if clustering:
        out += f"CLUSTER BY ({', '.join('.'.join(quote_if_needed(p) for p in c.split('.')) for c in clustering)})\n"
    if meta.description is not None:
        out += f"COMMENT {sql_string(meta.description)}\n"
    if handle.external and not handle.by_path:
        out += f"LOCATION {sql_string(P.to_file_uri(handle.path))}\n"
    props = shown_properties(snap)
    if props:
        out += "TBLPROPERTIES " + _multi_lines(f"{sql_string(k)} = {sql_string(v)}" for k, v in props)
    return out


def create_view_statement(view: views.ViewDefinition) -> str:
    out = f"CREATE VIEW {quote(view.database)}.{quote(view.name)} "
    comments = dict(zip([c.lower() for c in view.columns], view.column_comments))
    if view.schema:
        cols = []
        for name, _ in view.schema:
            comment = comments.get(name.lower())
            cols.append(quote(name) + (f" COMMENT {sql_string(comment)}" if comment is not None else ""))
        out += _multi_lines(cols)
    if view.comment is not None:
        out += f"COMMENT {sql_string(view.comment)}\n"
    if view.properties:
        out += "TBLPROPERTIES " + _multi_lines(f"{sql_string(k)} = {sql_string(v)}"
                                               for k, v in sorted(view.properties.items()))
    out += f"AS {view.text}\n"
    return out


@executes(ast.ShowCreateTable)
def run_show_create_table(ctx, stmt: ast.ShowCreateTable) -> QueryResult:
    view = views.lookup(ctx, stmt.table)
    if view is not None:
        if view.temporary:
            raise AnalysisError(f"SHOW CREATE TABLE is not supported on a temporary view `{view.name}`.",
                                error_class="UNSUPPORTED_SHOW_CREATE_TABLE.ON_TEMPORARY_VIEW", sqlstate="0A000")
        text = create_view_statement(view)
    else:
        handle = P.resolve(ctx, stmt.table)
        snap = P.snapshot_of(ctx, handle, stmt.table)
        if snap.metadata is None:
            raise TableNotFoundError(handle.name)
        text = create_table_statement(handle, snap)
    return QueryResult(columns=["createtab_stmt"], rows=[(text,)])


for _fn in (run_show_databases, run_show_columns, run_show_create_table):
    _fn.needs_spark = False
