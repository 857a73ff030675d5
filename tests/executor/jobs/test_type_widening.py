"""Type widening on Spark: reading tables whose older files hold narrower types (Delta's golden
table and isolde's own), ALTER TABLE ... ALTER COLUMN ... TYPE, data skipping on widened
columns, and DML / OPTIMIZE after a widening.

The oracle: delta-rs 1.6.6 refuses ``typeWidening`` and ``typeWidening-preview`` tables
("Unsupported table features required"), so rows are compared with what pyarrow reads from
the files delta-rs's own log replay lists (``get_add_actions``), each column cast to the
table's type by pyarrow (every change on Delta's list is an exact pyarrow cast), and with
delta-rs itself where it reads (the golden table's version 0).
"""

from __future__ import annotations

import decimal
import json
import os
import shutil
from datetime import date, datetime

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from isolde import errors as E
from isolde.executor.log import type_widening as TW

from tests.helpers.meta import delta_rows, snapshot, sorted_rows, version_of

pytestmark = pytest.mark.spark

from tests.helpers import ENGINES  # noqa: E402  (tests/data/engines)

GOLDEN = os.path.join(ENGINES, "type-widening")
D = decimal.Decimal


def _path(session, name):
    from isolde.grammar import ast

    return session.catalog.resolve(ast.TableRef(parts=(name,)), session.current_database, must_exist=False).path


def widened_table(path: str, version=None) -> pa.Table:
    """The table as pyarrow reads the data files delta-rs's log replay lists (no deletion
    vectors: the tables here have none), each column cast to the schema delta-rs reads from the
    log, partition values from delta-rs's add actions. (The oracle for tables delta-rs refuses
    to read: typeWidening and typeWidening-preview.)"""
    from deltalake import DeltaTable

    dt = DeltaTable(path, version=version)
    schema = pa.schema(dt.schema().to_arrow())
    parts = list(dt.metadata().partition_columns)
    pieces = []
    for add in pa.table(dt.get_add_actions(flatten=True)).to_pylist():
        data = pq.read_table(os.path.join(path, add["path"]))
        cols = {}
        for f in schema:
            if f.name in parts:
                cols[f.name] = pa.array([add[f"partition.{f.name}"]] * data.num_rows).cast(f.type)  # typed by delta-rs
            else:
                cols[f.name] = data.column(f.name).cast(f.type)
        pieces.append(pa.table(cols, schema=schema))
    return pa.concat_tables(pieces) if pieces else schema.empty_table()


def arrow_oracle(path: str, version=None, columns=None) -> list[tuple]:
    """``widened_table`` as sorted row tuples (of ``columns``, default all)."""
    table = widened_table(path, version)
    names = columns or table.column_names
    return sorted_rows(tuple(r[n] for n in names) for r in table.to_pylist())


def _isolde(session, sql) -> list[tuple]:
    return sorted_rows(tuple(r) for r in session.execute(sql).collect())


# --------------------------------------------------------------------------- Delta's golden table


GOLDEN_V2 = [
    (1, 2, 3.4000000953674316, 5.0, 6.0, 7.0, D("123.45"), D("67.89000"), D("1.0"), D("2.0"), D("3.0"), D("4.0"),
     datetime(2024, 9, 9)),
    (9223372036854775807, 9223372036854775807, 1.234567890123, 1.234567890123, 1.234567890123, 1.234567890123,
     D("12345678901234.56"), D("12345678901.23456"), D("123.4"), D("12345.6"), D("1234567890.1"),
     D("123456789012345678.9"), datetime(2024, 9, 9, 12, 34, 56, 123456)),
]
GOLDEN_V0 = [(1, 2, 3.4000000953674316, 5, 6, 7, D("123.45"), D("67.89"), 1, 2, 3, 4, date(2024, 9, 9))]


