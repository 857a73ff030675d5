"""How a DML statement's conflict scope meets its transaction, without Spark: what the
planner needs to know of the table (``scope_flags``) and recording the scope as reads
(``record_scope``). The Spark executor and the log-level model tests share these."""

from __future__ import annotations

from ..log.features import row_level_mode


def scope_flags(snapshot) -> dict:
    """What the planner's conflict scope needs to know of a table: deletion vectors on, CLUSTER
    BY, and its isolde.rowLevelConcurrency mode."""
    from ..catalog.properties import clustering_columns

    metadata = snapshot.metadata
    configuration = dict(getattr(metadata, "configuration", None) or {})
    dvs = str(configuration.get("delta.enableDeletionVectors", "false")).strip().lower() == "true"
    if dvs:
        proto = snapshot.protocol
        feats = set(getattr(proto, "writer_features", None) or ()) | set(getattr(proto, "reader_features", None) or ())
        dvs = "deletionVectors" in feats
    try:
        clustered = bool(clustering_columns(snapshot))
    except Exception:
        clustered = False
    return {"deletion_vectors": dvs, "clustered": clustered, "row_level_mode": row_level_mode(metadata)}


def record_scope(txn, scope) -> list:
    """Record the statement's conflict scope through the transaction; returns the candidate files.
    A row-level eligible scope makes the transaction's conflicts be checked per row."""
    if scope.row_level_eligible:
        txn.enable_row_level()
    if scope.reads_whole_table or scope.read_predicate is None:
        txn.read_whole_table()
        return txn.filter_files(None)
    # the transaction splits partition-only conjuncts off the predicate itself
    return txn.filter_files(scope.read_predicate)
