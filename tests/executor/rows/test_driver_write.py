"""A few rows on the driver written by pyarrow (executor/rows/driver_write.py).

A VALUES insert, a point MERGE or UPDATE leave their new rows in a local relation; isolde
writes them with pyarrow instead of a Spark write job. Each case writes the same rows into two
tables, one with the route on and one with it switched off (Spark's writer), and compares what
a reader can see: rows read by isolde and by delta-rs, the statistics in the log, the
partition folders and values, and each Parquet leaf column's physical and logical type.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import os
import random

import pyarrow.parquet as pq
import pytest

from isolde.errors import ConstraintViolationError, NotNullViolationError
from isolde.executor.rows import driver_write
from isolde.executor.rows import routes as rules  # (``routes``: the fixture of the writers taken)

pytestmark = pytest.mark.spark

COLUMNS = ("id BIGINT, b TINYINT, sh SMALLINT, i INT, f FLOAT, d DOUBLE, dec5 DECIMAL(5,2), dec15 DECIMAL(15,3), "
           "dec30 DECIMAL(30,5), s STRING, bin BINARY, flag BOOLEAN, day DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, "
           "arr ARRAY<INT>, st STRUCT<a: INT, b: STRING>, m MAP<STRING, BIGINT>, nested ARRAY<STRUCT<x: DOUBLE>>")

def _row(rng: random.Random, i: int) -> tuple:
    def maybe(value):
        return None if rng.random() < 0.15 else value

    utc = datetime.timezone.utc
    return (
        i,
        maybe(rng.choice([-128, 0, 127, rng.randrange(-128, 128)])),
        maybe(rng.choice([-32768, 32767, rng.randrange(-999, 999)])),
        maybe(rng.choice([-2**31, 2**31 - 1, rng.randrange(-10**6, 10**6)])),
        maybe(rng.choice([0.0, -0.0, 1.5, float("nan"), float("inf"), rng.random()])),
        maybe(rng.choice([0.0, -0.0, -1e300, float("nan"), float("-inf"), rng.random()])),
        maybe(decimal.Decimal(rng.randrange(-99999, 100000)) / 100),
        maybe(decimal.Decimal(rng.randrange(-10**15 + 1, 10**15)) / 1000),
        maybe(decimal.Decimal(rng.randrange(-10**30 + 1, 10**30)) / 100000),
        maybe(rng.choice(["", "é∂ unicode", "x" * 40, "a/b=c%d", f"s{rng.randrange(9)}"])),
        maybe(bytes(rng.randrange(256) for _ in range(rng.randrange(5)))),
        maybe(rng.random() < 0.5),
        maybe(datetime.date(1, 1, 1) + datetime.timedelta(days=rng.randrange(800_000))),
        maybe(datetime.datetime(1960, 3, 31, 1, 30, tzinfo=utc)
              + datetime.timedelta(microseconds=rng.randrange(10**16))),
        maybe(datetime.datetime(2024, 10, 27, 2, 30) + datetime.timedelta(microseconds=rng.randrange(10**12))),
        maybe([rng.choice([None, rng.randrange(9)]) for _ in range(rng.randrange(3))]),
        maybe((rng.randrange(9), rng.choice([None, "b"]))),
        maybe({f"k{rng.randrange(3)}": rng.choice([None, rng.randrange(-9, 9)])}),
        maybe([(rng.choice([None, rng.random()]),) for _ in range(rng.randrange(3))]),
    )


@pytest.fixture
def routes(monkeypatch):
    """What each write took: True for pyarrow, False where it fell back to Spark's writer."""
    taken = []
    for name in ("write_local_rows", "write_counted_rows"):
        def record(*args, _write=getattr(driver_write, name), **kwargs):
            written = _write(*args, **kwargs)
            taken.append(written is not None)
            return written

        monkeypatch.setattr(driver_write, name, record)
    return taken


def _spark_writer():
    """A context in which every write takes Spark's writer."""
    off = pytest.MonkeyPatch.context()
    patch = off.__enter__()
    patch.setattr(driver_write, "writable_schema", lambda *a, **k: False)
    return off


def _insert_both(session, spark, columns: str, rows: list, partitioned_by: str = "") -> None:
    """The same rows into ``drv`` (the route on) and ``spk`` (Spark's writer), as one INSERT
    from a local relation each."""
    parts = f" PARTITIONED BY ({partitioned_by})" if partitioned_by else ""
    for name in ("drv", "spk"):
        session.execute(f"CREATE TABLE {name} ({columns}){parts}")
    typed = spark.createDataFrame(rows, columns)  # an RDD: made local (a relation on the driver) via Arrow
    spark.createDataFrame(typed.toArrow(), schema=typed.schema).createOrReplaceTempView("rows_in")
    session.execute("INSERT INTO drv SELECT * FROM rows_in")
    off = _spark_writer()
    try:
        session.execute("INSERT INTO spk SELECT * FROM rows_in")
    finally:
        off.__exit__(None, None, None)
    spark.catalog.dropTempView("rows_in")


