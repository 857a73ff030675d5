"""What UPDATE / DELETE / MERGE / INSERT answer and commit (GitHub issue 21):

* Databricks' one-row results (``num_affected_rows`` ...), exact, also through prepare();
* a file a deletion-vector write leaves with no live row is removed (no vector covering every
  row), with Delta's metrics;
* a DELETE whose condition is decided by partition values removes whole files from the log
  without reading them, records the same reads as before, and keeps its conflicts;
* commitInfo's isolationLevel is the table's for every data change, and userName is filled.

delta-rs (``deltalake``) is the interop oracle: ``to_pyarrow_table()`` where no deletion
vector remains, QueryBuilder otherwise."""

from __future__ import annotations

import getpass
import glob
import json
import os

import pyarrow as pa
import pytest

from tests.helpers.oracle import read_delta_rows  # noqa: E402
from tests.helpers.dml import make_table  # noqa: E402

import isolde.errors as E  # noqa: E402

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("p", pa.string())])
DV = {"delta.enableDeletionVectors": "true"}
COW = {"delta.enableDeletionVectors": "false"}


# --------------------------------------------------------------------------- helpers


def _path(s, name="t") -> str:
    return os.path.join(s.warehouse, "default", name)


def _table(s, batches, *, partitioned=False, properties=None, name="t") -> str:
    """One file per batch (and partition): ids as given, v = id, p as given (default 'a')."""
    rows = [[{"id": i, "v": i, "p": p} for i, p in batch] for batch in batches]
    path = _path(s, name)
    make_table(path, SCHEMA, rows, partition_by=("p",) if partitioned else (), properties=properties)
    return path


def _ids(*ids, p="a"):
    return [(i, p) for i in ids]


def _actions(path, version) -> list[dict]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _info(path, version) -> dict:
    return next(a["commitInfo"] for a in _actions(path, version) if "commitInfo" in a)


def _files(path, version, kind) -> list[dict]:
    return [a[kind] for a in _actions(path, version) if kind in a]


def _rows(s, cols="id, v, p"):
    return sorted(tuple(r) for r in s.execute(f"SELECT {cols} FROM t").collect())


def _live(path):
    from isolde.executor.log import DeltaLog

    return DeltaLog.for_table(path).update().all_files


