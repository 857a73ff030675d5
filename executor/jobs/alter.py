"""ALTER TABLE: metadata (and protocol) commits through the transaction.

    SET TBLPROPERTIES (...)            operation SET TBLPROPERTIES
    UNSET TBLPROPERTIES [IF EXISTS]    operation UNSET TBLPROPERTIES
    ADD COLUMNS (...)                  operation ADD COLUMNS
    ADD CONSTRAINT c CHECK (expr)      operation ADD CONSTRAINT   (existing rows checked by a Spark job)
    DROP CONSTRAINT [IF EXISTS] c      operation DROP CONSTRAINT
    CLUSTER BY (cols) | NONE           operation CLUSTER BY       (domain metadata ``delta.clustering``)
    ALTER COLUMN c SYNC IDENTITY       operation CHANGE COLUMN    (identity high-water mark)
    ALTER|CHANGE COLUMN c TYPE t       operation CHANGE COLUMN    (type widening: delta.typeChanges)
    (DROP FEATURE lives in drop_feature.py)

Every runner reads the latest snapshot through a new transaction, validates, builds the
actions and returns a PreparedWrite whose ``commit()`` commits them. A protocol change is a
``protocol`` action, so concurrent writers fail with ProtocolChangedException; a metadata
change makes them fail with MetadataChangedException. A refused statement raises before
anything is written, so the table version is unchanged.

Notes on choices (documented differences from Delta):
* ``SYNC IDENTITY`` never lowers the high-water mark unless
  ``spark.databricks.delta.identity.allowSyncIdentityToLowerHighWaterMark.enabled`` is true.
* A no-op (``DROP CONSTRAINT IF EXISTS`` of a missing constraint, ``UNSET ... IF EXISTS`` of
  missing keys only, ``CLUSTER BY NONE`` on an unclustered table) commits nothing.
"""

from __future__ import annotations

import json
import time

import sqlglot.expressions as exp
from pyspark.sql import types as T

from isolde.errors import (
    AnalysisError,
    ColumnNotFoundError,
    ConstraintViolationError,
    ExecutionError,
    InvalidPropertyError,
)
from ..catalog import properties as P
from ..catalog import schema as S
from ..catalog import variant
from . import executes
from ..log.actions import DomainMetadata
from ..session.results import CommitResult, PreparedWrite, QueryResult
from isolde.grammar import ast

LOWER_HWM_CONF = "spark.databricks.delta.identity.allowSyncIdentityToLowerHighWaterMark.enabled"
MAX_CLUSTERING_COLUMNS = 4


def _begin(ctx, ref: ast.TableRef):
    if ref.version is not None or ref.timestamp is not None:
        raise AnalysisError(f"ALTER TABLE cannot change an old version of {ref.name}: drop the VERSION/TIMESTAMP AS OF.")
    handle = P.resolve(ctx, ref)
    txn = ctx.start_transaction(handle.log)
    return handle, txn, txn.snapshot


def prepared_log_write(handle, txn, operation: str, actions: list, params: dict, metrics: dict | None = None,
                       result=CommitResult) -> PreparedWrite:
    """A write that is only log actions (ALTER, CONVERT, RESTORE, ...), committed on ``commit()``."""
    started = time.perf_counter()
    metrics = dict(metrics or {})

    def commit() -> CommitResult:
        version = P.txn_commit(txn, actions, operation, params, metrics)
        return result(version=version, operation=operation, metrics=dict(metrics), table=handle.name,
                      elapsed_s=time.perf_counter() - started)

    return PreparedWrite(operation=operation, table=handle.name, commit_fn=commit, metrics=dict(metrics))


def _noop(message: str) -> QueryResult:
    return QueryResult(columns=[], rows=[], message=message)


def _protocol_actions(snapshot, new_protocol) -> list:
    return [] if P.same_protocol(new_protocol, snapshot.protocol) else [new_protocol]


def _struct(metadata) -> T.StructType:
    return T.StructType.fromJson(metadata.schema)


