"""A deletion-vector DELETE's positions grouped on the driver (bounded_rows.collect_positions, and
``collect_live_positions`` for rows read with their files' deletion vectors not yet applied).

A DELETE that finds at most ``routes.POSITION_ROWS`` rows brings their (file, row) pairs to
the driver in one job with no shuffle and groups them by file there; one that finds more builds
its bitmaps in Spark (``row_bitmaps``). Every bounded collection here is checked against Spark's
bitmap aggregate over the same rows, and the table against the expected rows, read by isolde and
by delta-rs.
"""

from __future__ import annotations

import pytest

from isolde.executor.rows import bounded_rows, dml, routes, row_bitmaps
from isolde.executor.rows.scan import FILE_COL, ROW_COL

pytestmark = pytest.mark.spark

PROPS = "'delta.enableDeletionVectors' = 'true'"


def _checked_positions(monkeypatch) -> list:
    """Each DELETE's bounded collection: its row count (None when the bound stopped it), its
    bitmaps asserted equal to those Spark's bitmap aggregate builds from the same rows."""
    taken = []
    collect, spark_bitmaps = bounded_rows.collect_positions, dml.changed_positions

    def record(ctx, rows, files):
        positions = collect(ctx, rows, files)
        if positions is not None:
            spark_built = spark_bitmaps(rows)
            assert {p: list(b) for p, b in positions.items()} == {p: list(b) for p, b in spark_built.items()}
        taken.append(None if positions is None else sum(len(b) for b in positions.values()))
        return positions

    monkeypatch.setattr(bounded_rows, "collect_positions", record)
    live = bounded_rows.collect_live_positions

    def record_live(ctx, rows, files, after):
        # rows read with the vectors not applied: the positions the driver keeps must be those
        # Spark's bitmap aggregate finds once the vectors are applied to the same rows
        positions = live(ctx, rows, files, after)
        if positions is not None:
            spark_built = row_bitmaps.positions_by_file(after.finish(rows), FILE_COL, ROW_COL)
            assert {p: list(b) for p, b in positions.items()} == {p: list(b) for p, b in spark_built.items()}
        taken.append(None if positions is None else sum(len(b) for b in positions.values()))
        return positions

    monkeypatch.setattr(bounded_rows, "collect_live_positions", record_live)
    return taken


def _table(session, name: str = "t") -> dict:
    """4,000 rows in three inserts (several files), partitioned by ``p`` (a NULL partition too)."""
    session.execute(f"CREATE TABLE {name} (id BIGINT, s STRING, p INT) PARTITIONED BY (p) TBLPROPERTIES ({PROPS})")
    for lo, hi in ((0, 1500), (1500, 3000), (3000, 4000)):
        session.execute(f"INSERT INTO {name} SELECT id, IF(id % 11 = 0, NULL, concat('s', id)), "
                        f"IF(id % 5 = 4, NULL, CAST(id % 5 AS INT)) FROM range({lo}, {hi}) AS r(id)")
    return {i: (None if i % 11 == 0 else f"s{i}", None if i % 5 == 4 else i % 5) for i in range(4000)}


def _check(session, table_path, delta_rows, want: dict, name: str = "t") -> None:
    expected = sorted((i, s, p) for i, (s, p) in want.items())
    assert sorted(tuple(r) for r in session.sql(f"SELECT id, s, p FROM {name}").collect()) == expected
    assert delta_rows(table_path(session, name), ["id", "s", "p"]) == expected


def test_deletes_group_their_positions_on_the_driver(session, monkeypatch, table_path, delta_rows):
    want = _table(session)
    taken = _checked_positions(monkeypatch)
    session.execute("CREATE TABLE picks (id BIGINT)")
    session.execute("INSERT INTO picks VALUES (3), (1501), (3999), (NULL), (777777)")
    statements = [
        ("DELETE FROM t WHERE id % 10 = 5", lambda i, s, p: i % 10 == 5),  # every file and partition
        # files that already carry a deletion vector: old and new positions together
        ("DELETE FROM t WHERE id % 10 = 6 AND id < 2000", lambda i, s, p: i % 10 == 6 and i < 2000),
        # rows it selects that are deleted already (id % 10 = 5) are neither counted nor found
        ("DELETE FROM t WHERE id % 10 = 5 OR id % 20 = 0", lambda i, s, p: i % 10 == 5 or i % 20 == 0),
        ("DELETE FROM t WHERE s IS NULL AND p IS NULL", lambda i, s, p: s is None and p is None),
        # a subquery's join: the rows come out of a shuffle's tasks
        ("DELETE FROM t WHERE id IN (SELECT id FROM picks)", lambda i, s, p: i in (3, 1501, 3999)),
        ("DELETE FROM t WHERE id = 123456", lambda i, s, p: False),
    ]
    counts = []
    for sql, gone in statements:
        deleted = {i for i, (s, p) in want.items() if gone(i, s, p)}
        assert session.execute(sql).metrics["numDeletedRows"] == len(deleted)
        want = {i: v for i, v in want.items() if i not in deleted}
        counts.append(len(deleted))
        _check(session, table_path, delta_rows, want)
    assert taken == counts == [400, 200, 200, 72, 3, 0]


def test_a_delete_past_the_bound_builds_its_bitmaps_in_spark(session, monkeypatch, table_path, delta_rows):
    want = _table(session)
    monkeypatch.setattr(routes, "POSITION_ROWS", 500)
    taken = _checked_positions(monkeypatch)
    built_in_spark = []
    positions = dml.changed_positions

    def record(changes, paths=None):
        built_in_spark.append(True)
        return positions(changes, paths)

    monkeypatch.setattr(dml, "changed_positions", record)
    assert session.execute("DELETE FROM t WHERE id % 3 = 1").metrics["numDeletedRows"] == 1333
    assert taken == [None] and built_in_spark == [True]  # stopped by the bound: Spark's aggregate
    want = {i: v for i, v in want.items() if i % 3 != 1}
    _check(session, table_path, delta_rows, want)
    built_in_spark.clear()
    assert session.execute("DELETE FROM t WHERE id % 30 = 2").metrics["numDeletedRows"] == 134
    assert taken == [None, 134] and built_in_spark == []  # under the bound: grouped on the driver
    want = {i: v for i, v in want.items() if i % 30 != 2}
    _check(session, table_path, delta_rows, want)


def test_a_non_deterministic_delete_builds_its_bitmaps_in_spark(session, monkeypatch):
    _table(session)
    taken = _checked_positions(monkeypatch)
    n = session.execute("DELETE FROM t WHERE rand(3) < 0.5").metrics["numDeletedRows"]
    # evaluated once per row (checkpointed), counted by Spark's bitmaps: the rows counted are those gone
    assert taken == [] and 0 < n < 4000
    assert session.sql("SELECT count(*) AS n FROM t").first().n == 4000 - n
