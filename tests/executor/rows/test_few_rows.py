"""Point MERGE / UPDATE pairs collected to the driver (executor/rows/few_rows.py).

A MERGE with a small source and an UPDATE over small candidate files bring their changed rows
to the driver in one job (at most ``routes.FEW_ROWS``) instead of checkpointing them and building the
deletion vectors' bitmaps in a second job; the write reads them back as a local relation. The
tables they leave must be the ones the Spark route leaves: each case runs the same statement on
two copies of a table, one with the driver route and one with it switched off, and compares
rows (read by isolde and by delta-rs), metrics and deletion vectors. The copy without the
driver route takes, in turn, the Spark route (checkpoint, bitmaps built in Spark) and the
bounded one (``bounded_rows``: the changed rows computed as written in one job), so the three
routes are checked against each other. Non-unique keys, types that do not survive Arrow, and
more rows than ``FEW_ROWS`` must fall back to the Spark route.
"""

from __future__ import annotations

import datetime
import decimal
import random

import pytest

from isolde.errors import MergeCardinalityError
from isolde.executor.rows import bounded_rows, few_rows
from isolde.executor.rows import routes as rules  # (``routes``: the fixture of the routes taken)

pytestmark = pytest.mark.spark

COLUMNS = ("id BIGINT, v DOUBLE, s STRING, d DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, dec DECIMAL(12,3), "
           "arr ARRAY<INT>, st STRUCT<a: INT, b: STRING>, m MAP<STRING, INT>")
PROPS = "'delta.enableDeletionVectors' = 'true', 'delta.enableRowTracking' = 'true'"
SCHEMA = COLUMNS  # (createDataFrame takes the DDL)


def _row(rng: random.Random, i: int) -> tuple:
    none = rng.random() < 0.15
    return (i, None if none else rng.choice([0.0, -0.0, 1.5, rng.random()]), None if none else f"s{rng.randrange(5)}",
            datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randrange(400)),
            datetime.datetime(2024, 3, 31, 1, 30, tzinfo=datetime.timezone.utc) + datetime.timedelta(
                microseconds=rng.randrange(10**12)),
            datetime.datetime(2024, 10, 27, 2, 30) + datetime.timedelta(microseconds=rng.randrange(10**9)),
            decimal.Decimal(rng.randrange(-10**6, 10**6)) / 1000,
            None if none else [rng.randrange(9) for _ in range(rng.randrange(3))],
            (rng.randrange(9), f"b{rng.randrange(3)}"), {f"k{rng.randrange(3)}": rng.randrange(9)})


def _tables(session, spark, rng: random.Random, ids: list) -> None:
    """Two tables (``few``, ``wide``) holding the same rows, in three files each."""
    rows = [_row(rng, i) for i in ids]
    for name in ("few", "wide"):
        session.execute(f"CREATE TABLE {name} ({COLUMNS}) TBLPROPERTIES ({PROPS})")
        for part in range(3):
            spark.createDataFrame(rows[part::3], SCHEMA).createOrReplaceTempView("rows_in")
            session.execute(f"INSERT INTO {name} SELECT * FROM rows_in")
    spark.catalog.dropTempView("rows_in")


def _contents(session, name: str) -> list:
    return sorted((tuple(r) for r in session.sql(f"SELECT * FROM {name}").collect()), key=repr)


def _files(session, table_path, name: str) -> dict:
    """path -> (first id, rows, deleted positions) of each live file."""
    from isolde.executor.log.delta_log import DeltaLog
    from isolde.executor.log.deletion_vectors import read_deletion_vector

    path = table_path(session, name)
    return {a.path: (a.parsed_stats["minValues"]["id"], a.num_records,
                     sorted(read_deletion_vector(path, a.deletion_vector)) if a.deletion_vector else [])
            for a in DeltaLog.for_table(path).snapshot().all_files}


def _vectors(before: dict, after: dict) -> tuple:
    """The deleted positions of the files the statement found (by their first id: the two
    tables' paths differ), and the rows of the files it wrote (the two routes may split those
    into files differently)."""
    found = sorted((before[p][0], after[p] if p in after else "removed") for p in before)
    return found, sum(n for p, (_, n, _) in after.items() if p not in before)


@pytest.fixture
def routes(monkeypatch):
    """Which route each statement took: True for the driver's, False for a fallback."""
    taken = []
    collect = few_rows.collect_few

    def record(df, limit=None, files=None):
        found = collect(df, limit, files)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(few_rows, "collect_few", record)
    return taken


@pytest.fixture(params=["spark", "bounded"])
def reference(request):
    """The route ``wide`` takes: Spark's (a checkpoint, bitmaps built in Spark), or the changed
    rows computed as written in one job (``bounded_rows``)."""
    return request.param


