"""Counted rows written by the driver (driver_write.write_counted_rows).

A deletion-vector UPDATE knows how many rows it changed before it writes them, a MERGE how
many it updated and at most how many it inserts (its source's rows). When those are few, Spark
computes them into Arrow and pyarrow writes one file per partition, with no write job. Each
case runs the same statements on two copies of a table, one with the route and one with
Spark's writer, and compares what readers see: rows (isolde and delta-rs), the metrics, the
log's statistics, one file per partition, and the rows' stable ids.
"""

from __future__ import annotations

import json
import os

import pytest
from pyspark.sql import types as T

from isolde.executor.rows import driver_write
from isolde.executor.rows import routes as rules  # (``routes``: the writers each statement took)
from .test_dml_row_ids import _live_rows
from .test_driver_write import _adds, _spark_writer, _table_stats

pytestmark = pytest.mark.spark

COLUMNS = "id BIGINT, v DOUBLE, s STRING, day DATE, ps STRING, pi INT"
PROPS = ("'delta.enableDeletionVectors' = 'true', 'delta.enableRowTracking' = 'true', "
         "'delta.enableChangeDataFeed' = 'true'")
# 4,000 rows over 12 partitions (a NULL string and a NULL integer partition among them), made by
# Spark from a range: not a local relation
ROWS = ("SELECT id, id * 0.5, IF(id % 7 = 0, NULL, concat('s', id)), date_add(DATE'2024-01-01', CAST(id % 40 AS INT)), "
        "CASE id % 4 WHEN 0 THEN 'a/b' WHEN 1 THEN 'x=y' WHEN 2 THEN NULL ELSE 'é' END, "
        "IF(id % 3 = 0, NULL, CAST(id % 3 AS INT)) FROM range({lo}, {hi}) AS r(id)")
STATEMENTS = [
    # ~1,300 rows: more than a point statement's 1,000, one partition moved for some
    ("UPDATE", "UPDATE {t} SET v = v + 1, s = upper(s), pi = IF(id % 30 = 0, 9, pi) WHERE id % 3 = 1"),
    ("DELETE", "DELETE FROM {t} WHERE id % 10 = 5"),
    # a source of 2,000 rows made by Spark: 1,334 ids in the table (133 of them deleted above:
    # inserted again), 666 new, in new partitions too
    ("MERGE", "MERGE INTO {t} t USING (SELECT id * 3 AS id, -1.0D AS v, 'm' AS s, DATE'2025-06-01' AS day, "
              "IF(id % 5 = 0, NULL, 'new') AS ps, CAST(id % 2 AS INT) AS pi FROM range(0, 2000) AS r(id)) src "
              "ON t.id = src.id WHEN MATCHED AND t.id % 4 = 0 THEN UPDATE SET * "
              "WHEN MATCHED AND t.id % 4 = 2 THEN DELETE WHEN NOT MATCHED THEN INSERT *"),
]


def _routes(monkeypatch) -> list:
    """Each write of counted rows: True (by the driver), False (left to Spark's writer) or
    "error"; "arrow" for rows already on the driver (bounded_rows)."""
    taken = []
    write, write_arrow = driver_write.write_counted_rows, driver_write.write_arrow_rows

    def record(*args, **kwargs):
        try:
            written = write(*args, **kwargs)
        except BaseException:
            taken.append("error")
            raise
        taken.append(written is not None)
        return written

    def record_arrow(*args, **kwargs):
        taken.append("arrow")
        return write_arrow(*args, **kwargs)

    monkeypatch.setattr(driver_write, "write_counted_rows", record)
    monkeypatch.setattr(driver_write, "write_arrow_rows", record_arrow)
    return taken


def _bounded_collections(monkeypatch) -> list:
    """Route an UPDATE of these small files to ``bounded_rows`` (not the point route), and
    record each bounded collection's rows (None: stopped, too many)."""
    from isolde.executor.rows import few_rows

    monkeypatch.setattr(rules, "SMALL_SCAN_ROWS", 0)
    bounded, collected = few_rows.collect_bounded, []

    def record(*args, **kwargs):
        got = bounded(*args, **kwargs)
        collected.append(None if got is None else got.num_rows)
        return got

    monkeypatch.setattr(few_rows, "collect_bounded", record)
    return collected