def _field(struct: T.StructType, name: str, table: str) -> T.StructField:
    f = S.field_named(struct, name)
    if f is None:
        raise ColumnNotFoundError(name, table, [x.name for x in struct.fields])
    return f


# --------------------------------------------------------------------------- SET / UNSET TBLPROPERTIES


@executes(ast.SetTblProperties)
def set_tblproperties(ctx, stmt: ast.SetTblProperties):
    handle, txn, snap = _begin(ctx, stmt.table)
    raw = P.properties_dict(stmt.properties)
    if not raw:
        raise AnalysisError("SET TBLPROPERTIES needs at least one property.")
    validated = P.validate_new_properties(raw)
    conf, features, min_reader, min_writer = P.split_feature_properties(validated)
    if _backfill_row_ids_first(ctx, handle, snap, conf):
        handle, txn, snap = _begin(ctx, stmt.table)  # the property is set over the backfilled table
    refused = sorted(f for f in features if f not in _SETTABLE_FEATURES)
    if refused:
        raise InvalidPropertyError(
            f"The table feature `{refused[0]}` cannot be added with SET TBLPROPERTIES: it needs more than a protocol "
            f"change (features that can: {', '.join(sorted(_SETTABLE_FEATURES))}).",
            error_class="DELTA_UNSUPPORTED_TABLE_PROPERTY_CHANGE")
    if min_reader and min_reader < snap.protocol.min_reader_version or \
            min_writer and min_writer < snap.protocol.min_writer_version:
        raise InvalidPropertyError(
            f"Protocol versions can only go up: the table is at reader {snap.protocol.min_reader_version} / writer "
            f"{snap.protocol.min_writer_version}; use DROP FEATURE to remove a feature.",
            error_class="DELTA_INVALID_PROTOCOL_DOWNGRADE")
    configuration = dict(snap.metadata.configuration)
    _refuse_unsupported_changes(handle.name, configuration, conf)
    changes = _name_mapping_upgrade(snap.metadata, configuration, conf)
    lowered = {k.lower(): k for k in configuration}
    for key, value in conf.items():
        old = lowered.get(key.lower())
        if old is not None and old != key:
            configuration.pop(old)
        configuration[key] = value
    metadata = P.copy_metadata(snap.metadata, configuration=configuration, **changes)
    protocol = P.protocol_for_metadata(snap.protocol, metadata)
    protocol = P.protocol_with(protocol, reader={f for f in features if f in P.READER_WRITER_FEATURES},
                               writer=features, min_reader=min_reader, min_writer=min_writer)
    actions = _protocol_actions(snap, protocol) + [metadata]
    return prepared_log_write(handle, txn, "SET TBLPROPERTIES", actions, {"properties": validated})


def _backfill_row_ids_first(ctx, handle, snapshot, new: dict) -> bool:
    """Enabling row tracking on a table that has files, in Delta's order (its
    RowTrackingBackfillCommand): first a commit named ROW TRACKING BACKFILL that adds the feature
    to the protocol and re-adds every live file with its base row id (dataChange=false), then the
    property in a commit of its own. A Delta writer racing either lets its own statement commit
    over them (its checker skips a backfill's re-added files, and tolerates a metadata change that
    only enables row tracking); one commit holding both read to it as files added under its read,
    and failed it. Inside BEGIN ... COMMIT the transaction's one commit does both. True when the
    backfill was committed (the caller reads the table again)."""
    enabling = any(k.lower() == "delta.enablerowtracking" and str(v).lower() == "true" for k, v in new.items())
    if not enabling or getattr(getattr(ctx, "session", None), "active_transaction", None) is not None:
        return False
    current = {k.lower(): str(v).lower() for k, v in snapshot.metadata.configuration.items()}
    files = snapshot.all_files
    supported = "rowTracking" in (snapshot.protocol.writer_features or ())
    if current.get("delta.enablerowtracking") == "true" or not files or \
            (supported and all(f.base_row_id is not None for f in files)):
        return False
    txn = ctx.start_transaction(handle.log)
    protocol = P.protocol_with(txn.snapshot.protocol, writer={"rowTracking", "domainMetadata"})
    P.txn_commit(txn, _protocol_actions(txn.snapshot, protocol), "ROW TRACKING BACKFILL", {"batchId": "0"}, {})
    return True


