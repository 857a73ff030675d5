"""OPTIMIZE (bin-packing) and REORG TABLE ... APPLY (PURGE): what they rewrite, that rows never
change (isolde and delta-rs read the same rows), idempotency, WHERE scoping, and conflicts
through prepare()/commit() in both orders with the exact exception class and table state."""

from __future__ import annotations

import json
import os

import pytest

from isolde import errors as E

ROWS_A = [(i, "a") for i in range(6)]
ROWS_B = [(i + 100, "b") for i in range(6)]


def _log_actions(path: str, version: int) -> list[dict]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _files(s, name: str = "t") -> int:
    return s.execute(f"DESCRIBE DETAIL {name}").first().numFiles


def _rows(s, name: str = "t") -> list:
    return sorted(tuple(r) for r in s.sql(f"SELECT * FROM {name}").collect())


# one two-row file per partition: deleting one row leaves a deletion vector (deleting the only
# row of a one-row file removes the file)
TWO_ROW_FILES = ("INSERT INTO t SELECT /*+ COALESCE(1) */ * FROM VALUES (50, 'a'), (51, 'a'), (150, 'b'), (151, 'b') "
                 "AS v(id, d)")


@pytest.fixture
def small_files(session):
    """A table partitioned by d: six one-row files in each of partitions 'a' and 'b'."""
    session.execute("CREATE TABLE t (id INT, d STRING) PARTITIONED BY (d)")
    for (i, a), (j, b) in zip(ROWS_A, ROWS_B):
        session.execute(f"INSERT INTO t VALUES ({i}, '{a}'), ({j}, '{b}')")
    return session


def test_optimize_compacts_each_partition_and_keeps_every_row(small_files, table_path, delta_rows):
    s = small_files
    path = table_path(s, "t")
    s.execute(TWO_ROW_FILES)
    s.execute("DELETE FROM t WHERE id IN (50, 151)")  # deletion vectors on two files
    before = _rows(s)
    assert _files(s) == 14
    r = s.execute("OPTIMIZE t")
    assert r.operation == "OPTIMIZE"
    assert r.metrics["numRemovedFiles"] == 14 and r.metrics["numAddedFiles"] == 2
    assert r.metrics["numDeletionVectorsRemoved"] == 2
    assert r.metrics["minFileSize"] <= r.metrics["p50FileSize"] <= r.metrics["maxFileSize"]
    assert _files(s) == 2
    assert _rows(s) == before and sorted(delta_rows(path, ["id", "d"])) == before
    actions = _log_actions(path, r.version)
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    assert len(adds) == 2 and len(removes) == 14
    assert r.metrics["numAddedBytes"] == sum(a["size"] for a in adds)
    assert r.metrics["numRemovedBytes"] == sum(a["size"] for a in removes)
    assert not any(a["dataChange"] for a in adds) and not any(a["dataChange"] for a in removes)
    assert all(a.get("deletionVector") is None for a in adds)  # the vectors were applied
    assert sorted(a["partitionValues"]["d"] for a in adds) == ["a", "b"]
    assert all(a["path"].startswith(f"d={a['partitionValues']['d']}/") for a in adds)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "OPTIMIZE" and info["operationParameters"]["predicate"] == "[]"
    # a second run finds nothing to do and commits nothing
    again = s.execute("OPTIMIZE t")
    assert again.version == r.version and again.metrics["numAddedFiles"] == 0
    assert s.execute("DESCRIBE HISTORY t").first().version == r.version


def test_optimize_where_compacts_only_the_named_partitions(small_files, table_path, delta_rows):
    s = small_files
    r = s.execute("OPTIMIZE t WHERE d = 'a'")
    assert r.metrics["numRemovedFiles"] == 6 and r.metrics["numAddedFiles"] == 1
    adds = [a["add"] for a in _log_actions(table_path(s, "t"), r.version) if "add" in a]
    assert [a["partitionValues"]["d"] for a in adds] == ["a"]
    assert _files(s) == 7
    assert _rows(s) == sorted(ROWS_A + ROWS_B) == sorted(delta_rows(table_path(s, "t"), ["id", "d"]))
    with pytest.raises(E.AnalysisError, match=r"only reference partition columns: `id` is not one"):
        s.execute("OPTIMIZE t WHERE id > 3")
    with pytest.raises(E.AnalysisError, match=r"column `dd` does not exist.*Did you mean.*d"):
        s.execute("OPTIMIZE t WHERE dd = 'a'")


