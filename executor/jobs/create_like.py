"""CREATE TABLE [IF NOT EXISTS] t LIKE src [USING delta] [TBLPROPERTIES (...)] [LOCATION '...'].

An empty Delta table with the definition of ``src``, as Delta's CREATE TABLE LIKE builds it
(DeltaAnalysis' EligibleCreateTableLikeCommand -> CreateDeltaTableCommand):

* a Delta source (``name`` or ``delta.`/path```): its schema with every column definition --
  types, NOT NULL, comments, DEFAULT, GENERATED ALWAYS AS (expr), identity columns (START WITH /
  INCREMENT BY / ALWAYS or BY DEFAULT) -- its partition columns, its clustering columns, its
  comment and its configuration (``delta.*`` properties, CHECK constraints
  ``delta.constraints.*``, user properties) merged with the statement's TBLPROPERTIES (those
  win). The new protocol is at least the source's (Delta passes the source protocol on).
  Not copied, because the engine assigns them to each table: ``delta.columnMapping.maxColumnId``,
  column mapping ids / physical names (new ones are assigned when the mode is ``name``), the
  row-tracking materialised column names, identity high-water marks (the new table is empty:
  its identity sequence starts at START WITH). No data, no history, a new table id.
* a view (temporary or persistent): its output columns (names, types, column comments) only.

isolde's defaults for new tables apply first (session ``spark.databricks.delta.properties.
defaults.*``, deletion vectors on), then the source's configuration, then TBLPROPERTIES.
The target name taken: TableAlreadyExistsError unless IF NOT EXISTS (then nothing is done).
LOCATION makes the new table external; the location must be empty. Commit: operation
``CREATE TABLE`` with Delta's parameters, like a plain CREATE TABLE.
"""

from __future__ import annotations

import json

from pyspark.sql import types as T

from isolde.errors import AnalysisError, TableAlreadyExistsError
from ..catalog import properties as P
from ..catalog import schema as S
from ..catalog import views
from ..catalog.warehouse import foreign_entries, has_commits
from . import executes
from .ddl import build_protocol, table_properties, with_column_mapping
from ..session.results import CommitResult, PreparedWrite, QueryResult
from isolde.grammar import ast

#: configuration keys the engine assigns to each table (never inherited)
ENGINE_ASSIGNED = frozenset({
    "delta.columnmapping.maxcolumnid",
    "delta.rowtracking.materializedrowidcolumnname",
    "delta.rowtracking.materializedrowcommitversioncolumnname",
})
#: field metadata keys the engine assigns (column mapping, identity progress)
_FIELD_INTERNAL = frozenset({S.COLUMN_ID, S.PHYSICAL_NAME, S.PARQUET_FIELD_ID, S.IDENTITY_HWM})


def clean_struct(struct: T.StructType) -> T.StructType:
    """The schema without what the engine assigned (column mapping ids and physical names, identity
    high-water marks), nested fields included; every column definition kept."""
    fields = []
    for f in struct.fields:
        meta = {k: v for k, v in (f.metadata or {}).items() if k not in _FIELD_INTERNAL}
        fields.append(T.StructField(f.name, S.map_structs(f.dataType, clean_struct), f.nullable, meta))
    return T.StructType(fields)


def _view_struct(view: views.ViewDefinition) -> T.StructType:
    comments = dict(zip([c.lower() for c in view.columns], view.column_comments))
    fields = []
    for name, type_text in view.schema:
        dt = S.parse_data_type(type_text)
        if isinstance(dt, T.NullType):
            dt = T.StringType()
        comment = comments.get(name.lower())
        fields.append(T.StructField(name, dt, True, {"comment": comment} if comment is not None else {}))
    return T.StructType(fields)


