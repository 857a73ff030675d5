"""Row-id sets as SQL literals (executor/rows/id_sets.py), evaluated by Spark against the set itself.

Differential: random sets of ``monotonically_increasing_id`` values (several source partitions,
rows past a partition's last member, partitions with no member, ids on byte and word edges),
from the IN-list size to bitmaps of several partitions; every candidate id must test as a
member exactly when it is one. Then a MERGE whose source is a multi-partition DataFrame with
thousands of matches: the rows inserted are exactly the source rows no target row matched.
"""

from __future__ import annotations

import random

import pytest

from isolde.executor.rows import id_sets, routes

pytestmark = pytest.mark.spark

ROW_BITS = 33


def _ids(rng: random.Random, n: int) -> list:
    partitions = rng.sample(range(0, 40), rng.randint(1, 5))
    out = set()
    while len(out) < n:
        p = rng.choice(partitions)
        out.add((p << ROW_BITS) | rng.choice([0, 1, 7, 8, 63, 64, rng.randrange(50_000)]))
    return sorted(out)


def _candidates(rng: random.Random, ids: list) -> list:
    """members, their neighbours, rows past each partition's last member, and other partitions"""
    out = set(ids)
    for x in ids[:: max(1, len(ids) // 200)]:
        out |= {x - 1, x + 1, x + 8, x + 64} - {-1}
    for x in {x >> ROW_BITS for x in ids}:
        last = max(i for i in ids if i >> ROW_BITS == x)
        out |= {last + 1, last + 9, last + 1000, ((x + 1) << ROW_BITS), ((x + 50) << ROW_BITS) | 3}
    out |= {rng.randrange(1 << 40) for _ in range(300)}
    return sorted(y for y in out if y >= 0)


@pytest.mark.parametrize("n", [0, 1, 256, 257, 5_000, 30_000])
@pytest.mark.parametrize("seed", range(2))
def test_membership_sql_matches_the_set(spark, n, seed):
    rng = random.Random(seed * 1000 + n)
    ids = _ids(rng, n)
    sql = id_sets.membership_sql(ids, "sid")
    assert sql is not None
    if n > routes.IN_LIST_IDS:
        assert " IN (" not in sql  # the bitmap form
    candidates = _candidates(rng, ids)
    df = spark.createDataFrame([(x,) for x in candidates], "sid BIGINT")
    got = sorted(r[0] for r in df.where(sql).collect())
    assert got == sorted(set(ids) & set(candidates))


def test_bitmap_accepts_a_pyroaring_bitmap(spark):
    from pyroaring import BitMap64

    ids = _ids(random.Random(3), 2_000)
    sql = id_sets.membership_sql(BitMap64(ids), "sid")
    df = spark.createDataFrame([(x,) for x in _candidates(random.Random(4), ids)], "sid BIGINT")
    assert sorted(r[0] for r in df.where(sql).collect()) == ids


def test_too_big_a_set_is_left_to_a_join(monkeypatch):
    monkeypatch.setattr(routes, "BITMAP_MAX_BYTES", 1024)
    assert id_sets.membership_sql(list(range(0, 8 * 1024 + 1, 8)), "sid") is None  # row 8192: 1,025 bytes
    assert id_sets.membership_sql(list(range(0, 8 * 1024, 8)), "sid") is not None  # row 8184: 1,024


@pytest.mark.parametrize("matched_ids_as", ["bitmap", "join"])
def test_merge_inserts_exactly_the_unmatched_source_rows(session, spark, monkeypatch, matched_ids_as):
    """An upsert from a 5-partition DataFrame: 3,000 of its 6,000 rows match, over the
    deletion-vector single pass (ids known on the driver); the join form as the control."""
    if matched_ids_as == "join":
        monkeypatch.setattr(routes, "BITMAP_MAX_BYTES", 0)
    session.execute("CREATE TABLE t (id BIGINT, v BIGINT) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    session.execute("INSERT INTO t SELECT id * 2, 0 FROM range(0, 6000)")
    spark.range(0, 6000, 1, 5).selectExpr("id * 2 + (id % 2) AS id", "id + 1 AS v").createOrReplaceTempView("src")
    res = session.execute("MERGE INTO t USING src s ON s.id = t.id "
                          "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    m = res.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (3000, 3000)
    got = dict(tuple(r) for r in session.execute("SELECT id, v FROM t").rows)
    want = {i * 2: 0 for i in range(6000)}
    want.update({i * 2 + (i % 2): i + 1 for i in range(6000)})
    assert got == want


def test_the_bitmap_saves_the_broadcast_job(session, spark, monkeypatch):
    """The same upsert twice, on two identical tables: with the matched ids as a join, one Spark
    job more (the broadcast of the matched ids) than with them as a bitmap literal."""
    def jobs():
        return int(spark.sparkContext._jsc.sc().dagScheduler().nextJobId())

    spark.range(0, 4000, 1, 4).selectExpr("id * 2 + (id % 2) AS id", "id AS v").createOrReplaceTempView("src2")
    counts = {}
    for name, limit in (("as_bitmap", routes.BITMAP_MAX_BYTES), ("as_join", 0)):
        monkeypatch.setattr(routes, "BITMAP_MAX_BYTES", limit)
        session.execute(f"CREATE TABLE {name} (id BIGINT, v BIGINT) "
                        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
        session.execute(f"INSERT INTO {name} SELECT id * 2, 0 FROM range(0, 4000)")
        before = jobs()
        res = session.execute(f"MERGE INTO {name} t USING src2 s ON s.id = t.id "
                              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
        counts[name] = jobs() - before
        assert (res.metrics["numTargetRowsUpdated"], res.metrics["numTargetRowsInserted"]) == (2000, 2000)
    assert counts["as_join"] - counts["as_bitmap"] == 1, counts
