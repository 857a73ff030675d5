"""Issue 52, items 1-3, as users meet them: a row-level rebase over a commit that shrank a
deletion vector, a compaction after a statement was ordered before an earlier winner, and the
row-level budget's fallback to the file-level rules after such a placement.

Each reproducer runs the statements the issue names through ``prepare()`` / ``commit()`` on real
Spark DML and asserts the exact outcome (exception class, table state read by isolde and by
delta-rs). The log-level model checker (tests/executor/txn/test_row_level_model.py) covers the same
classes on random histories.
"""

from __future__ import annotations

import pytest

from isolde import errors as E

VALUES = ", ".join(f"({i}, 0)" for i in range(10))  # one INSERT: one data file


def rows(s, table="t"):
    return sorted(tuple(r) for r in s.sql(f"SELECT id, v FROM {table}").collect())


def create(s, *, level="WriteSerializable", mode="auto", extra=""):
    s.execute(f"CREATE TABLE t (id INT, v INT) TBLPROPERTIES ('delta.isolationLevel' = '{level}', "
              f"'isolde.rowLevelConcurrency' = '{mode}'{extra})")
    s.execute(f"INSERT INTO t VALUES {VALUES}")  # v1


# --------------------------------------------------------------------------- 1: a winner that shrank a vector

LOSERS = {
    "DELETE": ("DELETE FROM t WHERE id = 5", lambda r: [x for x in r if x[0] != 5]),
    "UPDATE": ("UPDATE t SET v = 7 WHERE id = 5", lambda r: [(i, 7 if i == 5 else v) for i, v in r]),
    "MERGE": ("MERGE INTO t USING (SELECT 5 AS id) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 7",
              lambda r: [(i, 7 if i == 5 else v) for i, v in r]),
}


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
@pytest.mark.parametrize("loser", sorted(LOSERS))
def test_a_rebase_over_a_restore_never_deletes_the_restored_rows(session, table_path, delta_rows, level, loser):
    s = session
    create(s, level=level)
    s.execute("DELETE FROM t WHERE id = 0")  # v2: a vector {0} on the one file
    sql, expect = LOSERS[loser]
    p = s.prepare(sql)  # reads v2: its own new vector is {0, 5}
    s.execute("RESTORE TABLE t TO VERSION AS OF 1")  # v3: id 0 back, the file without a vector
    result = p.commit()
    expected = sorted(expect([(i, 0) for i in range(10)]))
    assert rows(s) == expected and delta_rows(table_path(s, "t"), ["id", "v"]) == expected
    assert result.counts["num_affected_rows"] == 1  # its own row only


def test_a_rebase_over_a_restore_to_a_smaller_vector_keeps_the_winners_vector(session, table_path, delta_rows):
    s = session
    create(s)
    s.execute("DELETE FROM t WHERE id = 1")  # v2: {1}
    s.execute("DELETE FROM t WHERE id = 2")  # v3: {1, 2}
    p = s.prepare("DELETE FROM t WHERE id = 5")  # its vector would be {1, 2, 5}
    s.execute("RESTORE TABLE t TO VERSION AS OF 2")  # v4: {1}: id 2 back
    p.commit()
    expected = [(i, 0) for i in range(10) if i not in (1, 5)]
    assert rows(s) == expected and delta_rows(table_path(s, "t"), ["id", "v"]) == expected


def test_a_rebase_over_a_replace_by_clone_keeps_the_cloned_rows(session, table_path, delta_rows):
    """A shallow clone of the table's own older version onto it: the files come back with their
    older vectors, as after RESTORE; a statement prepared before it is rebased the same way, or
    refused if the replace changed the metadata -- never does it delete the revived rows."""
    s = session
    create(s)
    s.execute("DELETE FROM t WHERE id = 0")
    s.execute("CREATE TABLE keep SHALLOW CLONE t VERSION AS OF 1")
    p = s.prepare("DELETE FROM t WHERE id = 5")
    s.execute("CREATE OR REPLACE TABLE t SHALLOW CLONE keep")
    try:
        p.commit()
    except E.ConcurrentModificationException:
        assert rows(s) == [(i, 0) for i in range(10)]
    else:
        expected = [(i, 0) for i in range(10) if i != 5]
        assert rows(s) == expected and delta_rows(table_path(s, "t"), ["id", "v"]) == expected


