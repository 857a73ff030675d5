"""DESCRIBE HISTORY / DETAIL / TABLE and SHOW TBLPROPERTIES: pure log reads, no Spark job.

Each returns a :class:`QueryResult` with fixed rows and Delta's column names:

* ``DESCRIBE HISTORY t [LIMIT n]`` -- newest first: version, timestamp, userName,
  operation, operationParameters, readVersion, isolationLevel, isBlindAppend,
  operationMetrics, engineInfo (plus userMetadata when present);
* ``DESCRIBE DETAIL t`` -- one row: format, id, name, description, location, createdAt,
  lastModified, partitionColumns, clusteringColumns, numFiles, sizeInBytes, properties,
  minReaderVersion, minWriterVersion, tableFeatures, rowLevelConcurrency (isolde: "row" or
  "file", how writers' conflicts are checked);
* ``DESCRIBE [TABLE] [EXTENDED] t`` -- (col_name, data_type, comment) rows, then the
  ``# Partition Information`` / ``# Clustering Information`` sections, identity and
  generated columns, and with EXTENDED ``# Constraints`` and ``# Detailed Table Information``;
* ``SHOW TBLPROPERTIES t [(key)]`` -- (key, value): the configuration plus
  delta.minReaderVersion / delta.minWriterVersion and ``delta.feature.X = supported``, and
  isolde.rowLevelConcurrency (its default shown) with ``.effective``: row or file level, why.
"""

from __future__ import annotations

import datetime as dt
import json

from pyspark.sql import types as T

from ..catalog import properties as P
from . import executes
from ..session.results import QueryResult
from isolde.grammar import ast

HISTORY_COLUMNS = ["version", "timestamp", "userName", "operation", "operationParameters", "readVersion",
                   "isolationLevel", "isBlindAppend", "operationMetrics", "engineInfo", "userMetadata"]
DETAIL_COLUMNS = ["format", "id", "name", "description", "location", "createdAt", "lastModified",
                  "partitionColumns", "clusteringColumns", "numFiles", "sizeInBytes", "properties",
                  "minReaderVersion", "minWriterVersion", "tableFeatures", "rowLevelConcurrency",
                  "universalFormats"]


def _ts(ms) -> dt.datetime | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(int(ms) / 1000, dt.timezone.utc).replace(tzinfo=None)


def _str_map(value) -> dict:
    if not value:
        return {}
    return {str(k): (v if isinstance(v, str) else json.dumps(v)) for k, v in dict(value).items()}


# --------------------------------------------------------------------------- DESCRIBE HISTORY


@executes(ast.DescribeHistory)
def describe_history(ctx, stmt: ast.DescribeHistory) -> QueryResult:
    handle = P.resolve(ctx, stmt.table)
    if stmt.limit is not None and stmt.limit < 0:
        from isolde.errors import AnalysisError

        raise AnalysisError(f"DESCRIBE HISTORY LIMIT must be >= 0, not {stmt.limit}.")
    entries = handle.log.history(limit=stmt.limit) if stmt.limit != 0 else []
    rows = []
    for e in entries:
        rows.append((
            int(e["version"]),
            _ts(e.get("inCommitTimestamp") or e.get("timestamp")),
            e.get("userName"),
            e.get("operation"),
            _str_map(e.get("operationParameters")),
            e.get("readVersion"),
            e.get("isolationLevel"),
            e.get("isBlindAppend"),
            _str_map(e.get("operationMetrics")),
            e.get("engineInfo"),
            e.get("userMetadata"),
        ))
    return QueryResult(columns=HISTORY_COLUMNS, rows=rows)


# --------------------------------------------------------------------------- DESCRIBE DETAIL


def _display_name(handle) -> str | None:
    if getattr(handle, "by_path", False) or getattr(handle, "database", None) is None:
        return None
    return f"spark_catalog.{handle.database}.{handle.table}"


@executes(ast.DescribeDetail)
def describe_detail(ctx, stmt: ast.DescribeDetail) -> QueryResult:
    handle = P.resolve(ctx, stmt.table)
    snap = P.snapshot_of(ctx, handle, stmt.table)
    meta, proto = snap.metadata, snap.protocol
    files = snap.all_files
    row = (
        "delta",
        meta.id,
        _display_name(handle),
        meta.description,
        P.to_file_uri(handle.path),
        _ts(meta.created_time),
        _ts(snap.timestamp),
        list(meta.partition_columns),
        P.clustering_columns(snap),
        len(files),
        sum(int(a.size or 0) for a in files),
        dict(meta.configuration),
        proto.min_reader_version,
        proto.min_writer_version,
        P.table_features(proto, meta),
        effective_row_level(snap)[0],
        universal_formats(meta.configuration),
    )
    return QueryResult(columns=DETAIL_COLUMNS, rows=[row])