def _run_both(session, monkeypatch, table_path) -> tuple:
    """Every statement on ``drv`` (the route) and ``spk`` (Spark's writer): the routes taken,
    per table the statements' metrics and the rows' stable ids before them."""
    for name in ("drv", "spk"):
        session.execute(f"CREATE TABLE {name} ({COLUMNS}) PARTITIONED BY (ps, pi) TBLPROPERTIES ({PROPS})")
        session.execute(f"INSERT INTO {name} " + ROWS.format(lo=0, hi=2500))
        session.execute(f"INSERT INTO {name} " + ROWS.format(lo=2500, hi=4000))
    initial = {name: _live_rows(table_path(session, name)) for name in ("drv", "spk")}
    routes = _routes(monkeypatch)
    metrics = {"drv": [], "spk": []}
    for _kind, sql in STATEMENTS:
        metrics["drv"].append(session.execute(sql.format(t="drv")).metrics)
        off = _spark_writer()
        try:
            metrics["spk"].append(session.execute(sql.format(t="spk")).metrics)
        finally:
            off.__exit__(None, None, None)
    return routes, metrics, initial


def _expected_ids() -> list:
    ids = {i for i in range(4000) if i % 10 != 5}
    for sid in (i * 3 for i in range(2000)):
        if sid not in ids:
            ids.add(sid)
        elif sid % 4 == 2:
            ids.discard(sid)
    return sorted(ids)


def _new_files(path: str, version: int) -> list:
    """The partition folders of the data files a commit added (not the re-adds of old files
    with their new deletion vectors)."""
    adds, removed = [], set()
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as fh:
        for line in fh:
            action = json.loads(line)
            if "add" in action:
                adds.append(action["add"]["path"])
            elif "remove" in action:
                removed.add(action["remove"]["path"])
    return [os.path.dirname(p) for p in adds if p not in removed]


def _rows(session, name: str) -> list:
    return sorted(tuple(r) for r in session.sql(f"SELECT * FROM {name}").collect())


def _comparable(m: dict) -> dict:
    return {k: v for k, v in m.items() if not k.endswith("TimeMs") and "Bytes" not in k}


@pytest.mark.parametrize("find", ["checkpoint", "bounded"])
def test_wide_dml_writes_counted_rows_as_sparks_writer_does(session, monkeypatch, table_path, delta_rows, find):
    # the UPDATE's and MERGE's rows: materialised by a checkpoint (the bounded route switched
    # off), or computed as written in one job (bounded_rows: the UPDATE's 1,333 rows, the
    # MERGE's 1,201 pairs of 2,000 source rows)
    if find == "checkpoint":
        from isolde.executor.rows import bounded_rows

        monkeypatch.setattr(bounded_rows, "collect_changed", lambda *a, **k: None)
    collected = _bounded_collections(monkeypatch) if find == "bounded" else []
    routes, metrics, initial = _run_both(session, monkeypatch, table_path)
    # (the DELETE's 400 positions are collected on both tables: it writes no row)
    assert collected == ([] if find == "checkpoint" else [1333, 400, 400, 1201])
    # UPDATE and MERGE by the driver (the DELETE writes no row; the MERGE's new rows join its
    # updated rows on the driver); Spark's writer for spk
    assert routes == [True if find == "checkpoint" else "arrow", False, True, False]
    drv_path, spk_path = table_path(session, "drv"), table_path(session, "spk")
    assert _rows(session, "drv") == _rows(session, "spk")
    assert sorted(r[0] for r in _rows(session, "drv")) == _expected_ids()
    assert delta_rows(drv_path) == delta_rows(spk_path)
    assert [_comparable(m) for m in metrics["drv"]] == [_comparable(m) for m in metrics["spk"]]
    assert metrics["drv"][0]["numUpdatedRows"] > rules.DRIVER_WRITE_ROWS
    drv, spk = _adds(session, table_path, "drv"), _adds(session, table_path, "spk")
    assert _table_stats(drv) == _table_stats(spk)
    # each statement wrote one new file per partition, in the partition's folder
    for version in (3, 5):
        new = _new_files(drv_path, version)
        assert new and len(new) == len(set(new)) == len(set(_new_files(spk_path, version)))
    assert sorted((os.path.dirname(a.path), str(sorted(a.partition_values.items()))) for a in drv) == \
        sorted((os.path.dirname(a.path), str(sorted(a.partition_values.items()))) for a in spk)
    # each table's rows kept their stable ids (ids depend on file order: per table); both tables'
    # rows took the same commit versions; rows deleted and inserted again, and new rows, took
    # fresh ids past the old ones
    final = {name: _live_rows(table_path(session, name)) for name in ("drv", "spk")}
    for name in ("drv", "spk"):
        ids, old = final[name], initial[name]
        kept = {i for i in old if i in ids and i % 10 != 5}
        assert {i: ids[i][0] for i in kept} == {i: old[i][0] for i in kept}
        assert len({row_id for row_id, _ in ids.values()}) == len(ids)
        assert min(ids[i][0] for i in set(ids) - kept) > max(row_id for row_id, _ in old.values())
    assert {i: v for i, (_, v) in final["drv"].items()} == {i: v for i, (_, v) in final["spk"].items()}
    # the change feed is the same
    feed = "SELECT id, v, s, ps, pi, _change_type, _commit_version FROM table_changes('{t}', 3)"
    assert sorted(tuple(r) for r in session.sql(feed.format(t="drv")).collect()) == \
        sorted(tuple(r) for r in session.sql(feed.format(t="spk")).collect())


