"""TRUNCATE TABLE t: Delta's TRUNCATE.

One commit, operation ``TRUNCATE`` with no parameters (DeltaOperations.Truncate), that removes
every live file of the snapshot it read with ``dataChange = true`` (deletion vectors do not
matter: the files leave whole). Metrics as Delta's DeltaOperationMetrics.TRUNCATE:
``numRemovedFiles`` and ``executionTimeMs``. Schema, properties, protocol, domain metadata and
history are kept; no data file is read, so it needs no Spark. An empty table still gets its
TRUNCATE commit (numRemovedFiles 0), so the statement always shows in DESCRIBE HISTORY.

Conflicts: the transaction records exactly the reads of a ``DELETE FROM t`` without a condition
(the planner's conflict scope of that statement, recorded through the same helper), so a
concurrent INSERT / UPDATE / DELETE / MERGE meets TRUNCATE as it would meet that DELETE.

Refused: a view (Spark's EXPECT_TABLE_NOT_VIEW.NO_ALTERNATIVE), a table addressed by path
(``delta.`/p```: TRUNCATE acts on a catalog table; DELETE FROM delta.`/p` does the same work),
time travel, and ``TRUNCATE TABLE ... PARTITION (...)`` (Delta's
DELTA_TRUNCATE_TABLE_PARTITION_NOT_SUPPORTED).
"""

from __future__ import annotations

import time

from isolde.errors import AnalysisError
from ..catalog import views
from . import executes
from ..session.results import CommitResult, PreparedWrite
from isolde.grammar import ast

OPERATION = "TRUNCATE"


def _refuse(ctx, stmt: ast.TruncateTable) -> None:
    if getattr(stmt, "partition", None):
        raise AnalysisError("Operation not allowed: TRUNCATE TABLE on Delta tables does not support partition "
                            "predicates; use DELETE to delete specific partitions or rows.",
                            error_class="DELTA_TRUNCATE_TABLE_PARTITION_NOT_SUPPORTED", sqlstate="0AKDC")
    ref = stmt.table
    view = views.lookup(ctx, ref)
    if view is not None:
        raise AnalysisError(f"`{view.qualified_name}` is a view, not a table: TRUNCATE TABLE needs a table.",
                            error_class="EXPECT_TABLE_NOT_VIEW.NO_ALTERNATIVE", sqlstate="42809")
    if ref.path is not None:
        raise AnalysisError(f"Table {ref.name} does not support TRUNCATE TABLE: a table addressed by path is not in "
                            f"the catalog. Use DELETE FROM {ref.name} to remove every row.",
                            error_class="UNSUPPORTED_FEATURE.TABLE_OPERATION", sqlstate="0A000")
    if ref.version is not None or ref.timestamp is not None:
        raise AnalysisError(f"Cannot TRUNCATE `{ref.name}` with time travel (VERSION/TIMESTAMP AS OF).",
                            error_class="DELTA_UNSUPPORTED_TIME_TRAVEL_MULTIPLE_FORMATS", sqlstate="42613")


@executes(ast.TruncateTable)
def run_truncate(ctx, stmt: ast.TruncateTable) -> PreparedWrite:
    from ..rows.dml import start_transaction
    from ..txn.statement_scope import record_scope, scope_flags
    from ..catalog import schema as S
    from isolde.planner.scope import conflict_scope

    started = time.time()
    _refuse(ctx, stmt)
    handle = ctx.resolve(stmt.table)
    txn = start_transaction(ctx, handle.log)
    snap = txn.snapshot
    struct = S.metadata_schema(snap.metadata)
    # the reads of `DELETE FROM t` (no WHERE): the same scope, recorded the same way
    as_delete = ast.Delete(table=stmt.table)
    scope = conflict_scope(as_delete, {f.name: f.dataType for f in struct.fields},
                           S.partition_columns(snap.metadata), **scope_flags(snap))
    files = record_scope(txn, scope)
    now = int(time.time() * 1000)
    removes = [add.remove(deletion_timestamp=now, data_change=True) for add in files]
    metrics = {"numRemovedFiles": len(removes)}

    def commit() -> CommitResult:
        final = dict(metrics)
        final["executionTimeMs"] = int((time.time() - started) * 1000)
        version = txn.commit(removes, operation=OPERATION, operation_parameters={}, metrics=final)
        return CommitResult(version=version, operation=OPERATION, metrics=final, table=handle.name)

    return PreparedWrite(operation=OPERATION, table=handle.name, commit_fn=commit, staged_paths=[],
                         metrics=dict(metrics))


run_truncate.needs_spark = False
