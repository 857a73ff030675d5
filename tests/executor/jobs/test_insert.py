"""INSERT INTO / OVERWRITE / PARTITION / REPLACE WHERE / BY NAME, identity and generated columns,
constraints; every written table is read back by delta-rs and compared with isolde's read."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest

from isolde import errors as E
from tests.helpers.oracle import read_delta_rows, sorted_rows

pytestmark = pytest.mark.spark


def _commit_info(path: str, version: int) -> dict:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as fh:
        return next(json.loads(l)["commitInfo"] for l in fh if '"commitInfo"' in l)


def _version(session, table: str) -> int:
    from isolde.grammar import ast

    return session.catalog.resolve(ast.TableRef(parts=(table,)), session.current_database).log.snapshot().version


def _same(session, table_path, name: str) -> list[tuple]:
    """isolde's rows == delta-rs's rows; returns them sorted."""
    ours = sorted_rows(session.execute(f"SELECT * FROM {name}").rows)
    assert ours == read_delta_rows(table_path(session, name))
    return ours


def test_insert_values_blind_append(session, table_path):
    session.execute("CREATE TABLE t (id INT, name STRING, score DOUBLE)")
    r = session.execute("INSERT INTO t VALUES (1, 'a', 1.5), (2, 'b', NULL)")
    assert r.version == 1 and r.operation == "WRITE" and r.metrics["numOutputRows"] == 2
    info = _commit_info(table_path(session, "t"), 1)
    assert info["isBlindAppend"] is True and info["operationParameters"]["mode"] == "Append"
    assert "readPredicates" not in info
    session.execute("INSERT INTO t (name, id) VALUES ('c', 3)")
    session.execute("INSERT INTO t BY NAME SELECT 4.5 AS score, 'd' AS name, 4 AS id")
    assert _same(session, table_path, "t") == [(1, "a", 1.5), (2, "b", None), (3, "c", None), (4, "d", 4.5)]


def test_insert_select_self_read_is_not_blind(session, table_path):
    session.execute("CREATE TABLE t (id INT, v STRING)")
    session.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    session.execute("INSERT INTO t SELECT id + 10, v FROM t WHERE id = 1")
    info = _commit_info(table_path(session, "t"), 2)
    assert info["isBlindAppend"] is False and info["readVersion"] == 1
    assert _same(session, table_path, "t") == [(1, "a"), (2, "b"), (11, "a")]


def test_insert_errors_leave_table_unchanged(session, table_path):
    session.execute("CREATE TABLE t (id INT NOT NULL, name STRING) TBLPROPERTIES ('delta.constraints.pos' = 'id > 0')")
    session.execute("INSERT INTO t VALUES (1, 'a')")
    with pytest.raises(E.AnalysisError, match="not enough data columns|INSERT"):
        session.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(E.AnalysisError, match="too many"):
        session.execute("INSERT INTO t VALUES (1, 'a', 'b')")
    with pytest.raises(E.AnalysisError, match="cannot safely cast.*BOOLEAN"):
        session.execute("INSERT INTO t VALUES (true, 'a')")
    with pytest.raises(E.ColumnNotFoundError, match="Did you mean `name`"):
        session.execute("INSERT INTO t (id, nmae) VALUES (1, 'a')")
    with pytest.raises(E.TableNotFoundError, match="Did you mean `t`"):
        session.execute("INSERT INTO tt VALUES (1, 'a')")
    with pytest.raises(E.NotNullViolationError, match="id"):
        session.execute("INSERT INTO t VALUES (NULL, 'x')")
    with pytest.raises(E.ConstraintViolationError, match=r"(?s)pos.*id : -5"):
        session.execute("INSERT INTO t VALUES (2, 'ok'), (-5, 'bad')")
    assert _version(session, "t") == 1
    assert _same(session, table_path, "t") == [(1, "a")]
    # no staged files left behind
    leftovers = [n for n in os.listdir(table_path(session, "t")) if n.startswith(".isolde-staging")]
    assert leftovers == []


def test_partitioned_insert_overwrite_static_and_dynamic(session, table_path):
    session.execute("CREATE TABLE p (id INT, day STRING, region STRING) PARTITIONED BY (day, region)")
    session.execute("INSERT INTO p VALUES (1, '2024-01-01', 'eu'), (2, '2024-01-01', 'us'), "
                    "(3, '2024-01-02', 'eu'), (4, NULL, 'a b/c')")
    path = table_path(session, "p")
    assert _same(session, table_path, "p") == [(1, "2024-01-01", "eu"), (2, "2024-01-01", "us"),
                                                (3, "2024-01-02", "eu"), (4, None, "a b/c")]
    # static partition overwrite: only day=2024-01-01/region=eu is replaced
    session.execute("INSERT OVERWRITE p PARTITION (day = '2024-01-01', region = 'eu') VALUES (10)")
    assert _same(session, table_path, "p") == [(2, "2024-01-01", "us"), (3, "2024-01-02", "eu"),
                                                (4, None, "a b/c"), (10, "2024-01-01", "eu")]
    info = _commit_info(path, 2)
    assert info["operationParameters"]["mode"] == "Overwrite" and info["isBlindAppend"] is False
    # dynamic: only the partitions the new rows land in
    session.execute("SET spark.sql.sources.partitionOverwriteMode = dynamic")
    session.execute("INSERT OVERWRITE p VALUES (20, '2024-01-02', 'eu')")
    assert _same(session, table_path, "p") == [(2, "2024-01-01", "us"), (4, None, "a b/c"),
                                                (10, "2024-01-01", "eu"), (20, "2024-01-02", "eu")]
    session.execute("RESET spark.sql.sources.partitionOverwriteMode")
    # static whole-table overwrite
    session.execute("INSERT OVERWRITE p SELECT 99, 'd', 'r'")
    assert _same(session, table_path, "p") == [(99, "d", "r")]
    # time travel still sees the first version
    assert len(session.execute("SELECT * FROM p VERSION AS OF 1").rows) == 4


def test_replace_where(session, table_path):
    session.execute("CREATE TABLE r (id INT, v STRING)")
    session.execute("INSERT INTO r VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')")
    session.execute("INSERT INTO r REPLACE WHERE id >= 3 VALUES (3, 'C'), (5, 'E')")
    assert _same(session, table_path, "r") == [(1, "a"), (2, "b"), (3, "C"), (5, "E")]
    info = _commit_info(table_path(session, "r"), 2)
    assert info["isBlindAppend"] is False and info.get("readPredicates")
    with pytest.raises(E.ConstraintViolationError, match="REPLACE WHERE"):
        session.execute("INSERT INTO r REPLACE WHERE id >= 3 VALUES (1, 'x')")
    assert _version(session, "r") == 2


def test_replace_where_on_partition_columns_replaces_exactly_the_matching_partitions(session, table_path):
    # `upper(p)` cannot be evaluated on the log; files of other partitions must survive untouched
    session.execute("CREATE TABLE rp (id INT, p STRING) PARTITIONED BY (p)")
    session.execute("INSERT INTO rp VALUES (1, 'a'), (2, 'b'), (3, NULL)")
    r = session.execute("INSERT INTO rp REPLACE WHERE upper(p) = 'A' SELECT 10, 'a'")
    assert r.metrics["numRemovedFiles"] == 1
    assert _same(session, table_path, "rp") == sorted_rows([(10, "a"), (2, "b"), (3, None)])
    session.execute("CREATE TABLE rd (id INT, day DATE) PARTITIONED BY (day)")
    session.execute("INSERT INTO rd VALUES (1, DATE'2024-01-01'), (2, DATE'2024-01-02')")
    session.execute("INSERT INTO rd REPLACE WHERE day >= DATE'2024-01-02' AND year(day) = 2024 "
                    "SELECT 5, DATE'2024-01-03'")
    assert _same(session, table_path, "rd") == [(1, dt.date(2024, 1, 1)), (5, dt.date(2024, 1, 3))]


def test_identity_columns(session, table_path):
    session.execute("CREATE TABLE i (id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 100 INCREMENT BY 10), "
                    "v STRING)")
    session.execute("INSERT INTO i (v) VALUES ('a'), ('b'), ('c')")
    session.execute("INSERT INTO i (v) SELECT CAST(id AS STRING) FROM range(4)")
    rows = _same(session, table_path, "i")
    ids = [r[0] for r in rows]
    assert len(set(ids)) == 7 and all(i >= 100 and (i - 100) % 10 == 0 for i in ids)
    # high-water mark lives in the schema and was committed with the insert
    path = table_path(session, "i")
    with open(os.path.join(path, "_delta_log", f"{2:020d}.json")) as fh:
        meta = next(json.loads(l)["metaData"] for l in fh if '"metaData"' in l)
    field = json.loads(meta["schemaString"])["fields"][0]
    assert field["metadata"]["delta.identity.highWaterMark"] == max(ids)
    with pytest.raises(E.AnalysisError, match="GENERATED ALWAYS AS IDENTITY"):
        session.execute("INSERT INTO i VALUES (1, 'x')")
    session.execute("CREATE TABLE j (id BIGINT GENERATED BY DEFAULT AS IDENTITY, v STRING)")
    session.execute("INSERT INTO j VALUES (42, 'explicit')")
    session.execute("INSERT INTO j (v) VALUES ('auto')")
    # explicit values never move the high-water mark, as in Delta (4.4 checked): the next generated
    # value is the start; ALTER TABLE ... SYNC IDENTITY moves the mark past the data's values
    assert sorted(r[0] for r in _same(session, table_path, "j")) == [1, 42]
    session.execute("ALTER TABLE j ALTER COLUMN id SYNC IDENTITY")
    session.execute("INSERT INTO j (v) VALUES ('after sync')")
    assert sorted(r[0] for r in _same(session, table_path, "j")) == [1, 42, 43]


def test_identity_insert_conflicts_with_concurrent_writer(session):
    session.execute("CREATE TABLE i (id BIGINT GENERATED ALWAYS AS IDENTITY, v STRING)")
    first = session.prepare("INSERT INTO i (v) VALUES ('a')")
    second = session.prepare("INSERT INTO i (v) VALUES ('b')")
    first.commit()
    with pytest.raises(E.MetadataChangedException):
        second.commit()
    assert session.execute("SELECT v FROM i").rows == [("a",)]


def test_explicit_identity_insert_commits_over_a_generating_one(session):
    """An INSERT with explicit ids moves no high-water mark (no metadata change): a concurrent
    INSERT that generated ids, and so moved the mark, does not fail it (Delta's identity-only
    metadata update, IdentityColumnConflictSuite); the mark stays the winner's."""
    session.execute("CREATE TABLE i (id BIGINT GENERATED BY DEFAULT AS IDENTITY, v STRING)")
    explicit = session.prepare("INSERT INTO i VALUES (100, 'explicit')")
    session.execute("INSERT INTO i (v) VALUES ('generated')")
    explicit.commit()
    session.execute("INSERT INTO i (v) VALUES ('next')")
    assert sorted(tuple(r) for r in session.execute("SELECT id, v FROM i").rows) == \
        [(1, "generated"), (2, "next"), (100, "explicit")]


