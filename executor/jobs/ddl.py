"""CREATE [OR REPLACE] TABLE [IF NOT EXISTS] / REPLACE TABLE / CTAS, and DROP TABLE.

New tables:
* properties: session defaults (``spark.databricks.delta.properties.defaults.*``), then
  TBLPROPERTIES; isolde's own default is ``delta.enableDeletionVectors = true`` unless either
  says otherwise. ``delta.minReaderVersion`` / ``delta.minWriterVersion`` are protocol
  floors, not stored. Values are validated (InvalidPropertyError) before any data is written.
* protocol: the lowest one the schema + properties need (schema.protocol_for): 1/2 plain,
  3/7 with deletionVectors, writer 6 (or the feature) for identity columns, ...
* CLUSTER BY: features ``clustering`` + ``domainMetadata`` and the ``delta.clustering``
  domain ``{"clusteringColumns": [["col"], ...]}`` (as Delta writes it), and row tracking on
  unless TBLPROPERTIES say otherwise. isolde does not re-cluster on write; OPTIMIZE clusters.
* LOCATION: an external table (the name points at the path); an existing Delta table at the
  location is registered as-is when no schema is given.
* CREATE OR REPLACE / REPLACE on an existing table commits a new version on the same log
  (new metadata, all files removed, CTAS files added), so time travel still sees the old data.
DROP TABLE: managed tables lose their folder; external tables only their registration.
"""

from __future__ import annotations

import json

from pyspark.sql import types as T

from isolde.errors import AnalysisError, InvalidPropertyError, TableAlreadyExistsError, TableNotFoundError
from ..catalog import properties as P
from ..catalog import schema as S
from ..catalog import variant
from ..catalog.warehouse import check_identifier, foreign_entries, has_commits
from . import executes
from ..session.results import CommitResult, PreparedWrite, QueryResult
from isolde.grammar import ast
from isolde.grammar.dialect import DIALECT
from isolde.planner.resolve import resolve_column

ISOLDE_DEFAULTS = {"delta.enableDeletionVectors": "true"}


def with_column_mapping(struct, config: dict):
    """A new table's schema with column-mapping ids and physical names when its properties ask
    for name or id mode (``config`` gets ``delta.columnMapping.maxColumnId``): both modes give
    every field, nested ones too, an id and a ``col-<uuid>`` physical name, as Delta does, and
    with icebergCompatV2 array elements and map keys / values ids of their own."""
    mode = str(config.get("delta.columnMapping.mode", "none")).lower()
    if mode in ("name", "id"):
        struct, max_id = S.assign_column_mapping(struct, nested_ids=S.iceberg_compat_v2(config))
        config["delta.columnMapping.maxColumnId"] = str(max_id)
    return struct


def table_properties(ctx, properties, existing: dict | None = None) -> tuple[dict, int, int]:
    """(validated configuration, min reader floor, min writer floor) of a new table."""
    from ..log.features import validate_table_properties

    config: dict = {}
    config.update(ISOLDE_DEFAULTS)
    for key, value in ctx.table_defaults().items():
        config[key] = value
    if existing:
        config.update(existing)
    for prop in properties:
        if prop.value is None:
            raise InvalidPropertyError(f"Table property `{prop.key}` needs a value.")
        config[prop.key] = prop.value
    # case-insensitive duplicates of delta.* keys: the later one wins
    merged: dict = {}
    lower_seen: dict = {}
    for key, value in config.items():
        lk = key.lower()
        if lk.startswith("delta.") and lk in lower_seen:
            merged.pop(lower_seen[lk], None)
        lower_seen[lk] = key
        merged[key] = value
    min_reader = min_writer = 0
    for key in list(merged):
        if key.lower() == "delta.minreaderversion":
            min_reader = _version(merged.pop(key), key)
        elif key.lower() == "delta.minwriterversion":
            min_writer = _version(merged.pop(key), key)
    explicit = {prop.key.lower() for prop in properties}
    return iceberg_compat_properties(validate_table_properties(merged), explicit), min_reader, min_writer


