"""INSERT INTO / INSERT OVERWRITE [PARTITION (...)] / INSERT INTO ... REPLACE WHERE.

* A blind INSERT (the source does not read the target) records no reads: committed as a
  blind append (operation WRITE, isBlindAppend true), which never conflicts.
* A source that reads the target table reads the transaction's snapshot and records that
  read (predicate + files), so it conflicts like MERGE.
* OVERWRITE removes every file (static mode), the files of the static PARTITION values, or,
  with ``spark.sql.sources.partitionOverwriteMode=dynamic``, the partitions the new data
  lands in; the removed files are recorded as read through ``txn.filter_files``.
* REPLACE WHERE cond: new rows must satisfy cond (else ConstraintViolationError with Delta's
  DELTA_REPLACE_WHERE_MISMATCH, nothing is committed); rows matching cond are replaced: files
  entirely inside cond (partition-only conditions) are removed, the files holding a row cond is
  TRUE for are rewritten without those rows; no row replaced and none written: no commit.
* Identity columns get values and their high-water mark advances (a metaData action in the
  same commit); generated columns are computed; NOT NULL / CHECK constraints are enforced.
"""

from __future__ import annotations

import json
from typing import Optional

import sqlglot
import sqlglot.expressions as exp
from pyspark.sql import functions as F

from isolde.errors import AnalysisError, TableNotFoundError
from ..rows import cdf, dml
from ..catalog import properties as P
from ..catalog import schema as S
from ..catalog import schema_evolution as evolution
from . import executes
from .query import bind_query
from ..session.results import DmlResult, PreparedWrite
from ..rows.scan import scan
from ..catalog.table_binding import handle_travels, location_key, pin
from ..rows.target_reads import dataframe_reads, statement_reads_target
from ..txn.statement_scope import scope_flags
from ..rows.writer import REPLACE_WHERE_MISMATCH, SEP, VIOLATION_MARK, conform, identity_metadata_update, write_files
from isolde.grammar import ast
from isolde.grammar.dialect import DIALECT
from isolde.grammar.slots import construct
from isolde.planner.resolve import resolve_column, table_references


def insert_reads_target(ctx, stmt: ast.Insert) -> bool:
    target = ctx.resolve(stmt.table)
    for use in table_references(stmt.source.tree):
        try:
            handle = ctx.resolve(use.ref)
        except AnalysisError:
            continue
        if location_key(handle.path) == location_key(target.path) and not handle_travels(handle):
            return True
    return False


def _with_defaults(stmt: ast.Insert, struct) -> ast.Query:
    """The source of ``INSERT ... VALUES (1, DEFAULT)``: each DEFAULT replaced by its column's
    default expression (NULL without one), the column found by position as the write maps
    VALUES onto the table (the column list, else every column not given by PARTITION, or every
    column that is not generated when that is how many there are)."""
    from ..rows import store_assignment as SA

    tree = stmt.source.tree
    if not isinstance(tree, exp.Values) or not any(SA.is_default_keyword(v) for row in tree.expressions
                                                  for v in getattr(row, "expressions", ())):
        return stmt.source
    static = {pv.column.lower() for pv in stmt.partition if pv.value is not None}
    fields = [f for f in struct.fields if f.name.lower() not in static]
    if stmt.columns:
        fields = [S.field_named(struct, c) for c in stmt.columns]
    width = len(tree.expressions[0].expressions) if tree.expressions else 0
    if not stmt.columns and width != len(fields):
        fields = [f for f in fields if not S.is_generated(f) and not S.is_identity(f)]
    tree = tree.copy()
    for row in tree.expressions:
        for k, value in enumerate(list(row.expressions)):
            if not SA.is_default_keyword(value):
                continue
            f = fields[k] if k < len(fields) and fields[k] is not None else None
            if f is None:
                raise AnalysisError("DEFAULT stands where the table has no column.", error_class="DEFAULT_PLACEMENT_INVALID",
                                    sqlstate="42608")
            if S.is_generated(f) or S.is_identity(f):
                raise AnalysisError(f"DEFAULT for the generated or identity column `{f.name}` is not supported: leave "
                                    "the column out of the INSERT's column list instead.",
                                    error_class="DEFAULT_UNSUPPORTED", sqlstate="42623")
            value.replace(sqlglot.parse_one(SA.default_sql(f), read=DIALECT))
    from isolde.grammar.dialect import sql as render_sql

    return construct(ast.Query, {"sql": render_sql(tree), "tree": tree, "tables": stmt.source.tables,
                                 "span": stmt.source.span})


def _sql_value(expr) -> str:
    return getattr(expr, "sql", str(expr))


