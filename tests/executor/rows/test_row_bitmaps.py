"""Per-file bitmaps built in Spark (executor/rows/row_bitmaps.py) against the positions themselves.

Differential: random (file, position) sets, dense and sparse, across the 32,768-row bucket
boundaries and past 2^32, with duplicates; the bitmaps the driver rebuilds from Spark's
``bitmap_construct_agg`` buffers must hold exactly the distinct positions of each key, and
the pair counts the rows that named them. Also: one job, adaptive execution off for it only.
"""

from __future__ import annotations

import random

import pytest

pytestmark = pytest.mark.spark


def _frame(spark, rows):
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("f", T.StringType()), T.StructField("cl", T.IntegerType()),
                           T.StructField("p", T.LongType())])
    return spark.createDataFrame(rows, schema)


def _expected(rows):
    out: dict = {}
    for f, cl, p in rows:
        if p is None:
            continue
        rows_, n = out.get((f, cl), (set(), 0))
        rows_.add(p)
        out[(f, cl)] = (rows_, n + 1)
    return out


EDGES = [0, 1, 32766, 32767, 32768, 32769, 65535, 65536, 65537, 2**31 - 1, 2**32 - 1, 2**32, 2**32 + 5, 2**40 + 3]


@pytest.mark.parametrize("seed", range(6))
def test_bitmaps_hold_exactly_the_positions(spark, seed):
    from isolde.executor.rows import row_bitmaps

    rng = random.Random(seed)
    rows = []
    for f in ("a", "b", "c")[: rng.randint(1, 3)]:
        for cl in (0, 1)[: rng.randint(1, 2)]:
            dense = rng.random() < 0.5
            hi = rng.choice([1000, 100_000, 3_000_000])
            n = rng.randint(1, 40_000 if dense else 300)
            rows += [(f, cl, rng.randrange(hi)) for _ in range(n)]
            rows += [(f, cl, rng.choice(EDGES)) for _ in range(rng.randint(0, 4))]
    rows += [("a", 0, None)]  # NULL positions are not rows
    rng.shuffle(rows)
    got = row_bitmaps.collect_bitmaps(_frame(spark, rows).repartition(3), ["f", "cl"], "p")
    want = _expected(rows)
    assert set(got) == set(want)
    for key, (positions, pairs) in want.items():
        assert sorted(got[key].rows) == sorted(positions), key
        assert got[key].pairs == pairs
        assert len(got[key]) == len(positions)


def test_every_row_of_a_bucket_and_none_of_the_next(spark):
    from isolde.executor.rows import row_bitmaps

    rows = [("f", 0, p) for p in range(32768)]
    got = row_bitmaps.positions_by_file(_frame(spark, rows), "f", "p")
    assert list(got) == ["f"] and len(got["f"]) == 32768
    assert got["f"].min() == 0 and got["f"].max() == 32767


def test_positions_by_file_keeps_only_the_paths_asked(spark):
    from isolde.executor.rows import row_bitmaps

    rows = [("x", 0, 3), ("y", 0, 4), ("y", 0, 9)]
    assert {k: list(v) for k, v in row_bitmaps.positions_by_file(_frame(spark, rows), "f", "p", ["y"]).items()} \
        == {"y": [4, 9]}
    assert row_bitmaps.positions_by_file(_frame(spark, rows), "f", "p", []) == {}


def test_one_job_and_the_session_keeps_adaptive_execution(spark):
    from isolde.executor.rows import row_bitmaps

    sched = spark.sparkContext._jsc.sc().dagScheduler()
    df = _frame(spark, [("f", 0, i * 7) for i in range(5000)])
    before = int(sched.nextJobId())
    got = row_bitmaps.collect_bitmaps(df, ["f"], "p")
    assert int(sched.nextJobId()) - before == 1  # no separate map-stage job of AQE
    assert len(got[("f",)]) == 5000
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"