def iceberg_compat_properties(config: dict, explicit: set) -> dict:
    """What Delta's IcebergCompatV2 needs of a new table's properties (IcebergCompat.scala):
    UniForm (``delta.universalFormat.enabledFormats`` with ``iceberg``) only with the compat on;
    column mapping in name mode (set when not given, as Delta does; id mode is kept); deletion
    vectors off (isolde's default of on is dropped; asking for them is refused). ``explicit``:
    lower-case keys of the statement's TBLPROPERTIES."""
    lower = {k.lower(): k for k in config}

    def get(key: str) -> str:
        return str(config.get(lower.get(key.lower(), key), "")).strip().lower()

    def put(key: str, value: str) -> None:
        config[lower.get(key.lower(), key)] = value

    formats = [f.strip() for f in get("delta.universalFormat.enabledFormats").split(",") if f.strip()]
    compat = get("delta.enableIcebergCompatV2") == "true"
    if "iceberg" in formats and not compat:
        raise InvalidPropertyError(
            "delta.universalFormat.enabledFormats = 'iceberg' needs IcebergCompatV2: add "
            "'delta.enableIcebergCompatV2' = 'true' to the table properties.")
    if not compat:
        return config
    if get("delta.enableDeletionVectors") == "true":
        if "delta.enabledeletionvectors" in explicit:
            raise InvalidPropertyError(
                "IcebergCompatV2 (UniForm) cannot be enabled on a table with deletion vectors: remove "
                "'delta.enableDeletionVectors' = 'true' or set it to false.")
        put("delta.enableDeletionVectors", "false")
    if get("delta.columnMapping.mode") in ("", "none"):
        put("delta.columnMapping.mode", "name")
    return config


def _version(value: str, key: str) -> int:
    try:
        v = int(value)
    except ValueError:
        raise InvalidPropertyError(f"{key} must be an integer, not {value!r}.")
    if not (1 <= v <= (3 if "reader" in key.lower() else 7)):
        raise InvalidPropertyError(f"{key} = {value} is not a valid protocol version.")
    return v


def build_protocol(struct, config, clustering: bool, min_reader: int = 0, min_writer: int = 0):
    from ..log.actions import Protocol

    reader, writer, rf, wf = S.protocol_for(struct, config, clustering, max(min_reader, 1), max(min_writer, 2))
    return Protocol(reader, writer, rf, wf)


def _ctas_struct(df) -> T.StructType:
    fields = []
    for f in df.schema.fields:
        dt = f.dataType
        if isinstance(dt, T.NullType):
            dt = T.StringType()
        fields.append(T.StructField(f.name, dt, True))
    names = [f.name.lower() for f in fields]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise AnalysisError(f"Found duplicate column(s) in the query: {', '.join(sorted(dupes))}. Give them aliases.",
                            error_class="COLUMN_ALREADY_EXISTS", sqlstate="42711")
    bad = [f.name for f in fields if not f.name or any(c in f.name for c in " ,;{}()\n\t=")]
    if bad:
        raise AnalysisError(f"Invalid column name(s) {', '.join(repr(b) for b in bad)} in the query: give the "
                            "expressions aliases (SELECT expr AS name).", error_class="INVALID_COLUMN_NAME",
                            sqlstate="42K05")
    return T.StructType(fields)


def _operation(stmt: ast.CreateTable, replacing: bool) -> str:
    ctas = stmt.query is not None
    if stmt.replace and not stmt.or_replace:
        return "REPLACE TABLE AS SELECT" if ctas else "REPLACE TABLE"
    if stmt.or_replace:
        return "CREATE OR REPLACE TABLE AS SELECT" if ctas else "CREATE OR REPLACE TABLE"
    return "CREATE TABLE AS SELECT" if ctas else "CREATE TABLE"


