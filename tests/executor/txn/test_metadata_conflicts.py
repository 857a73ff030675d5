"""Metadata and protocol changes fail every concurrent writer (the reference's "Important" box):
each metadata statement of its list against each kind of write, through prepare()/commit() --
except a change that only enables a feature a prepared commit honours (deletion vectors, as
Delta 4.1+ does: FeatureEnablementConcurrencySuite), which every such writer commits on top of.

A writer that read the table before the change commits after it: MetadataChangedException, or
ProtocolChangedException when the change touched the protocol; the table keeps the change
and not the writer's rows. In the other order (the change prepared first, a writer commits
first) the change still commits on top -- it read no rows -- unless what the writer committed
makes the change wrong: DROP FEATURE deletionVectors must not drop the feature under a
deletion vector that a concurrent DELETE just wrote.
"""

from __future__ import annotations

import pytest

from isolde import errors as E

#: (id, statement, changes the protocol?) -- the table starts without deletion vectors unless
#: the statement needs them (see _table)
CHANGES = [
    ("property", "ALTER TABLE t SET TBLPROPERTIES ('team' = 'blue')", False),
    ("isolation", "ALTER TABLE t SET TBLPROPERTIES ('delta.isolationLevel' = 'Serializable')", False),
    ("unset", "ALTER TABLE t UNSET TBLPROPERTIES ('owner')", False),
    ("add-columns", "ALTER TABLE t ADD COLUMNS (note STRING)", False),
    ("drop-feature", "ALTER TABLE t DROP FEATURE deletionVectors", True),
]

WRITES = {
    "insert": "INSERT INTO t VALUES (100, 'new')",
    "insert-select": "INSERT INTO t SELECT id + 100, v FROM t WHERE id = 1",
    "update": "UPDATE t SET v = 'changed' WHERE id = 2",
    "delete": "DELETE FROM t WHERE id = 3",
    "merge": ("MERGE INTO t USING (SELECT 1 AS id, 'm' AS v UNION ALL SELECT 200, 'm') s ON t.id = s.id "
              "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"),
    "truncate": "TRUNCATE TABLE t",
}

ROWS = [(1, "a"), (2, "b"), (3, "c"), (4, "d")]


def _table(s, change_id: str) -> int:
    """t with four rows in two files; for DROP FEATURE the deletionVectors feature is in the protocol
    but turned off, so the drop is its one protocol commit (with the property on, its first commit
    turns it off: tests/executor/jobs/test_drop_feature_history.py)."""
    feature = ", 'delta.feature.deletionVectors' = 'supported'" if change_id == "drop-feature" else ""
    s.execute(f"CREATE TABLE t (id INT, v STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = 'false', "
              f"'owner' = 'ops'{feature})")
    s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    s.execute("INSERT INTO t VALUES (3, 'c'), (4, 'd')")
    return s.execute("DESCRIBE HISTORY t").first().version


def _rows(s):
    return sorted(tuple(r)[:2] for r in s.sql("SELECT id, v FROM t").collect())


@pytest.mark.parametrize("change_id, change, protocol", CHANGES, ids=[c[0] for c in CHANGES])
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_metadata_change_fails_a_writer_that_started_before_it(session, change_id, change, protocol, write):
    s = session
    base = _table(s, change_id)
    writer = s.prepare(WRITES[write])
    s.execute(change)
    expected = E.ProtocolChangedException if protocol else E.MetadataChangedException
    with pytest.raises(E.ConcurrentModificationException) as info:
        writer.commit()
    assert type(info.value) is expected
    assert info.value.winning_version == base + 1
    assert s.execute("DESCRIBE HISTORY t").first().version == base + 1  # the change, not the write
    assert _rows(s) == ROWS


#: changes that only enable a feature (or only add one to the protocol): as in Delta 4.4, they
#: fail no writer that changes neither metadata nor protocol -- (id, statement, property it sets)
ENABLEMENTS = [
    ("enable-dv", "ALTER TABLE t SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
     ("delta.enableDeletionVectors", "true")),
    ("feature", "ALTER TABLE t SET TBLPROPERTIES ('delta.feature.checkConstraints' = 'supported')", None),
]