def test_generated_columns(session, table_path):
    session.execute("CREATE TABLE g (a INT, b INT GENERATED ALWAYS AS (a * 2), c STRING)")
    session.execute("INSERT INTO g (a, c) VALUES (1, 'p'), (2, 'q')")
    session.execute("INSERT INTO g VALUES (3, 6, 'x')")
    assert _same(session, table_path, "g") == [(1, 2, "p"), (2, 4, "q"), (3, 6, "x")]
    with pytest.raises(E.ConstraintViolationError, match="Generated Column"):
        session.execute("INSERT INTO g VALUES (4, 7, 'y')")
    assert len(session.execute("SELECT * FROM g").rows) == 3


def test_column_defaults(session, table_path):
    session.execute("CREATE TABLE d (a INT, c STRING DEFAULT 'none')")
    session.execute("INSERT INTO d (a) VALUES (1)")
    assert _same(session, table_path, "d") == [(1, "none")]


def test_prepare_abort_removes_staged_files(session, table_path):
    session.execute("CREATE TABLE t (a INT)")
    p = session.prepare("INSERT INTO t VALUES (1), (2)")
    assert p.staged_paths and all(os.path.exists(x) for x in p.staged_paths)
    p.abort()
    assert not any(os.path.exists(x) for x in p.staged_paths)
    assert session.execute("SELECT * FROM t").rows == []
    with pytest.raises(E.AnalysisError, match="not a write"):
        session.prepare("SELECT * FROM t")
    with pytest.raises(E.AnalysisError, match="not a write"):
        session.prepare("DROP TABLE t")
    assert session.tables() == ["t"]