def _partition_literal_sql(value: Optional[str]) -> str:
    if value is None:
        return "NULL"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _partition_predicate(columns: list[str], tuples: set[tuple]) -> Optional[str]:
    if not tuples:
        return None
    ors = []
    for values in sorted(tuples, key=lambda t: tuple("" if v is None else str(v) for v in t)):
        ands = []
        for col, v in zip(columns, values):
            q = "`" + col.replace("`", "``") + "`"
            ands.append(f"{q} IS NULL" if v is None else f"{q} = {_partition_literal_sql(v)}")
        ors.append("(" + " AND ".join(ands) + ")")
    return " OR ".join(ors)


@executes(ast.Insert)
def run_insert(ctx, stmt: ast.Insert) -> PreparedWrite:
    handle = ctx.resolve(stmt.table)
    txn = dml.start_transaction(ctx, handle.log)
    snap = txn.snapshot
    if snap.version < 0:
        raise TableNotFoundError(handle.name)
    metadata = snap.metadata
    struct = S.metadata_schema(metadata)
    parts = S.partition_columns(metadata)
    config = S.configuration(metadata)
    names = [f.name for f in struct.fields]

    # ---- the source, with the target pinned to this transaction's snapshot
    bound = bind_query(ctx, _with_defaults(stmt, struct), pinned=pin(handle.path, snap))
    self_reads = [t for t in bound.tables if t.path == handle.path and t.version == snap.version
                  and t.snapshot is snap]
    # the target read under another name (its path, a Spark view or DataFrame over it, inside
    # a subquery too): the planner's scope cannot say which rows, so the whole table
    elsewhere = statement_reads_target(ctx, handle.path, stmt)
    travelled = any(t.time_travel and location_key(t.path) == location_key(handle.path) for t in bound.tables)
    if elsewhere is None and not self_reads and not travelled:  # (an old version's files are no current read)
        elsewhere = dataframe_reads(bound.df, handle.path)
    if elsewhere is not None:
        txn.read_whole_table()
    if self_reads:
        scope_pred, row_level = _self_read_scope(stmt, struct, parts, scope_flags(snap), elsewhere)
        if row_level:
            txn.enable_row_level()
        for t in self_reads:
            if scope_pred is None:
                txn.read_whole_table()
                txn.record_read(None, files=t.files)
            else:
                txn.record_read(scope_pred, files=t.files)
    df = bound.df

    # ---- PARTITION clause
    static: dict[str, str] = {}
    dynamic_cols: list[str] = []
    for pv in stmt.partition:
        col = resolve_column(pv.column, names, handle.name)
        if col.lower() not in {p.lower() for p in parts}:
            raise AnalysisError(f"`{col}` is not a partition column of {handle.name} "
                                f"(partitioned by {', '.join(parts) or 'nothing'}).",
                                error_class="PARTITIONS_NOT_FOUND", sqlstate="428FT")
        if pv.value is not None:
            static[col] = _sql_value(pv.value)
        else:
            dynamic_cols.append(col)
    columns = list(stmt.columns)
    if static:
        if stmt.by_name:
            raise AnalysisError("INSERT ... BY NAME cannot be combined with static PARTITION values.",
                                error_class="UNSUPPORTED_FEATURE")
        src_cols = list(df.columns)
        target_cols = columns or [n for n in names if n not in static and not _auto(struct, n)]
        if len(target_cols) != len(src_cols):
            raise AnalysisError(
                f"Cannot write to {handle.name}: {len(target_cols)} non-static column(s) "
                f"({', '.join(target_cols)}) but the data has {len(src_cols)}.",
                error_class="INSERT_COLUMN_ARITY_MISMATCH", sqlstate="21S01")
        tmp = [f"__isolde_in_{i}" for i in range(len(src_cols))]
        df = df.toDF(*tmp).select(*tmp, *[F.expr(v).alias(f"__isolde_static_{c}") for c, v in static.items()])
        columns = list(target_cols) + list(static)
    evolved = _evolution(ctx, stmt, struct, df.schema, static=bool(static), columns=columns)
    if evolved is not None:  # autoMerge: the new columns and struct fields join the table's schema
        metadata, protocol = P.with_schema(metadata, snap.protocol, evolved)
        struct = S.metadata_schema(metadata)
        names = [f.name for f in struct.fields]
    conformed = conform(df, struct, columns=columns, by_name=stmt.by_name, table_name=handle.name,
                        configuration=config, parse_strings=True)
    observed = conformed  # (the identity values it generated: writer.identity_metadata_update)

    # ---- REPLACE WHERE: every new row must satisfy the condition
    replace_sql = stmt.replace_where.sql if stmt.replace_where is not None else None
    if replace_sql is not None:
        _check_columns(replace_sql, names, handle.name)
        cond = F.expr(replace_sql)
        msg = f"{VIOLATION_MARK}{SEP}{REPLACE_WHERE_MISMATCH}{SEP}replaceWhere{SEP}Written data does not conform " \
              f"to the REPLACE WHERE condition ({replace_sql}): a row falls outside it.{SEP}"
        conformed = conformed.filter(F.when(~F.coalesce(cond, F.lit(False)), F.raise_error(F.lit(msg)))
                                     .otherwise(F.lit(True)).cast("boolean"))

    written = write_files(ctx, conformed, handle.path, metadata)
    actions: list = list(written.adds)
    staged = list(written.staged_paths)
    removed = []
    copied = 0
    params: dict = {"mode": "Append", "partitionBy": json.dumps(parts)}
    overwrite_mode = str(ctx.conf.get("spark.sql.sources.partitionOverwriteMode", "static")).lower()

    try:
        if stmt.overwrite:
            params["mode"] = "Overwrite"
            if parts and overwrite_mode == "dynamic":
                touched = {tuple(a.partition_values.get(p) for p in parts) for a in written.adds}
                pred = _partition_predicate(parts, touched)
                if static:
                    static_pred = " AND ".join(f"`{c}` = {v}" for c, v in static.items())
                    pred = f"({pred}) AND ({static_pred})" if pred else None
                params["dynamicPartitionOverwrite"] = "true"
                removed = _files_where_partition_condition_holds(
                    ctx, snap, txn.filter_files(partition_predicate_sql=pred), pred, struct, parts) if pred else []
                if pred is None:
                    txn.record_read("false", files=[])
            elif static:
                pred = " AND ".join(f"`{c}` = {v}" for c, v in static.items())
                params["predicate"] = json.dumps([pred])
                removed = _files_where_partition_condition_holds(
                    ctx, snap, txn.filter_files(partition_predicate_sql=pred), pred, struct, parts)
            else:
                removed = txn.filter_files()
                txn.read_whole_table()
        elif replace_sql is not None:
            params = {"mode": "Overwrite", "partitionBy": json.dumps(parts), "predicate": json.dumps([replace_sql])}
            candidates = txn.filter_files(replace_sql)
            if _only_partition_columns(replace_sql, parts):
                # one value of the condition per file: replace exactly the files where it is TRUE
                removed = _files_where_partition_condition_holds(ctx, snap, candidates, replace_sql, struct, parts)
            else:
                # only the files holding a row the condition is TRUE for are rewritten (as Delta):
                # a candidate by its statistics alone keeps its file, and no row is copied for it
                removed = _files_with_rows_where(ctx, snap, handle.path, candidates, replace_sql)
                if removed:
                    kept = scan(ctx, snap, handle.path, removed).filter(
                        ~F.coalesce(F.expr(replace_sql), F.lit(False)))
                    rewritten = write_files(ctx, kept, handle.path, metadata)
                    actions.extend(rewritten.adds)
                    copied = rewritten.num_rows
                    staged.extend(rewritten.staged_paths)
                    if cdf.enabled(metadata):  # copied rows: the adds alone would say they changed
                        sink = dml.ChangeSet()
                        cdf.record(ctx, handle, sink, cdf.replaced_rows(ctx, handle.path, snap, removed,
                                                                        replace_sql, written.adds), metadata)
                        actions.extend(sink.actions)
                        staged.extend(sink.staged_paths)
        else:
            if not self_reads and elsewhere is None:
                txn.set_blind_append()
    except BaseException:
        _remove(staged)
        raise

    actions.extend(a.remove() for a in removed)
    new_meta = identity_metadata_update(metadata, written, observed)
    if new_meta is not None or evolved is not None:
        actions.append(new_meta or metadata)
    if evolved is not None and not P.same_protocol(protocol, snap.protocol):
        actions.insert(0, protocol)
    metrics = {
        "numFiles": len(written.adds),
        "numOutputRows": written.num_rows,
        "numOutputBytes": written.num_bytes,
    }
    if removed:
        metrics["numRemovedFiles"] = len(removed)
    if copied:
        metrics["numCopiedRows"] = copied

    def commit() -> DmlResult:
        if not actions and not stmt.overwrite and txn.write_identity is None:
            # an append of no rows, or a REPLACE WHERE that replaces no row with none, changes
            # nothing: as Delta, no version is committed
            return DmlResult.of("INSERT", txn.read_version, "WRITE", metrics, handle.name, inserted=0)
        version = txn.commit(actions, operation="WRITE", operation_parameters=params, metrics=metrics)
        # Databricks' INSERT row: the rows this statement inserted (rows an OVERWRITE / REPLACE
        # WHERE replaced or copied are not counted)
        return DmlResult.of("INSERT", version, "WRITE", metrics, handle.name, inserted=written.num_rows)

    return PreparedWrite(operation="WRITE", table=handle.name, commit_fn=commit, staged_paths=staged,
                         metrics=metrics)