def test_golden_table_reads_at_every_version(session):
    ref = f"delta.`{GOLDEN}`"
    assert _isolde(session, f"SELECT * FROM {ref} VERSION AS OF 0") == delta_rows(GOLDEN, version=0) == GOLDEN_V0
    assert _isolde(session, f"SELECT * FROM {ref} VERSION AS OF 1") == arrow_oracle(GOLDEN, 1) == GOLDEN_V0
    assert _isolde(session, f"SELECT * FROM {ref}") == arrow_oracle(GOLDEN) == sorted_rows(GOLDEN_V2)
    with pytest.raises(Exception, match="TypeWideningPreview"):
        delta_rows(GOLDEN)  # why delta-rs is not the oracle past version 0


@pytest.mark.parametrize("predicate, ids", [
    # the old file's float statistic (3.4) is no bound of the double value read (3.4000000953674316)
    ("float_double = 3.4000000953674316", [1]),
    ("float_double > 3.4000000001", [1]),
    ("date_timestamp_ntz = TIMESTAMP_NTZ'2024-09-09 00:00:00'", [1]),
    ("date_timestamp_ntz > TIMESTAMP_NTZ'2024-09-09 12:00:00'", [9223372036854775807]),
    ("decimal_decimal_greater_scale = 67.89", [1]),
    ("int_decimal = 3", [1]),
    ("byte_long > 100", [9223372036854775807]),
])
def test_golden_table_filters(session, predicate, ids):
    assert _isolde(session, f"SELECT byte_long FROM delta.`{GOLDEN}` WHERE {predicate}") == [(i,) for i in ids]


def test_golden_table_write_round_trip(session, tmp_path):
    """INSERT + DELETE on the preview table: new files are written wide, the preview feature is kept."""
    path = str(tmp_path / "tw")
    shutil.copytree(GOLDEN, path)
    ref = f"delta.`{path}`"
    session.execute(f"INSERT INTO {ref} SELECT 7, 8, 0.5, 1.5, 2.5, 3.5, 1.25, 2.5, 0.5, 1.5, 2.5, 3.5, "
                    "TIMESTAMP_NTZ'2025-01-02 03:04:05'")
    session.execute(f"DELETE FROM {ref} WHERE byte_long = 1")
    expected = sorted_rows([GOLDEN_V2[1], (7, 8, 0.5, 1.5, 2.5, 3.5, D("1.25"), D("2.50000"), D("0.5"), D("1.5"),
                                           D("2.5"), D("3.5"), datetime(2025, 1, 2, 3, 4, 5))])
    assert _isolde(session, f"SELECT * FROM {ref}") == arrow_oracle(path) == expected
    snap = snapshot(path)
    assert "typeWidening-preview" in snap.protocol.reader_features
    newest = max((a for a in snap.all_files), key=lambda a: a.modification_time)
    physical = pq.read_schema(os.path.join(path, newest.path))
    assert physical.field("byte_long").type == pa.int64() and physical.field("float_double").type == pa.float64()
    # a type change on a preview table records the version, as preview clients expect
    session.execute(f"ALTER TABLE {ref} ALTER COLUMN int_long TYPE DECIMAL(22,0)")
    field = next(f for f in snapshot(path).metadata.schema["fields"] if f["name"] == "int_long")
    assert field["type"] == "decimal(22,0)" and field["metadata"][TW.TYPE_CHANGES] == [
        {"toType": "long", "fromType": "integer", "tableVersion": 2},
        {"tableVersion": 5, "fromType": "long", "toType": "decimal(22,0)"}]
    assert _isolde(session, f"SELECT int_long FROM {ref}") == [(D(8),), (D(9223372036854775807),)]


# --------------------------------------------------------------------------- ALTER COLUMN TYPE

