"""DESCRIBE / SHOW / RESTORE / VACUUM / CLONE / CONVERT through a Session on Spark, with
isolde's own writes (INSERT, DELETE) and reads; every table is read back by isolde and by
delta-rs and compared row for row. Time travel, RESTORE and VACUUM are run against
concurrent (prepared, not yet committed) writes.
"""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from isolde import errors as E

from tests.helpers.meta import age_files, assert_same_rows, snapshot, version_of

pytestmark = pytest.mark.spark
DAY = 86_400


def _path(session, name):
    from isolde.grammar import ast

    return session.catalog.resolve(ast.TableRef(parts=(name,)), session.current_database, must_exist=False).path


def test_describe_and_show_on_isolde_writes(session):
    s = session
    s.execute("CREATE TABLE t (id BIGINT COMMENT 'key', s STRING) PARTITIONED BY (s) "
              "TBLPROPERTIES ('delta.isolationLevel' = 'Serializable')")
    s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    s.execute("DELETE FROM t WHERE id = 1")
    hist = s.execute("DESCRIBE HISTORY t").as_dicts()
    assert [h["operation"] for h in hist] == ["DELETE", "WRITE", "CREATE TABLE"]
    assert [h["version"] for h in hist] == [2, 1, 0]
    assert hist[0]["readVersion"] == 1 and hist[0]["isolationLevel"] == "Serializable"
    assert hist[1]["operationMetrics"]["numFiles"] == "2"
    detail = s.execute("DESCRIBE DETAIL t").as_dicts()[0]
    assert detail["partitionColumns"] == ["s"] and detail["numFiles"] == len(snapshot(_path(s, "t")).all_files)
    assert detail["properties"]["delta.isolationLevel"] == "Serializable"
    rows = s.execute("DESCRIBE TABLE t").rows
    assert rows[0] == ("id", "bigint", "key") and ("# Partition Information", "", "") in rows
    props = dict(s.execute("SHOW TBLPROPERTIES t").rows)
    assert props["delta.isolationLevel"] == "Serializable"
    assert_same_rows(s, _path(s, "t"), ref="t", expected=[(2, "b")])


def test_commit_user_metadata_from_the_session_setting(session):
    """SET spark.databricks.delta.commitInfo.userMetadata tags every commit of the session
    (DML, DDL, ALTER) until RESET, as in Delta; DESCRIBE HISTORY and delta-rs both show it."""
    from deltalake import DeltaTable

    s = session
    s.execute("CREATE TABLE t (id BIGINT, v STRING)")                     # v0, untagged
    s.execute("SET spark.databricks.delta.commitInfo.userMetadata = 'backfill #42'")
    s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")                 # v1
    s.execute("UPDATE t SET v = 'z' WHERE id = 2")                       # v2
    s.execute("ALTER TABLE t SET TBLPROPERTIES ('delta.appendOnly' = 'false')")  # v3
    s.execute("RESET spark.databricks.delta.commitInfo.userMetadata")
    s.execute("DELETE FROM t WHERE id = 1")                              # v4, untagged
    hist = {h["version"]: h["userMetadata"] for h in s.execute("DESCRIBE HISTORY t").as_dicts()}
    assert hist == {0: None, 1: "backfill #42", 2: "backfill #42", 3: "backfill #42", 4: None}
    theirs = {h["version"]: h.get("userMetadata") for h in DeltaTable(_path(s, "t")).history()}
    assert theirs == hist


def test_restore_time_travel_and_concurrent_writers(session):
    s = session
    s.execute("CREATE TABLE t (id BIGINT, v STRING)")
    s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")               # v1
    s.execute("INSERT INTO t VALUES (3, 'c')")                         # v2
    s.execute("DELETE FROM t WHERE id = 1")                            # v3 (a DV)
    path = _path(s, "t")
    at_v1 = sorted(s.execute("SELECT * FROM t VERSION AS OF 1").rows)
    assert at_v1 == [(1, "a"), (2, "b")]
    r = s.execute("RESTORE TABLE t TO VERSION AS OF 1")
    assert r.operation == "RESTORE" and r.version == 4
    assert_same_rows(s, path, ref="t", expected=at_v1)
    assert sorted(s.execute("SELECT * FROM t VERSION AS OF 3").rows) == [(2, "b"), (3, "c")]
    # by timestamp: the moment version 2 was committed
    ts = snapshot(path, 2).timestamp
    import datetime as dt

    when = dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    s.execute(f"RESTORE TABLE t TO TIMESTAMP AS OF '{when}'")           # v5
    assert_same_rows(s, path, ref="t", expected=[(1, "a"), (2, "b"), (3, "c")])
    # a DELETE prepared before a RESTORE commits loses when the RESTORE deleted the same row
    # (checked per row: the RESTORE's deletion vector on that file removes id 1 again)
    prepared = s.prepare("DELETE FROM t WHERE id = 1")
    s.execute("RESTORE TABLE t TO VERSION AS OF 3")                    # v6
    with pytest.raises(E.ConcurrentDeleteDeleteException):
        prepared.commit()
    assert version_of(path) == 6
    assert_same_rows(s, path, ref="t", expected=[(2, "b"), (3, "c")])
    # ... and commits after it when the rows differ: RESTORE, then the DELETE, is a serial order
    prepared = s.prepare("DELETE FROM t WHERE id = 3")
    s.execute("RESTORE TABLE t TO VERSION AS OF 5")                    # v7: 1, 2, 3 again
    prepared.commit()                                                  # v8
    assert_same_rows(s, path, ref="t", expected=[(1, "a"), (2, "b")])
    # a RESTORE prepared before a DELETE commits loses (it read the whole table)
    restore = s.prepare("RESTORE TABLE t TO VERSION AS OF 2")
    s.execute("DELETE FROM t WHERE id = 2")                            # v9
    with pytest.raises(E.ConcurrentModificationException):
        restore.commit()
    assert_same_rows(s, path, ref="t", expected=[(1, "a")])
    with pytest.raises(E.VersionNotFoundError):
        s.execute("RESTORE TABLE t TO VERSION AS OF 42")
    assert version_of(path) == 9