@pytest.mark.parametrize("change_id, change, prop", ENABLEMENTS, ids=[c[0] for c in ENABLEMENTS])
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_feature_enablement_fails_no_writer(session, write, change_id, change, prop):
    """The writer prepared before the enablement commits on top of it, with the rows it would have
    written without it (the same write run on a twin table u that nobody altered)."""
    import re

    s = session
    base = _table(s, change_id)
    s.execute("CREATE TABLE u AS SELECT * FROM t")
    writer = s.prepare(WRITES[write])
    s.execute(change)
    assert writer.commit().version == base + 2
    s.execute(re.sub(r"\bt\b", "u", WRITES[write]))
    assert _rows(s) == sorted(tuple(r) for r in s.sql("SELECT id, v FROM u").collect())
    props = {r[0]: r[1] for r in s.execute("SHOW TBLPROPERTIES t").collect()}
    if prop is not None:
        assert props[prop[0]] == prop[1]


@pytest.mark.parametrize("change_id, change, protocol",
                         [c for c in CHANGES if c[0] != "drop-feature"], ids=[c[0] for c in CHANGES if c[0] != "drop-feature"])
@pytest.mark.parametrize("write", ["insert", "update", "merge"])
def test_a_metadata_change_commits_on_top_of_a_writer_that_won(session, change_id, change, protocol, write):
    s = session
    base = _table(s, change_id)
    alter = s.prepare(change)
    s.execute(WRITES[write])
    after_write = _rows(s)
    result = alter.commit()
    assert result.version == base + 2
    assert _rows(s) == after_write  # the writer's rows stay


def test_drop_feature_does_not_drop_deletion_vectors_a_concurrent_delete_wrote(session, delta_rows, table_path):
    s = session
    base = _table(s, "drop-feature")
    drop = s.prepare("ALTER TABLE t DROP FEATURE deletionVectors")
    s.execute("DELETE FROM t WHERE id = 3")  # a deletion vector on the second file
    with pytest.raises(E.ConcurrentModificationException):
        drop.commit()
    history = s.execute("DESCRIBE HISTORY t")
    assert history.first().version == base + 1 and history.first().operation == "DELETE"
    assert _rows(s) == [r for r in ROWS if r[0] != 3]
    assert delta_rows(table_path(s, "t"), ["id", "v"]) == [r for r in ROWS if r[0] != 3]
    # a fresh DROP FEATURE decides on the table as the DELETE left it: refused while a live file
    # has a deletion vector, else dropped; either way the rows stay
    from isolde.executor.log.delta_log import DeltaLog

    live_dvs = any(a.deletion_vector is not None for a in DeltaLog(table_path(s, "t")).update().all_files)
    if live_dvs:
        with pytest.raises(E.ExecutionError, match="REORG"):
            s.execute("ALTER TABLE t DROP FEATURE deletionVectors")
    else:
        s.execute("ALTER TABLE t DROP FEATURE deletionVectors")
    assert _rows(s) == [r for r in ROWS if r[0] != 3]


@pytest.mark.parametrize("create", [
    "CREATE TABLE r (id INT, v STRING)",
    "CREATE TABLE r AS SELECT 1 AS id, 'x' AS v",
    "CREATE TABLE IF NOT EXISTS r (id INT, v STRING)",
])
def test_two_writers_creating_one_table_one_wins(session, create):
    """Both prepared before either commits: the first creates the table, the second gets
    ProtocolChangedException saying another writer created it (IF NOT EXISTS included: it
    checked before the other existed)."""
    s = session
    first, second = s.prepare(create), s.prepare(create)
    won = first.commit()
    assert won.version == 0
    with pytest.raises(E.ConcurrentModificationException) as info:
        second.commit()
    assert type(info.value) is E.ProtocolChangedException
    assert "created" in str(info.value).lower()
    assert s.execute("DESCRIBE HISTORY r").first().version == 0


def test_threads_racing_to_create_one_table_leave_one_version_zero(session, spark):
    import threading

    import isolde

    warehouse = session.warehouse
    outcomes: list = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def create(n: int):
        s = isolde.connect(warehouse=warehouse, spark=spark)
        try:
            barrier.wait()
            r = s.execute(f"CREATE TABLE race AS SELECT {n} AS writer")
            with lock:
                outcomes.append(("ok", r.version, n))
        except E.IsoldeError as e:
            with lock:
                outcomes.append((type(e).__name__, None, n))

    threads = [threading.Thread(target=create, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o[0] == "ok"]
    assert len(winners) == 1 and winners[0][1] == 0, outcomes
    # the losers: another writer created it (a conflict) or it already existed when they looked
    assert {o[0] for o in outcomes if o[0] != "ok"} <= {"ProtocolChangedException", "TableAlreadyExistsError"}, outcomes
    assert [tuple(r) for r in session.sql("SELECT writer FROM race").collect()] == [(winners[0][2],)]