def _both(session, table_path, sql_for, reference: str = "spark") -> tuple:
    """``sql_for(name)`` on ``few`` (driver route on) and on ``wide`` (off: the ``reference``
    route): their results, and each table's files before and after."""
    few_before = _files(session, table_path, "few")
    first = session.execute(sql_for("few"))
    wide_before = _files(session, table_path, "wide")
    collected = []
    collect = bounded_rows.collect_changed

    def record(*args, **kwargs):
        found = collect(*args, **kwargs)
        collected.append(found is not None)
        return found

    with pytest.MonkeyPatch.context() as off:
        off.setattr(rules, "FEW_ROWS", -1)
        off.setattr(rules, "SMALL_SCAN_ROWS", -1)
        off.setattr(bounded_rows, "collect_changed", record if reference == "bounded" else lambda *a, **k: None)
        second = session.execute(sql_for("wide"))
    assert collected == ([True] if reference == "bounded" else [])
    return (first, _vectors(few_before, _files(session, table_path, "few"))), \
        (second, _vectors(wide_before, _files(session, table_path, "wide")))


def _same_tables(session, table_path, delta_rows, first, second) -> None:
    (first, first_files), (second, second_files) = first, second
    assert _contents(session, "few") == _contents(session, "wide")
    assert delta_rows(table_path(session, "few")) == delta_rows(table_path(session, "wide"))
    assert first_files == second_files
    metrics = ("numTargetRowsUpdated", "numTargetRowsDeleted", "numTargetRowsInserted", "numUpdatedRows",
               "numDeletionVectorsAdded", "numTargetDeletionVectorsAdded")
    assert {k: first.metrics.get(k) for k in metrics} == {k: second.metrics.get(k) for k in metrics}


MERGES = [
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    "WHEN MATCHED AND s.v > 0.5 THEN UPDATE SET v = s.v, st = s.st, m = s.m WHEN MATCHED AND s.v IS NULL THEN DELETE "
    "WHEN NOT MATCHED AND s.id % 2 = 0 THEN INSERT *",
    "WHEN MATCHED THEN DELETE",
    "WHEN MATCHED AND t.dec > 0 THEN UPDATE SET dec = t.dec + s.dec, arr = concat(t.arr, s.arr), ts = s.ts",
]


@pytest.mark.parametrize("seed", range(8))
def test_a_small_merge_leaves_the_table_the_spark_route_leaves(session, spark, routes, seed,
                                                                table_path, delta_rows, reference):
    rng = random.Random(seed)
    _tables(session, spark, rng, list(range(300)))
    source = [_row(rng, i) for i in rng.sample(range(450), rng.randrange(1, 40))]
    local = seed % 2 == 0  # a local relation (VALUES-like) or a source Spark must read
    if local:
        spark.createDataFrame(source, SCHEMA).createOrReplaceTempView("src")
    else:
        session.execute(f"CREATE TABLE src_t ({COLUMNS})")
        spark.createDataFrame(source, SCHEMA).createOrReplaceTempView("src_in")
        session.execute("INSERT INTO src_t SELECT * FROM src_in")
    src = "src" if local else "src_t"
    clauses = MERGES[seed % len(MERGES)]
    first, second = _both(session, table_path, lambda name: f"MERGE INTO {name} t USING {src} s ON t.id = s.id {clauses}",
                          reference)
    assert routes == [True], routes
    _same_tables(session, table_path, delta_rows, first, second)


def test_a_small_update_leaves_the_table_the_spark_route_leaves(session, spark, routes, table_path,
                                                                 delta_rows, reference):
    for where in ("id = 17", "id IN (3, 300, 599) OR s = 's9'", "id % 50 = 7 AND v IS NOT NULL", "id < 0"):
        # fresh tables each time: the two routes may split the rows they write into files differently
        session.execute("DROP TABLE IF EXISTS few")
        session.execute("DROP TABLE IF EXISTS wide")
        _tables(session, spark, random.Random(11), list(range(600)))
        first, second = _both(session, table_path, lambda name: f"UPDATE {name} SET v = coalesce(v, 0) + 1, "
                                                    f"st = named_struct('a', st.a + 1, 'b', 'u'), "
                                                    f"dec = dec * 2 WHERE {where}", reference)
        _same_tables(session, table_path, delta_rows, first, second)
    assert routes == [True] * 4, routes