def _evolution(ctx, stmt: ast.Insert, struct, data, static: bool, columns: list):
    """The schema an INSERT under Delta's autoMerge setting (or a DataFrame write's mergeSchema
    option) evolves the table to, or None (no setting, nothing new). A column list or static
    PARTITION values write named columns only: no evolution there. By position, only data that
    gives every column (its extra ones past the table's last) evolves the table."""
    merge_schema = str((getattr(ctx, "write_options", None) or {}).get("mergeschema", "")).strip().lower() == "true"
    if not (merge_schema or evolution.auto_merge(ctx.conf)) or static or columns:
        return None
    if not stmt.by_name and len(data.fields) < len(struct.fields):
        return None
    evolved = evolution.by_name(struct, data.fields) if stmt.by_name else evolution.by_position(struct, data)
    return evolved if evolution.changed(struct, evolved) else None


def _auto(struct, name: str) -> bool:
    f = S.field_named(struct, name)
    return f is not None and (S.is_identity(f) or S.is_generated(f))


def _remove(paths) -> None:
    from ..log import table_files

    for p in paths:
        table_files.delete(p)


def _check_columns(sql: str, names: list[str], table: str) -> None:
    import sqlglot
    import sqlglot.expressions as exp

    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except Exception:
        return
    for c in tree.find_all(exp.Column):
        resolve_column(c.name, names, table)