def _adds(session, table_path, name: str) -> list:
    from isolde.executor.log.delta_log import DeltaLog

    return list(DeltaLog.for_table(table_path(session, name)).snapshot().all_files)


def _canonical(value):
    """A statistic comparable across files: NaN equal to NaN."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def _table_stats(adds: list) -> dict:
    """The log's statistics over all of a table's files: rows, and per column the least
    minimum, the greatest maximum and the nulls (the routes split rows into files differently).
    A bound some file lacks (a float column with NaN in it, all-NULL values) is absent for the
    table: the other route may have put those rows beside others."""
    out = {"numRecords": sum(a.num_records for a in adds)}
    seen: dict = {}
    for add in adds:
        stats = json.loads(add.stats)
        for kind, pick in (("minValues", min), ("maxValues", max), ("nullCount", None)):
            for col, value in _flat(stats.get(kind) or {}):
                key = (kind, col)
                seen[key] = seen.get(key, 0) + 1
                if kind == "nullCount":
                    out[key] = out.get(key, 0) + value
                else:
                    out[key] = value if key not in out else pick([out[key], value])
    live = [a for a in adds if a.num_records]
    return {k: _canonical(v) for k, v in out.items()
            if k == "numRecords" or k[0] == "nullCount" or seen[k] == len(live)}


def _flat(stats: dict, prefix: str = ""):
    for k, v in stats.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _leaf_types(path: str) -> list:
    """(column path, physical type, logical type, definition / repetition levels) per leaf."""
    schema = pq.ParquetFile(path).schema
    return [(c.path, c.physical_type, str(c.logical_type), c.max_definition_level, c.max_repetition_level)
            for c in (schema.column(i) for i in range(len(schema)))]


def _contents(session, name: str) -> list:
    return sorted((tuple(r) for r in session.sql(f"SELECT * FROM {name}").collect()), key=lambda r: r[0])


def _same_values(a: list, b: list) -> bool:
    return [tuple(_canonical(v) for v in r) for r in a] == [tuple(_canonical(v) for v in r) for r in b]


@pytest.mark.parametrize("seed", range(4))
def test_rows_written_by_pyarrow_read_and_encode_as_sparks(session, spark, routes, table_path, delta_rows, seed):
    rng = random.Random(seed)
    rows = [_row(rng, i) for i in range(rng.randrange(1, 60))]
    _insert_both(session, spark, COLUMNS, rows)
    assert routes == [True, False]
    assert _same_values(_contents(session, "drv"), _contents(session, "spk"))
    assert _same_values(delta_rows(table_path(session, "drv")), delta_rows(table_path(session, "spk")))
    drv, spk = _adds(session, table_path, "drv"), _adds(session, table_path, "spk")
    assert len(drv) == 1
    # parquet-mr leaves a float column's bounds out of a footer when it holds a NaN, Arrow keeps
    # the bounds of the other values: compare those to the rows instead
    floats = {("minValues", "f"), ("maxValues", "f"), ("minValues", "d"), ("maxValues", "d")}
    drv_stats, spk_stats = _table_stats(drv), _table_stats(spk)
    assert {k: v for k, v in drv_stats.items() if k not in floats} == \
        {k: v for k, v in spk_stats.items() if k not in floats}
    names = [f.name for f in session.sql("SELECT * FROM drv").schema.fields]
    for kind, col in floats & set(drv_stats):
        values = [r[names.index(col)] for r in rows]
        values = [v for v in values if v is not None and not math.isnan(v)]
        assert drv_stats[(kind, col)] == (min(values) if kind == "minValues" else max(values))
    drv_file = os.path.join(table_path(session, "drv"), drv[0].path)
    spk_file = os.path.join(table_path(session, "spk"), spk[0].path)
    assert _leaf_types(drv_file) == _leaf_types(spk_file)
    assert os.path.basename(drv_file).endswith(".snappy.parquet")
    assert pq.ParquetFile(drv_file).metadata.row_group(0).column(0).compression == "SNAPPY"


PARTITION_COLUMNS = "id INT, v STRING, ps STRING, pi INT, pd DATE, pb BOOLEAN"
PARTITION_VALUES = ["a/b", "x=y", "100%", " lead", "", None, "é", "c:d", "#?*", "plain"]


def test_partitions_get_sparks_folders_and_values(session, spark, routes, table_path, delta_rows):
    rng = random.Random(7)
    rows = [(i, f"v{i}", rng.choice(PARTITION_VALUES), rng.choice([None, -3, 0, 2**31 - 1]),
             rng.choice([None, datetime.date(2024, 2, 29), datetime.date(1, 1, 1)]), rng.choice([None, True, False]))
            for i in range(80)]
    _insert_both(session, spark, PARTITION_COLUMNS, rows, "ps, pi, pd, pb")
    assert routes == [True, False]
    drv, spk = _adds(session, table_path, "drv"), _adds(session, table_path, "spk")

    def folders(adds):
        return sorted({(os.path.dirname(a.path), json.dumps(a.partition_values, sort_keys=True)) for a in adds})

    assert folders(drv) == folders(spk)
    assert len(drv) == len(folders(drv))  # one file per partition
    assert _contents(session, "drv") == _contents(session, "spk")
    assert delta_rows(table_path(session, "drv")) == delta_rows(table_path(session, "spk"))
    # a later statement prunes on those values
    assert session.sql("SELECT count(*) FROM drv WHERE ps = 'a/b' AND pb").first()[0] == \
        sum(1 for r in rows if r[2] == "a/b" and r[5])


def test_violations_are_reported_as_with_sparks_writer(session, table_path, routes):
    session.execute("CREATE TABLE c (id INT NOT NULL, v INT) USING delta")
    session.execute("ALTER TABLE c ADD CONSTRAINT positive CHECK (v > 0)")
    session.execute("INSERT INTO c VALUES (1, 1)")
    version = session.execute("DESCRIBE HISTORY c").first().version
    for sql, error in (("INSERT INTO c VALUES (2, -1)", ConstraintViolationError),
                       ("INSERT INTO c VALUES (NULL, 5)", NotNullViolationError)):
        with pytest.raises(error) as on:
            session.execute(sql)
        off = _spark_writer()
        try:
            with pytest.raises(error) as spark_says:
                session.execute(sql)
        finally:
            off.__exit__(None, None, None)
        assert type(on.value) is type(spark_says.value)
    assert session.execute("DESCRIBE HISTORY c").first().version == version
    assert [tuple(r) for r in session.sql("SELECT * FROM c").collect()] == [(1, 1)]
    assert not [p for p in os.listdir(table_path(session, "c")) if p.startswith(".isolde-staging")]


def test_more_rows_than_the_limit_take_sparks_writer(session, routes, monkeypatch):
    monkeypatch.setattr(rules, "DRIVER_WRITE_ROWS", 5)
    session.execute("CREATE TABLE t (id INT, v STRING)")
    session.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    session.execute("INSERT INTO t SELECT id, 'x' FROM VALUES (10), (11), (12), (13), (14), (15), (16) AS s(id)")
    assert routes == [True, False]
    assert sorted(tuple(r) for r in session.sql("SELECT * FROM t").collect()) == \
        [(1, "a"), (2, "b"), (3, "c")] + [(i, "x") for i in range(10, 17)]


@pytest.mark.parametrize("ddl", [
    "CREATE TABLE t (id INT, v STRING) TBLPROPERTIES ('delta.columnMapping.mode' = 'name')",
    "CREATE TABLE t (id INT, v STRING, p TIMESTAMP) PARTITIONED BY (p)",
    "CREATE TABLE t (id INT, v STRING, p DOUBLE) PARTITIONED BY (p)",
])
def test_tables_whose_files_need_sparks_writer_keep_it(session, routes, table_path, delta_rows, ddl):
    session.execute(ddl)
    columns = [f.name for f in session.sql("SELECT * FROM t").schema.fields]
    values = "(1, 'a')" if len(columns) == 2 else ("(1, 'a', TIMESTAMP'2024-01-01 10:00:00')" if "TIMESTAMP" in ddl
                                                    else "(1, 'a', 1.5)")
    session.execute(f"INSERT INTO t VALUES {values}")
    assert routes == [False]
    assert len(session.sql("SELECT * FROM t").collect()) == 1
    assert len(delta_rows(table_path(session, "t"))) == 1


def test_a_point_merge_and_update_write_through_pyarrow(session, routes, table_path, delta_rows):
    session.execute("CREATE TABLE t (id BIGINT, v DOUBLE) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    session.execute("INSERT INTO t SELECT id, id * 1.0 FROM range(1000)")
    session.execute("MERGE INTO t USING (SELECT * FROM VALUES (5L, -1.0D), (5000L, 2.0D) AS v(id, v)) s ON t.id = s.id "
                    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    session.execute("UPDATE t SET v = 7 WHERE id = 6")
    assert routes[-2:] == [True, True]
    got = dict(delta_rows(table_path(session, "t")))
    assert len(got) == 1001 and got[5] == -1.0 and got[5000] == 2.0 and got[6] == 7.0
    assert dict(tuple(r) for r in session.sql("SELECT * FROM t").collect()) == got
