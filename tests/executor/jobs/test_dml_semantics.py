"""UPDATE / DELETE / MERGE semantics against expected result tables (Spark)."""

from __future__ import annotations

import datetime
import glob
import json
import os

import pyarrow as pa
import pytest

from tests.helpers.dml import Runner, make_table  # noqa: E402

from isolde.errors import AnalysisError, MergeCardinalityError  # noqa: E402

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])
BASE = [(0, 0, "a"), (1, 10, "b"), (2, 20, None), (3, None, "d"), (4, 40, "e")]


def _dicts(rows, schema=SCHEMA):
    return [dict(zip(schema.names, r)) for r in rows]


@pytest.fixture
def r(tmp_path):
    runner = Runner(tmp_path / "wh")
    make_table(runner.path("t"), SCHEMA, [_dicts(BASE[:3]), _dicts(BASE[3:])])
    return runner


def history(r, name="t"):
    return r.log(name).history(1)[0]


# --------------------------------------------------------------------------- UPDATE


def test_update_functions_case_and_null_where(r):
    res = r.run("UPDATE t SET v = CASE WHEN v > 15 THEN v * 2 ELSE coalesce(v, -1) END, s = upper(s) WHERE v <> 10")
    # v <> 10 is NULL for id 3 (v NULL): not updated; id 1 (v = 10) false
    assert r.rows("t") == [(0, 0, "A"), (1, 10, "b"), (2, 40, None), (3, None, "d"), (4, 80, "E")]
    assert res.operation == "UPDATE" and res.metrics["numUpdatedRows"] == 3
    h = history(r)
    assert h["operation"] == "UPDATE"
    assert json.loads(h["operationParameters"]["predicate"]) == ["v <> 10"]
    m = h["operationMetrics"]
    assert m["numUpdatedRows"] == "3" and int(m["numRemovedFiles"]) == 2 and int(m["numCopiedRows"]) == 2
    for key in ("numAddedFiles", "numAddedBytes", "numRemovedBytes", "executionTimeMs"):
        assert key in m


def test_update_alias_subquery_and_no_match(r):
    make_table(r.path("other"), pa.schema([("id", pa.int64())]), [[{"id": 1}, {"id": 4}]])
    r.run("UPDATE t AS x SET x.v = x.v + 1 WHERE x.id IN (SELECT id FROM other)")
    assert r.rows("t") == [(0, 0, "a"), (1, 11, "b"), (2, 20, None), (3, None, "d"), (4, 41, "e")]
    version = r.log("t").update().version
    res = r.run("UPDATE t SET v = 0 WHERE id > 100")
    assert res.metrics["numUpdatedRows"] == 0
    assert r.log("t").update().version == version  # nothing changed, nothing committed


def test_update_without_where_and_cast(r):
    r.run("UPDATE t SET v = '7', s = 5")
    assert r.rows("t") == [(i, 7, "5") for i in range(5)]


def test_update_nested_struct_field(tmp_path):
    runner = Runner(tmp_path / "wh")
    schema = pa.schema([("id", pa.int64()), ("info", pa.struct([("city", pa.string()), ("zip", pa.int64())]))])
    make_table(runner.path("p"), schema, [[{"id": 1, "info": {"city": "Paris", "zip": 75}},
                                           {"id": 2, "info": {"city": "Lyon", "zip": 69}},
                                           {"id": 3, "info": None}]])
    runner.run("UPDATE p SET info.city = upper(info.city) WHERE id <> 2")
    rows = runner.rows("p")
    assert rows[0][1]["city"] == "PARIS" and rows[0][1]["zip"] == 75
    assert rows[1][1]["city"] == "Lyon"
    assert rows[2][1]["city"] is None and rows[2][1]["zip"] is None  # a NULL parent becomes a struct
    with pytest.raises(AnalysisError):
        runner.run("UPDATE p SET info.nope = 1")


def test_update_unknown_column(r):
    with pytest.raises(AnalysisError):
        r.run("UPDATE t SET nope = 1")


# --------------------------------------------------------------------------- DELETE


