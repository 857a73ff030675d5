"""The log a multi-statement transaction sees (executor/log/staged_log.py) and its squash into
one commit (executor/txn/multi_statement.py), at the log level without Spark: the pin hides
later real versions and checkpoints, staged commits stay in memory, the net actions are the
difference between the pinned and the final snapshot, and the real commit is one version."""

from __future__ import annotations

import os

import pytest

from isolde.errors import ConcurrentAppendException, TransactionStateError
from isolde.executor.log import DeltaLog
from isolde.executor.log.staged_log import StagedDeltaLog
from isolde.executor.txn.multi_statement import MultiStatementTransaction, net_actions
from tests.helpers.log_tables import add, create_table


def _commit(log, actions, operation="WRITE", read=None):
    txn = log.start_transaction()
    if read is not None:
        txn.filter_files(read)
    return txn.commit(actions, operation)


def _files(log):
    return sorted(f.path for f in log.update().all_files)


def test_later_real_versions_and_checkpoints_stay_hidden(table_dir):
    log = create_table(table_dir, files=[add("a.parquet")])
    staged = StagedDeltaLog(log, log.update())
    _commit(log, [add("b.parquet")])
    log.checkpoint()  # a checkpoint (and _last_checkpoint) past the pin
    assert _files(DeltaLog.for_table(table_dir)) == ["a.parquet", "b.parquet"]
    fresh = StagedDeltaLog(log, log.snapshot(0))
    assert fresh.update().version == 0 and _files(fresh) == ["a.parquet"]
    assert _files(staged) == ["a.parquet"]


def test_staged_commits_live_in_memory_and_read_your_own_writes(table_dir):
    log = create_table(table_dir, files=[add("a.parquet")])
    staged = StagedDeltaLog(log, log.update())
    _commit(staged, [add("b.parquet")])
    txn = staged.start_transaction()
    txn.commit([staged.update().all_files[0].remove(), add("c.parquet")], "DELETE")
    assert staged.update().version == 2 and _files(staged) == ["b.parquet", "c.parquet"]
    assert sorted(os.listdir(os.path.join(table_dir, "_delta_log"))) == ["00000000000000000000.json"]
    assert log.update().version == 0


def test_net_actions_drop_what_the_transaction_added_and_removed_again(table_dir):
    log = create_table(table_dir, files=[add("a.parquet"), add("k.parquet")])
    staged = StagedDeltaLog(log, log.update())
    _commit(staged, [add("b.parquet")])
    snap = staged.update()
    by_path = {f.path: f for f in snap.all_files}
    _commit(staged, [by_path["b.parquet"].remove(), by_path["a.parquet"].remove(), add("c.parquet")], "DELETE")
    actions = net_actions(staged)
    kinds = sorted((type(a).__name__, a.path) for a in actions)
    assert kinds == [("AddFile", "c.parquet"), ("RemoveFile", "a.parquet")]


def test_one_real_version_with_the_union_of_reads(table_dir):
    log = create_table(table_dir, files=[add("a.parquet", country="x")], partition_columns=("country",),
                       configuration={"delta.isolationLevel": "Serializable"})
    mt = MultiStatementTransaction()
    staged = mt.log_for("t", log)
    for where, path in (("country = 'x'", "b.parquet"), ("country = 'y'", "c.parquet")):
        mt.begin_statement("Insert")
        txn = staged.start_transaction()
        txn.filter_files(partition_predicate_sql=where)
        txn.commit([add(path, country="y")], "WRITE")
        mt.end_statement(True)
    prepared = mt.prepare(lambda real, snapshot: real.start_transaction(snapshot))
    _, txn, actions, operation, parameters, _ = prepared
    assert operation == "MULTI-STATEMENT TRANSACTION" and len(txn.read_predicates) == 2
    # a winner appends into the partition only the SECOND statement read: under Serializable the
    # whole transaction conflicts
    _commit(log, [add("w.parquet", country="y")])
    with pytest.raises(ConcurrentAppendException):
        mt.commit(prepared)
    assert log.update().version == 1 and mt.state == "rolled back"


def test_a_committed_transaction_is_one_version(table_dir):
    log = create_table(table_dir, files=[add("a.parquet")])
    mt = MultiStatementTransaction()
    staged = mt.log_for("t", log)
    for path in ("b.parquet", "c.parquet", "d.parquet"):
        mt.begin_statement("Insert")
        _commit(staged, [add(path)])
        mt.end_statement(True)
    assert mt.commit(mt.prepare(lambda real, snapshot: real.start_transaction(snapshot))) == 1
    assert log.update().version == 1 and _files(log) == ["a.parquet", "b.parquet", "c.parquet", "d.parquet"]


def test_a_second_table_is_refused(tmp_path):
    one = create_table(str(tmp_path / "one"), files=[add("a.parquet")])
    two = create_table(str(tmp_path / "two"), files=[add("a.parquet")])
    mt = MultiStatementTransaction()
    mt.begin_statement("Insert")
    _commit(mt.log_for("one", one), [add("b.parquet")])
    mt.end_statement(True)
    mt.begin_statement("Insert")
    with pytest.raises(TransactionStateError, match="already writes one"):
        mt.log_for("two", two).start_transaction()
    mt.end_statement(False)


@pytest.mark.parametrize("kind", ["CreateTable", "Optimize", "Vacuum", "Restore", "DropTable", "SetTblProperties"])
def test_statements_a_transaction_refuses(kind):
    with pytest.raises(TransactionStateError, match="cannot run inside a transaction"):
        MultiStatementTransaction().begin_statement(kind)


def test_staged_logs_never_checkpoint_or_write_outside_commits(table_dir):
    log = create_table(table_dir, files=[add("a.parquet")])
    staged = StagedDeltaLog(log, log.update())
    assert staged.checkpoint() == ""
    with pytest.raises(Exception):
        staged.store.write(os.path.join(table_dir, "_delta_log", "_last_checkpoint"), b"{}")