def _name_mapping_upgrade(metadata, configuration: dict, new: dict) -> dict:
    """``delta.columnMapping.mode`` none -> name on an existing table, metadata only (Delta's
    upgrade): every field keeps its current name as its physical name and gets an id, so the
    files already written read as before; RENAME / DROP COLUMN work from then on. Updates
    ``configuration`` (maxColumnId) and returns the metadata changes (the new schema)."""
    wanted = next((str(v).lower() for k, v in new.items() if k.lower() == _MAPPING_MODE), None)
    current = next((str(v).lower() for k, v in configuration.items() if k.lower() == _MAPPING_MODE), "none")
    if wanted != "name" or current != "none":
        return {}
    from .reorg_uniform import upgrade_to_name_mapping

    nested = any(str(v).lower() == "true" for k, v in configuration.items() if k.lower() == "delta.enableicebergcompatv2")
    struct = upgrade_to_name_mapping(S.metadata_schema(metadata), configuration, nested_ids=nested)
    return {"schema_string": S.struct_to_delta(struct)}


# Features a bare protocol upgrade can add (``delta.feature.X = supported``): the others need data or
# metadata work (row ids, Iceberg metadata, change data files) that a property change cannot do.
_SETTABLE_FEATURES = frozenset({"deletionVectors", "appendOnly", "invariants", "checkConstraints", "generatedColumns",
                                "identityColumns", "domainMetadata", "clustering", "timestampNtz",
                                "v2Checkpoint", "vacuumProtocolCheck", "typeWidening", "variantType",
                                "changeDataFeed"})

# Properties whose switching-on needs more than a metadata commit (writing Iceberg metadata). Row
# tracking is enabled on an existing table in one commit: the transaction assigns every live
# file its base row id and re-adds it (dataChange=false), as Delta's backfill does.
_NOT_ON_EXISTING = {
    "delta.enableicebergcompatv2": ("false", "use REORG TABLE ... APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=2))"),
    "delta.universalformat.enabledformats": ("", "use REORG TABLE ... APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=2))"),
}

#: the column mapping mode changes after CREATE only from none to name (every field's physical name
#: is its current name, so old files stay readable): files hold physical names (and field ids) that
#: only the mode's metadata maps back, so turning it off or to id would leave them unreadable
_MAPPING_MODE = "delta.columnmapping.mode"


def _refuse_unsupported_changes(table: str, current: dict, new: dict) -> None:
    cur = {k.lower(): str(v).lower() for k, v in current.items()}
    for key, value in new.items():
        if key.lower() == _MAPPING_MODE and str(value).lower() != cur.get(_MAPPING_MODE, "none") \
                and (cur.get(_MAPPING_MODE, "none"), str(value).lower()) != ("none", "name"):
            raise InvalidPropertyError(
                f"Cannot set `{key}` = '{value}' on the existing table {table}: its column mapping mode is "
                f"'{cur.get(_MAPPING_MODE, 'none')}'; the only change of mode after CREATE is from none to name "
                "(files written under one mode cannot be read under another).",
                error_class="DELTA_UNSUPPORTED_COLUMN_MAPPING_MODE_CHANGE", sqlstate="0AKDC")
        rule = _NOT_ON_EXISTING.get(key.lower())
        if rule is None:
            continue
        off, why = rule
        old = cur.get(key.lower(), off)
        if str(value).lower() != old and str(value).lower() != off:
            raise InvalidPropertyError(f"Cannot set `{key}` = '{value}' on the existing table {table}: {why}.",
                                       error_class="DELTA_UNSUPPORTED_TABLE_PROPERTY_CHANGE")


