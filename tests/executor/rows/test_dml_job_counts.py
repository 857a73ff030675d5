"""Spark jobs per point statement on a deletion-vector table whose statistics prune to one file
(issue 23): a regression guard on COUNTS, not times. Each statement's rows are checked too,
read back by isolde and by delta-rs (QueryBuilder, which applies deletion vectors).

The table: ids 0..499 in one file, 500..999 in another, one row already deleted from each, so
every scan applies a deletion vector (the steady state of a table taking point statements).
Jobs counted by the DAG scheduler's job counter, so jobs from any thread count.

Why each count (see benchmarks/dml_point.py for the times). The two deleted rows are tested as
literals in the scan (routes.DV_INLINE_MAX_ROWS): no deletion-vector broadcast.
  UPDATE  1: the pass that finds the row and brings it to the driver (few_rows), where pyarrow
             writes the new row (driver_write)
  DELETE  1: the pass that collects the position (no row is written)
  MERGE   1: the VALUES source taken from the driver as it is (ids and key summary added there)
             and written into pass 1's plan as literals (inline_source: no broadcast job);
             pass 1 collecting the pairs; pyarrow writes the row
  MERGE of a new key 0: statistics prune every file (no pass 1); the new row is a local
             relation pyarrow writes
  INSERT  0: a VALUES list is a local relation pyarrow writes
  SELECT  1: the collect
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark

HALF = 500


@pytest.fixture
def table(session, spark, table_path):
    """The two-file table with a vector on each file; returns (path, expected rows dict)."""
    session.execute("CREATE TABLE pt (id BIGINT, v DOUBLE, s STRING)")
    for lo in (0, HALF):
        df = spark.range(lo, lo + HALF, 1, 1).selectExpr("id", "CAST(id AS DOUBLE) / 2 AS v",
                                                          "concat('r', CAST(id AS STRING)) AS s")
        df.coalesce(1).createOrReplaceTempView("pt_half")
        session.execute("INSERT INTO pt SELECT * FROM pt_half")
    spark.catalog.dropTempView("pt_half")
    session.execute("DELETE FROM pt WHERE id = 7 OR id = 707")
    path = table_path(session, "pt")
    expected = {i: (i, i / 2, f"r{i}") for i in range(2 * HALF) if i not in (7, 707)}
    return path, expected


def _jobs(spark):
    sched = spark.sparkContext._jsc.sc().dagScheduler()
    return int(sched.nextJobId())  # an AtomicInteger: py4j hands it over as an int


def _apply(expected: dict, kind: str, key: int) -> None:
    if kind == "UPDATE":
        i, v, s = expected[key]
        expected[key] = (i, v + 1, s)
    elif kind == "DELETE":
        del expected[key]
    elif kind in ("MERGE", "MERGE_NEW"):
        expected[key] = (key, 0.5, "m")
    elif kind == "INSERT":
        expected[key] = (key, 0.25, "i")


CASES = [
    # (kind, statement, key, Spark jobs, files the commit removes: the one pruned file)
    ("UPDATE", "UPDATE pt SET v = v + 1 WHERE id = {k}", 123, 1, 1),
    ("DELETE", "DELETE FROM pt WHERE id = {k}", 612, 1, 1),
    ("MERGE", "MERGE INTO pt t USING (VALUES ({k}, 0.5, 'm')) AS src(id, v, s) ON t.id = src.id "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *", 345, 1, 1),
    ("MERGE_NEW", "MERGE INTO pt t USING (VALUES ({k}, 0.5, 'm')) AS src(id, v, s) ON t.id = src.id "
                  "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *", 5000, 0, 0),
    ("INSERT", "INSERT INTO pt VALUES ({k}, 0.25, 'i')", 6000, 0, 0),
]


@pytest.mark.parametrize("kind,sql,key,jobs,removed", CASES, ids=[c[0] for c in CASES])
def test_point_statement_jobs_and_rows(session, spark, table, delta_rows, kind, sql, key, jobs, removed):
    path, expected = table
    before = _jobs(spark)
    result = session.execute(sql.format(k=key))
    assert _jobs(spark) - before == jobs
    removes = [a for a in _last_commit(path) if "remove" in a]
    assert len(removes) == removed
    _apply(expected, kind, key)
    want = sorted(expected.values())
    assert sorted(tuple(r) for r in session.sql("SELECT id, v, s FROM pt").collect()) == want
    assert delta_rows(path, ["id", "v", "s"]) == want
    assert result.version == 4  # create, two inserts, the first delete, this statement


def test_point_select_jobs(session, spark, table):
    path, expected = table
    before = _jobs(spark)
    rows = session.sql("SELECT * FROM pt WHERE id = 808").collect()
    assert _jobs(spark) - before == 1
    assert [tuple(r) for r in rows] == [expected[808]]
    before = _jobs(spark)
    assert session.sql("SELECT * FROM pt WHERE id = 707").collect() == []  # the deleted row
    assert _jobs(spark) - before == 1


def test_merge_of_many_source_rows_keeps_the_general_plan(session, spark, table, delta_rows):
    """A source with duplicate matches still raises the cardinality error; one with several keys
    updates and inserts exactly (the driver-side summary and pairs agree with Spark's)."""
    from isolde.errors import MergeCardinalityError

    path, expected = table
    with pytest.raises(MergeCardinalityError):
        session.execute("MERGE INTO pt t USING (VALUES (10, 1.0, 'a'), (10, 2.0, 'b')) AS src(id, v, s) "
                        "ON t.id = src.id WHEN MATCHED THEN UPDATE SET *")
    session.execute("MERGE INTO pt t USING (VALUES (11, 1.0, 'a'), (600, 2.0, 'b'), (7, 3.0, 'c'), "
                    "(NULL, 4.0, 'd'), (2000, 5.0, 'e')) AS src(id, v, s) ON t.id = src.id "
                    "WHEN MATCHED AND src.v < 2 THEN DELETE WHEN MATCHED THEN UPDATE SET * "
                    "WHEN NOT MATCHED THEN INSERT *")
    del expected[11]
    expected[600] = (600, 2.0, "b")
    expected[7] = (7, 3.0, "c")  # deleted before: not matched, inserted again
    expected[2000] = (2000, 5.0, "e")
    want = sorted(expected.values()) + [(None, 4.0, "d")]
    got = sorted((tuple(r) for r in session.sql("SELECT id, v, s FROM pt").collect()),
                 key=lambda r: (r[0] is None, r[0] or 0))
    assert got == want
    assert sorted(delta_rows(path, ["id", "v", "s"]), key=lambda r: (r[0] is None, r[0] or 0)) == want


def _last_commit(path: str) -> list:
    import glob
    import json
    import os

    last = sorted(glob.glob(os.path.join(path, "_delta_log", "*.json")))[-1]
    with open(last) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_many_deleted_rows_take_the_broadcast(session, spark, table, delta_rows):
    """Past routes.DV_INLINE_MAX_ROWS deleted rows an UPDATE's scan broadcasts the vectors: one
    job more. A DELETE applies them on the driver to the positions it found: still one job."""
    from isolde.executor.rows import routes

    path, expected = table
    n = routes.DV_INLINE_MAX_ROWS
    session.execute(f"DELETE FROM pt WHERE id >= 100 AND id < {100 + n}")  # with 7 and 707: past the limit
    before = _jobs(spark)
    session.execute("UPDATE pt SET v = -1.0 WHERE id = 98")
    assert _jobs(spark) - before == 2
    before = _jobs(spark)
    # id 100 is deleted already: neither found again nor counted
    assert session.execute("DELETE FROM pt WHERE id = 99 OR id = 100").metrics["numDeletedRows"] == 1
    assert _jobs(spark) - before == 1
    expected[98] = (98, -1.0, expected[98][2])
    want = sorted(v for k, v in expected.items() if not (100 <= k < 100 + n or k == 99))
    assert sorted(tuple(r) for r in session.sql("SELECT id, v, s FROM pt").collect()) == want
    assert delta_rows(path, ["id", "v", "s"]) == want


SOURCES = [
    # (what the source is, its SQL: (id, v) rows 20 -> 9.5 and 3000 -> 1.5)
    ("local, a TIMESTAMP column (read with toArrow)",
     "SELECT * FROM VALUES (20L, 9.5D, TIMESTAMP'2024-03-31 02:30:00'), (3000L, 1.5D, TIMESTAMP'2024-01-01 00:00:00') "
     "AS x(id, v, ts)"),
    ("local, a struct column", "SELECT * FROM VALUES (20L, 9.5D, named_struct('a', 1)), (3000L, 1.5D, named_struct('a', 2)) "
                               "AS x(id, v, st)"),
    ("not local (a temp view over a range: materialised)", "SELECT * FROM pt_src"),
]


@pytest.mark.parametrize("what,source", SOURCES, ids=["timestamp", "struct", "view"])
def test_merge_sources_other_than_plain_values(session, spark, table, delta_rows, what, source):
    path, expected = table
    spark.range(0, 2, 1, 2).selectExpr("IF(id = 0, 20L, 3000L) AS id", "IF(id = 0, 9.5D, 1.5D) AS v") \
        .createOrReplaceTempView("pt_src")
    try:
        session.execute(f"MERGE INTO pt t USING ({source}) AS src ON t.id = src.id "
                        "WHEN MATCHED THEN UPDATE SET v = src.v WHEN NOT MATCHED THEN INSERT (id, v, s) "
                        "VALUES (src.id, src.v, 'n')")
    finally:
        spark.catalog.dropTempView("pt_src")
    expected[20] = (20, 9.5, "r20")
    expected[3000] = (3000, 1.5, "n")
    want = sorted(expected.values())
    assert sorted(tuple(r) for r in session.sql("SELECT id, v, s FROM pt").collect()) == want
    assert delta_rows(path, ["id", "v", "s"]) == want