def universal_formats(configuration: dict) -> list[str]:
    """UniForm: the formats ``delta.universalFormat.enabledFormats`` lists (``["iceberg"]``)."""
    for key, value in (configuration or {}).items():
        if key.lower() == "delta.universalformat.enabledformats":
            return [f.strip().lower() for f in str(value).split(",") if f.strip()]
    return []


def effective_row_level(snap) -> tuple[str, str]:
    """How this table's writers' conflicts are checked: ("row" | "file", why)."""
    from ..log.features import row_level_mode, writer_features
    from isolde.planner.scope import file_level_reason

    meta = snap.metadata
    mode = row_level_mode(meta)
    dvs = (str(meta.configuration.get("delta.enableDeletionVectors", "false")).lower() == "true"
           and "deletionVectors" in writer_features(snap.protocol, meta))
    reason = file_level_reason(dvs, bool(meta.partition_columns) and not P.clustering_columns(snap), mode)
    if reason is not None:
        return "file", reason
    return "row", f"isolde.rowLevelConcurrency = {mode}, deletion vectors enabled"


# --------------------------------------------------------------------------- DESCRIBE TABLE


def _type_string(field: T.StructField) -> str:
    return field.dataType.simpleString()


def _identity_text(meta: dict) -> str:
    always = not bool(meta.get("delta.identity.allowExplicitInsert", False))
    kind = "ALWAYS" if always else "BY DEFAULT"
    return (f"GENERATED {kind} AS IDENTITY (START WITH {meta.get('delta.identity.start', 1)} "
            f"INCREMENT BY {meta.get('delta.identity.step', 1)})")


@executes(ast.DescribeTable)
def describe_table(ctx, stmt: ast.DescribeTable) -> QueryResult:
    from ..catalog import views

    view = views.lookup(ctx, stmt.table)
    if view is not None:
        return describe_view(view, stmt.extended)
    handle = P.resolve(ctx, stmt.table)
    snap = P.snapshot_of(ctx, handle, stmt.table)
    meta = snap.metadata
    struct = T.StructType.fromJson(meta.schema)
    rows: list[tuple] = []
    for f in struct.fields:
        rows.append((f.name, _type_string(f), (f.metadata or {}).get("comment")))
    by_name = {f.name.lower(): f for f in struct.fields}
    if meta.partition_columns:
        rows.append(("# Partition Information", "", ""))
        rows.append(("# col_name", "data_type", "comment"))
        for c in meta.partition_columns:
            f = by_name.get(c.lower())
            rows.append((c, _type_string(f) if f else "", (f.metadata or {}).get("comment") if f else None))
    clustering = P.clustering_columns(snap)
    if clustering:
        rows.append(("# Clustering Information", "", ""))
        rows.append(("# col_name", "data_type", "comment"))
        for c in clustering:
            f = by_name.get(c.lower())
            rows.append((c, _type_string(f) if f else "", (f.metadata or {}).get("comment") if f else None))
    identity = [f for f in struct.fields if "delta.identity.start" in (f.metadata or {})]
    if identity:
        rows.append(("# Identity Columns", "", ""))
        rows.append(("# col_name", "definition", "high_water_mark"))
        for f in identity:
            hwm = f.metadata.get("delta.identity.highWaterMark")
            rows.append((f.name, _identity_text(f.metadata), None if hwm is None else str(hwm)))
    generated = [f for f in struct.fields if "delta.generationExpression" in (f.metadata or {})]
    if generated:
        rows.append(("# Generated Columns", "", ""))
        rows.append(("# col_name", "definition", ""))
        for f in generated:
            rows.append((f.name, f"GENERATED ALWAYS AS ({f.metadata['delta.generationExpression']})", ""))
    if stmt.extended:
        constraints = sorted((k[len(P.CONSTRAINT_PREFIX):], v) for k, v in meta.configuration.items()
                             if k.lower().startswith(P.CONSTRAINT_PREFIX))
        if constraints:
            rows.append(("", "", ""))
            rows.append(("# Constraints", "", ""))
            for name, expr in constraints:
                rows.append((name, f"CHECK ({expr})", ""))
        rows.append(("", "", ""))
        rows.append(("# Detailed Table Information", "", ""))
        name = _display_name(handle)
        if name:
            rows.append(("Catalog", "spark_catalog", ""))
            rows.append(("Database", handle.database, ""))
            rows.append(("Table", handle.table, ""))
        rows.append(("Name", name or handle.name, ""))
        rows.append(("Type", "EXTERNAL" if (getattr(handle, "external", False) or getattr(handle, "by_path", False))
                     else "MANAGED", ""))
        rows.append(("Location", P.to_file_uri(handle.path), ""))
        rows.append(("Provider", "delta", ""))
        if meta.description:
            rows.append(("Comment", meta.description, ""))
        rows.append(("Version", str(snap.version), ""))
        rows.append(("Created Time", str(_ts(meta.created_time)), ""))
        rows.append(("Last Modified", str(_ts(snap.timestamp)), ""))
        props = ",".join(f"{k}={v}" for k, v in sorted(meta.configuration.items()))
        rows.append(("Table Properties", f"[{props}]", ""))
        rows.append(("Table Features", ",".join(P.table_features(snap.protocol, meta)), ""))
    return QueryResult(columns=["col_name", "data_type", "comment"], rows=rows)


