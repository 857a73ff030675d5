"""Transactions over several tables (docs/TRANSACTIONS.md, sentences 21-27): tables that opt in
to coordinated commits are written together, as one coordinator entry and one version per
table; every isolde reader sees all of it or none; write skew across tables is refused under
Serializable, also when the two COMMITs race; each table's final state is read alike by
delta-rs."""

from __future__ import annotations

import json
import os
import threading

import pytest

from isolde import errors as E
from isolde.executor.log import DeltaLog
from isolde.executor.session import transactions

COORDINATED = ("TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', 'isolde.coordinatedCommits' = 'true'"
               "{extra})")


def _table(s, name, rows, columns="id INT, bal INT", extra=""):
    s.execute(f"CREATE TABLE {name} ({columns}) USING DELTA {COORDINATED.format(extra=extra)}")
    if rows:
        s.execute(f"INSERT INTO {name} VALUES {', '.join(str(r) for r in rows)}")


def _bank(s, extra=""):
    _table(s, "acc", [(1, 100), (2, 100), (3, 100)], extra=extra)
    _table(s, "audit", [], columns="transfer STRING, src INT, dst INT, amount INT", extra=extra)


def _rows(s, name):
    return sorted(tuple(r) for r in s.execute(f"SELECT * FROM {name}").rows)


def _version(s, table_path, name):
    return DeltaLog.for_table(table_path(s, name)).update().version


def _entries(s):
    folder = os.path.join(s.warehouse, "_isolde_coordinator", "log")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def _other(session):
    import isolde

    return isolde.connect(warehouse=session.warehouse, spark=session.engine)


TRANSFER = ["UPDATE acc SET bal = bal - 10 WHERE id = 1", "UPDATE acc SET bal = bal + 10 WHERE id = 2",
            "INSERT INTO audit VALUES ('t1', 1, 2, 10)"]


def test_a_transfer_across_two_tables_is_one_entry_and_one_version_each(session, table_path, delta_rows):
    _bank(session)
    before = {t: _version(session, table_path, t) for t in ("acc", "audit")}
    entries = _entries(session)
    session.execute("BEGIN")
    for statement in TRANSFER:
        session.execute(statement)
    result = session.execute("COMMIT")
    assert result.versions == {"acc": before["acc"] + 1, "audit": before["audit"] + 1}
    assert result.table == "acc, audit" and result.version is None
    assert len(_entries(session)) == len(entries) + 1
    entry = json.loads(open(os.path.join(session.warehouse, "_isolde_coordinator", "log",
                                         _entries(session)[-1])).read())
    assert sorted(c["version"] for c in entry["commits"]) == sorted(result.versions.values())
    assert _rows(session, "acc") == [(1, 90), (2, 110), (3, 100)]
    assert _rows(session, "audit") == [("t1", 1, 2, 10)]
    assert delta_rows(table_path(session, "acc")) == [(1, 90), (2, 110), (3, 100)]
    assert delta_rows(table_path(session, "audit")) == [("t1", 1, 2, 10)]
    history = session.execute("DESCRIBE HISTORY acc").rows[0]
    assert history.operation == "MULTI-STATEMENT TRANSACTION" and history.version == result.versions["acc"]


def test_begin_atomic_and_the_library_form_write_several_tables(session):
    _bank(session)
    session.execute("BEGIN ATOMIC " + "; ".join(TRANSFER) + "; END")
    with session.transaction() as tx:
        tx.execute("UPDATE acc SET bal = bal - 5 WHERE id = 2")
        tx.execute("UPDATE acc SET bal = bal + 5 WHERE id = 3")
        tx.execute("INSERT INTO audit VALUES ('t2', 2, 3, 5)")
    assert _rows(session, "acc") == [(1, 90), (2, 105), (3, 105)]
    assert [r[0] for r in _rows(session, "audit")] == ["t1", "t2"]


def test_a_failing_statement_rolls_back_every_table(session, table_path):
    _bank(session)
    versions = {t: _version(session, table_path, t) for t in ("acc", "audit")}
    with pytest.raises(E.IsoldeError):
        session.execute("BEGIN ATOMIC " + "; ".join(TRANSFER) + "; INSERT INTO audit VALUES ('x', 'not a number'); END")
    assert {t: _version(session, table_path, t) for t in ("acc", "audit")} == versions
    assert _rows(session, "acc") == [(1, 100), (2, 100), (3, 100)] and _rows(session, "audit") == []
    session.execute("BEGIN")
    for statement in TRANSFER:
        session.execute(statement)
    session.execute("ROLLBACK")
    assert {t: _version(session, table_path, t) for t in ("acc", "audit")} == versions


