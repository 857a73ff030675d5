"""commitInfo as isolde records it, without Spark: the isolation level (Delta's rule, the same
for every operation; separate from the level the conflict checker applies), userName (the OS
user unless a session setting names another), and the DML result rows' shape."""

from __future__ import annotations

import getpass

import pytest

from isolde.executor.log.actions import DomainMetadata, Metadata
from isolde.executor.txn.transaction import USER_NAME_KEY, os_user_name, session_user_name

from tests.helpers.log_tables import add, create_table

SER = {"delta.isolationLevel": "Serializable"}
WS = {"delta.isolationLevel": "WriteSerializable"}


def _commit(log, actions, operation="WRITE", **kw):
    txn = log.start_transaction()
    built = actions(txn.snapshot) if callable(actions) else actions
    txn.commit(built, operation, **kw)
    return txn


def _metadata(log, **config):
    m = log.update().metadata
    return Metadata(m.schema_string, tuple(m.partition_columns), {**m.configuration, **config})


@pytest.mark.parametrize("config, level", [({}, "WriteSerializable"), (WS, "WriteSerializable"),
                                           (SER, "Serializable")], ids=["default", "ws", "ser"])
def test_every_data_change_records_the_tables_level(table_dir, config, level):
    """Appends, rewrites, deletes and commits that also carry a metaData action (an identity
    high-water mark, schema evolution) all record the table's level: a metaData action is
    no reason to record Serializable."""
    log = create_table(table_dir, configuration=config)
    assert _commit(log, [add("a.parquet")], "WRITE").commit_info.isolation_level == level
    assert _commit(log, lambda s: [s.file("a.parquet").remove(), add("b.parquet")],
                   "UPDATE").commit_info.isolation_level == level
    assert _commit(log, lambda s: [s.file("b.parquet").remove()], "DELETE").commit_info.isolation_level == level
    # an INSERT / MERGE that advances an identity high-water mark re-emits metaData
    txn = _commit(log, lambda s: [add("c.parquet"), _metadata(log, **{"x.hwm": "7"})], "MERGE")
    assert txn.commit_info.isolation_level == level
    txn = _commit(log, [add("d.parquet"), _metadata(log, **{"x.hwm": "8"})], "WRITE")
    assert txn.commit_info.isolation_level == level


@pytest.mark.parametrize("config, level", [({}, "WriteSerializable"), (SER, "Serializable")], ids=["ws", "ser"])
def test_metadata_only_commits_record_the_tables_level(table_dir, config, level):
    log = create_table(table_dir, configuration=config)
    assert log.history()[-1]["isolationLevel"] == level  # CREATE TABLE: its own level
    txn = _commit(log, [_metadata(log, **{"delta.appendOnly": "false"})], "SET TBLPROPERTIES")
    assert txn.commit_info.isolation_level == level


def test_a_level_change_records_the_new_level(table_dir):
    """The level of the metadata the commit leaves (Delta reads the transaction's metadata)."""
    log = create_table(table_dir)
    txn = _commit(log, [_metadata(log, **SER)], "SET TBLPROPERTIES")
    assert txn.commit_info.isolation_level == "Serializable"


@pytest.mark.parametrize("config", [{}, SER], ids=["ws", "ser"])
def test_commits_that_change_no_data_record_snapshot_isolation(table_dir, config):
    log = create_table(table_dir, configuration=config, files=[add("a.parquet"), add("b.parquet")])
    txn = _commit(log, lambda s: [s.file("a.parquet").remove(data_change=False),
                                  s.file("b.parquet").remove(data_change=False),
                                  add("c.parquet", data_change=False)], "OPTIMIZE")
    assert txn.commit_info.isolation_level == "SnapshotIsolation"
    assert _commit(log, [], "VACUUM START").commit_info.isolation_level == "SnapshotIsolation"
    # the row-tracking domain does not count as a metadata change (Delta's exception)
    txn = _commit(log, lambda s: [s.file("c.parquet").remove(data_change=False), add("e.parquet", data_change=False),
                                  DomainMetadata("delta.rowTracking", '{"rowIdHighWaterMark":3}')], "OPTIMIZE")
    assert txn.commit_info.isolation_level == "SnapshotIsolation"


def test_an_empty_data_changing_commit_keeps_write_serializable(table_dir):
    """Delta's ``!op.changesData``: an INSERT of no rows is still a write under WriteSerializable;
    under Serializable any commit without a data change may use snapshot isolation."""
    log = create_table(table_dir)
    assert _commit(log, [], "WRITE").commit_info.isolation_level == "WriteSerializable"
    ser = create_table(table_dir + "_ser", configuration=SER)
    assert _commit(ser, [], "WRITE").commit_info.isolation_level == "SnapshotIsolation"