@executes(ast.CreateTable)
def run_create_table(ctx, stmt: ast.CreateTable):
    from ..log.actions import DomainMetadata, Metadata

    if stmt.using is not None and stmt.using.lower() != "delta":
        raise AnalysisError(f"isolde creates Delta tables only (USING {stmt.using} is not supported).",
                            error_class="UNSUPPORTED_DATA_SOURCE", sqlstate="0A000")
    handle = ctx.resolve(stmt.table, must_exist=False, location=stmt.location)
    exists = ctx.catalog.exists(handle)
    data_exists = has_commits(handle.path)
    replacing = stmt.or_replace or stmt.replace
    if exists and not replacing:
        if stmt.if_not_exists:
            return QueryResult(message=f"Table {handle.name} already exists; nothing done.")
        raise TableAlreadyExistsError(handle.name)
    if stmt.replace and not stmt.or_replace and not data_exists:
        raise TableNotFoundError(handle.name)
    if (handle.external and data_exists and not exists and not stmt.columns and stmt.query is None
            and not replacing):
        # CREATE TABLE t LOCATION '/existing/delta/table': register it
        def register() -> CommitResult:
            ctx.catalog.register_external(handle)
            version = handle.log.snapshot().version
            return CommitResult(version=version, operation="CREATE TABLE", metrics={}, table=handle.name)

        return PreparedWrite(operation="CREATE TABLE", table=handle.name, commit_fn=register)
    if handle.external and data_exists and not replacing:
        raise AnalysisError(f"Cannot create table {handle.name}: location {handle.path} already holds a Delta "
                            "table. Leave out the schema to register it, or use CREATE OR REPLACE.",
                            error_class="DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", sqlstate="42601")
    foreign = [] if data_exists else foreign_entries(handle.path)
    if foreign:
        raise AnalysisError(
            f"Cannot create table {handle.name}: location {handle.path} is not empty and is not a Delta table "
            f"(it holds {', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''}). Use an empty folder, or "
            "CONVERT TO DELTA for a folder of Parquet files.",
            error_class="DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", sqlstate="42601")

    config, min_reader, min_writer = table_properties(ctx, stmt.properties)

    # ---- schema
    df = None
    bound = None
    if stmt.query is not None:
        from .query import bind_query

        bound = bind_query(ctx, stmt.query)
        df = bound.df
        struct = _ctas_struct(df)
        if stmt.columns:
            declared = S.columns_to_struct(stmt.columns)
            if len(declared.fields) != len(struct.fields):
                raise AnalysisError("The column list of CREATE TABLE AS SELECT does not match the query.",
                                    error_class="INSERT_COLUMN_ARITY_MISMATCH")
            struct = declared
    else:
        if not stmt.columns and (stmt.partitioned_by or stmt.cluster_by):
            raise AnalysisError(f"CREATE TABLE {handle.name} needs a column list or AS SELECT to be partitioned "
                                "or clustered.", error_class="DELTA_SCHEMA_NOT_PROVIDED", sqlstate="42908")
        # no columns: Databricks' schemaless placeholder table, whose schema the first
        # COPY INTO ... COPY_OPTIONS ('mergeSchema' = 'true') sets
        struct = S.columns_to_struct(stmt.columns) if stmt.columns else T.StructType([])
    names = [check_identifier(f.name, "column") for f in struct.fields]  # CTAS names come from the query
    partition_cols = [resolve_column(c, names, handle.name) for c in stmt.partitioned_by]
    cluster_cols = [resolve_column(c, names, handle.name) for c in stmt.cluster_by]
    if partition_cols and cluster_cols:
        raise AnalysisError("A table cannot be both PARTITIONED BY and CLUSTER BY.",
                            error_class="SPECIFY_CLUSTER_BY_WITH_PARTITIONED_BY_IS_NOT_ALLOWED", sqlstate="56038")
    variant.check_placement(struct, partition_cols, cluster_cols)  # VARIANT is not comparable
    for c in partition_cols:
        f = S.field_named(struct, c)
        if isinstance(f.dataType, (T.StructType, T.ArrayType, T.MapType)):
            raise AnalysisError(f"Cannot partition by `{c}`: it has the complex type {f.dataType.simpleString()}.",
                                error_class="DELTA_INVALID_PARTITION_COLUMN_TYPE", sqlstate="42996")
    if len(set(c.lower() for c in partition_cols)) != len(partition_cols):
        raise AnalysisError("A partition column is listed twice.", error_class="COLUMN_ALREADY_EXISTS")
    if partition_cols and len(partition_cols) == len(names):
        raise AnalysisError("Cannot partition by every column of the table.",
                            error_class="ALL_PARTITION_COLUMNS_NOT_ALLOWED")
    for f in struct.fields:
        if S.is_generated(f):
            _check_generation_expression(f, names, handle.name)

    if cluster_cols and not any(k.lower() == "delta.enablerowtracking" for k in config):
        # as Databricks creates clustered tables: row tracking on, so a concurrent deletion vector
        # follows rows through OPTIMIZE's re-clustering instead of failing one side
        config["delta.enableRowTracking"] = "true"
    if S.iceberg_compat_v2(config):
        from .reorg_uniform import check_types

        check_types(struct, partition_cols, handle.name)  # IcebergCompatV2's type allow-list
    struct = with_column_mapping(struct, config)
    protocol = build_protocol(struct, config, bool(cluster_cols), min_reader, min_writer)
    config = P.without_protocol_properties(config)  # they are the protocol's now, as Delta keeps them
    existing_meta = None
    if data_exists:
        existing_meta = handle.log.snapshot().metadata
    metadata = Metadata(
        schema_string=S.struct_to_delta(struct),
        partition_columns=tuple(partition_cols),
        configuration=config,
        description=stmt.comment,
    )
    if existing_meta is not None and replacing:
        metadata.id = existing_meta.id  # same table identity across REPLACE
    domains = []
    if cluster_cols:
        # physical names under column mapping (PROTOCOL.md, Clustered Table): they survive a rename
        physical = {f.name: S.physical_name(f) for f in struct.fields}
        domains.append(DomainMetadata("delta.clustering",
                                      json.dumps({"clusteringColumns": [[physical.get(c, c)] for c in cluster_cols]})))
    elif data_exists and replacing:
        old = handle.log.snapshot().domain_metadata.get("delta.clustering")
        if old is not None and not old.removed:
            domains.append(DomainMetadata("delta.clustering", old.configuration, removed=True))

    txn = ctx.start_transaction(handle.log)
    removes = []
    if txn.snapshot.version >= 0:
        txn.read_whole_table()
        removes = [a.remove() for a in txn.snapshot.all_files]

    written = None
    staged = []
    if df is not None:
        from ..rows.writer import conform, identity_metadata_update, write_files

        conformed = conform(df, struct, table_name=handle.name, configuration=config)
        written = write_files(ctx, conformed, handle.path, metadata)
        staged = written.staged_paths
        updated = identity_metadata_update(metadata, written, conformed)
        if updated is not None:
            metadata = updated
    operation = _operation(stmt, data_exists)
    params = {"isManaged": str(handle.managed).lower(), "partitionBy": json.dumps(partition_cols),
              "properties": json.dumps(config)}
    if stmt.comment is not None:
        params["description"] = stmt.comment
    if cluster_cols:
        params["clusterBy"] = json.dumps(cluster_cols)
    metrics = {}
    if written is not None:
        metrics = {"numFiles": len(written.adds), "numOutputRows": written.num_rows,
                   "numOutputBytes": written.num_bytes}
    actions = [protocol, metadata, *domains, *removes, *(written.adds if written else [])]

    def commit() -> CommitResult:
        version = txn.commit(actions, operation=operation, operation_parameters=params, metrics=metrics)
        if handle.external:
            ctx.catalog.register_external(handle)
        return CommitResult(version=version, operation=operation, metrics=metrics, table=handle.name)

    return PreparedWrite(operation=operation, table=handle.name, commit_fn=commit, staged_paths=staged,
                         metrics=metrics, root=handle.path)