@executes(ast.UnsetTblProperties)
def unset_tblproperties(ctx, stmt: ast.UnsetTblProperties):
    handle, txn, snap = _begin(ctx, stmt.table)
    P.check_settable({k: None for k in stmt.keys}, for_unset=True)
    configuration = dict(snap.metadata.configuration)
    lowered = {k.lower(): k for k in configuration}
    removed = []
    for key in stmt.keys:
        existing = lowered.get(key.lower())
        if existing is None or existing not in configuration:
            if stmt.if_exists:
                continue
            raise AnalysisError(
                f"Attempted to unset non-existent property '{key}' in table {handle.name}.",
                error_class="DELTA_UNSET_NON_EXISTENT_PROPERTY", sqlstate="42616")
        if existing.lower() == _MAPPING_MODE and str(configuration[existing]).lower() != "none":
            raise InvalidPropertyError(
                f"Cannot unset `{existing}` on table {handle.name}: its files hold physical column names that only "
                "the column mapping maps back to the table's columns.",
                error_class="DELTA_UNSUPPORTED_COLUMN_MAPPING_MODE_CHANGE", sqlstate="0AKDC")
        configuration.pop(existing)
        removed.append(existing)
    if not removed:
        return _noop(f"None of the properties exist on {handle.name}; nothing to unset.")
    metadata = P.copy_metadata(snap.metadata, configuration=configuration)
    params = {"properties": list(stmt.keys), "ifExists": bool(stmt.if_exists)}
    return prepared_log_write(handle, txn, "UNSET TBLPROPERTIES", [metadata], params)


# --------------------------------------------------------------------------- ADD COLUMNS


@executes(ast.AddColumns)
def add_columns(ctx, stmt: ast.AddColumns):
    handle, txn, snap = _begin(ctx, stmt.table)
    struct = _struct(snap.metadata)
    existing = {f.name.lower(): f.name for f in struct.fields}
    seen: dict[str, str] = {}
    new_fields = []
    for col in stmt.columns:
        low = col.name.lower()
        if low in existing:
            raise AnalysisError(f"Cannot add column `{col.name}` to {handle.name}: a column `{existing[low]}` already "
                                "exists (column names are case-insensitive).",
                                error_class="FIELDS_ALREADY_EXISTS", sqlstate="42710")
        if low in seen:
            raise AnalysisError(f"Column `{col.name}` is listed twice in ADD COLUMNS.",
                                error_class="COLUMN_ALREADY_EXISTS", sqlstate="42711")
        seen[low] = col.name
        if not col.nullable:
            raise AnalysisError(
                f"Cannot add column `{col.name}` as NOT NULL: the rows already in {handle.name} would have no value for "
                "it. Add it as a nullable column.", error_class="DELTA_NOT_NULL_COLUMN_NOT_FOUND_IN_STRUCT",
                sqlstate="42K09")
        if col.identity is not None:
            raise AnalysisError(f"Cannot add identity column `{col.name}` to an existing table.",
                                error_class="DELTA_IDENTITY_COLUMNS_ALTER_NOT_SUPPORTED", sqlstate="0AKDD")
        if col.generated_as is not None:
            raise AnalysisError(f"Cannot add generated column `{col.name}` to an existing table.",
                                error_class="DELTA_ADD_COLUMN_GENERATED_NOT_SUPPORTED", sqlstate="0AKDC")
        if col.default is not None:
            raise AnalysisError(f"Cannot add column `{col.name}` with a DEFAULT: isolde does not support column "
                                "defaults on existing tables.", error_class="DELTA_UNSUPPORTED_COLUMN_DEFAULT")
        f = S.column_to_field(col)
        new_fields.append(T.StructField(f.name, f.dataType, True, f.metadata))
    metadata, protocol = P.add_columns(snap.metadata, snap.protocol, new_fields)
    if any(variant.uses_variant(f.dataType) for f in new_fields):
        needs = variant.feature_to_add(P.protocol_features(protocol)[0])
        protocol = P.protocol_with(protocol, reader=needs, writer=needs)
    params = {"columns": [{"column": f.jsonValue()} for f in new_fields]}
    return prepared_log_write(handle, txn, "ADD COLUMNS", _protocol_actions(snap, protocol) + [metadata], params)