def describe_view(view, extended: bool) -> QueryResult:
    """DESCRIBE [EXTENDED] of a view, as Spark answers it: its output columns (names, types and
    comments recorded when it was created), then the view's text and properties."""
    comments = list(view.column_comments) + [None] * len(view.schema)
    rows: list[tuple] = [(name, dtype, comments[i]) for i, (name, dtype) in enumerate(view.schema)]
    if extended:
        rows.append(("", "", ""))
        rows.append(("# Detailed Table Information", "", ""))
        if not view.temporary:
            rows.append(("Catalog", "spark_catalog", ""))
            rows.append(("Database", view.database, ""))
        rows.append(("Table", view.name, ""))
        rows.append(("Created Time", str(_ts(view.created_ms)), ""))
        rows.append(("Type", "VIEW" if not view.temporary else "TEMPORARY VIEW", ""))
        if view.comment:
            rows.append(("Comment", view.comment, ""))
        rows.append(("View Text", view.text, ""))
        rows.append(("View Original Text", view.text, ""))
        rows.append(("View Query Output Columns", "[" + ", ".join(n for n, _ in view.schema) + "]", ""))
        props = ",".join(f"{k}={v}" for k, v in sorted(view.properties.items()))
        rows.append(("Table Properties", f"[{props}]", ""))
    return QueryResult(columns=["col_name", "data_type", "comment"], rows=rows)


# --------------------------------------------------------------------------- SHOW TBLPROPERTIES


def _all_properties(snap) -> list[tuple[str, str]]:
    meta, proto = snap.metadata, snap.protocol
    out = dict(meta.configuration)
    out["delta.minReaderVersion"] = str(proto.min_reader_version)
    out["delta.minWriterVersion"] = str(proto.min_writer_version)
    if proto.min_writer_version >= 7:
        for feature in sorted(set(proto.writer_features or ()) | set(proto.reader_features or ())):
            out[f"delta.feature.{feature}"] = "supported"
    from ..log.features import ROW_LEVEL_PROPERTY, row_level_mode

    out.setdefault(ROW_LEVEL_PROPERTY, row_level_mode(meta))
    level, why = effective_row_level(snap)
    out[ROW_LEVEL_PROPERTY + ".effective"] = f"{level} level ({why})"
    return sorted(out.items())


@executes(ast.ShowTblProperties)
def show_tblproperties(ctx, stmt: ast.ShowTblProperties) -> QueryResult:
    handle = P.resolve(ctx, stmt.table)
    snap = P.snapshot_of(ctx, handle, stmt.table)
    props = _all_properties(snap)
    if stmt.key is not None:
        lookup = {k.lower(): (k, v) for k, v in props}
        hit = lookup.get(stmt.key.lower())
        if hit is None:
            return QueryResult(columns=["key", "value"],
                               rows=[(stmt.key, f"Table {handle.name} does not have property: {stmt.key}")])
        return QueryResult(columns=["key", "value"], rows=[hit])
    return QueryResult(columns=["key", "value"], rows=props)


# Pure log work: the session need not wait for Spark to start (no Spark job group).
describe_history.needs_spark = False
describe_detail.needs_spark = False
describe_table.needs_spark = False
show_tblproperties.needs_spark = False