def test_the_target_size_makes_several_bins(session, table_path, delta_rows):
    s = session
    s.execute("CREATE TABLE t (id BIGINT, pad STRING)")
    for i in range(8):
        s.execute(f"INSERT INTO t SELECT id, repeat('x', 50) FROM range({i * 500}, {(i + 1) * 500})")
    path = table_path(s, "t")
    from isolde.executor.log import DeltaLog

    files = DeltaLog.for_table(path).update().all_files
    one = max(f.size for f in files)
    s.execute(f"ALTER TABLE t SET TBLPROPERTIES ('delta.targetFileSize' = '{3 * one}')")
    r = s.execute("OPTIMIZE t")
    n, total, target = len(files), sum(f.size for f in files), 3 * one
    removed, added = r.metrics["numRemovedFiles"], r.metrics["numAddedFiles"]
    # every bin holds at least three files (each at most a third of the target) and at most the
    # target; a last bin of one file is left alone
    assert n - 1 <= removed <= n and added > 1
    assert -(-(total - one) // target) <= added <= -(-removed // 3)
    assert _files(s) == n - removed + added
    assert sorted(delta_rows(path, ["id"])) == [(i,) for i in range(4000)]
    # a bad size is a clear error, and the session setting is used when the table sets none
    s.execute("ALTER TABLE t UNSET TBLPROPERTIES ('delta.targetFileSize')")
    s.execute("SET spark.databricks.delta.optimize.maxFileSize = 'lots'")
    try:
        with pytest.raises(E.AnalysisError, match="must be a positive size in bytes"):
            s.execute("OPTIMIZE t")
    finally:
        s.execute("RESET spark.databricks.delta.optimize.maxFileSize")


def test_reorg_purge_rewrites_only_files_with_deletion_vectors(small_files, table_path, delta_rows):
    s = small_files
    path = table_path(s, "t")
    s.execute(TWO_ROW_FILES)
    s.execute("DELETE FROM t WHERE id IN (50, 151)")
    from isolde.executor.log import DeltaLog

    snap = DeltaLog.for_table(path).update()
    with_dv = sorted(f.path for f in snap.all_files if f.deletion_vector is not None)
    without = sorted(f.path for f in snap.all_files if f.deletion_vector is None)
    assert len(with_dv) == 2
    before = _rows(s)
    r = s.execute("REORG TABLE t APPLY (PURGE)")
    assert r.operation == "REORG" and r.metrics["numRemovedFiles"] == 2
    removed = sorted(a["remove"]["path"] for a in _log_actions(path, r.version) if "remove" in a)
    assert removed == with_dv
    after = DeltaLog.for_table(path).update().all_files
    assert all(f.deletion_vector is None for f in after)
    assert set(without) <= {f.path for f in after}
    assert _rows(s) == before == sorted(delta_rows(path, ["id", "d"]))
    assert s.execute("REORG TABLE t APPLY (PURGE)").version == r.version  # nothing left to purge
    s.execute("DELETE FROM t WHERE id = 3")
    r = s.execute("REORG TABLE t WHERE d = 'b' APPLY (PURGE)")
    assert r.metrics["numRemovedFiles"] == 0  # the new vector is in partition 'a'


def test_unsupported_forms_say_so(small_files):
    with pytest.raises(E.UnsupportedFeatureError, match="UNIFORM"):
        small_files.execute("REORG TABLE t APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION = 3))")


def test_optimize_of_a_table_delta_rs_wrote(session, tmp_path, delta_rows):
    import pandas as pd
    from deltalake import write_deltalake

    path = str(tmp_path / "rs")
    for i in range(5):
        write_deltalake(path, pd.DataFrame({"id": [i, i + 10], "p": ["x", "y"]}), mode="append", partition_by=["p"])
    r = session.execute(f"OPTIMIZE delta.`{path}`")
    assert r.metrics["numRemovedFiles"] == 10 and r.metrics["numAddedFiles"] == 2
    want = sorted([(i, "x") for i in range(5)] + [(i + 10, "y") for i in range(5)])
    assert sorted(delta_rows(path, ["id", "p"])) == want
    write_deltalake(path, pd.DataFrame({"id": [99], "p": ["x"]}), mode="append", partition_by=["p"])
    assert sorted(tuple(r) for r in session.sql(f"SELECT id, p FROM delta.`{path}`").collect()) == \
        sorted(want + [(99, "x")])


def test_an_aborted_optimize_leaves_nothing(small_files, table_path):
    s = small_files
    path = table_path(s, "t")
    on_disk = lambda: sorted(os.path.relpath(os.path.join(r, n), path) for r, _, ns in os.walk(path)  # noqa: E731
                             for n in ns if "_delta_log" not in r)
    before = on_disk()
    w = s.prepare("OPTIMIZE t")
    assert len(on_disk()) > len(before)  # the compacted files are staged
    w.abort()
    assert on_disk() == before and _files(s) == 12


# --------------------------------------------------------------------------- conflicts

def _conflict_case(s, first: str, then: str):
    """``first`` prepared, ``then`` committed, then ``first`` commits (or raises)."""
    w = s.prepare(first)
    s.execute(then)
    return w


def test_optimize_and_insert_never_conflict_in_either_order(small_files, delta_rows, table_path):
    s = small_files
    w = _conflict_case(s, "OPTIMIZE t", "INSERT INTO t VALUES (50, 'a')")
    w.commit()
    w = _conflict_case(s, "INSERT INTO t VALUES (51, 'a')", "OPTIMIZE t")
    w.commit()
    want = sorted(ROWS_A + ROWS_B + [(50, "a"), (51, "a")])
    assert _rows(s) == want == sorted(delta_rows(table_path(s, "t"), ["id", "d"]))


def _four_files(s, partitioned: bool, deletion_vectors: bool = True):
    """Four files of three rows (ids 10*i .. 10*i+2, v = 0), one of them with a deletion
    vector; unpartitioned, the table's writers are checked per row."""
    s.execute("CREATE TABLE t (id INT, v INT, d STRING)" + (" PARTITIONED BY (d)" if partitioned else "")
              + f" TBLPROPERTIES ('delta.enableDeletionVectors' = '{str(deletion_vectors).lower()}')")
    for i in range(4):
        s.execute(f"INSERT INTO t VALUES ({10 * i}, 0, 'a'), ({10 * i + 1}, 0, 'a'), ({10 * i + 2}, 0, 'a')")
    s.execute("DELETE FROM t WHERE id = 10")  # the layout must skip a row deleted before the compaction
    return s


FOUR = {10 * i + j: 0 for i in range(4) for j in range(3) if 10 * i + j != 10}
# statements that delete or update rows in several input files, at several positions
CONCURRENT = [
    ("DELETE FROM t WHERE id IN (2, 11, 30)", lambda m: {k: v for k, v in m.items() if k not in (2, 11, 30)}),
    ("UPDATE t SET v = v + 1 WHERE id IN (12, 21)", lambda m: {k: v + (k in (12, 21)) for k, v in m.items()}),
    ("MERGE INTO t USING (SELECT 22 AS id UNION ALL SELECT 5) s ON t.id = s.id "
     "WHEN MATCHED THEN UPDATE SET v = 9 WHEN NOT MATCHED THEN INSERT (id, v, d) VALUES (s.id, 7, 'a')",
     lambda m: {**m, 22: 9, 5: 7}),
]


def _state(s, table_path, delta_rows):
    got = {i: v for i, v, _ in _rows(s)}
    assert sorted(delta_rows(table_path(s, "t"), ["id", "v", "d"])) == _rows(s)  # delta-rs agrees
    return got


@pytest.mark.parametrize("sql, effect", CONCURRENT, ids=["delete", "update", "merge"])
@pytest.mark.parametrize("partitioned", [True, False], ids=["file-level", "row-level"])
def test_optimize_carries_a_concurrent_write_onto_its_file(session, partitioned, sql, effect, delta_rows, table_path):
    """The DML commits first; the compaction then commits the DML's deletion vectors, mapped to
    its own file, instead of failing: nothing deleted comes back, nothing is lost."""
    s = _four_files(session, partitioned)
    w = _conflict_case(s, "OPTIMIZE t", sql)
    r = w.commit()
    assert r.operation == "OPTIMIZE"
    assert _state(s, table_path, delta_rows) == effect(FOUR)
    s.execute("REORG TABLE t APPLY (PURGE)")  # the carried vector is a real one: purge it
    assert _state(s, table_path, delta_rows) == effect(FOUR)
    s.execute("UPDATE t SET v = v + 100 WHERE id = 1")
    assert _state(s, table_path, delta_rows) == {**effect(FOUR), 1: 100}


@pytest.mark.parametrize("sql, effect", CONCURRENT, ids=["delete", "update", "merge"])
@pytest.mark.parametrize("partitioned", [True, False], ids=["file-level", "row-level"])
def test_a_write_losing_to_optimize_moves_onto_the_compacted_file(session, partitioned, sql, effect, delta_rows,
                                                                   table_path):
    s = _four_files(session, partitioned)
    w = _conflict_case(s, sql, "OPTIMIZE t")
    w.commit()
    assert _state(s, table_path, delta_rows) == effect(FOUR)
    assert _files(s) <= 3  # the compacted file, plus what the statement added
    s.execute("DELETE FROM t WHERE id = 0")
    assert _state(s, table_path, delta_rows) == {k: v for k, v in effect(FOUR).items() if k != 0}


def test_both_directions_in_one_race(session, delta_rows, table_path):
    """A DELETE commits, then OPTIMIZE (carrying it), then an UPDATE prepared before both
    (moved onto the compacted file, its vector united with the carried one)."""
    s = _four_files(session, False)
    update = s.prepare("UPDATE t SET v = 5 WHERE id IN (1, 31)")
    optimize = s.prepare("OPTIMIZE t")
    s.execute("DELETE FROM t WHERE id IN (0, 32)")
    optimize.commit()
    update.commit()
    want = {k: (5 if k in (1, 31) else v) for k, v in FOUR.items() if k not in (0, 32)}
    assert _state(s, table_path, delta_rows) == want


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
def test_copy_on_write_keeps_the_conflicts(session, partitioned, delta_rows, table_path):
    s = _four_files(session, partitioned, deletion_vectors=False)
    w = _conflict_case(s, "OPTIMIZE t", "DELETE FROM t WHERE id = 2")
    with pytest.raises(E.ConcurrentDeleteReadException) as info:
        w.commit()
    assert "DELETE" in str(info.value)
    want = {k: v for k, v in FOUR.items() if k != 2}
    assert _state(s, table_path, delta_rows) == want
    w = _conflict_case(s, "DELETE FROM t WHERE id = 1", "OPTIMIZE t")
    with pytest.raises(E.ConcurrentDeleteDeleteException):
        w.commit()
    assert _state(s, table_path, delta_rows) == want  # nothing deleted twice, nothing resurrected
    s.execute("DELETE FROM t WHERE id = 1")  # a retry succeeds
    assert _state(s, table_path, delta_rows) == {k: v for k, v in want.items() if k != 1}


def test_an_update_of_files_optimize_did_not_touch_commits(session, delta_rows, table_path):
    s = session
    s.execute("CREATE TABLE t (id INT, d STRING) PARTITIONED BY (d)")
    for i in range(3):
        s.execute(f"INSERT INTO t VALUES ({i}, 'a'), ({i + 10}, 'b')")
    w = _conflict_case(s, "UPDATE t SET id = id + 100 WHERE d = 'b' AND id = 11", "OPTIMIZE t WHERE d = 'a'")
    w.commit()
    want = sorted([(i, "a") for i in range(3)] + [(10, "b"), (111, "b"), (12, "b")])
    assert _rows(s) == want == sorted(delta_rows(table_path(s, "t"), ["id", "d"]))


def test_two_compactions(small_files, delta_rows, table_path):
    s = small_files
    w = _conflict_case(s, "OPTIMIZE t", "OPTIMIZE t")  # the same files
    with pytest.raises(E.ConcurrentDeleteDeleteException):
        w.commit()
    s.execute("INSERT INTO t VALUES (7, 'a'), (8, 'a'), (107, 'b')")
    s.execute("INSERT INTO t VALUES (9, 'a'), (108, 'b')")
    w = _conflict_case(s, "OPTIMIZE t WHERE d = 'a'", "OPTIMIZE t WHERE d = 'b'")  # disjoint partitions
    w.commit()
    assert _files(s) == 2  # one per partition again
    want = sorted(ROWS_A + ROWS_B + [(7, "a"), (8, "a"), (9, "a"), (107, "b"), (108, "b")])
    assert _rows(s) == want == sorted(delta_rows(table_path(s, "t"), ["id", "d"]))


def test_reorg_purge_losing_to_a_delete_carries_it(session, delta_rows, table_path):
    s = session
    s.execute("CREATE TABLE t (id INT, d STRING) PARTITIONED BY (d)")
    s.execute("INSERT INTO t VALUES (0, 'a'), (1, 'a'), (2, 'a')")
    s.execute("INSERT INTO t VALUES (3, 'a')")
    s.execute("DELETE FROM t WHERE id = 1")  # a deletion vector on the first file
    w = _conflict_case(s, "REORG TABLE t APPLY (PURGE)", "DELETE FROM t WHERE id = 2")
    w.commit()  # the delete's vector is carried onto the purged file
    assert _rows(s) == [(0, "a"), (3, "a")] == sorted(delta_rows(table_path(s, "t"), ["id", "d"]))
    from isolde.executor.log import DeltaLog

    with_dv = [f for f in DeltaLog.for_table(table_path(s, "t")).update().all_files if f.deletion_vector is not None]
    assert len(with_dv) == 1 and with_dv[0].deletion_vector.cardinality == 1
    assert s.execute("REORG TABLE t APPLY (PURGE)").metrics["numDeletionVectorsRemoved"] == 1
    assert _rows(s) == [(0, "a"), (3, "a")] == sorted(delta_rows(table_path(s, "t"), ["id", "d"]))


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
def test_a_read_follows_its_rows_into_the_compacted_file(session, level, delta_rows, table_path):
    """T read a file; OPTIMIZE moved its rows into a new file; a DELETE then removed a row T
    read from that new file: T must still see the conflict (file level: its read set follows
    the compaction)."""
    s = session
    s.execute(f"CREATE TABLE t (id INT, d STRING) PARTITIONED BY (d) TBLPROPERTIES ('delta.isolationLevel' = '{level}')")
    for i in range(3):
        s.execute(f"INSERT INTO t VALUES ({i}, 'a')")
    w = s.prepare("INSERT INTO t SELECT id + 100, d FROM t WHERE id = 1")
    s.execute("OPTIMIZE t")
    s.execute("DELETE FROM t WHERE id = 1")
    with pytest.raises(E.ConcurrentDeleteReadException):
        w.commit()
    assert _rows(s) == [(0, "a"), (2, "a")] == sorted(delta_rows(table_path(s, "t"), ["id", "d"]))


@pytest.mark.parametrize("value", ["plain", "é-ünïcode", "50%_off", "Z upper"])
def test_the_output_rows_are_in_the_order_its_tag_records(session, table_path, value):
    """The carry-over relies on it: input by input as the tag lists them, by position."""
    import pyarrow.parquet as pq

    from isolde.executor.log import DeltaLog
    from isolde.executor.txn.compaction import LAYOUT_TAG

    s = session
    s.execute("CREATE TABLE t (id INT, d STRING) PARTITIONED BY (d)")
    for i in range(5):
        s.execute(f"INSERT INTO t VALUES ({i * 10}, '{value}'), ({i * 10 + 1}, '{value}'), ({i * 10 + 2}, '{value}')")
    s.execute("DELETE FROM t WHERE id IN (1, 22)")
    path = table_path(s, "t")
    before = {f.path: f for f in DeltaLog.for_table(path).update().all_files}
    expected = []
    s.execute("OPTIMIZE t")
    (out,) = DeltaLog.for_table(path).update().all_files
    for entry in json.loads(out.tags[LAYOUT_TAG]):
        f = before[entry["path"]]
        ids = pq.read_table(_local(path, f.path)).column("id")
        deleted = set()
        if f.deletion_vector is not None:
            from isolde.executor.log.deletion_vectors import read_deleted_rows

            deleted = read_deleted_rows(path, f.deletion_vector)
        expected += [x for pos, x in enumerate(ids.to_pylist()) if pos not in deleted]
    got = pq.read_table(_local(path, out.path)).column("id").to_pylist()
    assert got == expected and sorted(got) == [i * 10 + j for i in range(5) for j in range(3) if i * 10 + j not in (1, 22)]


def _local(table: str, log_path: str) -> str:
    from isolde.executor.catalog.properties import local_path

    return local_path(table, log_path)