# --------------------------------------------------------------------------- CHECK constraints


def _constraint_key(configuration: dict, name: str) -> str | None:
    wanted = (P.CONSTRAINT_PREFIX + name).lower()
    return next((k for k in configuration if k.lower() == wanted), None)


def _check_expression(stmt: ast.AddConstraint, struct: T.StructType, table: str) -> None:
    tree = stmt.check.tree
    if tree is None:
        return
    if tree.find(exp.Subquery, exp.Select) is not None:
        raise AnalysisError(f"CHECK constraint {stmt.name}: subqueries are not allowed in a CHECK constraint.",
                            error_class="DELTA_UNSUPPORTED_SUBQUERY_IN_CONSTRAINT")
    if tree.find(exp.Rand, exp.Uuid) is not None:
        raise AnalysisError(f"CHECK constraint {stmt.name}: non-deterministic expressions are not allowed.",
                            error_class="DELTA_NON_DETERMINISTIC_EXPRESSION_IN_CHECK_CONSTRAINT")
    names = [f.name for f in struct.fields]
    lower = {n.lower() for n in names}
    for column in tree.find_all(exp.Column):
        parts = [p.name for p in column.parts] if hasattr(column, "parts") else [column.name]
        head = parts[0] if parts else column.name
        if head.lower() not in lower:
            raise ColumnNotFoundError(head, table, names)


def _show_row(row, limit: int = 8) -> str:
    items = list(row.asDict().items())
    text = ", ".join(f"{k} => {v!r}" for k, v in items[:limit])
    return text + (", ..." if len(items) > limit else "")


def _spark_error(e: Exception) -> str:
    return str(e).strip().splitlines()[0][:400]


@executes(ast.AddConstraint)
def add_constraint(ctx, stmt: ast.AddConstraint):
    handle, txn, snap = _begin(ctx, stmt.table)
    configuration = dict(snap.metadata.configuration)
    old = _constraint_key(configuration, stmt.name)
    if old is not None:
        raise AnalysisError(
            f"Constraint '{stmt.name}' already exists on {handle.name}. Please delete the old constraint first. "
            f"Old constraint: {configuration[old]}", error_class="DELTA_CONSTRAINT_ALREADY_EXISTS", sqlstate="42710")
    struct = _struct(snap.metadata)
    _check_expression(stmt, struct, handle.name)
    expr = stmt.check.sql.strip()
    txn.read_whole_table()
    from ..rows.scan import scan

    df = scan(ctx, snap, handle.path)
    try:
        bad = df.where(f"NOT coalesce(({expr}), false)")
        sample = bad.limit(1).collect()
    except Exception as e:  # pyspark AnalysisException / ParseException: not a valid boolean expression
        if isinstance(e, (AnalysisError, ExecutionError)):
            raise
        raise AnalysisError(f"CHECK constraint {stmt.name} ({expr}) is not a valid condition on {handle.name}: "
                            f"{_spark_error(e)}", error_class="DELTA_INVALID_CHECK_CONSTRAINT", sqlstate="42621")
    if sample:
        count = bad.count()
        raise ConstraintViolationError(
            f"{count} row(s) in {handle.name} violate the new CHECK constraint {stmt.name} ({expr}); for example the "
            f"row with values: {_show_row(sample[0])}.", error_class="DELTA_NEW_CHECK_CONSTRAINT_VIOLATION")
    configuration[P.CONSTRAINT_PREFIX + stmt.name.lower()] = expr
    metadata = P.copy_metadata(snap.metadata, configuration=configuration)
    protocol = P.protocol_with(P.protocol_for_metadata(snap.protocol, metadata), writer={"checkConstraints"})
    params = {"name": stmt.name, "expr": expr}
    return prepared_log_write(handle, txn, "ADD CONSTRAINT", _protocol_actions(snap, protocol) + [metadata], params)


