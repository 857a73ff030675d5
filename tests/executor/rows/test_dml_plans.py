"""Every physical plan of UPDATE / DELETE / MERGE gives the same table (Spark).

The executor picks between plans by size: a partitioned copy-on-write rewrite writes each
touched partition in its own job only above ``routes.GROUP_MIN_BYTES`` per partition, and MERGE
broadcasts a source of at most ``routes.BROADCAST_ROWS`` rows (else it shuffles it, and a big
upsert touching every candidate file takes one full outer join). Small test tables never
cross those lines, so this file forces each plan with the thresholds and replays one
statement sequence -- unique and duplicate source keys, rows moving partition, NOT MATCHED
BY SOURCE, an insert-only merge, a join key matching a whole partition, UPDATE, DELETE --
checking the hand-computed final table and that every plan reports the same row counts.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tests.helpers.dml import (PLANS, Runner, always_one_scan, force_plan, make_table,  # noqa: E402
                              spy_outcomes, spy_slice_writes)

from isolde.executor.rows import dml, routes, writer
from isolde.executor.rows import scan as scan_module
from isolde.executor.jobs import merge  # noqa: E402

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string()), ("d", pa.string())])


@pytest.fixture(autouse=True)
def _a_task_per_file_whatever_the_cores(monkeypatch):
    always_one_scan(monkeypatch)


def _row(i, v=None, s=None, d=None):
    return {"id": i, "v": i * 10 if v is None else v, "s": s or f"r{i}", "d": d or "abc"[i % 3]}


STATEMENTS = [
    # unique source keys: no cardinality pass over row positions; rows stay in their partition
    # (22 is new in a partition whose files are rewritten: it joins that partition's rewrite;
    # 11 makes the update touch two partitions)
    ("u1", [_row(1, 1001, "u"), _row(4, 1004, "u"), _row(20, 1020, "u"), _row(21, 1021, "u"),
            _row(22, 22, "new", "b"), _row(11, 110, "u1")],
     "MERGE INTO p t USING u1 s ON s.id = t.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"),
    # two source rows match id 2, only one acts; the other matched, so it is not inserted
    ("u2", [_row(2, 5, "x", "c"), _row(2, -5, "y", "c"), _row(30, 1, "n", "a")],
     "MERGE INTO p t USING u2 s ON s.id = t.id WHEN MATCHED AND s.v > 0 THEN UPDATE SET v = t.v + s.v "
     "WHEN NOT MATCHED THEN INSERT *"),
    # a row moves to another partition
    (None, None, "MERGE INTO p t USING (SELECT 5 AS id) s ON s.id = t.id WHEN MATCHED THEN UPDATE SET d = 'a'"),
    # NOT MATCHED BY SOURCE with a target-only ON conjunct
    ("u3", [_row(0, 0, "z", "a"), _row(99, 9, "new", "b")],
     "MERGE INTO p t USING u3 s ON s.id = t.id AND t.d = 'a' WHEN MATCHED THEN DELETE "
     "WHEN NOT MATCHED BY SOURCE AND t.d = 'a' AND t.v > 100 THEN UPDATE SET s = 'nbs' "
     "WHEN NOT MATCHED THEN INSERT *"),
    # insert-only: no target file is rewritten
    ("u4", [_row(3, 0, "dup", "a"), _row(40, 40, "i", "b")],
     "MERGE INTO p t USING u4 s ON s.id = t.id WHEN NOT MATCHED THEN INSERT *"),
    (None, None, "UPDATE p SET v = v + 1 WHERE d = 'b' AND id < 10"),
    # one source row matches a whole partition (a low-cardinality key): every row updated once
    (None, None, "MERGE INTO p t USING (SELECT 'c' AS d, 7 AS bump) s ON s.d = t.d "
                 "WHEN MATCHED THEN UPDATE SET v = t.v + s.bump"),
    (None, None, "DELETE FROM p WHERE v > 1000 AND d <> 'b'"),
]

FINAL = [(1, 1002, "u", "b"), (2, 32, "r2", "c"), (3, 30, "r3", "a"), (4, 1005, "u", "b"), (5, 50, "r5", "a"),
         (6, 60, "r6", "a"), (7, 71, "r7", "b"), (8, 87, "r8", "c"), (9, 90, "r9", "a"), (10, 100, "r10", "b"),
         (11, 117, "u1", "c"), (22, 22, "new", "b"), (30, 1, "n", "a"), (40, 40, "i", "b"), (99, 9, "new", "b")]

# row counts: the same under every plan (file counts are not: plans lay rows out differently)
COUNTS = ("numUpdatedRows", "numDeletedRows", "numTargetRowsUpdated", "numTargetRowsDeleted",
          "numTargetRowsInserted")


def _replay(tmp_path, monkeypatch, plan):
    force_plan(monkeypatch, plan)
    one_scans = spy_outcomes(monkeypatch, scan_module, "scan_file_per_task")  # one scan, or refused
    slice_writes = spy_slice_writes(monkeypatch)  # per one-job write: wrote, or handed back
    beside_writes = []
    real_beside = writer.BackgroundWrite
    monkeypatch.setattr(writer, "BackgroundWrite", lambda *a, **k: beside_writes.append(1) or real_beside(*a, **k))
    split_sources = []
    real_split = merge._source_per_partition

    def spy_split(*a, **k):
        view_of = real_split(*a, **k)
        return None if view_of is None else lambda key: split_sources.append(key) or view_of(key)

    monkeypatch.setattr(merge, "_source_per_partition", spy_split)
    grouped_writes = []
    real_groups = writer.write_partition_groups

    def spy_groups(ctx, groups, *a, **k):
        grouped_writes.append(len(groups))
        return real_groups(ctx, groups, *a, **k)

    monkeypatch.setattr(writer, "write_partition_groups", spy_groups)
    r = Runner(tmp_path / "wh")
    # two files per partition, so a statement can touch some files of a partition and not others
    make_table(r.path("p"), SCHEMA, [[_row(i) for i in range(12) if i % 2 == half] for half in (0, 1)],
               partition_by=["d"])
    spark = r.session.spark
    queries = []
    real_sql = spark.sql

    def spy_sql(text, *a, **k):
        queries.append(text)
        return real_sql(text, *a, **k)

    monkeypatch.setattr(spark, "sql", spy_sql)
    counts = []
    for name, rows, sql in STATEMENTS:
        if name:
            make_table(r.path(name), SCHEMA, [rows])
        res = r.run(sql)
        counts.append({k: res.metrics[k] for k in COUNTS if k in res.metrics})
        if name == "u4":  # insert-only merge: appends, rewrites nothing
            assert res.metrics["numRemovedFiles"] == 0 and res.metrics["numAddedFiles"] >= 1
        if name == "u1":  # (records, min id, max id) of partition b's files
            stats = [json.loads(a.stats) for a in r.log("p").update().all_files if a.partition_values["d"] == "b"]
            b_files = sorted((st["numRecords"], st["minValues"]["id"], st["maxValues"]["id"]) for st in stats)
    full_outer = sum("FULL OUTER JOIN" in q for q in queries)
    return (r.rows("p"), counts, grouped_writes, full_outer, b_files, split_sources, slice_writes, len(beside_writes),
            one_scans)


@pytest.fixture(scope="module")
def default_plan(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        return _replay(tmp_path_factory.mktemp("default"), mp, "default")
    finally:
        mp.undo()


@pytest.mark.parametrize("plan", list(PLANS))
def test_every_plan_gives_the_same_table(tmp_path, monkeypatch, plan, default_plan):
    default_counts = default_plan[1]
    if plan == "default":
        rows, counts, grouped_writes, full_outer, b_files, split_sources, slice_writes, beside, one_scans = default_plan
    else:
        rows, counts, grouped_writes, full_outer, b_files, split_sources, slice_writes, beside, one_scans = _replay(
            tmp_path, monkeypatch, plan)
    assert rows == FINAL
    assert counts == default_counts
    # the plan the thresholds force was really taken
    if "group_min_bytes" in PLANS[plan]:
        assert grouped_writes, "no per-partition write happened"
        # the new row rode along with partition b's rewritten rows: no file of its own
        assert sum(n for n, _, _ in b_files) == 5 and (1, 22, 22) not in b_files, b_files
    else:
        assert grouped_writes == []
    if PLANS[plan].get("slice_writes", True):
        # u1, u3, the UPDATE, the whole-partition MERGE and the DELETE (u2's duplicate keys
        # need row positions: not this plan; a shuffled MERGE source leaves only UPDATE and
        # DELETE): every one-job write wrote, none handed back to another plan
        assert len(slice_writes) == (2 if "broadcast_rows" in PLANS[plan] else 5), slice_writes
        assert all(slice_writes), slice_writes
        # ... those over several partitions (u1, unless its source is shuffled, and the UPDATE)
        # reading their files as one scan unless the union is forced
        several = 1 if "broadcast_rows" in PLANS[plan] else 2
        assert one_scans == ([] if plan == "union_of_scans" else [True] * several), one_scans
    else:
        assert slice_writes == []
    # u1's and u3's new rows were written beside their one-job rewrite
    assert beside == (2 if plan in ("default", "union_of_scans") else 0)
    assert bool(split_sources) == ("split_source_rows" in PLANS[plan])
    if "broadcast_rows" in PLANS[plan]:
        assert full_outer >= 1  # u1 touches every candidate file: one full outer join
    else:
        assert full_outer == 0
    # the hand-checked counts of the sequence
    assert default_counts[0]["numTargetRowsUpdated"] == 3 and default_counts[0]["numTargetRowsInserted"] == 3
    assert default_counts[1]["numTargetRowsUpdated"] == 1 and default_counts[1]["numTargetRowsInserted"] == 1
    assert (default_counts[3]["numTargetRowsDeleted"], default_counts[3]["numTargetRowsUpdated"],
            default_counts[3]["numTargetRowsInserted"]) == (1, 1, 1)
    assert default_counts[4]["numTargetRowsInserted"] == 1
    assert default_counts[5]["numUpdatedRows"] == 3 and default_counts[6]["numTargetRowsUpdated"] == 4
    assert default_counts[7]["numDeletedRows"] == 2


def test_materialised_rows_are_released_after_the_statement(tmp_path):
    """MERGE materialises its source, its matches and the matched source rows; a non-deterministic
    UPDATE its flagged rows. None of it may outlive the statement in executor memory."""
    r = Runner(tmp_path / "wh")
    make_table(r.path("p"), SCHEMA, [[_row(i) for i in range(12)]], partition_by=["d"])
    make_table(r.path("u1"), SCHEMA, [STATEMENTS[0][1]])
    sc = r.session.spark.sparkContext

    def cached_rdds():
        return {info.id() for info in sc._jsc.sc().getRDDStorageInfo()}

    before = cached_rdds()
    r.run(STATEMENTS[0][2])
    r.run("UPDATE p SET v = v + 1 WHERE rand() < 2")  # non-deterministic: materialised once
    assert cached_rdds() - before == set()
    assert [row[1] for row in r.rows("p") if row[0] in (1, 20)] == [1002, 1021]


EVOLVING = [
    "CREATE TABLE e (id BIGINT NOT NULL, v STRING, p INT) USING DELTA PARTITIONED BY (p) "
    "TBLPROPERTIES ('delta.columnMapping.mode' = 'name', 'delta.enableDeletionVectors' = 'false')",
    "INSERT INTO e VALUES (1, 'a', 1), (2, 'b', 1), (3, 'c', 2), (4, 'd', 3)",
    "INSERT INTO e VALUES (5, 'e', 1), (6, 'f', 2)",
    # updates in partitions 1 and 2; new rows in partition 1 (rewritten) and 4 (new); a new column
    "MERGE WITH SCHEMA EVOLUTION INTO e t USING (SELECT * FROM VALUES (2, 'B', 1, true), (6, 'F', 2, false), "
    "(7, 'g', 1, true), (8, 'h', 4, null) AS s(id, v, p, flag)) s ON s.id = t.id "
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    "UPDATE e SET v = upper(v) WHERE p = 1 AND id = 5",
]
EVOLVED = [(1, "a", 1, None), (2, "B", 1, True), (3, "c", 2, None), (4, "d", 3, None), (5, "E", 1, None),
           (6, "F", 2, False), (7, "g", 1, True), (8, "h", 4, None)]


@pytest.mark.parametrize("plan", ["default", "per_partition_sources"])
def test_new_rows_join_rewritten_partitions_with_mapping_and_evolution(tmp_path, monkeypatch, plan):
    """Column mapping (files hold physical names), an INT partition column, a column added by
    schema evolution, and a NOT NULL column (so the row checks still run on the per-partition
    path): both plans give the hand-computed table, and delta-rs reads the same rows."""
    from tests.helpers.oracle import read_delta_rows

    if plan != "default":
        monkeypatch.setattr(routes, "GROUP_MIN_BYTES", 0)
        monkeypatch.setattr(routes, "SPLIT_SOURCE_ROWS", 0)
    r = Runner(tmp_path / "wh")
    for sql in EVOLVING:
        r.session.execute(sql)
    got = sorted(tuple(row) for row in r.session.sql("SELECT id, v, p, flag FROM e").collect())
    assert got == EVOLVED
    assert read_delta_rows(r.path("e"), ["id", "v", "p", "flag"]) == EVOLVED
    with pytest.raises(Exception, match="NOT NULL"):
        r.session.execute("UPDATE e SET id = NULL WHERE p = 2")
    assert sorted(tuple(row) for row in r.session.sql("SELECT id, v, p, flag FROM e").collect()) == EVOLVED
