"""A deletion-vector UPDATE's changed rows brought to the driver by file ordinal
(``bounded_rows.collect_changed`` with ``paths``).

The job brings each changed row's file ordinal, not its path: the driver looks the path up
from the scan's files, and groups the deletion vectors' positions and writes the rows by it.
Each case runs the same UPDATE on two copies of a table, ``drv`` on this route and ``spk``
with the bounded route off (Spark materialises the rows and writes them), and compares what
readers see: rows (isolde and delta-rs), the new files' folders and partition values, the
deletion vectors' positions (through the rows left), and the rows' stable ids.
"""

from __future__ import annotations

import os

import pytest

from isolde.executor.rows import bounded_rows, routes
from .test_counted_write import _new_files, _rows
from .test_dml_row_ids import _live_rows
from .test_driver_write import _adds

pytestmark = pytest.mark.spark

PROPS = "'delta.enableDeletionVectors' = 'true', 'delta.enableRowTracking' = 'true'"
# partition values with characters a folder name escapes, NULLs of a string, an integer and a
# date partition column, and an empty string (NULL in the log)
ROWS = ("SELECT id, id * 0.5, concat('s', id), "
        "CASE id % 5 WHEN 0 THEN 'a/b' WHEN 1 THEN 'x=y' WHEN 2 THEN NULL WHEN 3 THEN '' ELSE 'é %' END, "
        "IF(id % 3 = 0, NULL, CAST(id % 3 AS INT)), "
        "IF(id % 4 = 0, NULL, date_add(DATE'2024-02-27', CAST(id % 4 AS INT))) FROM range({lo}, {hi}) AS r(id)")


def _capture(monkeypatch) -> list:
    """Route the UPDATE to ``bounded_rows`` (not the point route) and record each changed-rows
    collection's keyword arguments and row count (None: it fell back)."""
    monkeypatch.setattr(routes, "SMALL_SCAN_ROWS", 0)
    changed, seen = bounded_rows.collect_changed, []

    def record(*args, **kwargs):
        got = changed(*args, **kwargs)
        seen.append((kwargs.get("paths") is not None, None if got is None else got.num_rows))
        return got

    monkeypatch.setattr(bounded_rows, "collect_changed", record)
    return seen


def _make(session, name: str, columns: str, partitioned_by: str, props: str, inserts: list) -> None:
    session.execute(f"CREATE TABLE {name} ({columns}) PARTITIONED BY ({partitioned_by}) TBLPROPERTIES ({props})")
    for sql in inserts:
        session.execute(f"INSERT INTO {name} {sql}")


def _partitions(session, table_path, name: str) -> list:
    """(folder, partition values, rows) of each file, physical column names (column mapping:
    random per table) replaced by logical ones."""
    from isolde.executor.catalog import schema as S
    from isolde.executor.log.delta_log import DeltaLog

    metadata = DeltaLog.for_table(table_path(session, name)).snapshot().metadata
    logical = {v: k for k, v in S.logical_to_physical(metadata).items()}

    def named(text: str) -> str:
        for physical, name in logical.items():
            text = text.replace(physical, name)
        return text

    return sorted((named(os.path.dirname(a.path)), str(sorted((named(k), v) for k, v in a.partition_values.items())),
                   a.num_records) for a in _adds(session, table_path, name))


def _same_on_both(session, monkeypatch, table_path, delta_rows, columns, partitioned_by, props, inserts, update):
    """Run ``update`` on both tables; return what the route recorded on ``drv``."""
    for name in ("drv", "spk"):
        _make(session, name, columns, partitioned_by, props, inserts)
    before = {name: _live_rows(table_path(session, name)) for name in ("drv", "spk")}
    seen = _capture(monkeypatch)
    updates = [update] if isinstance(update, str) else list(update)
    drv = [session.execute(u.format(t="drv")).metrics for u in updates]
    route = list(seen)
    monkeypatch.setattr(bounded_rows, "collect_changed", lambda *a, **k: None)
    spk = [session.execute(u.format(t="spk")).metrics for u in updates]
    assert [m["numUpdatedRows"] for m in drv] == [m["numUpdatedRows"] for m in spk]
    assert all(m["numUpdatedRows"] > 0 for m in drv)
    assert _rows(session, "drv") == _rows(session, "spk")
    assert delta_rows(table_path(session, "drv")) == delta_rows(table_path(session, "spk"))
    assert _partitions(session, table_path, "drv") == _partitions(session, table_path, "spk")
    version = max(int(f[:20]) for f in os.listdir(os.path.join(table_path(session, "drv"), "_delta_log"))
                  if f.endswith(".json"))
    assert len(_new_files(table_path(session, "drv"), version)) == len(_new_files(table_path(session, "spk"), version))
    # every row kept its stable id (ids depend on file order: compared per table)
    for name in ("drv", "spk"):
        after = _live_rows(table_path(session, name))
        assert {i: v[0] for i, v in after.items()} == {i: v[0] for i, v in before[name].items()}
    return route, drv[-1]