def test_the_checker_still_applies_serializable_to_metadata_changes(table_dir):
    """What is recorded is not what is checked: a metadata change is checked strictly."""
    log = create_table(table_dir)
    txn = log.start_transaction()
    actions = [add("a.parquet"), _metadata(log, **{"x": "1"})]
    assert txn._effective_isolation_level(actions) == "Serializable"
    assert txn.recorded_isolation_level(actions, "WRITE") == "WriteSerializable"


# --------------------------------------------------------------------------- userName


def test_user_name_is_the_os_user_by_default(table_dir):
    log = create_table(table_dir)
    expected = getpass.getuser()
    assert os_user_name() == expected
    txn = _commit(log, [add("a.parquet")])
    assert txn.commit_info.extra["userName"] == expected
    assert log.history()[0]["userName"] == expected


def test_user_name_can_be_named(table_dir):
    log = create_table(table_dir)
    txn = log.start_transaction()
    txn.user_name = "alice@example.com"
    txn.commit([add("a.parquet")], "WRITE")
    assert log.history()[0]["userName"] == "alice@example.com"
    txn = log.start_transaction()
    txn.user_name = "alice"
    txn.commit([add("b.parquet")], "WRITE", user_name="bob")  # the commit's own argument wins
    assert log.history()[0]["userName"] == "bob"


def test_user_name_falls_back_to_none_without_a_login(table_dir, monkeypatch):
    def no_user():
        raise OSError("no login")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert os_user_name() is None
    log = create_table(table_dir)
    txn = _commit(log, [add("a.parquet")])
    assert "userName" not in txn.commit_info.extra


def test_session_user_name_setting():
    assert USER_NAME_KEY == "isolde.userName"
    assert session_user_name({USER_NAME_KEY: " carol "}) == "carol"
    assert session_user_name({USER_NAME_KEY: "  "}) is None
    assert session_user_name({}) is None
    assert session_user_name(None) is None


# --------------------------------------------------------------------------- result rows


def test_dml_result_rows():
    from pyspark.sql.types import LongType

    from isolde.executor.session.results import CommitResult, DmlResult, OptimizeResult

    r = DmlResult.of("MERGE", 3, "MERGE", {"numTargetRowsUpdated": 2}, "t", updated=2, deleted=1, inserted=4)
    assert r.columns == ["num_affected_rows", "num_updated_rows", "num_deleted_rows", "num_inserted_rows"]
    assert r.first() == (7, 2, 1, 4) and r.first().num_affected_rows == 7
    assert r.collect() == r.rows == list(r) and r.count() == 1 and not r.isEmpty()
    assert r.as_dicts() == [{"num_affected_rows": 7, "num_updated_rows": 2, "num_deleted_rows": 1,
                             "num_inserted_rows": 4}]
    assert r.dtypes == [(c, "bigint") for c in r.columns]
    assert all(isinstance(f.dataType, LongType) for f in r.schema.fields)
    assert (r.version, r.operation, r.metrics, r.table) == (3, "MERGE", {"numTargetRowsUpdated": 2}, "t")
    assert DmlResult.of("UPDATE", 1, "UPDATE", {}, updated=5, deleted=9).first().asDict() == {"num_affected_rows": 5}
    assert DmlResult.of("DELETE", 1, "DELETE", {}, deleted=9).first().asDict() == {"num_affected_rows": 9}
    assert DmlResult.of("INSERT", 1, "WRITE", {}, inserted=2).first().asDict() == {"num_affected_rows": 2,
                                                                                   "num_inserted_rows": 2}
    zero = DmlResult.of("MERGE", 1, "MERGE", {})
    assert tuple(zero.first()) == (0, 0, 0, 0)
    # a commit without a result row answers with none (the REPL shows only its commit line)
    plain = CommitResult(1, "CREATE TABLE")
    assert plain.columns == [] and plain.rows == [] and plain.first() is None and plain.schema is None
    assert bool(plain)  # a dataclass without __len__: truthiness is unchanged
    opt = OptimizeResult(2, "OPTIMIZE", path="/x", result_metrics={"numFilesAdded": 1, "zOrderStats": {"a": 1}})
    assert opt.columns == ["path", "metrics"] and opt.first().metrics.numFilesAdded == 1
    assert opt.first().metrics.zOrderStats.a == 1
