"""``[MSCK] REPAIR TABLE t SYNC METADATA`` (Databricks' spelling): bring a UniForm table's
Iceberg metadata up to the table's latest version now.

Every commit of a UniForm table converts itself after it commits, and a conversion that failed
(a crash, a full disk, a bug) is caught up by the next commit; this statement is the explicit
catch-up for a table nobody writes to. Unlike the post-commit hook, it reports a failure as an
error. It reads only the Delta log and writes only ``<table>/metadata/``, so it commits
nothing to Delta and needs no Spark.

``REPAIR TABLE t`` without SYNC METADATA, and the ``ADD | DROP | SYNC PARTITIONS`` forms, are
Hive's partition discovery: a Delta table's partitions are its log's, so they are refused with
Delta's error class.
"""

from __future__ import annotations

from isolde.errors import AnalysisError, ExecutionError
from . import executes
from ..session.results import QueryResult
from isolde.grammar import ast


@executes(ast.RepairTable)
def repair_table(ctx, stmt: ast.RepairTable):
    from ..log import uniform

    handle = ctx.resolve(stmt.table)
    if not stmt.sync_metadata:
        raise AnalysisError(f"REPAIR TABLE {handle.name}{' ... PARTITIONS' if stmt.partitions else ''} is Hive's "
                            "partition discovery; a Delta table's partitions are in its log. To refresh a UniForm "
                            f"table's Iceberg metadata use MSCK REPAIR TABLE {handle.name} SYNC METADATA.",
                            error_class="DELTA_OPERATION_NOT_ALLOWED", sqlstate="0AKDC")
    snap = handle.log.update()
    if not uniform.uniform_iceberg_enabled(snap.metadata.configuration):
        return QueryResult(message=f"{handle.name} has no UniForm format enabled "
                                   "(delta.universalFormat.enabledFormats): no metadata to sync.")
    try:
        result = uniform.convert_after_commit(handle.path, snap.version)
    except Exception as e:  # noqa: BLE001 - any conversion failure becomes the statement's error
        raise ExecutionError(f"Could not sync the Iceberg metadata of {handle.name} to version {snap.version}: "
                             f"{type(e).__name__}: {e}", error_class="DELTA_UNIVERSAL_FORMAT_CONVERSION_FAILED",
                             sqlstate="KD00E") from e
    if result.mode == "noop":
        return QueryResult(message=f"Iceberg metadata of {handle.name} is already at Delta version {snap.version}.")
    return QueryResult(message=f"Iceberg metadata of {handle.name} synced to Delta version {snap.version} "
                               f"({result.mode}, {result.snapshots_added} snapshot(s)): {result.metadata_location}")


repair_table.needs_spark = False