@executes(ast.CreateTableLike)
def run_create_table_like(ctx, stmt: ast.CreateTableLike):
    from ..log.actions import DomainMetadata, Metadata

    if stmt.using is not None and stmt.using.lower() != "delta":
        raise AnalysisError(f"isolde creates Delta tables only (USING {stmt.using} is not supported).",
                            error_class="UNSUPPORTED_DATA_SOURCE", sqlstate="0A000")

    # ---- the source's definition
    source_view = views.lookup(ctx, stmt.source)
    src_protocol = None
    clustering: list[str] = []
    if source_view is not None:
        struct = _view_struct(source_view)
        partition_cols: list[str] = []
        description = None
        src_config: dict = {}
        source_name = source_view.qualified_name
    else:
        src_handle = P.resolve(ctx, stmt.source)
        src = P.snapshot_of(ctx, src_handle, stmt.source)
        meta = src.metadata
        struct = clean_struct(S.metadata_schema(meta))
        partition_cols = list(meta.partition_columns)
        clustering = P.clustering_columns(src)
        description = meta.description
        src_config = {k: v for k, v in (meta.configuration or {}).items() if k.lower() not in ENGINE_ASSIGNED}
        src_protocol = src.protocol
        source_name = src_handle.name

    # ---- the target
    handle = ctx.resolve(stmt.table, must_exist=False, location=stmt.location)
    if ctx.catalog.exists(handle):
        if stmt.if_not_exists:
            return QueryResult(message=f"Table {handle.name} already exists; nothing done.")
        raise TableAlreadyExistsError(handle.name)
    if has_commits(handle.path):
        raise AnalysisError(f"Cannot create table {handle.name}: location {handle.path} already holds a Delta table.",
                            error_class="DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", sqlstate="42601")
    foreign = foreign_entries(handle.path)
    if foreign:
        raise AnalysisError(
            f"Cannot create table {handle.name}: location {handle.path} is not empty and is not a Delta table "
            f"(it holds {', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''}). Use an empty folder.",
            error_class="DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", sqlstate="42601")

    # ---- the new table's metadata and protocol
    config, min_reader, min_writer = table_properties(ctx, stmt.properties, existing=src_config)
    struct = with_column_mapping(struct, config)
    if clustering and not any(k.lower() == "delta.enablerowtracking" for k in config):
        config["delta.enableRowTracking"] = "true"  # as CREATE TABLE ... CLUSTER BY does
    protocol = build_protocol(struct, config, bool(clustering), min_reader, min_writer)
    config = P.without_protocol_properties(config)  # they are the protocol's now, as Delta keeps them
    if src_protocol is not None:
        protocol = P.merge_protocols(protocol, src_protocol)
    metadata = Metadata(schema_string=S.struct_to_delta(struct), partition_columns=tuple(partition_cols),
                        configuration=config, description=description)
    actions = [protocol, metadata]
    if clustering:
        physical = []
        for c in clustering:
            path, dt = [], struct
            for part in c.split("."):
                f = S.field_named(dt, part) if isinstance(dt, T.StructType) else None
                path.append(S.physical_name(f) if f is not None else part)
                dt = f.dataType if f is not None else None
            physical.append(path)
        actions.append(DomainMetadata(P.CLUSTERING_DOMAIN, json.dumps({"clusteringColumns": physical})))

    operation = "CREATE TABLE"
    params = {"isManaged": str(handle.managed).lower(), "description": description,
              "partitionBy": json.dumps(partition_cols), "properties": json.dumps(config)}
    if description is None:
        params.pop("description")
    if clustering:
        params["clusterBy"] = json.dumps(clustering)
    txn = ctx.start_transaction(handle.log)

    def commit() -> CommitResult:
        version = txn.commit(actions, operation=operation, operation_parameters=params, metrics={})
        if handle.external:
            ctx.catalog.register_external(handle)
        return CommitResult(version=version, operation=operation, metrics={}, table=handle.name)

    ctx.metrics["source"] = source_name
    return PreparedWrite(operation=operation, table=handle.name, commit_fn=commit, staged_paths=[], metrics={})


run_create_table_like.needs_spark = False