@executes(ast.DropConstraint)
def drop_constraint(ctx, stmt: ast.DropConstraint):
    handle, txn, snap = _begin(ctx, stmt.table)
    configuration = dict(snap.metadata.configuration)
    key = _constraint_key(configuration, stmt.name)
    if key is None:
        if stmt.if_exists:
            return _noop(f"Constraint {stmt.name} does not exist on {handle.name}; nothing dropped.")
        existing = [k[len(P.CONSTRAINT_PREFIX):] for k in configuration if k.lower().startswith(P.CONSTRAINT_PREFIX)]
        from isolde.errors import did_you_mean

        raise AnalysisError(
            f"Cannot drop nonexistent constraint {stmt.name} from table {handle.name}. To avoid throwing an error, "
            f"use DROP CONSTRAINT IF EXISTS.{did_you_mean(stmt.name, existing)}",
            error_class="DELTA_CONSTRAINT_DOES_NOT_EXIST", sqlstate="42704")
    expr = configuration.pop(key)
    metadata = P.copy_metadata(snap.metadata, configuration=configuration)
    params = {"name": stmt.name, "expr": expr}
    return prepared_log_write(handle, txn, "DROP CONSTRAINT", [metadata], params)


# --------------------------------------------------------------------------- CLUSTER BY


@executes(ast.AlterClusterBy)
def cluster_by(ctx, stmt: ast.AlterClusterBy):
    handle, txn, snap = _begin(ctx, stmt.table)
    old = P.clustering_columns(snap)
    if snap.metadata.partition_columns:
        raise AnalysisError(
            f"Cannot CLUSTER BY {handle.name}: it is partitioned by {', '.join(snap.metadata.partition_columns)}, and "
            "clustering and partitioning cannot be combined.",
            error_class="DELTA_ALTER_TABLE_CLUSTER_BY_ON_PARTITIONED_TABLE_NOT_ALLOWED", sqlstate="42000")
    struct = _struct(snap.metadata)
    cols = []
    physical = []
    for name in stmt.columns:
        f = _field(struct, name, handle.name)
        if f.name.lower() in {c.lower() for c in cols}:
            raise AnalysisError(f"Column `{name}` appears twice in CLUSTER BY.", error_class="DELTA_DUPLICATE_COLUMNS_FOUND")
        if isinstance(f.dataType, (T.StructType, T.ArrayType, T.MapType, T.BinaryType, T.BooleanType, T.VariantType)):
            raise AnalysisError(f"Cannot cluster by `{f.name}`: its type {f.dataType.simpleString()} has no min/max "
                                "statistics.", error_class="DELTA_CLUSTERING_COLUMN_MISSING_STATS")
        cols.append(f.name)
        physical.append((f.metadata or {}).get("delta.columnMapping.physicalName", f.name))
    if len(cols) > MAX_CLUSTERING_COLUMNS:
        raise AnalysisError(f"CLUSTER BY takes at most {MAX_CLUSTERING_COLUMNS} columns, not {len(cols)}.",
                            error_class="DELTA_CLUSTER_BY_INVALID_NUM_COLUMNS", sqlstate="54000")
    if not cols and not old and P.CLUSTERING_DOMAIN not in snap.domain_metadata:
        return _noop(f"{handle.name} is not clustered; nothing to change.")
    domain = DomainMetadata(P.CLUSTERING_DOMAIN, json.dumps({"clusteringColumns": [[p] for p in physical]},
                                                            separators=(",", ":")), False)
    protocol = P.protocol_with(snap.protocol, writer={"clustering", "domainMetadata"})
    params = {"oldClusteringColumns": ",".join(old), "newClusteringColumns": ",".join(cols)}
    return prepared_log_write(handle, txn, "CLUSTER BY", _protocol_actions(snap, protocol) + [domain], params)


