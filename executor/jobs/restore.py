"""RESTORE [TABLE] t TO VERSION AS OF n | TIMESTAMP AS OF expr.

One commit that makes the latest version look like the target version:

* ``remove`` (dataChange=true) of every live logical file (path + DV) the target does not have;
* ``add`` (dataChange=true) of every file of the target that is not live now -- after checking
  that each one (and its deletion-vector file) still exists: a file VACUUM deleted makes the
  restore fail with a clear error and no commit;
* the target's ``metaData`` when it differs, the union of both protocols when the target needs
  more (the protocol is never downgraded), and the domain metadata (clustering) of the target.

The transaction reads the whole table, so a concurrent data commit makes it fail instead of
silently being undone. Operation ``RESTORE``; parameters version / timestamp; metrics
tableSizeAfterRestore, numOfFilesAfterRestore, numRemovedFiles, numRestoredFiles,
removedFilesSize, restoredFilesSize (as Delta). The statement answers with Delta's RESTORE
result row (``RestoreResult``): table_size_after_restore, num_of_files_after_restore,
num_removed_files, num_restored_files, removed_files_size, restored_files_size.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from isolde.errors import AnalysisError, ExecutionError, VersionNotFoundError
from ..catalog import properties as P
from . import executes
from ..log.actions import DomainMetadata, now_ms
from ..log import table_files
from ..log.deletion_vectors import dv_file_path
from ..session.results import CommitResult
from .alter import prepared_log_write
from isolde.grammar import ast


#: Delta's RESTORE result columns, and the operationMetrics key each one reads
RESULT_COLUMNS = (
    ("table_size_after_restore", "tableSizeAfterRestore"),
    ("num_of_files_after_restore", "numOfFilesAfterRestore"),
    ("num_removed_files", "numRemovedFiles"),
    ("num_restored_files", "numRestoredFiles"),
    ("removed_files_size", "removedFilesSize"),
    ("restored_files_size", "restoredFilesSize"),
)


@dataclass(frozen=True)
class RestoreResult(CommitResult):
    """RESTORE's commit, which also answers with Delta's result row (one row of the six
    RESULT_COLUMNS, from the commit's metrics), so ``execute("RESTORE ...").first()
    .num_restored_files`` reads as it does in Delta."""

    @property
    def columns(self) -> list[str]:
        return [name for name, _ in RESULT_COLUMNS]

    @property
    def rows(self) -> list:
        from pyspark.sql import Row

        values = {name: int(self.metrics.get(key) or 0) for name, key in RESULT_COLUMNS}
        return [Row(**values)]

    def collect(self) -> list:
        return list(self.rows)

    def first(self):
        return self.rows[0]


def _missing_files(table_path: str, adds) -> list[str]:
    missing = []
    for a in adds:
        path = P.local_path(table_path, a.path)
        if not table_files.exists(path):
            missing.append(path)
        dv = a.deletion_vector
        if dv is not None and dv.storage_type != "i":
            dv_path = dv_file_path(table_path, dv)
            if not table_files.exists(dv_path):
                missing.append(dv_path)
    return missing


def restore_actions(table_path: str, current, target, *, timestamp_ms: int | None = None):
    """(actions, metrics) that turn ``current`` into ``target`` (both Snapshots of one table)."""
    ts = now_ms() if timestamp_ms is None else timestamp_ms
    cur = {a.key: a for a in current.all_files}
    tgt = {a.key: a for a in target.all_files}
    to_add = [a for k, a in tgt.items() if k not in cur]
    to_remove = [a for k, a in cur.items() if k not in tgt]
    missing = _missing_files(table_path, to_add)
    if missing:
        shown = ", ".join(missing[:5]) + (f" (and {len(missing) - 5} more)" if len(missing) > 5 else "")
        raise ExecutionError(
            f"Cannot restore to version {target.version}: {len(missing)} file(s) it needs no longer exist, most "
            f"likely deleted by VACUUM: {shown}. Restore to a later version, one whose files are still retained.",
            error_class="DELTA_CANNOT_RESTORE_MISSING_FILES")
    actions: list = []
    if current.protocol is not None and target.protocol is not None:
        merged = P.merge_protocols(current.protocol, target.protocol)
        if not P.same_protocol(merged, current.protocol):
            actions.append(merged)
    if target.metadata is not None and (current.metadata is None or
                                        target.metadata.to_dict() != current.metadata.to_dict()):
        actions.append(target.metadata)
    cur_domains = current.domain_metadata
    tgt_domains = target.domain_metadata
    for name, dm in tgt_domains.items():
        if name.startswith("delta.") and name != P.CLUSTERING_DOMAIN:
            continue  # system domains (row tracking high-water mark...) only ever move forward
        old = cur_domains.get(name)
        if old is None or old.configuration != dm.configuration:
            actions.append(DomainMetadata(name, dm.configuration, False))
    for name, dm in cur_domains.items():
        if name not in tgt_domains and (not name.startswith("delta.") or name == P.CLUSTERING_DOMAIN):
            actions.append(DomainMetadata(name, dm.configuration, True))
    for a in to_remove:
        actions.append(a.remove(deletion_timestamp=ts, data_change=True))
    for a in to_add:
        actions.append(dataclasses.replace(a, data_change=True))
    after = list(tgt.values())
    metrics = {
        "tableSizeAfterRestore": sum(int(a.size or 0) for a in after),
        "numOfFilesAfterRestore": len(after),
        "numRemovedFiles": len(to_remove),
        "numRestoredFiles": len(to_add),
        "removedFilesSize": sum(int(a.size or 0) for a in to_remove),
        "restoredFilesSize": sum(int(a.size or 0) for a in to_add),
    }
    return actions, metrics


@executes(ast.Restore)
def run(ctx, stmt: ast.Restore):
    handle = P.resolve(ctx, stmt.table)
    if stmt.table.version is not None or stmt.table.timestamp is not None:
        raise AnalysisError("RESTORE takes the version in its TO VERSION AS OF / TO TIMESTAMP AS OF clause, not on "
                            "the table name.")
    log = handle.log
    txn = ctx.start_transaction(log)
    current = getattr(txn, "snapshot", None) or log.update()
    params: dict = {}
    if stmt.version is not None:
        if stmt.version < 0 or stmt.version > current.version:
            raise VersionNotFoundError(
                f"Cannot restore {handle.name} to version {stmt.version}: available versions are 0 to "
                f"{current.version}.")
        target = log.snapshot(stmt.version)
        params["version"] = stmt.version
    elif stmt.timestamp is not None:
        when = P.eval_timestamp(ctx, stmt.timestamp)
        target = log.snapshot(timestamp=when)
        params["timestamp"] = when.isoformat() if hasattr(when, "isoformat") else str(when)
    else:  # pragma: no cover - the grammar always gives one
        raise AnalysisError("RESTORE needs TO VERSION AS OF n or TO TIMESTAMP AS OF expr.")
    actions, metrics = restore_actions(handle.path, current, target)
    reader = getattr(txn, "read_whole_table", None)
    if callable(reader):
        reader()
    return prepared_log_write(handle, txn, "RESTORE", actions, params, metrics, result=RestoreResult)


# Pure log work: the session need not wait for Spark to start (no Spark job group).
run.needs_spark = False