def _delta_rs_plain(path):
    """(id, v) of every row in the data files delta-rs lists, read as plain Parquet (nothing
    hidden by a vector): the table's rows only when no file carries a deletion vector, which
    delta-rs must confirm. ``to_pyarrow_table()`` reads the same where the table has no
    deletionVectors reader feature (it refuses the feature itself)."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    assert sum(b.num_rows for b in pa.RecordBatchReader.from_stream(dt.deletion_vectors())) == 0
    rows = sorted((r["id"], r["v"]) for f in dt.file_uris() for r in pq.read_table(f, columns=["id", "v"]).to_pylist())
    if "deletionVectors" not in (dt.protocol().reader_features or []):
        table = dt.to_pyarrow_table(columns=["id", "v"])
        assert sorted((r["id"], r["v"]) for r in table.to_pylist()) == rows
    return rows


# --------------------------------------------------------------------------- result rows


@pytest.mark.parametrize("props", [DV, COW], ids=["dv", "cow"])
def test_update_and_delete_answer_num_affected_rows(session, props):
    s = session
    path = _table(s, [_ids(0, 1, 2, 3, 4), _ids(5, 6, 7, 8, 9)], properties=props)
    r = s.execute("UPDATE t SET v = v + 100 WHERE id % 2 = 0")
    assert r.columns == ["num_affected_rows"] and r.collect() == [(5,)] and r.first().num_affected_rows == 5
    assert r.dtypes == [("num_affected_rows", "bigint")] and r.version == 2 and r.operation == "UPDATE"
    assert r.metrics["numUpdatedRows"] == 5
    r = s.execute("DELETE FROM t WHERE v > 105")
    assert r.first().asDict() == {"num_affected_rows": 2} and r.metrics["numDeletedRows"] == 2
    # a statement that changes nothing commits nothing and answers with zeros
    r = s.execute("UPDATE t SET v = 0 WHERE id > 1000")
    assert r.first().num_affected_rows == 0 and r.version == 3
    r = s.execute("DELETE FROM t WHERE id > 1000")
    assert r.first().num_affected_rows == 0 and r.version == 3
    assert not os.path.exists(os.path.join(path, "_delta_log", f"{4:020d}.json"))
    want = sorted([(i, i + 100 if i % 2 == 0 else i, "a") for i in range(10) if not (i % 2 == 0 and i > 5)])
    assert _rows(s) == want == read_delta_rows(path, ["id", "v", "p"])


@pytest.mark.parametrize("props", [DV, COW], ids=["dv", "cow"])
def test_merge_answers_every_clause_kind(session, props):
    """num_affected_rows = updated + deleted + inserted, NOT MATCHED BY SOURCE clauses included."""
    s = session
    path = _table(s, [_ids(0, 1, 2, 3, 4), _ids(5, 6, 7, 8, 9)], properties=props)
    s.spark.createDataFrame([(1, 10), (2, -1), (3, 30), (50, 5), (51, -5)], "id BIGINT, v BIGINT") \
        .createOrReplaceTempView("src")
    try:
        r = s.execute(
            "MERGE INTO t USING src s ON s.id = t.id "
            "WHEN MATCHED AND s.v < 0 THEN DELETE "
            "WHEN MATCHED THEN UPDATE SET v = s.v "
            "WHEN NOT MATCHED AND s.v > 0 THEN INSERT (id, v, p) VALUES (s.id, s.v, 'a') "
            "WHEN NOT MATCHED BY SOURCE AND t.id >= 8 THEN DELETE "
            "WHEN NOT MATCHED BY SOURCE AND t.id = 0 THEN UPDATE SET v = -100")
    finally:
        s.spark.catalog.dropTempView("src")
    assert r.columns == ["num_affected_rows", "num_updated_rows", "num_deleted_rows", "num_inserted_rows"]
    # updated: 1, 3 (matched) + 0 (by source); deleted: 2 (matched) + 8, 9 (by source); inserted: 50
    assert r.first().asDict() == {"num_affected_rows": 7, "num_updated_rows": 3, "num_deleted_rows": 3,
                                  "num_inserted_rows": 1}
    assert [r.metrics[k] for k in ("numTargetRowsUpdated", "numTargetRowsDeleted", "numTargetRowsInserted")] \
        == [3, 3, 1]
    want = sorted([(0, -100, "a"), (1, 10, "a"), (3, 30, "a"), (4, 4, "a"), (5, 5, "a"), (6, 6, "a"),
                   (7, 7, "a"), (50, 5, "a")])
    assert _rows(s) == want == read_delta_rows(path, ["id", "v", "p"])
    # a MERGE that matches and inserts nothing: zeros, nothing committed
    r = s.execute("MERGE INTO t USING (SELECT 1000 AS id, 1 AS v, 'a' AS p) s ON s.id = t.id "
                  "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED AND s.v < 0 THEN INSERT *")
    assert tuple(r.first()) == (0, 0, 0, 0) and r.version == 2


def test_insert_answers_inserted_rows(session):
    s = session
    s.execute("CREATE TABLE t (id BIGINT, v BIGINT, p STRING) PARTITIONED BY (p)")
    r = s.execute("INSERT INTO t VALUES (1, 1, 'a'), (2, 2, 'a'), (3, 3, 'b')")
    assert r.columns == ["num_affected_rows", "num_inserted_rows"] and tuple(r.first()) == (3, 3)
    assert r.operation == "WRITE" and r.metrics["numOutputRows"] == 3
    r = s.execute("INSERT INTO t SELECT id + 10, v, p FROM t")  # reads the target
    assert tuple(r.first()) == (3, 3)
    r = s.execute("INSERT INTO t SELECT id, v, p FROM t WHERE id < 0")  # no row: zeros
    assert tuple(r.first()) == (0, 0)
    r = s.execute("INSERT OVERWRITE t PARTITION (p = 'a') SELECT 7, 7")  # replaced rows are not counted
    assert tuple(r.first()) == (1, 1)
    r = s.execute("INSERT INTO t REPLACE WHERE p = 'b' SELECT 8, 8, 'b' UNION ALL SELECT 9, 9, 'b'")
    assert tuple(r.first()) == (2, 2)
    r = s.execute("INSERT INTO t REPLACE WHERE id = 8 SELECT 8, 80, 'b'")
    assert tuple(r.first()) == (1, 1)
    assert _rows(s) == [(7, 7, "a"), (8, 80, "b"), (9, 9, "b")]
    r = s.execute("INSERT OVERWRITE t SELECT 1, 1, 'c'")
    assert tuple(r.first()) == (1, 1)
    assert _rows(s) == [(1, 1, "c")]


def test_prepared_write_answers_the_same_row(session):
    s = session
    _table(s, [_ids(0, 1, 2), _ids(3, 4, 5)], properties=DV)
    p = s.prepare("DELETE FROM t WHERE id IN (1, 4)")
    r = p.commit()
    assert r is p.result and r.first().num_affected_rows == 2 and r.version == 2
    p = s.prepare("UPDATE t SET v = 9 WHERE id = 100")
    r = p.commit()
    assert r.first().num_affected_rows == 0 and r.version == 2


# --------------------------------------------------------------------------- emptied files


def test_a_delete_that_empties_a_file_removes_it(session):
    s = session
    path = _table(s, [_ids(0, 1, 2), _ids(3, 4, 5), _ids(6, 7, 8)], properties=DV)
    s.execute("DELETE FROM t WHERE id IN (0, 3)")  # vectors on two files
    r = s.execute("DELETE FROM t WHERE id IN (1, 2, 4, 7)")  # empties the first, grows the second, adds to the third
    assert r.first().num_affected_rows == 4
    m = r.metrics
    assert (m["numDeletedRows"], m["numRemovedFiles"], m["numAddedFiles"]) == (4, 1, 0)
    assert (m["numDeletionVectorsAdded"], m["numDeletionVectorsUpdated"], m["numDeletionVectorsRemoved"]) == (1, 1, 1)
    removes, adds = _files(path, r.version, "remove"), _files(path, r.version, "add")
    emptied = [x for x in removes if x["path"] not in {a["path"] for a in adds}]
    assert len(emptied) == 1 and len(adds) == 2 and len(removes) == 3
    assert all(a["deletionVector"]["cardinality"] < 3 for a in adds)
    assert m["numRemovedBytes"] == emptied[0]["size"]
    assert len(_live(path)) == 2
    assert _rows(s) == [(5, 5, "a"), (6, 6, "a"), (8, 8, "a")] == read_delta_rows(path, ["id", "v", "p"])
    # every vector gone with its file: delta-rs's plain reader (no vectors) reads the same rows,
    # and no deletion-vector file was written for files that were removed
    vectors = set(glob.glob(os.path.join(path, "deletion_vector_*.bin")))
    r = s.execute("DELETE FROM t WHERE id IN (5, 6, 8)")
    assert r.first().num_affected_rows == 3 and r.metrics["numRemovedFiles"] == 2
    assert r.metrics["numDeletionVectorsRemoved"] == 2 and not _files(path, r.version, "add")
    assert _live(path) == [] and _rows(s) == [] and _delta_rs_plain(path) == []
    assert set(glob.glob(os.path.join(path, "deletion_vector_*.bin"))) == vectors


def test_update_and_merge_that_empty_a_file_remove_it(session):
    s = session
    path = _table(s, [_ids(0, 1), _ids(2, 3), _ids(4, 5)], properties=DV)
    r = s.execute("UPDATE t SET v = v * 10 WHERE id IN (0, 1)")
    assert r.first().num_affected_rows == 2
    removes, adds = _files(path, r.version, "remove"), _files(path, r.version, "add")
    assert len(removes) == 1 and len(adds) == 1 and adds[0]["path"] != removes[0]["path"]
    assert "deletionVector" not in adds[0] or adds[0]["deletionVector"] is None
    assert r.metrics["numRemovedFiles"] == 1 and r.metrics["numDeletionVectorsAdded"] == 0
    r = s.execute("MERGE INTO t USING (SELECT 2 AS id UNION ALL SELECT 3 UNION ALL SELECT 4) s ON s.id = t.id "
                  "WHEN MATCHED AND t.id < 4 THEN DELETE WHEN MATCHED THEN UPDATE SET v = -1")
    assert tuple(r.first()) == (3, 1, 2, 0)
    m = r.metrics
    assert (m["numTargetFilesRemoved"], m["numTargetDeletionVectorsAdded"]) == (1, 1)
    removes, adds = _files(path, r.version, "remove"), _files(path, r.version, "add")
    gone = {x["path"] for x in removes} - {a["path"] for a in adds}
    assert len(gone) == 1  # the file of 2, 3: removed, no vector
    assert _rows(s) == [(0, 0, "a"), (1, 10, "a"), (4, -1, "a"), (5, 5, "a")] == read_delta_rows(path, ["id", "v", "p"])


# --------------------------------------------------------------------------- metadata-only DELETE


def _corrupt(path, partition):
    """Overwrite the data files of a partition with garbage: any read of them fails."""
    files = [f for f in _live(path) if f.partition_values.get("p") == partition]
    for f in files:
        with open(os.path.join(path, f.path), "wb") as out:
            out.write(b"not parquet")
    return files


@pytest.mark.parametrize("props", [DV, COW], ids=["dv", "cow"])
def test_a_partition_delete_reads_no_data(session, props):
    s = session
    path = _table(s, [_ids(0, 1, 2) + _ids(10, 11, p="b"), _ids(3, 4) + _ids(12, p="b") + _ids(20, p=None)],
                  partitioned=True, properties=props)
    s.execute("DELETE FROM t WHERE id = 1")  # a vector (or a rewrite) in partition a
    before = {f.path: f for f in _live(path) if f.partition_values.get("p") == "a"}
    _corrupt(path, "a")
    r = s.execute("DELETE FROM t WHERE p = 'a'")
    assert r.first().num_affected_rows == 4
    m = r.metrics
    assert (m["numDeletedRows"], m["numRemovedFiles"], m["numAddedFiles"]) == (4, 2, 0)
    assert m["numRemovedBytes"] == sum(f.size for f in before.values())
    assert m["numDeletionVectorsRemoved"] == sum(f.deletion_vector is not None for f in before.values())
    assert not _files(path, r.version, "add")
    assert {x["path"] for x in _files(path, r.version, "remove")} == set(before)
    info = _info(path, r.version)
    assert info["readPredicates"] == ["p = 'a'"] and info["isolationLevel"] == "WriteSerializable"
    assert _rows(s) == [(10, 10, "b"), (11, 11, "b"), (12, 12, "b"), (20, 20, None)]
    assert read_delta_rows(path, ["id", "v", "p"]) == _rows(s)
    # a NULL partition value makes `p <> 'b'` NULL: not deleted; `p IS NULL` is
    _corrupt(path, None)
    r = s.execute("DELETE FROM t WHERE p <> 'b'")
    assert r.first().num_affected_rows == 0 and r.version == 3
    r = s.execute("DELETE FROM t WHERE p IS NULL OR p IN ('x', 'y')")
    assert r.first().num_affected_rows == 1 and r.metrics["numRemovedFiles"] == 1
    assert _rows(s) == [(10, 10, "b"), (11, 11, "b"), (12, 12, "b")]
    assert _delta_rs_plain(path) == [(10, 10), (11, 11), (12, 12)] == _rows(s, "id, v")


def test_a_condition_true_for_whole_partitions_removes_them_and_scans_the_rest(session):
    """`p = 'a' OR id = 11`: partition a is removed from the log unread, b is scanned."""
    s = session
    path = _table(s, [_ids(0, 1, 2) + _ids(10, 11, 12, p="b")], partitioned=True, properties=DV)
    _corrupt(path, "a")
    r = s.execute("DELETE FROM t AS x WHERE x.p = 'a' OR x.id = 11")
    assert r.first().num_affected_rows == 4
    m = r.metrics
    assert (m["numDeletedRows"], m["numRemovedFiles"], m["numDeletionVectorsAdded"]) == (4, 1, 1)
    assert _rows(s) == [(10, 10, "b"), (12, 12, "b")] == read_delta_rows(path, ["id", "v", "p"])


def test_a_partition_delete_counts_rows_of_files_without_stats(session):
    """No numRecords in the log (another writer's table): the Parquet footer gives the count."""
    from isolde.executor.log import DeltaLog

    s = session
    path = _table(s, [_ids(0, 1, 2), _ids(5, p="b")], partitioned=True, properties=DV)
    log = DeltaLog.for_table(path)
    txn = log.start_transaction()
    files = log.update().all_files
    from dataclasses import replace

    txn.commit([a for f in files for a in (f.remove(data_change=False), replace(f, stats=None, data_change=False))],
               "OPTIMIZE")
    assert all(f.num_records is None for f in _live(path))
    r = s.execute("DELETE FROM t WHERE p = 'a'")
    assert r.first().num_affected_rows == 3 and r.metrics["numDeletedRows"] == 3
    r = s.execute("DELETE FROM t WHERE id = 5")  # the deletion-vector path: the footer says the file is emptied
    assert r.first().num_affected_rows == 1 and r.metrics["numRemovedFiles"] == 1
    assert _live(path) == []


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
def test_a_partition_delete_keeps_its_conflicts(session, level):
    """The metadata-only DELETE records its read as before: a concurrent insert into the deleted
    partition conflicts under Serializable (not under WriteSerializable: a blind append), one
    into another partition never does, and a concurrent DELETE of the same files does."""
    s = session
    path = _table(s, [_ids(0, 1) + _ids(10, p="b")], partitioned=True,
                  properties={**DV, "delta.isolationLevel": level})
    w = s.prepare("DELETE FROM t WHERE p = 'a'")
    s.execute("INSERT INTO t VALUES (2, 2, 'a')")
    if level == "Serializable":
        with pytest.raises(E.ConcurrentAppendException):
            w.commit()
        s.execute("DELETE FROM t WHERE id = 2")
    else:
        w.commit()
        assert _rows(s) == [(2, 2, "a"), (10, 10, "b")]
        s.execute("DELETE FROM t WHERE id = 2")
        s.execute("INSERT INTO t VALUES (0, 0, 'a')")
    w = s.prepare("DELETE FROM t WHERE p = 'a'")
    s.execute("INSERT INTO t VALUES (11, 11, 'b')")  # another partition
    w.commit()
    w = s.prepare("DELETE FROM t WHERE p = 'b'")
    s.execute("DELETE FROM t WHERE id = 10")  # the same file: removed by both
    with pytest.raises(E.ConcurrentDeleteReadException):
        w.commit()
    assert _rows(s) == [(11, 11, "b")] == read_delta_rows(path, ["id", "v", "p"])


@pytest.mark.parametrize("order", ["delete-first", "optimize-first"])
def test_a_delete_that_empties_a_file_and_optimize_do_not_conflict(session, order):
    """With deletion vectors OPTIMIZE never conflicts with a DELETE, also one that removes a
    file outright: losing to the compaction, the removal moves onto the compacted file."""
    s = session
    path = _table(s, [_ids(0, 1, 2), _ids(3, 4, 5), _ids(6, 7, 8)], properties=DV)
    s.execute("DELETE FROM t WHERE id = 6")
    first, then = ("DELETE FROM t WHERE id IN (3, 4, 5, 8)", "OPTIMIZE t") if order == "delete-first" \
        else ("OPTIMIZE t", "DELETE FROM t WHERE id IN (3, 4, 5, 8)")
    w = s.prepare(first)
    s.execute(then)
    w.commit()
    assert _rows(s) == [(0, 0, "a"), (1, 1, "a"), (2, 2, "a"), (7, 7, "a")] == read_delta_rows(path, ["id", "v", "p"])
    assert all(f.deletion_vector is None or f.deletion_vector.cardinality < f.num_records for f in _live(path))


def test_delete_everything_through_a_constant_condition(session):
    """`WHERE 1 = 1` decides every file without a column: removed from the log, unread."""
    s = session
    path = _table(s, [_ids(0, 1), _ids(2)], properties=DV)
    for f in _live(path):
        with open(os.path.join(path, f.path), "wb") as out:
            out.write(b"garbage")
    r = s.execute("DELETE FROM t WHERE 1 = 1")
    assert r.first().num_affected_rows == 3 and r.metrics["numRemovedFiles"] == 2
    assert _live(path) == []


# --------------------------------------------------------------------------- commitInfo


@pytest.mark.parametrize("level", ["WriteSerializable", "Serializable"])
def test_every_operation_records_the_tables_isolation_level(session, level):
    """Identity columns make INSERT and MERGE re-emit metaData (the high-water mark): that is
    no reason to record another level than UPDATE and DELETE do."""
    s = session
    s.execute(f"CREATE TABLE t (k BIGINT GENERATED ALWAYS AS IDENTITY, id BIGINT, v BIGINT) "
              f"TBLPROPERTIES ('delta.isolationLevel' = '{level}', 'delta.enableDeletionVectors' = 'true')")
    s.execute("INSERT INTO t (id, v) VALUES (1, 1), (2, 2), (3, 3)")
    s.execute("UPDATE t SET v = 10 WHERE id = 1")
    s.execute("DELETE FROM t WHERE id = 2")
    s.execute("MERGE INTO t USING (SELECT 3 AS id, 30 AS v UNION ALL SELECT 4, 40) s ON s.id = t.id "
              "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)")
    s.execute("INSERT INTO t (id, v) VALUES (5, 5)")
    s.execute("OPTIMIZE t")
    history = {r.operation: r.isolationLevel for r in s.execute("DESCRIBE HISTORY t").collect()}
    path = _path(s)
    assert any("metaData" in a for a in _actions(path, 1))  # the INSERT did carry a metaData action
    assert history == {"CREATE TABLE": level, "WRITE": level, "UPDATE": level, "DELETE": level, "MERGE": level,
                       "OPTIMIZE": "SnapshotIsolation"}


def test_user_name_is_recorded_and_can_be_set(spark, tmp_path):
    import isolde

    s = isolde.connect(warehouse=str(tmp_path / "wh"), spark=spark)
    try:
        s.execute("CREATE TABLE t (id BIGINT)")
        s.execute("INSERT INTO t VALUES (1)")
        s.execute("SET isolde.userName = alice@example.com")
        s.execute("UPDATE t SET id = 2")
        s.execute("RESET isolde.userName")
        s.execute("DELETE FROM t")
        names = [(r.operation, r.userName) for r in s.execute("DESCRIBE HISTORY t").collect()]
        me = getpass.getuser()
        assert names == [("DELETE", me), ("UPDATE", "alice@example.com"), ("WRITE", me), ("CREATE TABLE", me)]
    finally:
        s.close()
    s = isolde.connect(warehouse=str(tmp_path / "wh"), spark=spark, conf={"isolde.userName": "bob"})
    try:
        s.execute("INSERT INTO t VALUES (3)")
        assert s.execute("DESCRIBE HISTORY t").first().userName == "bob"
        # every commit of the session, not only DML: maintenance, DDL, properties
        s.execute("OPTIMIZE t")
        s.execute("ALTER TABLE t SET TBLPROPERTIES ('team' = 'x')")
        s.execute("CREATE TABLE t2 (id INT)")
        assert [r.userName for r in s.execute("DESCRIBE HISTORY t LIMIT 2").collect()] == ["bob", "bob"]
        assert s.execute("DESCRIBE HISTORY t2").first().userName == "bob"
    finally:
        s.close()
