"""Multi-statement transactions on one table (docs/TRANSACTIONS.md): each sentence of the
semantics, tested. BEGIN / COMMIT / ROLLBACK, BEGIN ATOMIC ... END and ``s.transaction()``;
one Delta version per transaction, read by delta-rs; read your own writes; one snapshot per
table; conflicts of the whole transaction against concurrent winners; what is refused."""

from __future__ import annotations

import os

import pytest

from isolde import errors as E
from isolde.executor.log import DeltaLog

DV = "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"


def _accounts(s, name="acc", props=DV, rows=((1, 100), (2, 100), (3, 100))):
    s.execute(f"CREATE TABLE {name} (id INT, bal INT) USING DELTA {props}")
    values = ", ".join(f"({i}, {b})" for i, b in rows)
    s.execute(f"INSERT INTO {name} VALUES {values}")


def _rows(s, name="acc"):
    return [tuple(r) for r in s.execute(f"SELECT * FROM {name} ORDER BY id").rows]


def _version(s, table_path, name="acc"):
    return DeltaLog.for_table(table_path(s, name)).update().version


def _other(session):
    import isolde

    return isolde.connect(warehouse=session.warehouse, spark=session.engine)


def test_begin_commit_is_one_version_that_delta_rs_reads(session, table_path, delta_rows):
    _accounts(session)
    before = _version(session, table_path)
    session.execute("BEGIN")
    session.execute("UPDATE acc SET bal = bal - 10 WHERE id = 1")
    session.execute("UPDATE acc SET bal = bal + 10 WHERE id = 2")
    session.execute("INSERT INTO acc VALUES (4, 0)")
    session.execute("DELETE FROM acc WHERE id = 3")
    assert _version(session, table_path) == before  # nothing reached the log yet
    result = session.execute("COMMIT")
    assert result.version == before + 1 == _version(session, table_path)
    expected = [(1, 90), (2, 110), (4, 0)]
    assert _rows(session) == expected
    assert delta_rows(table_path(session, "acc")) == expected
    history = session.execute("DESCRIBE HISTORY acc").as_dicts()[0]
    assert history["operation"] == "MULTI-STATEMENT TRANSACTION"
    assert history["operationParameters"]["statements"] == '["UPDATE", "UPDATE", "WRITE", "DELETE"]'
    assert int(history["operationMetrics"]["numUpdatedRows"]) == 2  # the statements' metrics add up


def test_a_transaction_of_one_statement_keeps_its_operation(session, table_path):
    _accounts(session)
    with session.transaction() as tx:
        tx.execute("UPDATE acc SET bal = 0 WHERE id = 1")
    assert tx.result.operation == "UPDATE"
    assert session.execute("DESCRIBE HISTORY acc").as_dicts()[0]["operation"] == "UPDATE"


def test_statements_inside_report_no_version(session):
    _accounts(session)
    session.execute("BEGIN")
    result = session.execute("UPDATE acc SET bal = 0 WHERE id = 1")
    assert result.version is None and result.first().num_affected_rows == 1
    session.execute("ROLLBACK")


def test_read_your_own_writes(session):
    """A query after an UPDATE sees the updated rows; a second UPDATE of the row sees the
    first's value; a DELETE then an INSERT of the same key works."""
    _accounts(session)
    session.execute("BEGIN")
    session.execute("UPDATE acc SET bal = bal + 1 WHERE id = 1")
    assert _rows(session)[0] == (1, 101)
    session.execute("UPDATE acc SET bal = bal * 2 WHERE id = 1")
    assert _rows(session)[0] == (1, 202)
    session.execute("DELETE FROM acc WHERE id = 2")
    session.execute("INSERT INTO acc VALUES (2, 7)")
    session.execute("MERGE INTO acc t USING (SELECT 3 AS id, 5 AS bal) s ON t.id = s.id "
                    "WHEN MATCHED THEN UPDATE SET bal = t.bal + s.bal")
    assert _rows(session) == [(1, 202), (2, 7), (3, 105)]
    session.execute("COMMIT")
    assert _rows(session) == [(1, 202), (2, 7), (3, 105)]


def test_others_see_nothing_until_commit_and_the_transaction_sees_one_snapshot(session):
    _accounts(session)
    other = _other(session)
    session.execute("BEGIN")
    session.execute("UPDATE acc SET bal = 0 WHERE id = 1")
    assert _rows(other) == [(1, 100), (2, 100), (3, 100)]
    other.execute("INSERT INTO acc VALUES (9, 9)")  # a blind append after the transaction's first read
    assert (9, 9) not in _rows(session)  # the transaction keeps reading its snapshot
    session.execute("COMMIT")  # WriteSerializable: the append orders before it
    assert _rows(other) == [(1, 0), (2, 100), (3, 100), (9, 9)]