def test_concurrent_inserts_and_overwrite_isolation(session, table_path):
    session.execute("CREATE TABLE c (id INT, p STRING) PARTITIONED BY (p)")
    a = session.prepare("INSERT INTO c VALUES (1, 'x')")
    b = session.prepare("INSERT INTO c VALUES (2, 'y')")
    assert a.commit().version == 1 and b.commit().version == 2  # blind appends never conflict
    assert sorted_rows(session.execute("SELECT * FROM c").rows) == [(1, "x"), (2, "y")]
    # WriteSerializable: an overwrite is not invalidated by a concurrent blind append
    ow = session.prepare("INSERT OVERWRITE c PARTITION (p = 'x') VALUES (10)")
    session.execute("INSERT INTO c VALUES (3, 'x')")
    ow.commit()
    assert _same(session, table_path, "c") == [(2, "y"), (3, "x"), (10, "x")]
    # Serializable: the same interleaving conflicts, and the loser leaves no files behind
    session.execute("CREATE TABLE s (id INT, p STRING) PARTITIONED BY (p) "
                    "TBLPROPERTIES ('delta.isolationLevel' = 'Serializable')")
    session.execute("INSERT INTO s VALUES (1, 'x')")
    ow = session.prepare("INSERT OVERWRITE s PARTITION (p = 'x') VALUES (10)")
    session.execute("INSERT INTO s VALUES (3, 'x')")
    with pytest.raises(E.ConcurrentAppendException):
        ow.commit()
    assert not any(os.path.exists(x) for x in ow.staged_paths)
    assert _same(session, table_path, "s") == [(1, "x"), (3, "x")]