CHANGES = [  # column, from, to, a value written before, the value read after
    ("b", "TINYINT", "INT", "-7", -7),
    ("s", "SMALLINT", "BIGINT", "-300", -300),
    ("i", "INT", "BIGINT", "-2147483648", -2147483648),
    ("f", "FLOAT", "DOUBLE", "CAST(0.7 AS FLOAT)", 0.699999988079071),
    ("id2", "INT", "DOUBLE", "2147483647", 2147483647.0),
    ("bd", "TINYINT", "DECIMAL(12,2)", "-128", D("-128.00")),
    ("ld", "BIGINT", "DECIMAL(21,1)", "-9223372036854775808", D("-9223372036854775808.0")),
    ("dd", "DECIMAL(5,2)", "DECIMAL(20,5)", "-123.45", D("-123.45000")),
    ("d", "DATE", "TIMESTAMP_NTZ", "DATE'2024-02-29'", datetime(2024, 2, 29)),
    ("st", "STRUCT<x: SMALLINT>", "STRUCT<x: INT>", "named_struct('x', CAST(-5 AS SMALLINT))", (-5,)),
    ("arr", "ARRAY<FLOAT>", "ARRAY<DOUBLE>", "array(CAST(0.1 AS FLOAT), NULL)", [0.10000000149011612, None]),
    ("m", "MAP<STRING, DATE>", "MAP<STRING, TIMESTAMP_NTZ>", "map('k', DATE'2000-01-01')",
     {"k": datetime(2000, 1, 1)}),
]
ALTERS = {"st": "st.x TYPE INT", "arr": "arr.element TYPE DOUBLE", "m": "m.value TYPE TIMESTAMP_NTZ"}


def _norm(value):
    if hasattr(value, "asDict"):
        return tuple(value)
    return value


@pytest.mark.parametrize("vectorized", ["true", "false"])
def test_every_widening_reads_older_files_right(session, spark, vectorized):
    """One table with a column per change on Delta's list (nested ones too): values written
    before the ALTER read back widened, by both of Spark's Parquet readers, and equal pyarrow's
    cast of the same files."""
    s = session
    cols = ", ".join(f"{c} {a}" for c, a, *_ in CHANGES)
    s.execute(f"CREATE TABLE w ({cols}, p INT) PARTITIONED BY (p) "
              "TBLPROPERTIES ('delta.enableTypeWidening' = 'true', 'delta.enableDeletionVectors' = 'false')")
    s.execute(f"INSERT INTO w SELECT {', '.join(v for *_, v, _ in CHANGES)}, 1")
    for c, _, to, *_ in CHANGES:
        s.execute(f"ALTER TABLE w ALTER COLUMN {ALTERS.get(c, f'{c} TYPE {to}')}")
    s.execute("ALTER TABLE w CHANGE COLUMN p p BIGINT")  # a partition column widens too
    path = _path(s, "w")
    old = spark.conf.get("spark.sql.parquet.enableVectorizedReader")
    spark.conf.set("spark.sql.parquet.enableVectorizedReader", vectorized)
    try:
        [row] = s.execute("SELECT * FROM w").collect()
    finally:
        spark.conf.set("spark.sql.parquet.enableVectorizedReader", old)
    assert [_norm(v) for v in row] == [read for *_, read in CHANGES] + [1]
    flat = [c for c, *_ in CHANGES if c not in ALTERS] + ["p"]
    assert _isolde(s, f"SELECT {', '.join(flat)} FROM w") == arrow_oracle(path, columns=flat)