def test_rollback_leaves_the_table_and_no_files(session, table_path):
    _accounts(session)
    path = table_path(session, "acc")
    before_version = _version(session, table_path)
    before_files = sorted(f for f in os.listdir(path) if not f.startswith("_"))
    session.execute("BEGIN")
    session.execute("UPDATE acc SET bal = 0 WHERE id = 1")
    session.execute("INSERT INTO acc VALUES (5, 5)")
    result = session.execute("ROLLBACK")
    assert "nothing of acc was committed" in result.message
    assert _version(session, table_path) == before_version
    assert _rows(session) == [(1, 100), (2, 100), (3, 100)]
    after_files = sorted(f for f in os.listdir(path) if not f.startswith("_"))
    assert after_files == before_files  # the staged data and deletion-vector files are gone


def test_the_library_form_rolls_back_on_an_exception(session, table_path):
    _accounts(session)
    before = _version(session, table_path)
    with pytest.raises(ZeroDivisionError):
        with session.transaction() as tx:
            tx.execute("UPDATE acc SET bal = 0 WHERE id = 1")
            1 / 0
    assert session.active_transaction is None
    assert _version(session, table_path) == before
    assert _rows(session)[0] == (1, 100)


def test_begin_atomic_commits_at_end(session, table_path):
    _accounts(session)
    before = _version(session, table_path)
    result = session.execute("BEGIN ATOMIC UPDATE acc SET bal = bal - 5 WHERE id = 1; "
                             "UPDATE acc SET bal = bal + 5 WHERE id = 3; END")
    assert result.version == before + 1
    assert _rows(session) == [(1, 95), (2, 100), (3, 105)]


def test_begin_atomic_rolls_back_entirely_when_a_statement_fails(session, table_path):
    _accounts(session)
    before = _version(session, table_path)
    with pytest.raises(E.IsoldeError) as info:
        session.execute("BEGIN ATOMIC UPDATE acc SET bal = 0 WHERE id = 1; UPDATE acc SET nope = 1; END")
    assert isinstance(info.value, (E.AnalysisError, E.ColumnNotFoundError))
    assert session.active_transaction is None
    assert _version(session, table_path) == before
    assert _rows(session)[0] == (1, 100)


def test_a_statement_failing_while_running_aborts_the_transaction(session):
    """As in Databricks: after an error nothing more runs in the transaction, COMMIT rolls it
    back (and says so), and ROLLBACK ends it."""
    _accounts(session)
    session.execute("BEGIN")
    session.execute("UPDATE acc SET bal = 1 WHERE id = 1")
    with pytest.raises(E.IsoldeError):
        session.execute("UPDATE acc SET nope = 1")
    with pytest.raises(E.TransactionStateError, match="aborted by an error") as info:
        session.execute("SELECT * FROM acc")
    assert info.value.error_class == "TRANSACTION_ABORTED"
    with pytest.raises(E.TransactionStateError, match="it was rolled back, nothing was committed"):
        session.execute("COMMIT")
    assert session.active_transaction is None and _rows(session)[0] == (1, 100)
    session.execute("BEGIN")
    with pytest.raises(E.IsoldeError):
        session.execute("SELECT nope FROM acc")
    session.execute("ROLLBACK")
    assert session.active_transaction is None