def test_more_rows_than_the_driver_takes_go_to_sparks_writer(session, monkeypatch, table_path, delta_rows):
    monkeypatch.setattr(rules, "COUNTED_ROWS", 1000)
    session.execute(f"CREATE TABLE t ({COLUMNS}) PARTITIONED BY (ps, pi) TBLPROPERTIES ({PROPS})")
    session.execute("INSERT INTO t " + ROWS.format(lo=0, hi=4000))
    routes = _routes(monkeypatch)
    session.execute("UPDATE t SET v = -v WHERE id % 3 = 1")  # 1,333 rows
    session.execute("UPDATE t SET v = -v WHERE id % 5 = 1")  # 800 rows
    assert routes == [False, True]
    expected = {i: i * 0.5 * (-1) ** ((i % 3 == 1) + (i % 5 == 1)) for i in range(4000)}
    assert {r[0]: r[1] for r in session.sql("SELECT id, v FROM t").collect()} == expected
    assert delta_rows(table_path(session, "t"), columns=["id", "v"]) == sorted(expected.items())


def test_an_update_of_small_files_past_the_point_route_takes_the_bounded_one(session, monkeypatch, table_path,
                                                                              delta_rows):
    from isolde.executor.rows import bounded_rows, few_rows

    session.execute(f"CREATE TABLE t ({COLUMNS}) PARTITIONED BY (ps, pi) TBLPROPERTIES ({PROPS})")
    session.execute("INSERT INTO t " + ROWS.format(lo=0, hi=4000))
    calls = []
    few, changed = few_rows.collect_few, bounded_rows.collect_changed

    def record_few(*args, **kwargs):
        got = few(*args, **kwargs)
        calls.append(("point", got is not None))
        return got

    def record_changed(*args, **kwargs):
        got = changed(*args, **kwargs)
        calls.append(("bounded", None if got is None else got.num_rows))
        return got

    monkeypatch.setattr(few_rows, "collect_few", record_few)
    monkeypatch.setattr(bounded_rows, "collect_changed", record_changed)
    routes = _routes(monkeypatch)
    # 1,333 rows of 4,000 (small files): more than the point route's 1,000, so it gives up and
    # the bounded route computes them as written, pyarrow writes them (no checkpoint)
    assert session.execute("UPDATE t SET v = -v WHERE id % 3 = 1").metrics["numUpdatedRows"] == 1333
    assert calls == [("point", False), ("bounded", 1333)] and routes == ["arrow"]
    expected = {i: i * 0.5 * (-1 if i % 3 == 1 else 1) for i in range(4000)}
    assert {r[0]: r[1] for r in session.sql("SELECT id, v FROM t").collect()} == expected
    assert delta_rows(table_path(session, "t"), columns=["id", "v"]) == sorted(expected.items())