def test_a_conflict_on_one_table_commits_nothing_anywhere(session, table_path):
    """The winner changed a row the transaction updated in acc: COMMIT fails as a whole, and
    audit, which nobody else touched, gets nothing either."""
    _bank(session, extra=", 'isolde.rowLevelConcurrency' = 'always'")
    other = _other(session)
    session.execute("BEGIN")
    for statement in TRANSFER:
        session.execute(statement)
    other.execute("UPDATE acc SET bal = 0 WHERE id = 1")
    winner = _version(session, table_path, "acc")
    audit = _version(session, table_path, "audit")
    with pytest.raises(E.ConcurrentModificationException) as info:
        session.execute("COMMIT")
    assert type(info.value).__name__ == "ConcurrentDeleteDeleteException"
    assert info.value.winning_version == winner and "rolled back" in str(info.value)
    assert _version(session, table_path, "audit") == audit and _rows(session, "audit") == []
    assert _rows(session, "acc") == [(1, 0), (2, 100), (3, 100)]


def test_each_table_is_read_as_of_one_coordinator_sequence_number(session):
    """The transaction read acc; then another transaction moved money and wrote audit; the
    transaction's first read of audit is as of the same point as its read of acc (no audit row
    without its balances)."""
    _bank(session)
    other = _other(session)
    session.execute("BEGIN")
    assert session.execute("SELECT sum(bal) FROM acc").rows[0][0] == 300
    other.execute("BEGIN ATOMIC " + "; ".join(TRANSFER) + "; END")
    assert session.execute("SELECT count(*) FROM audit").rows[0][0] == 0
    assert _rows(session, "acc") == [(1, 100), (2, 100), (3, 100)]
    session.execute("COMMIT")
    assert session.execute("SELECT count(*) FROM audit").rows[0][0] == 1


def _doctors(session, level):
    for name in ("ward_a", "ward_b"):
        _table(session, name, [(1, True), (2, True)], columns="doctor INT, on_call BOOLEAN",
               extra=f", 'delta.isolationLevel' = '{level}', 'isolde.rowLevelConcurrency' = 'always'")


def _leave(s, mine, others):
    """Check that the other ward keeps someone on call, then take a doctor off this ward."""
    s.execute("BEGIN")
    assert s.execute(f"SELECT count(*) FROM {others} WHERE on_call").rows[0][0] == 2
    s.execute(f"UPDATE {mine} SET on_call = false WHERE doctor = 1")
    s.execute(f"UPDATE {mine} SET on_call = false WHERE doctor = 2")


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
def test_write_skew_across_two_tables_is_refused(session, level):
    """Each transaction reads the ward the other empties, then empties its own: committing both
    would leave nobody on call, which no serial order allows. The second COMMIT fails under both
    levels: the winner rewrote rows the loser read (under WriteSerializable only a blind append
    to a read table may be ordered after the reader)."""
    _doctors(session, level)
    other = _other(session)
    _leave(session, "ward_a", "ward_b")
    _leave(other, "ward_b", "ward_a")
    session.execute("COMMIT")
    with pytest.raises(E.ConcurrentModificationException) as info:
        other.execute("COMMIT")
    assert type(info.value).__name__ == "ConcurrentDeleteReadException"
    assert _rows(session, "ward_b") == [(1, True), (2, True)]
    assert _rows(session, "ward_a") == [(1, False), (2, False)]


@pytest.mark.parametrize("level, conflicts", [("Serializable", True), ("WriteSerializable", False)])
def test_a_blind_append_to_a_table_read_is_ordered_by_the_level(session, level, conflicts):
    """A doctor joins ward_b on call while the transaction counted ward_b's doctors on call:
    Serializable refuses the transaction (it read what the append changes); WriteSerializable
    orders it before the append. (An appended doctor off call matches no read: both commit.)"""
    _doctors(session, level)
    other = _other(session)
    _leave(session, "ward_a", "ward_b")
    other.execute("INSERT INTO ward_b VALUES (3, true)")
    if conflicts:
        with pytest.raises(E.ConcurrentAppendException):
            session.execute("COMMIT")
        assert _rows(session, "ward_a") == [(1, True), (2, True)]
    else:  # the serial order: this transaction, then the append (which read nothing)
        session.execute("COMMIT")
        assert _rows(session, "ward_a") == [(1, False), (2, False)]