def _files_with_rows_where(ctx, snap, table_path: str, files: list, condition: str) -> list:
    """The files of ``files`` with at least one live row ``condition`` is TRUE for (one job)."""
    if not files:
        return []
    from ..rows.scan import ORD_COL

    rows = scan(ctx, snap, table_path, files, with_row_ids=True, with_ordinal=True)
    hit = rows.filter(F.coalesce(F.expr(condition), F.lit(False))).select(ORD_COL).distinct().collect()
    return [files[i] for i in sorted(r[0] for r in hit)]


def _files_where_partition_condition_holds(ctx, snap, files, condition: str, struct, parts) -> list:
    """The files whose partition values make ``condition`` (on partition columns only) TRUE.

    Log-level pruning is conservative (it keeps what it cannot evaluate), so it cannot say
    which files to drop wholesale; Spark evaluates the condition once per distinct partition.
    """
    if not files:
        return []
    physical = S.logical_to_physical(snap.metadata)

    def values_of(add) -> tuple:  # partitionValues are keyed by physical names under column mapping
        pv = add.partition_values
        return tuple(pv.get(physical.get(p, p), pv.get(p)) for p in parts)

    tuples = sorted({values_of(f) for f in files}, key=lambda t: tuple((v is None, v or "") for v in t))
    fields = {f.name.lower(): f for f in struct.fields}
    raw = ctx.spark.createDataFrame([(i, *t) for i, t in enumerate(tuples)],
                                    "__isolde_i INT, " + ", ".join(f"`__p{i}` STRING" for i in range(len(parts))))
    typed = raw.select("__isolde_i", *[
        (F.col(f"__p{i}") if fields[p.lower()].dataType.typeName() == "string"
         else F.col(f"__p{i}").cast(fields[p.lower()].dataType)).alias(fields[p.lower()].name)
        for i, p in enumerate(parts)])
    holds = {r[0] for r in typed.filter(F.coalesce(F.expr(condition), F.lit(False))).select("__isolde_i").collect()}
    matching = {tuples[i] for i in holds}
    return [f for f in files if values_of(f) in matching]


def _only_partition_columns(sql: str, parts: list[str]) -> bool:
    import sqlglot
    import sqlglot.expressions as exp

    if not parts:
        return False
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except Exception:
        return False
    lower = {p.lower() for p in parts}
    cols = list(tree.find_all(exp.Column))
    if tree.find(exp.Subquery, exp.Select):
        return False
    return bool(cols) and all(c.name.lower() in lower for c in cols)


def _self_read_scope(stmt: ast.Insert, struct, parts, flags: dict,
                     target_read: Optional[str] = None) -> tuple[Optional[str], bool]:
    """The read predicate of an INSERT whose source reads the target (None: the whole table),
    and whether its conflicts are checked per row."""
    try:
        from isolde.planner.scope import conflict_scope

        scope = conflict_scope(stmt, [(f.name, f.dataType) for f in struct.fields], parts, **flags,
                               target_read=target_read)
    except Exception:
        return None, False
    if scope.reads_whole_table or scope.read_predicate is None:
        return None, scope.row_level_eligible
    return scope.read_predicate, scope.row_level_eligible
