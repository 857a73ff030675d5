"""A file-level conflict that row level would have let through says how to get row level
(issue 55): two UPDATEs of different rows of one partition of a partitioned table with deletion
vectors. The message names the table property, and with it set the same two statements both commit."""

from __future__ import annotations

import pytest

from isolde.errors import ConcurrentDeleteReadException

SETTING = "SET TBLPROPERTIES ('isolde.rowLevelConcurrency' = 'always')"


def _table(session):
    session.execute("CREATE TABLE t (id BIGINT, v STRING, day DATE) PARTITIONED BY (day) "
                    "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    session.execute("INSERT INTO t VALUES (1, 'x', DATE'2024-01-01'), (2, 'x', DATE'2024-01-01')")


def _rows(session):
    return sorted(tuple(r) for r in session.execute("SELECT id, v FROM t").collect())


def test_the_conflict_names_the_property_and_the_property_lets_both_commit(session):
    _table(session)
    first = session.prepare("UPDATE t SET v = 'a' WHERE id = 1")
    session.execute("UPDATE t SET v = 'b' WHERE id = 2")
    with pytest.raises(ConcurrentDeleteReadException) as info:
        first.commit()
    assert SETTING in str(info.value)
    assert "UPDATE at version 2" in str(info.value)
    assert _rows(session) == [(1, "x"), (2, "b")]  # the loser left nothing behind

    session.execute(f"ALTER TABLE t {SETTING}")
    first = session.prepare("UPDATE t SET v = 'a' WHERE id = 1")
    session.execute("UPDATE t SET v = 'c' WHERE id = 2")
    first.commit()
    assert _rows(session) == [(1, "a"), (2, "c")]