def test_session_settings_apply_to_the_bitmap_query(spark):
    """The clone carries the session's settings: a setting that changes the rows (ANSI casts)
    must act on the bitmap query as it would on the DataFrame itself."""
    from pyspark.sql import functions as F

    from isolde.executor.rows import row_bitmaps

    df = spark.createDataFrame([("f", "12"), ("f", "x")], "f string, s string").select(
        "f", F.expr("try_cast(s AS BIGINT)").alias("p"))
    assert {k: list(v) for k, v in row_bitmaps.positions_by_file(df, "f", "p").items()} == {"f": [12]}
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    try:
        tz = spark.createDataFrame([("f",)], "f string").select(
            "f", F.expr("hour(timestamp_seconds(1704067200))").cast("long").alias("p"))  # 00:00 UTC
        assert tz.collect()[0]["p"] == 5  # 05:30 in Kolkata
        assert {k: list(v) for k, v in row_bitmaps.positions_by_file(tz, "f", "p").items()} == {"f": [5]}
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)


def test_dml_results_carry_their_phases(session):
    session.execute("CREATE TABLE ph (id BIGINT, v DOUBLE) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    session.execute("INSERT INTO ph SELECT id, id / 2 FROM range(1000)")
    import time

    t = time.perf_counter()
    upd = session.execute("UPDATE ph SET v = -1 WHERE id % 10 = 0")
    wall_ms = (time.perf_counter() - t) * 1000
    assert {"plan", "find", "dv", "write", "stats", "commit"} <= set(upd.phases)
    assert all(v >= 0 for v in upd.phases.values())
    assert sum(upd.phases.values()) <= wall_ms + 1
    dele = session.execute("DELETE FROM ph WHERE id % 10 = 1")
    assert "write" not in dele.phases and {"find", "dv", "commit"} <= set(dele.phases)
    prepared = session.prepare("DELETE FROM ph WHERE id = 2")
    assert prepared.commit().phases == {}  # prepare()'s commit is timed by its caller


def test_deleting_most_rows_of_a_large_file_brings_bitmaps_not_rows(session, spark, delta_rows, table_path,
                                                                     monkeypatch):
    """Past 32,768 rows a bucket is full; every second row of 200k deleted in one statement, then
    a second statement ORs its rows into the same files' vectors. delta-rs reads the result.
    The rows a DELETE brings to the driver as (file, row) pairs are bounded (bounded_rows): the
    bound is lowered to 50,000 here, so the first DELETE's 100k rows pass it and come as
    bitmaps built in Spark. The second finds its rows with the vectors deferred, deleted ones
    included (28,572 of which 14,286 are already deleted): under the bound, they come as pairs
    and the rows deleted already are taken out on the driver, not counted again."""
    from isolde.executor.rows import routes, row_bitmaps

    monkeypatch.setattr(routes, "POSITION_ROWS", 50_000)
    session.execute("CREATE TABLE big (id BIGINT) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    session.execute("INSERT INTO big SELECT id FROM range(0, 200000, 1, 1)")
    seen = []
    orig = row_bitmaps.bitmaps_from_arrow

    def spy(table, keys):
        seen.append(table.num_rows)
        return orig(table, keys)

    row_bitmaps.bitmaps_from_arrow = spy
    try:
        first = session.execute("DELETE FROM big WHERE id % 2 = 0")
        second = session.execute("DELETE FROM big WHERE id % 7 = 0")
    finally:
        row_bitmaps.bitmaps_from_arrow = orig
    assert first.metrics["numDeletedRows"] == 100000
    assert second.metrics["numDeletedRows"] == len([i for i in range(200000) if i % 7 == 0 and i % 2])
    # 200k positions in one file: 7 buckets of 32,768 came to the driver, not 100k rows; the
    # second DELETE's rows, under the bound, were grouped on the driver (no Spark bitmaps)
    assert len(seen) == 1 and seen[0] <= 200000 // 32768 + 1
    want = [(i,) for i in range(200000) if i % 2 and i % 7]
    assert delta_rows(table_path(session, "big")) == want
    assert sorted(session.execute("SELECT id FROM big").rows) == [tuple(r) for r in want]