def test_alter_column_type_records_the_change_and_upgrades_the_protocol(session):
    s = session
    s.execute("CREATE TABLE t (id INT, v SMALLINT) TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')")
    s.execute("INSERT INTO t VALUES (1, 10)")
    path = _path(s, "t")
    with pytest.raises(E.AnalysisError) as info:
        s.execute("ALTER TABLE t ALTER COLUMN id TYPE BIGINT")
    assert info.value.error_class == "DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP"
    assert "delta.enableTypeWidening" in str(info.value)
    assert version_of(path) == 1
    s.execute("ALTER TABLE t SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    p = snapshot(path).protocol
    assert (p.min_reader_version, p.min_writer_version) == (3, 7)
    assert "typeWidening" in p.reader_features and "typeWidening" in p.writer_features
    r = s.execute("ALTER TABLE t CHANGE COLUMN id TYPE BIGINT")
    assert r.operation == "CHANGE COLUMN"
    s.execute("ALTER TABLE t CHANGE v v INT")
    s.execute("ALTER TABLE t ALTER COLUMN v TYPE BIGINT")
    fields = {f["name"]: f for f in snapshot(path).metadata.schema["fields"]}
    assert fields["id"]["type"] == "long" and fields["v"]["type"] == "long"
    assert fields["id"]["metadata"] == {TW.TYPE_CHANGES: [{"fromType": "integer", "toType": "long"}]}
    assert fields["v"]["metadata"][TW.TYPE_CHANGES] == [{"fromType": "short", "toType": "integer"},
                                                       {"fromType": "integer", "toType": "long"}]
    v = version_of(path)
    for sql, error_class in [
        ("ALTER TABLE t ALTER COLUMN v TYPE INT", "NOT_SUPPORTED_CHANGE_COLUMN"),
        ("ALTER TABLE t ALTER COLUMN v TYPE DOUBLE", "DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP"),
        ("ALTER TABLE t ALTER COLUMN v TYPE STRING", "DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP"),
        ("ALTER TABLE t CHANGE COLUMN v w BIGINT", "DELTA_UNSUPPORTED_RENAME_COLUMN"),
    ]:
        with pytest.raises(E.AnalysisError) as info:
            s.execute(sql)
        assert info.value.error_class == error_class, sql
    with pytest.raises(E.ColumnNotFoundError):
        s.execute("ALTER TABLE t ALTER COLUMN nope TYPE BIGINT")
    s.execute("ALTER TABLE t ADD CONSTRAINT pos CHECK (v > 0)")
    with pytest.raises(E.AnalysisError) as info:
        s.execute("ALTER TABLE t ALTER COLUMN v TYPE DECIMAL(20,0)")
    assert info.value.error_class == "DELTA_CONSTRAINT_DEPENDENT_COLUMN_CHANGE"
    assert version_of(path) == v + 1  # only the constraint was committed
    s.execute("INSERT INTO t VALUES (9000000000, 9000000000)")
    assert _isolde(s, "SELECT * FROM t") == arrow_oracle(path) == [(1, 10), (9000000000, 9000000000)]


def test_create_with_type_widening_on(session):
    session.execute("CREATE TABLE c (a INT) TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    p = snapshot(_path(session, "c")).protocol
    assert "typeWidening" in p.reader_features and "typeWidening" in p.writer_features
    session.execute("ALTER TABLE c ALTER COLUMN a TYPE BIGINT")
    session.execute("CREATE TABLE e (a INT)")
    session.execute("ALTER TABLE e SET TBLPROPERTIES ('delta.feature.typeWidening' = 'supported', "
                    "'delta.feature.variantType' = 'supported')")
    p = snapshot(_path(session, "e")).protocol
    assert {"typeWidening", "variantType"} <= set(p.reader_features) & set(p.writer_features)
    with pytest.raises(E.AnalysisError) as info:  # supported, not enabled: widening stays off
        session.execute("ALTER TABLE e ALTER COLUMN a TYPE BIGINT")
    assert info.value.error_class == "DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP"


# --------------------------------------------------------------------------- data skipping


def _delta_printed_float_stats(path: str, column: str) -> None:
    """Rewrite the statistics of ``column`` in the table's commits the way Delta Spark prints a
    FLOAT (the shortest decimal: 0.7, not 0.699999988079071), dropping isolde's NaN-free tag."""
    log = os.path.join(path, "_delta_log")
    for name in sorted(os.listdir(log)):
        if not name.endswith(".json"):
            continue
        lines = [json.loads(x) for x in open(os.path.join(log, name))]
        for action in lines:
            add = action.get("add")
            if add and add.get("stats"):
                stats = json.loads(add["stats"])
                for side in ("minValues", "maxValues"):
                    if column in stats[side]:
                        stats[side][column] = float(str(np.float32(stats[side][column])))
                add["stats"] = json.dumps(stats)
                add.pop("tags", None)
        with open(os.path.join(log, name), "w") as fh:
            fh.write("\n".join(json.dumps(a) for a in lines) + "\n")


def test_float_statistics_from_before_a_widening_never_skip_a_match(session, tmp_path):
    """A FLOAT's statistic as Delta prints it (0.7) is above the value (0.699999988079071): read
    as a DOUBLE bound after FLOAT -> DOUBLE it would skip the file holding the row."""
    s = session
    s.execute("CREATE TABLE f (id INT, x FLOAT) TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    s.execute("INSERT INTO f VALUES (1, 0.7)")
    s.execute("INSERT INTO f VALUES (2, 5.5)")
    path = str(tmp_path / "copy")  # a fresh path: no cached snapshot holds the original statistics
    shutil.copytree(_path(s, "f"), path)
    _delta_printed_float_stats(path, "x")
    first = [json.loads(x) for x in open(os.path.join(path, "_delta_log", f"{1:020d}.json"))]
    assert [json.loads(a["add"]["stats"])["minValues"] for a in first if "add" in a] == [{"id": 1, "x": 0.7}]
    ref = f"delta.`{path}`"
    s.execute(f"ALTER TABLE {ref} ALTER COLUMN x TYPE DOUBLE")
    value = "0.699999988079071"
    assert _isolde(s, f"SELECT id, x FROM {ref} WHERE x = {value}") == [(1, 0.699999988079071)]
    assert _isolde(s, f"SELECT id FROM {ref} WHERE x < 0.6999999999") == [(1,)]
    assert _isolde(s, f"SELECT id FROM {ref} WHERE x > 5") == [(2,)]
    r = s.execute(f"DELETE FROM {ref} WHERE x <= {value}")
    assert r.metrics["numDeletedRows"] == 1
    assert _isolde(s, f"SELECT * FROM {ref}") == [(2, 5.5)]


# --------------------------------------------------------------------------- writes after a widening


def test_dml_and_optimize_after_widening_write_the_wide_type(session):
    s = session
    s.execute("CREATE TABLE d (id INT, amount DECIMAL(6,2), day DATE) "
              "TBLPROPERTIES ('delta.enableTypeWidening' = 'true', 'delta.enableDeletionVectors' = 'false')")
    s.execute("INSERT INTO d VALUES (1, 10.50, DATE'2024-01-01'), (2, 20.25, DATE'2024-01-02')")
    s.execute("INSERT INTO d VALUES (3, 30.00, DATE'2024-01-03')")
    for sql in ["ALTER TABLE d ALTER COLUMN id TYPE BIGINT", "ALTER TABLE d ALTER COLUMN amount TYPE DECIMAL(12,4)",
                "ALTER TABLE d ALTER COLUMN day TYPE TIMESTAMP_NTZ"]:
        s.execute(sql)
    path = _path(s, "d")
    s.execute("INSERT INTO d VALUES (5000000000, 12345678.1234, TIMESTAMP_NTZ'2024-01-04 05:06:07')")
    s.execute("UPDATE d SET amount = amount * 2 WHERE id = 1")
    s.execute("DELETE FROM d WHERE id = 2")
    s.execute("MERGE INTO d t USING (SELECT CAST(3 AS BIGINT) AS id, 0.0001 AS amount UNION ALL "
              "SELECT 6000000000, 1.5) u ON t.id = u.id "
              "WHEN MATCHED THEN UPDATE SET amount = u.amount "
              "WHEN NOT MATCHED THEN INSERT (id, amount, day) VALUES (u.id, u.amount, TIMESTAMP_NTZ'2030-01-01 00:00:00')")
    expected = [(1, D("21.0000"), datetime(2024, 1, 1)), (3, D("0.0001"), datetime(2024, 1, 3)),
                (5000000000, D("12345678.1234"), datetime(2024, 1, 4, 5, 6, 7)),
                (6000000000, D("1.5000"), datetime(2030, 1, 1))]
    assert _isolde(s, "SELECT * FROM d") == arrow_oracle(path) == expected
    s.execute("OPTIMIZE d")
    assert _isolde(s, "SELECT * FROM d") == arrow_oracle(path) == expected
    assert _isolde(s, "SELECT id FROM d WHERE day < TIMESTAMP_NTZ'2024-01-03 00:00:01' AND amount > 1") == [(1,)]
    [live] = snapshot(path).all_files
    physical = pq.read_schema(os.path.join(path, live.path))
    assert (physical.field("id").type, physical.field("amount").type, physical.field("day").type) == (
        pa.int64(), pa.decimal128(12, 4), pa.timestamp("us"))
    stats = json.loads(live.stats)
    assert stats["minValues"] == {"id": 1, "amount": 0.0001, "day": "2024-01-01T00:00:00.000"}


def test_clustering_column_widens_and_optimize_clusters_it(session):
    s = session
    s.execute("CREATE TABLE k (id SMALLINT, x STRING) CLUSTER BY (id) "
              "TBLPROPERTIES ('delta.enableTypeWidening' = 'true', 'delta.enableDeletionVectors' = 'false')")
    s.execute("INSERT INTO k VALUES (3, 'a'), (1, 'b')")
    s.execute("ALTER TABLE k ALTER COLUMN id TYPE INT")
    s.execute("INSERT INTO k VALUES (100000, 'c')")
    s.execute("OPTIMIZE k")
    path = _path(s, "k")
    assert _isolde(s, "SELECT * FROM k") == arrow_oracle(path) == [(1, "b"), (3, "a"), (100000, "c")]
    assert _isolde(s, "SELECT x FROM k WHERE id > 50000") == [("c",)]
    assert "clustering" in snapshot(path).protocol.writer_features


@pytest.mark.parametrize("mode", ["name", "id"])
def test_widening_under_column_mapping(session, mode):
    """Physical names and field ids stay; a DATE partition column becomes TIMESTAMP_NTZ."""
    s = session
    s.execute(f"CREATE TABLE cm (id INT, f FLOAT, p DATE) PARTITIONED BY (p) TBLPROPERTIES "
              f"('delta.columnMapping.mode' = '{mode}', 'delta.enableTypeWidening' = 'true')")
    s.execute("INSERT INTO cm VALUES (1, 0.5, DATE'2024-01-01')")
    before = {f["name"]: f["metadata"] for f in snapshot(_path(s, "cm")).metadata.schema["fields"]}
    for column, to in (("id", "BIGINT"), ("f", "DOUBLE"), ("p", "TIMESTAMP_NTZ")):
        s.execute(f"ALTER TABLE cm ALTER COLUMN {column} TYPE {to}")
    after = {f["name"]: f["metadata"] for f in snapshot(_path(s, "cm")).metadata.schema["fields"]}
    assert {k: {m: v for m, v in meta.items() if m != TW.TYPE_CHANGES} for k, meta in after.items()} == before
    s.execute("INSERT INTO cm VALUES (9000000000, 0.25, TIMESTAMP_NTZ'2024-01-02 03:00:00')")
    s.execute("UPDATE cm SET f = f + 1 WHERE id = 1")
    assert _isolde(s, "SELECT * FROM cm") == [(1, 1.5, datetime(2024, 1, 1)),
                                              (9000000000, 0.25, datetime(2024, 1, 2, 3))]
    assert _isolde(s, "SELECT id FROM cm WHERE p > TIMESTAMP_NTZ'2024-01-01 12:00:00'") == [(9000000000,)]