def test_update_brings_ordinals_and_looks_up_paths(session, monkeypatch, table_path,
                                                                         delta_rows):
    route, metrics = _same_on_both(
        session, monkeypatch, table_path, delta_rows,
        "id BIGINT, v DOUBLE, s STRING, ps STRING, pi INT, pd DATE", "ps, pi, pd", PROPS,
        [ROWS.format(lo=0, hi=1500), ROWS.format(lo=1500, hi=3000)],
        "UPDATE {t} SET v = v + 1, s = upper(s) WHERE id % 3 = 1")
    assert route == [(True, 1000)]
    assert metrics["numUpdatedRows"] == 1000
    # the empty string and NULL partitions both hold NULL
    got = {(r[0], r[1]) for r in session.sql("SELECT ps IS NULL, count(*) FROM drv GROUP BY 1").collect()}
    assert got == {(True, 1200), (False, 1800)}


def test_an_update_moving_rows_to_other_partitions(session, monkeypatch, table_path, delta_rows):
    route, _ = _same_on_both(
        session, monkeypatch, table_path, delta_rows,
        "id BIGINT, v DOUBLE, s STRING, ps STRING, pi INT, pd DATE", "ps, pi, pd", PROPS,
        [ROWS.format(lo=0, hi=3000)],
        "UPDATE {t} SET v = -v, pi = IF(id % 30 = 1, 7, pi) WHERE id % 3 = 1")
    assert route == [(True, 1000)]


def test_a_generated_partition_column_moves_rows(session, monkeypatch, table_path, delta_rows):
    # pg follows n: an UPDATE of n moves rows to another partition without naming pg
    columns = "id BIGINT, n INT, s STRING, pg INT GENERATED ALWAYS AS (n % 4)"
    rows = "SELECT id, CAST(id % 10 AS INT), concat('s', id) FROM range(0, 2000) AS r(id)"
    for name in ("drv", "spk"):
        _make(session, name, columns, "pg", PROPS, [])
        session.execute(f"INSERT INTO {name} (id, n, s) {rows}")
    seen = _capture(monkeypatch)
    session.execute("UPDATE drv SET n = n + 1 WHERE id % 2 = 0")
    assert seen == [(True, 1000)]
    monkeypatch.setattr(bounded_rows, "collect_changed", lambda *a, **k: None)
    session.execute("UPDATE spk SET n = n + 1 WHERE id % 2 = 0")
    expected = sorted((i, i % 10 + (i % 2 == 0), f"s{i}", (i % 10 + (i % 2 == 0)) % 4) for i in range(2000))
    assert _rows(session, "drv") == _rows(session, "spk") == expected
    assert _partitions(session, table_path, "drv") == _partitions(session, table_path, "spk")


def test_many_files(session, monkeypatch, table_path, delta_rows):
    # more files than a literal lookup takes: a broadcast join on the path finds the ordinal
    parts = routes.MAP_LOOKUP_MAX_FILES + 12
    rows = (f"SELECT id, id * 2.0, CAST(id % {parts} AS INT), IF(id % {parts} = 5, NULL, concat('p', id % 2)) "
            "FROM range(0, 3000) AS r(id)")
    route, _ = _same_on_both(
        session, monkeypatch, table_path, delta_rows,
        "id BIGINT, v DOUBLE, part INT, tag STRING", "part, tag", PROPS, [rows],
        "UPDATE {t} SET v = v / 2 WHERE id % 11 = 2")
    assert route == [(True, 273)]
    assert len(_adds(session, table_path, "drv")) > 2 * routes.MAP_LOOKUP_MAX_FILES


def test_column_mapping(session, monkeypatch, table_path, delta_rows):
    # physical partition names in the log; the driver's writer does not take this table (its
    # files hold physical names): the collection declines and Spark writes
    rows = "SELECT id, id * 2.0, CAST(id % 6 AS INT), IF(id % 6 = 5, NULL, concat('p', id % 2)) FROM range(0, 3000) AS r(id)"
    props = PROPS + ", 'delta.columnMapping.mode' = 'name'"
    route, _ = _same_on_both(
        session, monkeypatch, table_path, delta_rows,
        "id BIGINT, v DOUBLE, part INT, tag STRING", "part, tag", props, [rows],
        "UPDATE {t} SET v = v / 2 WHERE id % 11 = 2")
    assert route == [(True, None)]


def test_a_second_update_over_files_with_deletion_vectors(session, monkeypatch, table_path, delta_rows):
    # the second UPDATE reads files whose vectors delete rows already (the scan joins the
    # vectors' bitmaps by ordinal), and the first UPDATE's new files; rows updated twice
    route, metrics = _same_on_both(
        session, monkeypatch, table_path, delta_rows,
        "id BIGINT, v DOUBLE, s STRING, ps STRING, pi INT, pd DATE", "ps, pi, pd", PROPS,
        [ROWS.format(lo=0, hi=3000)],
        ("UPDATE {t} SET v = v + 1 WHERE id % 3 = 1", "UPDATE {t} SET v = v * 10, s = 'x' WHERE id % 2 = 1"))
    assert route == [(True, 1000), (True, 1500)]
    got = {r[0]: r[1] for r in session.sql("SELECT id, v FROM drv").collect()}
    assert got == {i: (i * 0.5 + (i % 3 == 1)) * (10 if i % 2 else 1) for i in range(3000)}