# --------------------------------------------------------------------------- SYNC IDENTITY


def _round_to_step(start: int, step: int, value: int) -> int:
    """The first value of the identity sequence (start + k*step) at or beyond ``value``."""
    if step > 0:
        k = -(-(value - start) // step)  # ceil
    else:
        k = -(-(start - value) // (-step))
    return start + k * step


@executes(ast.SyncIdentity)
def sync_identity(ctx, stmt: ast.SyncIdentity):
    handle, txn, snap = _begin(ctx, stmt.table)
    struct = _struct(snap.metadata)
    f = _field(struct, stmt.column, handle.name)
    meta = dict(f.metadata or {})
    if S.IDENTITY_START not in meta:
        raise AnalysisError(f"ALTER COLUMN {f.name} SYNC IDENTITY: `{f.name}` is not an identity column.",
                            error_class="DELTA_IDENTITY_COLUMNS_ALTER_NON_IDENTITY_COLUMN", sqlstate="429BQ")
    start, step = int(meta[S.IDENTITY_START]), int(meta[S.IDENTITY_STEP])
    hwm = meta.get(S.IDENTITY_HWM)
    txn.read_whole_table()
    from pyspark.sql import functions as F

    from ..rows.scan import scan

    df = scan(ctx, snap, handle.path)
    agg = (F.max if step > 0 else F.min)(S.column(f.name)).alias("v")
    value = df.agg(agg).collect()[0][0]
    if value is None or (step > 0 and value < start) or (step < 0 and value > start):
        return _noop(f"{handle.name}.{f.name} holds no value past the identity start; the high-water mark is unchanged.")
    new_hwm = _round_to_step(start, step, int(value))
    allow_lower = str(P.conf_get(ctx, LOWER_HWM_CONF, "false")).lower() == "true"
    if hwm is not None and not allow_lower:
        new_hwm = max(int(hwm), new_hwm) if step > 0 else min(int(hwm), new_hwm)
    if hwm is not None and int(hwm) == new_hwm:
        return _noop(f"The identity high-water mark of {handle.name}.{f.name} is already {new_hwm}.")
    meta[S.IDENTITY_HWM] = new_hwm
    fields = [T.StructField(x.name, x.dataType, x.nullable, meta) if x.name == f.name else x for x in struct.fields]
    metadata = P.copy_metadata(snap.metadata, schema_string=S.struct_to_delta(T.StructType(fields)))
    params = {"column": json.dumps({"name": f.name, "type": f.dataType.simpleString(), "nullable": f.nullable,
                                    "metadata": meta}), "syncIdentity": True}
    return prepared_log_write(handle, txn, "CHANGE COLUMN", [metadata], params,
                     {"oldHighWaterMark": hwm, "newHighWaterMark": new_hwm})


# --------------------------------------------------------------------------- ALTER COLUMN ... TYPE


def _dependents(snap, column: tuple[str, ...]) -> tuple[dict, dict]:
    """(CHECK constraints, generated columns) whose expression reads ``column`` or a field of it:
    Delta refuses to change such a column's type (the expression could change meaning)."""
    import sqlglot

    top = column[0].lower()

    def reads(sql: str) -> bool:
        try:
            tree = sqlglot.parse_one(sql, read="databricks")
        except sqlglot.errors.SqlglotError:
            return True  # unreadable: assume it does
        return any(p and p[0].name.lower() == top for p in (c.parts for c in tree.find_all(exp.Column)))

    conf = snap.metadata.configuration
    constraints = {k[len(P.CONSTRAINT_PREFIX):]: v for k, v in conf.items()
                   if k.lower().startswith(P.CONSTRAINT_PREFIX) and reads(v)}
    generated = {f["name"]: f["metadata"][S.GENERATION_EXPRESSION] for f in snap.metadata.schema.get("fields", [])
                 if S.GENERATION_EXPRESSION in (f.get("metadata") or {})
                 and reads(f["metadata"][S.GENERATION_EXPRESSION])}
    return constraints, generated


def _uniform_iceberg(snap) -> bool:
    conf = {k.lower(): str(v).lower() for k, v in snap.metadata.configuration.items()}
    _, writer = P.protocol_features(snap.protocol)
    return "iceberg" in conf.get("delta.universalformat.enabledformats", "") or \
        bool({"icebergCompatV1", "icebergCompatV2"} & writer)


@executes(ast.AlterColumnType)
def alter_column_type(ctx, stmt: ast.AlterColumnType):
    """Widen a column's (or nested field's, array element's, map key's / value's) type, as Delta's
    ALTER TABLE CHANGE COLUMN does with type widening: no data is rewritten, older files keep the
    narrower type and readers widen them; the change is recorded in ``delta.typeChanges``."""
    from ..log import type_widening as TW

    handle, txn, snap = _begin(ctx, stmt.table)
    schema = snap.metadata.schema
    change = TW.resolve(schema, stmt.column)
    if change is None:
        raise ColumnNotFoundError(".".join(stmt.column), handle.name, [f["name"] for f in schema.get("fields", [])])
    if stmt.new_name is not None and stmt.new_name.lower() != change.names[-1].lower():
        raise AnalysisError(
            f"Cannot rename column {change.display} of {handle.name} to {stmt.new_name}: isolde changes only the type "
            "with CHANGE COLUMN (repeat the column's name).", error_class="DELTA_UNSUPPORTED_RENAME_COLUMN",
            sqlstate="0AKDC")
    to_type = S.parse_data_type(stmt.data_type).jsonValue()
    TW.check_change(change, to_type, enabled=TW.enabled(snap.metadata.configuration), iceberg=_uniform_iceberg(snap),
                    table=handle.name)
    if change.current == to_type:
        return _noop(f"{handle.name}.{change.display} is already {TW.sql_name(to_type)}; nothing to change.")
    constraints, generated = _dependents(snap, change.names)
    if constraints:
        raise AnalysisError(
            f"Cannot change the type of column {change.display}: the CHECK constraint(s) "
            f"{', '.join(f'{k} ({v})' for k, v in constraints.items())} of {handle.name} use it. Drop them first.",
            error_class="DELTA_CONSTRAINT_DEPENDENT_COLUMN_CHANGE", sqlstate="42K09")
    if generated:
        raise AnalysisError(
            f"Cannot change the type of column {change.display}: the generated column(s) "
            f"{', '.join(f'{k} ({v})' for k, v in generated.items())} of {handle.name} use it.",
            error_class="DELTA_GENERATED_COLUMNS_DEPENDENT_COLUMN_CHANGE", sqlstate="42K09")
    _, writer = P.protocol_features(snap.protocol)
    preview = "typeWidening-preview" in writer  # preview clients read tableVersion (Delta keeps writing it)
    new_schema = TW.widened_schema(schema, change, to_type, record=True,
                                   table_version=txn.read_version + 1 if preview else None)
    metadata = P.copy_metadata(snap.metadata, schema_string=json.dumps(new_schema, separators=(",", ":")))
    feature = "typeWidening-preview" if preview and "typeWidening" not in writer else "typeWidening"
    needs = {feature} | ({"timestampNtz"} if to_type == "timestamp_ntz" else set())
    protocol = P.protocol_with(P.protocol_for_metadata(snap.protocol, metadata), reader=needs, writer=needs)
    holder = change.holder
    params = {"column": json.dumps({"name": change.display, "type": to_type, "nullable": holder.get("nullable", True),
                                    "metadata": {}}, separators=(",", ":"))}
    return prepared_log_write(handle, txn, "CHANGE COLUMN", _protocol_actions(snap, protocol) + [metadata], params)


# Pure log work: the session need not wait for Spark to start (no Spark job group).
set_tblproperties.needs_spark = False
unset_tblproperties.needs_spark = False
add_columns.needs_spark = False
drop_constraint.needs_spark = False
cluster_by.needs_spark = False
alter_column_type.needs_spark = False
