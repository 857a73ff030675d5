"""Exactly-once writes of micro-batches into an isolde table (``foreachBatch``).

Each batch commits its files together with a ``txn`` action (SetTransaction: appId, version =
batch id) in one Delta commit, as Delta's own streaming sink does. Before writing, the batch
reads the table's last version for its appId *through the transaction* (``txn_version``):

* a batch Spark replays after a crash (committed to the table, not yet to the checkpoint's
  commit log) finds its id already there and is skipped;
* two queries writing with one appId (two runs of one checkpoint) race on the same txn: the
  second commit meets the first's txn action and fails with ConcurrentTransactionException.

The appId is the streaming query's id, read from ``<checkpoint>/metadata`` (stable across
restarts of that checkpoint), unless one is given. Batches without rows commit nothing.
"""

from __future__ import annotations

import json
import os
from typing import Optional

from isolde.errors import AnalysisError, TableNotFoundError
from ..log.actions import SetTransaction, now_ms
from ..session.results import DmlResult, PreparedWrite

OPERATION = "STREAMING UPDATE"


def checkpoint_query_id(checkpoint: str) -> str:
    """The id Spark keeps in ``<checkpoint>/metadata`` (written when the query first starts)."""
    path = os.path.join(checkpoint, "metadata")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.loads(fh.readline())["id"]
    except (OSError, ValueError, KeyError) as e:
        raise AnalysisError(f"No streaming query id in {path}: start the query with this checkpointLocation "
                            "before its first batch is written, or pass app_id.",
                            error_class="STREAM_FAILED", sqlstate="XXKST") from e


def prepare_batch(session, table: str, df, app_id: str, version: int, *, query_id: Optional[str] = None
                  ) -> Optional[PreparedWrite]:
    """Write ``df`` into ``table`` as batch ``version`` of ``app_id``, staged but not committed;
    None when the table already has that batch (or a later one) of ``app_id``."""
    from ..rows import dml
    from ..catalog import schema as S
    from ..session.context import ExecutionContext
    from ..session.session import _ref_from_name, translate_errors
    from ..rows.writer import conform, identity_metadata_update, write_files

    ctx = ExecutionContext(session, None)
    handle = ctx.resolve(_ref_from_name(table))
    txn = dml.start_transaction(ctx, handle.log)
    snap = txn.snapshot
    if snap.version < 0:
        raise TableNotFoundError(handle.name)
    if txn.txn_version(app_id) >= version:
        return None
    metadata = snap.metadata
    struct = S.metadata_schema(metadata)
    conformed = conform(df, struct, by_name=True, table_name=handle.name, configuration=S.configuration(metadata))
    written = translate_errors(lambda: write_files(ctx, conformed, handle.path, metadata), ctx)
    if not written.adds:
        return None
    actions: list = [*written.adds, SetTransaction(app_id, int(version), now_ms())]
    new_meta = identity_metadata_update(metadata, written, conformed)
    if new_meta is not None:
        actions.append(new_meta)
    txn.set_blind_append()
    metrics = {"numAddedFiles": len(written.adds), "numOutputRows": written.num_rows,
               "numOutputBytes": written.num_bytes}
    params = {"outputMode": "Append", "queryId": query_id or app_id, "epochId": str(version)}

    def commit() -> DmlResult:
        committed = txn.commit(actions, operation=OPERATION, operation_parameters=params, metrics=metrics)
        return DmlResult.of("INSERT", committed, OPERATION, metrics, handle.name, inserted=written.num_rows)

    return PreparedWrite(operation=OPERATION, table=handle.name, commit_fn=commit,
                         staged_paths=list(written.staged_paths), metrics=metrics)


class BatchWriter:
    """The ``foreachBatch`` function of a query writing into ``table`` (see module docstring)."""

    def __init__(self, session, table: str, *, app_id: Optional[str] = None, checkpoint: Optional[str] = None):
        if app_id is None and checkpoint is None:
            raise AnalysisError("write_batches needs the query's checkpoint location (or an app_id).",
                                error_class="STREAM_FAILED", sqlstate="XXKST")
        self.session = session
        self.table = table
        self.checkpoint = checkpoint
        self._app_id = app_id
        self.skipped: list[int] = []  # batch ids that committed nothing: replays, batches without rows
        self.committed: list[int] = []

    @property
    def app_id(self) -> str:
        if self._app_id is None:
            self._app_id = checkpoint_query_id(self.checkpoint)
        return self._app_id

    def prepare(self, df, batch_id: int) -> Optional[PreparedWrite]:
        return prepare_batch(self.session, self.table, df, self.app_id, int(batch_id))

    def __call__(self, df, batch_id: int) -> None:
        prepared = self.prepare(df, batch_id)
        if prepared is None:
            self.skipped.append(int(batch_id))
            return
        prepared.commit()
        self.committed.append(int(batch_id))


def write_batches(session, table: str, *, checkpoint: Optional[str] = None, app_id: Optional[str] = None
                  ) -> BatchWriter:
    """``df.writeStream.foreachBatch(write_batches(s, "target", checkpoint=ckpt))
    .option("checkpointLocation", ckpt).start()``: exactly-once appends into ``target``."""
    return BatchWriter(session, table, app_id=app_id, checkpoint=checkpoint)