@pytest.mark.parametrize("statement, error_class", [
    ("SELECT * FROM acc VERSION AS OF 0", "TIME_TRAVEL_QUERY_IN_TRANSACTION"),
    ("SELECT * FROM table_changes('acc', 0)", "CDF_READ_IN_TRANSACTION"),
])
def test_reads_databricks_refuses_in_a_transaction(session, statement, error_class):
    _accounts(session, props="TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    session.execute("BEGIN")
    session.execute("UPDATE acc SET bal = 1 WHERE id = 1")
    with pytest.raises(E.TransactionStateError) as info:
        session.execute(statement)
    assert info.value.error_class == error_class and "still open" in str(info.value)
    session.execute("COMMIT")  # refused, not failed: the transaction stays usable
    assert _rows(session)[0] == (1, 1)


@pytest.mark.parametrize("statement", [
    "CREATE TABLE other (x INT) USING DELTA",
    "DROP TABLE acc",
    "OPTIMIZE acc",
    "VACUUM acc",
    "ALTER TABLE acc SET TBLPROPERTIES ('a' = 'b')",
    "RESTORE TABLE acc TO VERSION AS OF 0",
    "TRUNCATE TABLE acc",
    "BEGIN",
])
def test_statements_refused_inside_a_transaction_leave_it_usable(session, statement):
    _accounts(session)
    session.execute("BEGIN")
    session.execute("UPDATE acc SET bal = 1 WHERE id = 1")
    with pytest.raises(E.TransactionStateError) as info:
        session.execute(statement)
    word = statement.split()[0]
    assert word in str(info.value) and "still open" in str(info.value) or "already open" in str(info.value)
    session.execute("COMMIT")
    assert _rows(session)[0] == (1, 1)


def test_commit_without_begin_is_an_error_rollback_is_not(session):
    with pytest.raises(E.TransactionStateError, match="without a transaction"):
        session.execute("COMMIT")
    assert "No transaction is open" in session.execute("ROLLBACK").message  # as in Databricks


def test_a_second_table_not_coordinated_is_refused_and_the_transaction_stays_usable(session):
    """Tables whose commits do not go through a coordinator commit one per transaction; the
    error says how to opt in (tests/executor/session/test_multi_table_transactions.py: with it)."""
    _accounts(session)
    _accounts(session, "audit")
    session.execute("BEGIN")
    session.execute("UPDATE acc SET bal = 1 WHERE id = 1")
    with pytest.raises(E.TransactionStateError) as info:
        session.execute("INSERT INTO audit VALUES (7, 7)")
    assert info.value.error_class == "MULTI_TABLE_TRANSACTION_NOT_COORDINATED" and "acc" in str(info.value)
    assert "'isolde.coordinatedCommits' = 'true'" in str(info.value)
    session.execute("COMMIT")
    assert _rows(session)[0] == (1, 1)
    assert (7, 7) not in _rows(session, "audit")


def test_the_whole_transaction_conflicts_with_a_winner(session, table_path):
    """Its read set is every statement's: a concurrent UPDATE of a row its FIRST statement
    read makes COMMIT fail, the transaction is rolled back and the winner's row stands."""
    # file level: one file, so every UPDATE conflicts with every other
    _accounts(session, props="TBLPROPERTIES ('isolde.rowLevelConcurrency' = 'off')")
    other = _other(session)
    session.execute("BEGIN")
    session.execute("UPDATE acc SET bal = bal - 10 WHERE id = 1")
    session.execute("UPDATE acc SET bal = bal + 10 WHERE id = 2")
    other.execute("UPDATE acc SET bal = 50 WHERE id = 3")
    winner = _version(session, table_path)
    with pytest.raises(E.ConcurrentModificationException) as info:
        session.execute("COMMIT")
    assert type(info.value).__name__ in ("ConcurrentDeleteDeleteException", "ConcurrentDeleteReadException")
    assert info.value.winning_version == winner and "rolled back" in str(info.value)
    assert session.active_transaction is None
    assert _rows(session) == [(1, 100), (2, 100), (3, 50)]
    assert _version(session, table_path) == winner


def test_row_level_transactions_on_different_rows_both_commit(session):
    _accounts(session, props="TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
                             "'isolde.rowLevelConcurrency' = 'always')")
    other = _other(session)
    session.execute("BEGIN")
    session.execute("UPDATE acc SET bal = bal - 10 WHERE id = 1")
    other.execute("BEGIN")
    other.execute("UPDATE acc SET bal = bal - 1 WHERE id = 3")
    other.execute("COMMIT")
    session.execute("UPDATE acc SET bal = bal + 10 WHERE id = 2")
    session.execute("COMMIT")
    assert _rows(session) == [(1, 90), (2, 110), (3, 99)]


def test_serializable_refuses_write_skew_through_a_query(session):
    """The classic on-call anomaly on one table: each transaction checks that someone else is
    still on call, then takes itself off. Under Serializable the second COMMIT fails."""
    session.execute("CREATE TABLE oncall (doctor INT, on_call BOOLEAN) USING DELTA TBLPROPERTIES "
                    "('delta.enableDeletionVectors' = 'true', 'delta.isolationLevel' = 'Serializable', "
                    "'isolde.rowLevelConcurrency' = 'always')")
    session.execute("INSERT INTO oncall VALUES (1, true), (2, true)")
    other = _other(session)
    for s, me in ((session, 1), (other, 2)):
        s.execute("BEGIN")
        assert s.execute("SELECT count(*) FROM oncall WHERE on_call").rows[0][0] == 2
        s.execute(f"UPDATE oncall SET on_call = false WHERE doctor = {me}")
    session.execute("COMMIT")
    with pytest.raises(E.ConcurrentModificationException):
        other.execute("COMMIT")
    assert session.execute("SELECT count(*) FROM oncall WHERE on_call").rows[0][0] == 1


@pytest.mark.parametrize("query, conflicts", [
    ("SELECT bal FROM acc WHERE id = 1", False),  # scoped by its WHERE: row 3 is not read
    ("SELECT a.bal FROM acc a JOIN acc b ON a.id = b.id WHERE a.id = 1", True),  # a join: the whole table
    ("SELECT sum(bal) FROM acc", True),  # every row
])
def test_a_query_inside_a_transaction_reads_what_its_where_says(session, query, conflicts):
    """Row level, Serializable (the transaction must follow the winner): read balance 1, then
    update row 1, while another writer updates row 3. A query scoped by its WHERE does not
    conflict with that; one that read row 3 (or cannot be scoped) does. (Under WriteSerializable
    all three commit: the transaction can be ordered before the winner, which read only row 3.)"""
    _accounts(session, props="TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
                             "'delta.isolationLevel' = 'Serializable', 'isolde.rowLevelConcurrency' = 'always')")
    other = _other(session)
    session.execute("BEGIN")
    session.execute(query)
    session.execute("UPDATE acc SET bal = bal - 10 WHERE id = 1")
    other.execute("UPDATE acc SET bal = 0 WHERE id = 3")
    if conflicts:
        with pytest.raises(E.ConcurrentModificationException):
            session.execute("COMMIT")
        assert _rows(session) == [(1, 100), (2, 100), (3, 0)]
    else:
        session.execute("COMMIT")
        assert _rows(session) == [(1, 90), (2, 100), (3, 0)]


def test_two_phase_prepare_then_commit(session, table_path):
    _accounts(session)
    tx = session.transaction()
    tx.execute("UPDATE acc SET bal = 7 WHERE id = 1")
    prepared = tx.prepare()
    assert prepared.table == "acc" and _version(session, table_path) == 1
    result = prepared.commit()
    assert result.version == 2 and _rows(session)[0] == (1, 7)


def test_a_script_ending_inside_a_transaction_rolls_it_back_and_says_so(session, tmp_path):
    _accounts(session)
    script = tmp_path / "t.sql"
    script.write_text("BEGIN;\nUPDATE acc SET bal = 0 WHERE id = 1;\n")
    results = session.run_script(str(script))
    assert "rolled back" in results[-1].message and "acc" in results[-1].message
    assert session.active_transaction is None
    assert _rows(session)[0] == (1, 100)


def test_only_reads_commit_nothing(session, table_path):
    _accounts(session)
    before = _version(session, table_path)
    session.execute("BEGIN")
    assert len(_rows(session)) == 3
    result = session.execute("COMMIT")
    assert result.version is None and _version(session, table_path) == before


def test_change_data_feed_tables_take_one_write_statement(session):
    _accounts(session, "feed", props="TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    session.execute("BEGIN")
    session.execute("UPDATE feed SET bal = 1 WHERE id = 1")
    with pytest.raises(E.TransactionStateError, match="change data feed"):
        session.execute("UPDATE feed SET bal = 2 WHERE id = 2")
    session.execute("COMMIT")
    changes = session.execute("SELECT id, _change_type FROM table_changes('feed', 2) ORDER BY id, _change_type").rows
    assert [tuple(r) for r in changes] == [(1, "update_postimage"), (1, "update_preimage")]


def test_session_close_rolls_back(session, table_path):
    _accounts(session)
    other = _other(session)
    other.execute("BEGIN")
    other.execute("UPDATE acc SET bal = 0 WHERE id = 1")
    other.close()
    assert _rows(session)[0] == (1, 100)


def test_vacuum_keeps_the_files_a_transaction_staged(session, table_path):
    """A VACUUM with no retention (the check off) beside an open transaction keeps the files its
    statements staged (leased, as a prepared write's are), so COMMIT finds them; afterwards the
    leases are gone."""
    _accounts(session)
    other = _other(session)
    session.execute("BEGIN")
    session.execute("UPDATE acc SET bal = 5 WHERE id = 1")
    session.execute("INSERT INTO acc VALUES (4, 4)")
    other.execute("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    other.execute("VACUUM acc RETAIN 0 HOURS")
    session.execute("COMMIT")
    assert _rows(session) == [(1, 5), (2, 100), (3, 100), (4, 4)]
    assert not os.path.exists(os.path.join(table_path(session, "acc"), ".isolde-leases"))