def test_delete_null_semantics_and_metrics(r):
    res = r.run("DELETE FROM t WHERE v > 5 AND s <> 'e'")
    # id 1 deleted; id 2 (s NULL -> NULL) kept; id 3 (v NULL) kept; id 4 (s = 'e') kept
    assert r.rows("t") == [(0, 0, "a"), (2, 20, None), (3, None, "d"), (4, 40, "e")]
    assert res.metrics["numDeletedRows"] == 1
    h = history(r)
    assert h["operation"] == "DELETE" and json.loads(h["operationParameters"]["predicate"]) == ["v > 5 AND s <> 'e'"]
    assert h["operationMetrics"]["numRemovedFiles"] == "1" and h["operationMetrics"]["numCopiedRows"] == "2"
    assert h["readPredicates"] == ["v > 5 AND s <> 'e'"]


def test_delete_subquery_and_whole_table(r):
    make_table(r.path("gone"), pa.schema([("k", pa.int64())]), [[{"k": 0}, {"k": 3}, {"k": None}]])
    r.run("DELETE FROM t WHERE id IN (SELECT k FROM gone)")
    assert [x[0] for x in r.rows("t")] == [1, 2, 4]
    r.run("DELETE FROM t WHERE id NOT IN (SELECT k FROM gone)")  # NOT IN with a NULL: never true
    assert [x[0] for x in r.rows("t")] == [1, 2, 4]
    res = r.run("DELETE FROM t")
    assert r.rows("t") == [] and res.metrics["numDeletedRows"] == 3
    assert history(r)["operationMetrics"]["numAddedFiles"] == "0"


def test_delete_partitioned_and_deltalake_reads_it(tmp_path):
    runner = Runner(tmp_path / "wh")
    schema = pa.schema([("id", pa.int64()), ("date", pa.string()), ("v", pa.int64())])
    rows = [{"id": i, "date": f"2024-01-0{1 + i % 3}", "v": i} for i in range(30)]
    make_table(runner.path("p"), schema, [rows], partition_by=["date"])
    res = runner.run("DELETE FROM p WHERE date = '2024-01-02' AND v > 10")
    assert res.metrics["numRemovedFiles"] == 1  # only that partition's file
    expected = sorted((r["id"], r["date"], r["v"]) for r in rows if not (r["date"] == "2024-01-02" and r["v"] > 10))
    assert runner.rows("p") == expected
    h = history(runner, "p")
    assert h["readPredicates"] == ["date = '2024-01-02' AND v > 10"]
    from deltalake import DeltaTable

    dt = DeltaTable(runner.path("p"))
    got = sorted((r["id"], r["date"], r["v"]) for r in dt.to_pyarrow_table().to_pylist())
    assert got == expected


def test_thousand_files_touches_only_what_matches(tmp_path):
    runner = Runner(tmp_path / "wh")
    batches = [[{"id": f * 10 + k, "v": f, "s": "x"} for k in range(10)] for f in range(1000)]
    make_table(runner.path("big"), SCHEMA, batches)
    assert runner.log("big").update().num_files == 1000
    res = runner.run("DELETE FROM big WHERE id IN (5, 15, 9995)")
    assert res.metrics["numDeletedRows"] == 3 and res.metrics["numRemovedFiles"] == 3
    res = runner.run("UPDATE big SET s = 'y' WHERE id BETWEEN 5000 AND 5009")
    assert res.metrics["numUpdatedRows"] == 10 and res.metrics["numRemovedFiles"] == 1
    snap = runner.log("big").update()
    assert 997 <= snap.num_files <= 1000  # 4 files rewritten (Spark may pack the 3 into fewer)
    from isolde.executor.rows.scan import scan

    df = scan(runner.session.spark, snap, runner.path("big"))
    assert df.count() == 9997 and df.filter("s = 'y'").count() == 10


def test_prepare_abort_leaves_table_and_no_files(r):
    before = r.rows("t")
    files_before = set(glob.glob(os.path.join(r.path("t"), "**", "*.parquet"), recursive=True))
    p = r.prepare("UPDATE t SET v = 1")
    assert p.staged_paths
    p.abort()
    assert r.rows("t") == before
    assert set(glob.glob(os.path.join(r.path("t"), "**", "*.parquet"), recursive=True)) == files_before


# --------------------------------------------------------------------------- MERGE


def _src(r, rows, name="src", schema=SCHEMA):
    make_table(r.path(name), schema, [_dicts(rows, schema)])