def test_racing_commits_of_cross_table_write_skew_never_both_land(session):
    """The two COMMITs of the write-skew pair start at the same moment, over and over: the
    read-only table is validated inside the coordinator's decision, so there is no window in
    which both validate and both commit."""
    _doctors(session, "Serializable")
    other = _other(session)
    for round_ in range(6):
        session.execute("UPDATE ward_a SET on_call = true")
        session.execute("UPDATE ward_b SET on_call = true")
        _leave(session, "ward_a", "ward_b")
        _leave(other, "ward_b", "ward_a")
        prepared = [transactions.prepare(s) for s in (session, other)]  # the open BEGINs, built
        start, outcomes = threading.Barrier(2), [None, None]

        def commit(i):
            start.wait()
            try:
                prepared[i].commit()
                outcomes[i] = "committed"
            except E.ConcurrentModificationException as e:
                outcomes[i] = type(e).__name__

        threads = [threading.Thread(target=commit, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["ConcurrentDeleteReadException", "committed"], (round_, outcomes)
        on_call = sum(session.execute(f"SELECT count(*) FROM {w} WHERE on_call").rows[0][0]
                      for w in ("ward_a", "ward_b"))
        assert on_call == 2, round_


def test_tables_not_opted_in_are_refused_with_how_to_opt_in(session):
    session.execute("CREATE TABLE plain (id INT) USING DELTA")
    _bank(session)
    session.execute("BEGIN")
    session.execute("UPDATE acc SET bal = 1 WHERE id = 1")
    with pytest.raises(E.TransactionStateError) as info:
        session.execute("INSERT INTO plain VALUES (1)")
    assert info.value.error_class == "MULTI_TABLE_TRANSACTION_NOT_COORDINATED"
    assert "plain" in str(info.value) and "'isolde.coordinatedCommits' = 'true'" in str(info.value)
    session.execute("INSERT INTO audit VALUES ('t', 1, 1, 0)")  # still usable, and coordinated tables go together
    session.execute("COMMIT")
    assert _rows(session, "acc")[0] == (1, 1) and len(_rows(session, "audit")) == 1


def test_other_engines_read_a_coordinated_table_but_cannot_write_it(session, table_path):
    _bank(session)
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    path = table_path(session, "audit")
    assert DeltaTable(path).version() == _version(session, table_path, "audit")
    with pytest.raises(Exception, match="isoldeCoordinatedCommits"):
        write_deltalake(path, pa.table({"transfer": ["x"], "src": pa.array([1], pa.int32()),
                                        "dst": pa.array([1], pa.int32()), "amount": pa.array([1], pa.int32())}),
                        mode="append")
    assert _rows(session, "audit") == []


def test_dropping_the_feature_opts_out_and_other_engines_write_again(session, table_path, delta_rows):
    _bank(session)
    session.execute("ALTER TABLE audit DROP FEATURE isoldeCoordinatedCommits")
    path = table_path(session, "audit")
    snapshot = DeltaLog.for_table(path).update()
    assert "isoldeCoordinatedCommits" not in (snapshot.protocol.writer_features or ())
    assert "isolde.coordinatedCommits" not in snapshot.configuration
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(path, pa.table({"transfer": ["x"], "src": pa.array([1], pa.int32()),
                                    "dst": pa.array([2], pa.int32()), "amount": pa.array([3], pa.int32())}),
                    mode="append")
    assert _rows(session, "audit") == [("x", 1, 2, 3)] and delta_rows(path) == [("x", 1, 2, 3)]
    session.execute("BEGIN")
    session.execute("UPDATE acc SET bal = 0 WHERE id = 1")
    with pytest.raises(E.TransactionStateError, match="MULTI_TABLE|coordinator"):
        session.execute("INSERT INTO audit VALUES ('y', 1, 1, 1)")
    session.execute("ROLLBACK")
