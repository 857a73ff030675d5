"""A RESTORE can shrink a file's deletion vector: rows deleted before come back. That is an
append of those rows (never only a deletion), per row and per file, or a statement that read
them as absent commits over them."""

from __future__ import annotations

import pytest

from isolde import errors as E


def rows(s):
    return sorted(tuple(r) for r in s.sql("SELECT id, v FROM t").collect())


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
@pytest.mark.parametrize("mode", ["auto", "off"])
def test_update_prepared_before_a_restore_that_revives_rows_conflicts(session, level, mode):
    s = session
    s.execute(f"CREATE TABLE t (id INT, v STRING) TBLPROPERTIES ('delta.isolationLevel' = '{level}', "
              f"'isolde.rowLevelConcurrency' = '{mode}')")
    s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")      # v1, one file
    s.execute("DELETE FROM t WHERE id = 1")                            # v2: a deletion vector
    update = s.prepare("UPDATE t SET v = 'x' WHERE id <= 3")           # reads ids 2, 3
    assert ("checked per row" in s.explain("UPDATE t SET v = 'x' WHERE id <= 3")) is (mode == "auto")
    s.execute("RESTORE TABLE t TO VERSION AS OF 1")                    # v3: id 1 is back
    with pytest.raises(E.ConcurrentAppendException) as err:
        update.commit()
    assert err.value.winning_operation == "RESTORE" and err.value.winning_version == 3
    assert rows(s) == [(1, "a"), (2, "b"), (3, "c")]