def test_the_bound_counts_each_rows_file_path_at_its_length(session, monkeypatch, table_path, delta_rows):
    """The bounded route's rows each carry their file's AddFile path (here ~70 bytes: two
    partition folders): its byte bound counts the longest path in full, not a string's guess."""
    from deltalake import DeltaTable

    from isolde.executor.rows import few_rows
    from isolde.executor.rows.scan import FILE_COL

    session.execute(f"CREATE TABLE t ({COLUMNS}) PARTITIONED BY (ps, pi) TBLPROPERTIES ({PROPS})")
    session.execute("INSERT INTO t " + ROWS.format(lo=0, hi=4000))
    paths = DeltaTable(table_path(session, "t")).get_add_actions(flatten=True).column("path").to_pylist()
    longest = max(len(p.encode()) for p in paths)
    assert longest > driver_write.arrow_bytes(T.StringType())  # longer than a string's guess
    monkeypatch.setattr(rules, "SMALL_SCAN_ROWS", 0)
    bounded, limits = few_rows.collect_bounded, []

    def record(df, limit, tasks):
        others = sum(driver_write.arrow_bytes(f.dataType) for f in df.schema.fields if f.name != FILE_COL)
        guessed = rules.COUNTED_BYTES // (driver_write.arrow_bytes(T.StringType()) + others)
        limits.append((limit, rules.COUNTED_BYTES // (4 + longest + others), guessed))
        return bounded(df, limit, tasks)

    monkeypatch.setattr(few_rows, "collect_bounded", record)
    # 4,000 rows of ~190 bytes with their paths: past a bound of 680 KB
    monkeypatch.setattr(rules, "COUNTED_BYTES", 4000 * 170)
    routes = _routes(monkeypatch)
    assert session.execute("UPDATE t SET v = -v").metrics["numUpdatedRows"] == 4000
    # the path guessed at a string's size, all 4,000 rows would have been taken
    assert len(limits) == 1 and limits[0][0] == limits[0][1] < 4000 <= limits[0][2]
    # stopped; the rows then written (no path among their columns: within the bound) by the driver
    assert routes == [True]
    expected = {i: -i * 0.5 for i in range(4000)}
    assert {r[0]: r[1] for r in session.sql("SELECT id, v FROM t").collect()} == expected
    assert delta_rows(table_path(session, "t"), columns=["id", "v"]) == sorted(expected.items())


@pytest.mark.parametrize("find", ["checkpoint", "bounded"])
def test_a_violation_in_counted_rows_fails_as_with_sparks_writer(session, monkeypatch, table_path, find):
    from isolde.errors import ConstraintViolationError

    if find == "checkpoint":
        from isolde.executor.rows import bounded_rows

        monkeypatch.setattr(bounded_rows, "collect_changed", lambda *a, **k: None)
    collected = _bounded_collections(monkeypatch) if find == "bounded" else []
    session.execute(f"CREATE TABLE c ({COLUMNS}) PARTITIONED BY (ps, pi) TBLPROPERTIES ({PROPS})")
    session.execute("INSERT INTO c " + ROWS.format(lo=0, hi=4000))
    session.execute("ALTER TABLE c ADD CONSTRAINT small CHECK (v < 5000)")
    version = session.execute("DESCRIBE HISTORY c").first().version
    routes = _routes(monkeypatch)
    sql = "UPDATE c SET v = v * 10 WHERE id % 2 = 0"  # 2,000 rows, ids past 1,000 break the check
    with pytest.raises(ConstraintViolationError) as on:
        session.execute(sql)
    off = _spark_writer()
    try:
        with pytest.raises(ConstraintViolationError) as spark_says:
            session.execute(sql)
    finally:
        off.__exit__(None, None, None)
    if find == "checkpoint":  # the driver's route computed the rows and met the violation
        assert routes == ["error", False]
    else:  # the bounded collection computed the rows as written and met it: nothing to write
        assert routes == [False] and collected == []
    assert str(on.value).split(":")[0] == str(spark_says.value).split(":")[0]
    assert session.execute("DESCRIBE HISTORY c").first().version == version
    assert session.sql("SELECT sum(v) FROM c").first()[0] == sum(i * 0.5 for i in range(4000))
    assert not [p for p in os.listdir(table_path(session, "c")) if p.startswith(".isolde-staging")]