def test_a_partitioned_table_and_rows_that_change_partition(session, spark, routes, table_path, delta_rows,
                                                             reference):
    """Updated rows that move to another partition and inserts into new partitions: each
    partition's rows in its own file, as the Spark route writes them."""
    for name in ("few", "wide"):
        session.execute(f"CREATE TABLE {name} (id BIGINT, p STRING, v DOUBLE) PARTITIONED BY (p) "
                        f"TBLPROPERTIES ({PROPS})")
        session.execute(f"INSERT INTO {name} SELECT id, concat('p', id % 4), id * 0.5 FROM range(400)")
    source = "SELECT * FROM VALUES (3, 'p0', 1.0), (8, 'p9', 2.0), (13, 'p1', 3.0), (1000, 'p7', 4.0) AS s(id, p, v)"
    first, second = _both(session, table_path, lambda name: f"MERGE INTO {name} t USING ({source}) s ON t.id = s.id "
                                                           "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
                                          reference)
    assert routes == [True]
    _same_tables(session, table_path, delta_rows, first, second)
    first, second = _both(session, table_path, lambda name: f"UPDATE {name} SET p = 'p5', v = -v WHERE id IN (5, 6)",
                          reference)
    assert routes == [True, True]
    _same_tables(session, table_path, delta_rows, first, second)
    assert sorted(r.p for r in session.sql("SELECT p FROM few WHERE id IN (3, 5, 6, 8, 13, 1000)").collect()) == \
        ["p0", "p1", "p5", "p5", "p7", "p9"]


def test_more_rows_than_few_take_the_spark_route(session, spark, monkeypatch, routes, table_path, delta_rows):
    """A source key that is not unique in the target pairs with more rows than FEW_ROWS, and an
    UPDATE selects more: the limit stops the collection and Spark materialises them instead."""
    monkeypatch.setattr(rules, "FEW_ROWS", 20)
    session.execute(f"CREATE TABLE dup (id BIGINT, k INT, v DOUBLE) TBLPROPERTIES ({PROPS})")
    spark.range(200).selectExpr("id", "CAST(id % 3 AS INT) AS k", "0.0D AS v").createOrReplaceTempView("d_in")
    session.execute("INSERT INTO dup SELECT * FROM d_in")
    result = session.execute("MERGE INTO dup t USING (SELECT 1 AS k, 2.5D AS v) s ON t.k = s.k "
                             "WHEN MATCHED THEN UPDATE SET v = s.v")
    assert result.metrics["numTargetRowsUpdated"] == 67
    result = session.execute("UPDATE dup SET v = v + 1 WHERE k = 2")
    assert result.metrics["numUpdatedRows"] == 66
    assert routes == [False, False]
    expected = sorted((i, i % 3, {0: 0.0, 1: 2.5, 2: 1.0}[i % 3]) for i in range(200))
    assert sorted(tuple(r) for r in session.sql("SELECT * FROM dup").collect()) == expected
    assert delta_rows(table_path(session, "dup")) == expected


def test_types_arrow_cannot_carry_take_the_spark_route(session, spark, routes):
    session.execute(f"CREATE TABLE va (id BIGINT, j VARIANT) TBLPROPERTIES ({PROPS})")
    session.execute("""INSERT INTO va VALUES (1, parse_json('{"a": 1}')), (2, parse_json('[2]'))""")
    session.execute("""MERGE INTO va t USING (SELECT 2 AS id) s ON t.id = s.id
                       WHEN MATCHED THEN UPDATE SET j = parse_json('"m"')""")
    session.execute("""UPDATE va SET j = parse_json('{"u": true}') WHERE id = 1""")
    assert routes == [False, False]  # declined before any job: a VARIANT column is not Arrow-safe
    rows = sorted((r.id, r.j) for r in session.sql("SELECT id, to_json(j) AS j FROM va").collect())
    assert rows == [(1, '{"u":true}'), (2, '"m"')]


def test_two_source_rows_on_one_target_row_still_fail(session, spark, routes):
    session.execute(f"CREATE TABLE card (id BIGINT, v DOUBLE) TBLPROPERTIES ({PROPS})")
    session.execute("INSERT INTO card VALUES (1, 0.0), (2, 0.0)")
    with pytest.raises(MergeCardinalityError):
        session.execute("MERGE INTO card t USING (SELECT 1 AS id, 1.0D AS v UNION ALL SELECT 1, 2.0D) s "
                        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v")
    assert routes == [True]
    assert sorted(tuple(r) for r in session.sql("SELECT * FROM card").collect()) == [(1, 0.0), (2, 0.0)]
    # a lone unconditional DELETE may match a row twice (as in Delta)
    session.execute("MERGE INTO card t USING (SELECT 2 AS id UNION ALL SELECT 2) s ON t.id = s.id "
                    "WHEN MATCHED THEN DELETE")
    assert sorted(tuple(r) for r in session.sql("SELECT * FROM card").collect()) == [(1, 0.0)]