def test_merge_all_clauses_first_match_wins_and_null_keys(r):
    _src(r, [(1, -1, "del"), (2, 222, "upd"), (9, 9, "ins"), (None, 5, "nullkey"), (3, 1, "second")])
    res = r.run("""
        MERGE INTO t USING src AS s ON s.id = t.id
        WHEN MATCHED AND s.v < 0 THEN DELETE
        WHEN MATCHED AND s.v > 100 THEN UPDATE SET v = s.v, s = s.s
        WHEN MATCHED THEN UPDATE SET s = 'fallthrough'
        WHEN NOT MATCHED AND s.v > 6 THEN INSERT *
        WHEN NOT MATCHED THEN INSERT (id, s) VALUES (-1, s.s)
        WHEN NOT MATCHED BY SOURCE AND t.id = 0 THEN UPDATE SET v = -100
        WHEN NOT MATCHED BY SOURCE THEN DELETE""")
    assert r.rows("t") == [(-1, None, "nullkey"), (0, -100, "a"), (2, 222, "upd"), (3, None, "fallthrough"),
                           (9, 9, "ins")]
    m = res.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsDeleted"], m["numTargetRowsInserted"]) == (3, 2, 2)
    assert m["numSourceRows"] == 5
    h = history(r)
    p = h["operationParameters"]
    assert json.loads(p["predicate"]) == ["s.id = t.id"]
    assert [c["actionType"] for c in json.loads(p["matchedPredicates"])] == ["delete", "update", "update"]
    assert json.loads(p["notMatchedPredicates"])[0] == {"actionType": "insert", "predicate": "s.v > 6"}
    assert json.loads(p["notMatchedBySourcePredicates"])[1] == {"actionType": "delete"}
    assert h["readWholeTable"] is True  # NOT MATCHED BY SOURCE reads every target row


def test_merge_null_safe_join(r):
    _src(r, [(5, None, "n")])
    r.run("MERGE INTO t USING src s ON s.v <=> t.v WHEN MATCHED THEN UPDATE SET s = 'matched-null'")
    assert (3, None, "matched-null") in r.rows("t")
    r.run("MERGE INTO t USING src s ON s.v = t.v WHEN MATCHED THEN DELETE")  # NULL = NULL never matches
    assert (3, None, "matched-null") in r.rows("t")


def test_merge_cardinality(r):
    _src(r, [(1, 1, "x"), (1, 2, "y")])
    with pytest.raises(MergeCardinalityError) as e:
        r.run("MERGE INTO t USING src s ON s.id = t.id WHEN MATCHED THEN UPDATE SET v = s.v")
    assert e.value.error_class == "DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE"
    # only one of the two source rows acts: allowed, and the row is written once
    r.run("MERGE INTO t USING src s ON s.id = t.id WHEN MATCHED AND s.v = 2 THEN UPDATE SET v = s.v")
    assert [x for x in r.rows("t") if x[0] == 1] == [(1, 2, "b")]
    # a lone unconditional DELETE tolerates duplicates (Delta's rule)
    r.run("MERGE INTO t USING src s ON s.id = t.id WHEN MATCHED THEN DELETE")
    assert [x[0] for x in r.rows("t")] == [0, 2, 3, 4]


def test_merge_cardinality_sees_keys_equal_only_after_coercion(r):
    # '1' and '01' differ as strings but both equal the target's bigint 1: the source is not
    # unique in the target's type, so the per-row cardinality check must still run
    spark = r.session.spark
    spark.sql("SELECT * FROM VALUES ('1', 5L), ('01', 6L) AS x(id, v)").createOrReplaceTempView("coerced")
    try:
        version = r.log("t").update().version
        with pytest.raises(MergeCardinalityError):
            r.run("MERGE INTO t USING coerced s ON s.id = t.id WHEN MATCHED THEN UPDATE SET v = s.v")
        assert r.log("t").update().version == version and r.rows("t") == sorted(BASE, key=lambda x: x[0])
    finally:
        spark.catalog.dropTempView("coerced")


def test_merge_insert_only_appends_without_rewriting(r):
    _src(r, [(1, 100, "dup"), (7, 70, "new"), (8, 80, "new")])
    res = r.run("MERGE INTO t USING src s ON s.id = t.id WHEN NOT MATCHED THEN INSERT *")
    assert res.metrics["numTargetRowsInserted"] == 2 and res.metrics["numRemovedFiles"] == 0
    h = history(r)
    assert h["isBlindAppend"] is False and h["readPredicates"] == ["id IN (1, 7, 8)"]
    assert [x[0] for x in r.rows("t")] == [0, 1, 2, 3, 4, 7, 8]