# --------------------------------------------------------------------------- 2: compactions never fail DML


@pytest.mark.parametrize("compaction", ["OPTIMIZE t", "REORG TABLE t APPLY (PURGE)"])
def test_a_compaction_after_an_ordering_never_fails_the_statement(session, table_path, delta_rows, compaction):
    s = session
    create(s)
    s.execute("INSERT INTO t VALUES (20, 0)")  # a second file: something to compact
    p = s.prepare("UPDATE t SET v = 1 WHERE id = 5 OR id = 1")
    s.execute("UPDATE t SET id = 5 WHERE id = 9")  # moves a row into the read: p is ordered before it
    s.execute(compaction)
    p.commit()  # ConcurrentDeleteReadException naming the compaction before the fix
    expected = sorted([(i, 0) for i in range(9) if i not in (1, 5)] + [(1, 1), (5, 1), (5, 0), (20, 0)])
    assert rows(s) == expected and delta_rows(table_path(s, "t"), ["id", "v"]) == expected


# --------------------------------------------------------------------------- 3: the budget's fallback


def test_a_fallback_past_the_budget_keeps_the_statements_order(session, table_path, delta_rows):
    """WriteSerializable: p (ids 5, 1) is ordered before the UPDATE that moves id 9 to 5; the
    DELETE then removes the rows inserted after the move, the rows p writes (v = 1) and id 9 --
    it saw id 9 gone, so it must follow the move, which p must precede: p's rows would be
    deleted. (Without ``OR id = 9`` the DELETE could be ordered first, and p's commit would be
    serialisable: DELETE, p, UPDATE.) The DELETE's
    row-level check reads more than the budget (100 rows); per file, it touched no file p read.
    Before the fix p committed and its v = 1 rows outlived a DELETE that serially follows it."""
    s = session
    create(s)
    s.execute("SET isolde.rowLevelConcurrency.budgetRows = 100")
    p = s.prepare("UPDATE t SET v = 1 WHERE id = 5 OR id = 1")
    s.execute("RESET isolde.rowLevelConcurrency.budgetRows")
    s.execute("UPDATE t SET id = 5 WHERE id = 9")
    s.execute("INSERT INTO t SELECT id + 1000, 0 FROM range(200)")
    s.execute("DELETE FROM t WHERE (id >= 1000 AND id < 2000) OR v = 1 OR id = 9")
    before = rows(s)
    with pytest.raises((E.ConcurrentDeleteReadException, E.ConcurrentAppendException)) as err:
        p.commit()
    assert err.value.winning_operation == "DELETE" and err.value.winning_version == 4
    assert "Decided per file" in str(err.value) and "ordered before version 2" in str(err.value)
    assert rows(s) == before and delta_rows(table_path(s, "t"), ["id", "v"]) == before


def test_without_the_budget_the_row_level_check_refuses_the_same_history(session):
    s = session
    create(s)
    p = s.prepare("UPDATE t SET v = 1 WHERE id = 5 OR id = 1")
    s.execute("UPDATE t SET id = 5 WHERE id = 9")
    s.execute("INSERT INTO t SELECT id + 1000, 0 FROM range(200)")
    s.execute("DELETE FROM t WHERE (id >= 1000 AND id < 2000) OR v = 1 OR id = 9")
    with pytest.raises((E.ConcurrentDeleteReadException, E.ConcurrentAppendException)) as err:
        p.commit()
    assert err.value.winning_version == 4 and "Decided per file" not in str(err.value)
