"""A plain look at a table answered on the driver while Spark starts (executor/jobs/driver_query.py).

Which statements are plain reads (no Spark); then, differentially against Spark: random tables
(every type the driver reads, partition columns with awkward values, deletion vectors, column
mapping by name with renamed columns, columns added after the first files, files delta-rs
wrote) read by both routes must give the same Rows -- the same values of the same Python types
(``repr`` compared, so ``bytearray`` vs ``bytes`` or ``Decimal('1.50')`` vs ``Decimal('1.5')``
differ) -- in a time zone other than UTC. Tables the driver must not read are refused, so the
statement waits for Spark.
"""

from __future__ import annotations

import os
import random
import time

import pytest

import isolde
from isolde.executor.jobs import driver_query as D
from isolde.executor.session.context import ExecutionContext


# ----------------------------------------------------------------------------- which reads

PLAIN = [
    ("SELECT * FROM t", None, None),
    ("SELECT * FROM t LIMIT 10", None, 10),
    ("SELECT a, b AS x FROM t LIMIT 0", (("a", "a"), ("b", "x")), 0),
    ("SELECT t.a, A FROM db.t t LIMIT 3", (("a", "a"), ("A", "A")), 3),
    ("SELECT * FROM delta.`/tmp/x` VERSION AS OF 3 LIMIT 5", None, 5),
    (f"SELECT * FROM t LIMIT {D.DRIVER_ROWS}", None, D.DRIVER_ROWS),
]

NOT_PLAIN = [
    "SELECT * FROM t WHERE a = 1",
    "SELECT * FROM t ORDER BY a LIMIT 3",
    "SELECT DISTINCT a FROM t",
    "SELECT a, count(*) FROM t GROUP BY a",
    "SELECT a + 1 FROM t LIMIT 3",
    "SELECT * FROM t JOIN u ON t.a = u.a LIMIT 3",
    "SELECT * FROM t, u",
    "WITH c AS (SELECT * FROM t) SELECT * FROM c LIMIT 3",
    "SELECT * FROM (SELECT * FROM t) LIMIT 3",
    "SELECT * FROM t TIMESTAMP AS OF '2024-01-01' LIMIT 3",
    f"SELECT * FROM t LIMIT {D.DRIVER_ROWS + 1}",
    "SELECT * FROM t LIMIT 3 OFFSET 2",
    "SELECT u.a FROM t LIMIT 3",
    "SELECT * FROM t AS x(p, q) LIMIT 3",
    "SELECT * FROM table_changes('t', 1) LIMIT 3",
    "SELECT 1",
    "VALUES (1)",
    "SELECT * FROM t UNION ALL SELECT * FROM t",
]


@pytest.mark.parametrize("sql,columns,limit", PLAIN)
def test_plain_reads(sql, columns, limit):
    read = D.plain_read(isolde.parse(sql)[0])
    assert read is not None and read.columns == columns and read.limit == limit


@pytest.mark.parametrize("sql", NOT_PLAIN)
def test_reads_that_need_spark(sql):
    assert D.plain_read(isolde.parse(sql)[0]) is None


def _delta_rs_table(warehouse, name="events", parts=()):
    import pyarrow as pa
    from deltalake import write_deltalake

    path = os.path.join(warehouse, "default", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "kind": ["a", "b", None, "d"],
                     "day": pa.array([0, 1, 1, 2], pa.int32()).cast(pa.date32())})
    write_deltalake(path, data, partition_by=list(parts) or None)
    write_deltalake(path, data.slice(0, 2), mode="append", partition_by=list(parts) or None)
    return path