def test_vacuum_with_a_concurrent_prepared_write(session):
    s = session
    s.execute("CREATE TABLE t (id BIGINT, v STRING)")
    s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    s.execute("INSERT INTO t VALUES (3, 'c')")
    path = _path(s, "t")
    # an old DELETE: the file of version 1 was removed 10 days ago
    from isolde.executor.log.delta_log import DeltaLog

    v1_files = snapshot(path, 1).all_files
    txn = DeltaLog.for_table(path).start_transaction()
    txn.read_whole_table()
    txn.commit([a.remove(deletion_timestamp=int((time.time() - 10 * DAY) * 1000)) for a in v1_files],
               operation="DELETE")                                     # v3
    age_files(path, 20 * DAY)
    pending = s.prepare("INSERT INTO t VALUES (4, 'd'), (5, 'e')")    # staged, young, not committed
    assert pending.staged_paths
    dry = s.execute("VACUUM t DRY RUN")
    planned = {r[0] for r in dry.rows}
    assert planned == {os.path.join(path, a.path) for a in v1_files}
    with pytest.raises(E.AnalysisError, match="retentionDurationCheck"):
        s.execute("VACUUM t RETAIN 1 HOURS")
    r = s.execute("VACUUM t")
    assert r.metrics["numDeletedFiles"] == len(v1_files)
    for p in pending.staged_paths:
        assert os.path.exists(p), p
    pending.commit()
    assert_same_rows(s, path, ref="t", expected=[(3, "c"), (4, "d"), (5, "e")])
    # versions whose files are retained still time travel; a vacuumed one fails loudly, not silently
    assert sorted(s.execute("SELECT * FROM t VERSION AS OF 3").rows) == [(3, "c")]
    with pytest.raises(E.IsoldeError, match="does not exist"):
        s.execute("SELECT * FROM t VERSION AS OF 1").rows
    # with the check off and 0 hours, the removed files of recent versions go too
    s.execute("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    s.execute("DELETE FROM t WHERE id = 3")
    age_files(path, 60)
    before = {a.path for a in snapshot(path).all_files}
    s.execute("VACUUM t RETAIN 0 HOURS")
    assert all(os.path.exists(os.path.join(path, p)) for p in before)
    assert_same_rows(s, path, ref="t", expected=[(4, "d"), (5, "e")])


def test_clone_shallow_and_deep(session):
    s = session
    s.execute("CREATE TABLE src (id BIGINT, v STRING)")
    s.execute("INSERT INTO src VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    s.execute("DELETE FROM src WHERE id = 2")                          # v2: a DV in the source
    s.execute("INSERT INTO src VALUES (4, 'd')")                       # v3
    r = s.execute("CREATE TABLE sc SHALLOW CLONE src VERSION AS OF 2")
    assert r.operation == "CLONE"
    sc = _path(s, "sc")
    assert_same_rows(s, sc, ref="sc", expected=[(1, "a"), (3, "c")])
    s.execute("INSERT INTO sc VALUES (9, 'z')")                        # written into the clone's own folder
    s.execute("DELETE FROM sc WHERE id = 1")                           # a DV on a file the source owns
    assert_same_rows(s, sc, ref="sc", expected=[(3, "c"), (9, "z")])
    assert_same_rows(s, _path(s, "src"), ref="src", expected=[(1, "a"), (3, "c"), (4, "d")])
    s.execute("CREATE TABLE dc DEEP CLONE src")
    dc = _path(s, "dc")
    assert_same_rows(s, dc, ref="dc", expected=[(1, "a"), (3, "c"), (4, "d")])
    detail = s.execute("DESCRIBE DETAIL dc").as_dicts()[0]
    assert detail["numFiles"] == len(snapshot(_path(s, "src")).all_files)
    with pytest.raises(E.TableAlreadyExistsError):
        s.execute("CREATE TABLE dc SHALLOW CLONE src")


def test_convert_to_delta_then_write(session, tmp_path):
    s = session
    folder = str(tmp_path / "legacy")
    for part, rows in (("1", [{"id": 1, "name": "x"}]), ("2", [{"id": 2, "name": "y"}, {"id": 3, "name": None}])):
        os.makedirs(f"{folder}/p={part}")
        pq.write_table(pa.Table.from_pylist(rows), f"{folder}/p={part}/data.parquet")
    r = s.execute(f"CONVERT TO DELTA parquet.`{folder}` PARTITIONED BY (p INT)")
    assert r.operation == "CONVERT" and r.version == 0
    assert snapshot(folder).metadata.configuration.get("delta.enableDeletionVectors") == "true"  # CREATE's default
    ref = f"delta.`{folder}`"
    assert_same_rows(s, folder, ref=ref, columns=["id", "name", "p"],
                     expected=[(1, "x", 1), (2, "y", 2), (3, None, 2)])
    s.execute(f"INSERT INTO {ref} VALUES (4, 'w', 1)")
    s.execute(f"DELETE FROM {ref} WHERE id = 2")
    assert_same_rows(s, folder, ref=ref, columns=["id", "name", "p"],
                     expected=[(1, "x", 1), (3, None, 2), (4, "w", 1)])
    assert s.execute(f"DESCRIBE HISTORY {ref}").as_dicts()[-1]["operation"] == "CONVERT"