def _check_generation_expression(f, names, table) -> None:
    import sqlglot
    import sqlglot.expressions as exp

    sql = f.metadata[S.GENERATION_EXPRESSION]
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except Exception:
        raise AnalysisError(f"Cannot parse the generation expression of `{f.name}`: {sql}",
                            error_class="DELTA_UNSUPPORTED_EXPRESSION_GENERATED_COLUMN")
    for c in tree.find_all(exp.Column):
        resolve_column(c.name, names, table)
        if c.name.lower() == f.name.lower():
            raise AnalysisError(f"Generated column `{f.name}` cannot reference itself.",
                                error_class="DELTA_GENERATED_COLUMNS_REFERENCE_SELF")
    if tree.find(exp.Subquery, exp.Select, exp.AggFunc):
        raise AnalysisError(f"The generation expression of `{f.name}` must be deterministic and row-local: {sql}",
                            error_class="DELTA_UNSUPPORTED_EXPRESSION_GENERATED_COLUMN")


@executes(ast.DropTable)
def run_drop_table(ctx, stmt: ast.DropTable) -> QueryResult:
    try:  # links=True: a table folder that is a symbolic link is dropped by removing the link
        handle = ctx.catalog.resolve(stmt.table, ctx.current_database, must_exist=False, links=True)
    except AnalysisError as e:
        if stmt.if_exists and e.error_class != "NAME_OUTSIDE_WAREHOUSE":  # (a link out exists: say so)
            return QueryResult(message="Table does not exist; nothing done.")
        raise
    if not ctx.catalog.exists(handle):
        if stmt.if_exists:
            return QueryResult(message=f"Table {handle.name} does not exist; nothing done.")
        raise TableNotFoundError(handle.name, ctx.catalog.candidates(handle.database or ctx.current_database,
                                                                     ctx.current_database))
    linked = handle.managed and ctx.catalog.is_link(handle.path)
    target = ctx.catalog.files.realpath(handle.path) if linked else None
    ctx.catalog.drop_table(handle)
    if linked:
        return QueryResult(message=f"Table {handle.name} dropped (it was a symbolic link: the link is removed, the "
                                   f"data at {target} is kept)")
    return QueryResult(message=f"Table {handle.name} dropped" + (" (data kept at its location)"
                                                                  if handle.external else ""))


run_drop_table.needs_spark = False
# a plain CREATE TABLE only writes the log: it runs before Spark is up (the REPL starts Spark
# in the background); CTAS needs Spark
run_create_table.needs_spark = lambda stmt, session=None: stmt.query is not None