def test_merge_source_query_and_temp_view(r):
    r.run("MERGE INTO t USING (SELECT id, v * 2 AS v, 'q' AS s FROM t WHERE id < 2) AS s ON s.id = t.id "
          "WHEN MATCHED THEN UPDATE SET *")
    assert r.rows("t")[:2] == [(0, 0, "q"), (1, 20, "q")]
    assert history(r)["readWholeTable"] is True  # the source reads the target
    spark = r.session.spark
    spark.createDataFrame([(4, 400, "df"), (5, 500, "df")], "id long, v long, s string").createOrReplaceTempView("updates")
    try:
        r.run("MERGE INTO t USING updates u ON u.id = t.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    finally:
        spark.catalog.dropTempView("updates")
    assert r.rows("t")[-2:] == [(4, 400, "df"), (5, 500, "df")]


def test_merge_schema_evolution(r):
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string()), ("extra", pa.string())])
    _src(r, [(1, 11, "b", "x1"), (6, 66, "f", "x6")], schema=schema)
    # without evolution, UPDATE SET * assigns the target's columns and ignores the source's extra one
    r.run("MERGE INTO t USING src s ON s.id = t.id WHEN MATCHED THEN UPDATE SET * ")
    assert len(r.rows("t")[0]) == 3 and (1, 11, "b") in r.rows("t")
    r.run("MERGE WITH SCHEMA EVOLUTION INTO t USING src s ON s.id = t.id "
          "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    snap = r.log("t").update()
    assert [f["name"] for f in snap.schema["fields"]] == ["id", "v", "s", "extra"]
    assert r.rows("t") == [(0, 0, "a", None), (1, 11, "b", "x1"), (2, 20, None, None), (3, None, "d", None),
                           (4, 40, "e", None), (6, 66, "f", "x6")]


def test_merge_partition_scoped_dynamic_keys(tmp_path):
    runner = Runner(tmp_path / "wh")
    schema = pa.schema([("id", pa.int64()), ("date", pa.date32()), ("v", pa.int64())])
    d1, d2 = datetime.date(2024, 1, 1), datetime.date(2024, 1, 2)
    make_table(runner.path("p"), schema, [[{"id": i, "date": d, "v": 0} for i in range(3) for d in (d1, d2)]],
               partition_by=["date"])
    make_table(runner.path("src"), schema, [[{"id": 1, "date": d2, "v": 5}, {"id": 9, "date": d2, "v": 9}]])
    res = runner.run("MERGE INTO p t USING src s ON s.id = t.id AND s.date = t.date "
                     "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    assert res.metrics["numRemovedFiles"] == 1
    h = history(runner, "p")
    assert h["readPredicates"] == ["id IN (1, 9) AND date = CAST('2024-01-02' AS DATE)"]
    assert sorted(runner.rows("p")) == sorted([(i, d, 0) for i in range(3) for d in (d1, d2) if (i, d) != (1, d2)]
                                              + [(1, d2, 5), (9, d2, 9)])


def test_identity_and_generated_columns(tmp_path):
    """Changed rows keep their identity values and get generated columns recomputed; rows a
    MERGE inserts get new identity values (the high-water mark advances)."""
    runner = Runner(tmp_path / "wh")
    s = runner.session
    s.execute("CREATE TABLE g (id BIGINT GENERATED ALWAYS AS IDENTITY, v INT, "
              "w INT GENERATED ALWAYS AS (v * 2)) TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')")
    s.execute("INSERT INTO g (v) VALUES (1), (2), (3)")
    runner.run("UPDATE g SET v = v + 10 WHERE v >= 2")
    rows = runner.rows("g")
    assert sorted((v, w) for _, v, w in rows) == [(1, 2), (12, 24), (13, 26)]
    ids = sorted(i for i, _, _ in rows)
    assert len(set(ids)) == 3
    runner.run("MERGE INTO g USING (SELECT 1 AS v UNION ALL SELECT 50) s ON s.v = g.v "
               "WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT (v) VALUES (s.v)")
    rows = runner.rows("g")
    assert sorted((v, w) for _, v, w in rows) == [(12, 24), (13, 26), (50, 100)]
    new_id = next(i for i, v, _ in rows if v == 50)
    assert new_id not in ids and new_id > max(ids)