def test_a_session_that_has_not_started_spark_answers_plain_reads_of_a_delta_rs_table(tmp_path):
    """No JVM at all: the Session is never started; rows equal delta-rs's own read."""
    from deltalake import DeltaTable

    warehouse = str(tmp_path / "wh")
    path = _delta_rs_table(warehouse, parts=("day",))
    s = isolde.connect(warehouse=warehouse)
    try:
        assert s.needs_spark("SELECT * FROM events LIMIT 3")  # driver reads not asked for
        s.driver_reads = True
        s.wait_loaded()
        for sql in ("SELECT * FROM events", "SELECT kind, day AS d FROM events", "SELECT * FROM events LIMIT 4"):
            assert not s.needs_spark(sql), sql
        rows = s.execute("SELECT * FROM events").rows
        expected = DeltaTable(path).to_pyarrow_table().to_pylist()
        assert sorted(repr(tuple(r)) for r in rows) == \
            sorted(repr((e["id"], e["kind"], e["day"])) for e in expected)
        assert [r.asDict() for r in s.execute("SELECT kind, day AS d FROM events LIMIT 1").rows][0].keys() == {"kind", "d"}
        assert len(s.execute("SELECT * FROM events LIMIT 4").rows) == 4
        assert s.execute("SELECT * FROM events LIMIT 0").rows == []
        # reads that need Spark wait for it; an unknown table is said at once, without Spark
        assert s.needs_spark("SELECT * FROM events WHERE id = 1")
        assert not s.needs_spark("SELECT * FROM evnts LIMIT 3")
        with pytest.raises(isolde.errors.TableNotFoundError, match="events"):
            s.execute("SELECT * FROM evnts LIMIT 3")
        # a column Spark would name or suggest: Spark's job
        assert s.needs_spark("SELECT nope FROM events LIMIT 3")
        assert not s.ready
    finally:
        s.close()


# ----------------------------------------------------------------------------- against Spark

#: (SQL type, a function making a SQL literal of it)
def _lit_int(bits):
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return lambda r: str(r.choice([lo, hi, 0, -1, r.randint(lo, hi)]))


_TYPES = {
    "BOOLEAN": lambda r: r.choice(["true", "false"]),
    "TINYINT": lambda r: f"CAST({_lit_int(8)(r)} AS TINYINT)",
    "SMALLINT": lambda r: f"CAST({_lit_int(16)(r)} AS SMALLINT)",
    "INT": _lit_int(32),
    "BIGINT": lambda r: f"CAST({_lit_int(64)(r)} AS BIGINT)",
    "FLOAT": lambda r: f"CAST({r.choice(['NaN', '-0.0', '3.4e38', '0.1', 'Infinity', str(r.uniform(-1e6, 1e6))])!r} AS FLOAT)",
    "DOUBLE": lambda r: f"CAST({r.choice(['NaN', '-0.0', '1.7e308', '0.1', '-Infinity', repr(r.uniform(-1e9, 1e9))])!r} AS DOUBLE)",
    "DECIMAL(10,2)": lambda r: f"CAST({r.choice(['1.50', '-99999999.99', '0', str(round(r.uniform(-1e6, 1e6), 2))])} AS DECIMAL(10,2))",
    "DECIMAL(38,18)": lambda r: f"CAST('{r.choice(['12345678901234567890.123456789012345678', '0.000000000000000001', '-1'])}' AS DECIMAL(38,18))",
    "STRING": lambda r: "'" + r.choice(["", "plain", "with space", "o''quote", "ünïcödé ☃", "x/y=z", "a" * 40]) + "'",
    "BINARY": lambda r: r.choice(["X''", "X'00FF10'", "X'DEADBEEF'"]),
    "DATE": lambda r: r.choice(["DATE'1900-01-01'", "DATE'2024-02-29'", "DATE'1969-12-31'", "DATE'2999-12-31'"]),
    "TIMESTAMP": lambda r: r.choice(["TIMESTAMP'1970-01-01 00:00:00.000001'", "TIMESTAMP'2024-03-10 02:30:00'",
                                     "TIMESTAMP'1901-06-01 12:00:00'", "TIMESTAMP'2038-01-19 03:14:08.5'"]),
    "TIMESTAMP_NTZ": lambda r: r.choice(["TIMESTAMP_NTZ'1970-01-01 00:00:00'", "TIMESTAMP_NTZ'2024-11-03 01:30:00.25'",
                                         "TIMESTAMP_NTZ'1850-01-01 00:00:00'"]),
    "ARRAY<INT>": lambda r: r.choice(["array(1, NULL, 3)", "array()", "CAST(array() AS ARRAY<INT>)"]),
    "MAP<STRING, DOUBLE>": lambda r: r.choice(["map('a', 1.5D, 'b', NULL)", "map()", "map('z', CAST('NaN' AS DOUBLE))"]),
    "STRUCT<a: INT, b: STRING>": lambda r: r.choice(["named_struct('a', 1, 'b', 'x')", "named_struct('a', NULL, 'b', NULL)"]),
    "ARRAY<STRUCT<x: DOUBLE, y: ARRAY<BIGINT>>>": lambda r: r.choice(
        ["array(named_struct('x', 1.0D, 'y', array(1L, 2L)))", "array(named_struct('x', NULL, 'y', NULL), NULL)"]),
}