def test_all_types_round_trip_through_delta_rs(session, table_path):
    import datetime as dt
    from decimal import Decimal

    session.execute("""CREATE TABLE ty (b BOOLEAN, i8 TINYINT, i16 SMALLINT, i32 INT, i64 BIGINT, f FLOAT,
        d DOUBLE, dec DECIMAL(12, 3), s STRING, bin BINARY, dt DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ,
        arr ARRAY<INT>, m MAP<STRING, BIGINT>, st STRUCT<x: INT, y: STRING>) PARTITIONED BY (dt)""")
    session.execute("""INSERT INTO ty VALUES
        (true, 1, 2, 3, 4, 1.5, 2.5, 123.456, 'é x', X'CAFE', DATE'2024-02-29',
         TIMESTAMP'2024-02-29 12:34:56.789', TIMESTAMP_NTZ'2024-02-29 01:02:03', array(1, NULL), map('k', 7),
         named_struct('x', 1, 'y', 'z')),
        (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)""")
    ours = sorted_rows(session.execute("SELECT b, i8, i16, i32, i64, f, d, dec, s, bin, dt, ts, ntz FROM ty").rows)
    theirs = read_delta_rows(table_path(session, "ty"),
                             ["b", "i8", "i16", "i32", "i64", "f", "d", "dec", "s", "bin", "dt", "ts", "ntz"])
    assert len(ours) == len(theirs) == 2
    full = next(r for r in ours if r[0] is not None)
    assert full[7] == Decimal("123.456") and full[10] == dt.date(2024, 2, 29) and bytes(full[9]) == b"\xca\xfe"
    rs_full = next(r for r in theirs if r[0] is not None)
    assert rs_full[:9] == full[:9] and rs_full[10] == full[10] and bytes(rs_full[9]) == bytes(full[9])
    # instants agree (delta-rs returns UTC-aware timestamps, Spark naive UTC in this session)
    assert rs_full[11].replace(tzinfo=None) == full[11] and rs_full[12] == full[12]
    nested = session.execute("SELECT arr, m, st FROM ty WHERE b").rows[0]
    assert nested[0] == [1, None] and nested[1] == {"k": 7} and tuple(nested[2]) == (1, "z")
    with open(os.path.join(table_path(session, "ty"), "_delta_log", f"{0:020d}.json")) as fh:
        proto = next(json.loads(l)["protocol"] for l in fh if '"protocol"' in l)
    assert "timestampNtz" in proto["readerFeatures"]


def test_column_mapping_name_mode(session, table_path):
    session.execute("CREATE TABLE cm (id INT, name STRING, st STRUCT<a: INT, b: STRING>) "
                    "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    session.execute("INSERT INTO cm VALUES (1, 'x', named_struct('a', 1, 'b', 'q')), (2, 'y', NULL)")
    rows = sorted_rows((r[0], r[1], None if r[2] is None else tuple(r[2]))
                       for r in session.execute("SELECT * FROM cm").rows)
    assert rows == [(1, "x", (1, "q")), (2, "y", None)]
    theirs = read_delta_rows(table_path(session, "cm"), ["id", "name"])
    assert theirs == [(1, "x"), (2, "y")]
    r = session.execute("SELECT name FROM cm WHERE id = 2")
    assert r.rows == [("y",)] and r.metrics["files_read"] < r.metrics["files_total"]
    import glob

    import pyarrow.parquet as pq

    names = pq.read_schema(glob.glob(table_path(session, "cm") + "/*.parquet")[0]).names
    assert all(n.startswith("col-") for n in names)