_PARTITION_TYPES = {
    "STRING": lambda r: "'" + r.choice(["a b", "x/y", "%41", "ü", "p=q", "_"]) + "'",
    "INT": lambda r: str(r.choice([0, -5, 2147483647])),
    "DATE": lambda r: r.choice(["DATE'2024-01-01'", "DATE'1999-12-31'"]),
    "BOOLEAN": lambda r: r.choice(["true", "false"]),
}


def _value(r, make):
    return "NULL" if r.random() < 0.15 else make(r)


def _rows_repr(rows) -> list:
    return sorted(repr(tuple(row)) for row in rows)


@pytest.fixture
def los_angeles():
    """A local time zone other than UTC (timestamps reach Python as local wall time)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/Los_Angeles"
    time.tzset()
    yield
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


def _driver(session, sql):
    stmt = isolde.parse(sql)[0]
    return D.run(ExecutionContext(session, stmt), stmt)


def _compare(session, sql, limit=None):
    """The driver's rows equal Spark's (a LIMIT: as many, each one of Spark's whole table)."""
    driver = _driver(session, sql)
    assert driver is not None, f"the driver refused {sql}"
    spark_result = session.execute(sql)
    assert driver.columns == spark_result.columns, sql
    if limit is None:
        assert _rows_repr(driver.rows) == _rows_repr(spark_result.rows), sql
    else:
        whole = _rows_repr(session.execute(sql.rsplit(" LIMIT ", 1)[0]).rows)
        mine = _rows_repr(driver.rows)
        assert len(mine) == min(limit, len(whole)), sql
        for row in mine:
            assert row in whole, (sql, row)
            whole.remove(row)
    assert [f.dataType.simpleString() for f in driver.schema.fields] == \
        [f.dataType.simpleString() for f in spark_result.schema.fields], sql
    return driver


@pytest.mark.spark
@pytest.mark.parametrize("seed", range(8))
def test_driver_rows_equal_sparks_on_random_tables(session, seed, los_angeles):
    r = random.Random(seed)
    names = r.sample(sorted(_TYPES), k=r.randint(3, 7))
    columns = [(f"c{i}_{t.split('(')[0].split('<')[0].lower()}", t) for i, t in enumerate(names)]
    part = r.choice([None, *sorted(_PARTITION_TYPES)])
    all_columns = columns + ([("p", part)] if part else [])
    props = ["'delta.enableDeletionVectors' = 'true'"]
    mapped = r.random() < 0.5
    if mapped:
        props += ["'delta.columnMapping.mode' = 'name'", "'delta.minReaderVersion' = '2'", "'delta.minWriterVersion' = '5'"]
    session.execute(f"CREATE TABLE t ({', '.join(f'{n} {t}' for n, t in all_columns)}) "
                    + (f"PARTITIONED BY (p) " if part else "") + f"TBLPROPERTIES ({', '.join(props)})")

    def insert(cols, n):
        rows = []
        for _ in range(n):
            values = [_value(r, _TYPES[t]) for _, t in cols]
            if part:
                values.append(_value(r, _PARTITION_TYPES[part]))
            rows.append("(" + ", ".join(values) + ")")
        targets = [c for c, _ in cols] + (["p"] if part else [])
        session.execute(f"INSERT INTO t ({', '.join(targets)}) VALUES " + ", ".join(rows))

    insert(columns, r.randint(5, 25))
    insert(columns, r.randint(1, 10))
    session.execute(f"DELETE FROM t WHERE {columns[0][0]} IS NULL")  # deletion vectors, or whole files
    session.execute("ALTER TABLE t ADD COLUMNS (added STRING)")  # older files lack it
    columns.append(("added", "STRING"))
    insert(columns, r.randint(1, 8))
    if mapped:
        session.execute(f"ALTER TABLE t RENAME COLUMN {columns[1][0]} TO renamed")
        columns[1] = ("renamed", columns[1][1])
    _compare(session, "SELECT * FROM t")
    picked = r.sample([c for c, _ in columns] + (["p"] if part else []), k=2)
    _compare(session, f"SELECT {picked[0].upper()}, {picked[1]} AS other FROM t")
    _compare(session, "SELECT * FROM t LIMIT 4", limit=4)
    _compare(session, "SELECT * FROM t VERSION AS OF 2")


@pytest.mark.spark
def test_driver_rows_equal_sparks_on_a_delta_rs_table_with_awkward_partitions(session, tmp_path, los_angeles):
    import pyarrow as pa
    from deltalake import write_deltalake

    path = str(tmp_path / "rs")
    data = pa.table({"id": pa.array([1, 2, 3, 4, 5], pa.int64()),
                     "ts": pa.array([0, 1_700_000_000_000_000, None, -1, 86_400_000_000], pa.timestamp("us", "UTC")),
                     "amount": pa.array(["1.50", "2.00", None, "-0.01", "3.33"]).cast(pa.decimal128(9, 2)),
                     "blob": pa.array([b"", b"\x00", None, b"ab", b"\xff"], pa.binary()),
                     "part": ["a b", "x/y", None, "", "ü"]})
    write_deltalake(path, data, partition_by=["part"])
    write_deltalake(path, data.slice(1, 3), mode="append", partition_by=["part"])
    _compare(session, f"SELECT * FROM delta.`{path}`")
    _compare(session, f"SELECT blob, part FROM delta.`{path}` LIMIT 3", limit=3)
    session.execute(f"DELETE FROM delta.`{path}` WHERE id = 2")
    _compare(session, f"SELECT * FROM delta.`{path}`")


REFUSED = [
    ("CREATE TABLE r (c CHAR(3)) ", "SELECT * FROM r"),  # Spark pads CHAR on read
    ("CREATE TABLE r (c VARCHAR(3)) ", "SELECT * FROM r"),
    ("CREATE TABLE r (s STRUCT<t: TIMESTAMP>) ", "SELECT * FROM r"),
    ("CREATE TABLE r (a INT, p TIMESTAMP) PARTITIONED BY (p)", "SELECT a FROM r"),
    ("CREATE TABLE r (a INT, p DOUBLE) PARTITIONED BY (p)", "SELECT a FROM r"),
    ("CREATE TABLE r (v VARIANT) ", "SELECT * FROM r"),
    ("CREATE TABLE r (a INT) TBLPROPERTIES ('delta.columnMapping.mode' = 'id')", "SELECT * FROM r"),
    ("CREATE TABLE r (a INT) TBLPROPERTIES ('delta.enableTypeWidening' = 'true'); "
     "INSERT INTO r VALUES (1); ALTER TABLE r ALTER COLUMN a TYPE BIGINT", "SELECT * FROM r"),
    ("CREATE TABLE r (a INT); INSERT INTO r VALUES (1)", "SELECT * FROM r TIMESTAMP AS OF '2999-01-01'"),
    ("CREATE TABLE r (a INT); INSERT INTO r VALUES (1)", "SELECT nope FROM r LIMIT 1"),
]


@pytest.mark.spark
@pytest.mark.parametrize("setup,sql", REFUSED)
def test_tables_the_driver_does_not_read(session, setup, sql):
    session.execute(setup)
    stmt = isolde.parse(sql)[0]
    assert D.run(ExecutionContext(session, stmt), stmt) is None


@pytest.mark.spark
def test_a_table_with_more_rows_than_the_driver_takes_needs_a_limit(session, monkeypatch):
    session.execute("CREATE TABLE big (a BIGINT)")
    session.execute("INSERT INTO big SELECT id FROM range(50)")
    monkeypatch.setattr(D, "DRIVER_ROWS", 20)
    assert _driver(session, "SELECT * FROM big") is None
    assert len(_driver(session, "SELECT * FROM big LIMIT 20").rows) == 20
    session.execute("DELETE FROM big WHERE a >= 25")  # 25 live rows, the log says
    assert _driver(session, "SELECT * FROM big") is None
    session.execute("DELETE FROM big WHERE a >= 20")
    assert sorted(r.a for r in _driver(session, "SELECT * FROM big").rows) == list(range(20))


@pytest.mark.spark
def test_only_a_session_that_asks_and_whose_spark_is_not_up_reads_on_the_driver(session):
    session.execute("CREATE TABLE t (a INT)")
    assert session.needs_spark("SELECT * FROM t LIMIT 1")  # Spark is up
    session.driver_reads = True
    assert session.needs_spark("SELECT * FROM t LIMIT 1")
