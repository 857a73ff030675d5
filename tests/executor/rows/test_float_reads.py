"""Floating-point values through isolde's reads (executor/rows/scan.py read_plan): -0.0 / 0.0 and
NaN, where parquet-mr's filters and Spark disagree.

Spark compares -0.0 and 0.0 as equal. parquet-mr's dictionary filter compares a literal with
a row group's dictionary by Java's Double.compare, where they differ, and drops the row group:
plain Spark 4.3 returns half the rows of ``x = 0`` over files of dictionary-encoded zeros.
Spark orders NaN above every number; Arrow and delta-rs write float maxima that leave NaN out,
so parquet-mr's row-group statistics filter drops the NaN rows of ``f > 5`` in their files.
Every statement here is compared with Spark evaluating the same rows held in memory (no
Parquet, so no filter pushdown).
"""

from __future__ import annotations

import os

import pytest
from tests.helpers.oracle import pushed_filters
from pyspark.sql import types as T

pytestmark = pytest.mark.spark

#: files of one layout each: repeated values (dictionary-encoded) with one sign of zero,
#: a zero as a row group's minimum or maximum beside other values
FILES = {
    "negative zeros": ["-0.0"] * 40,
    "positive zeros": ["0.0"] * 40,
    "0.0 as the minimum": ["0.0", "2.5", "2.5"] * 13,
    "-0.0 as the maximum": ["-0.0", "-5", "-5"] * 13,
    "-0.0 as the minimum": ["-0.0", "2.5", "2.5"] * 13,
    "0.0 as the maximum": ["0.0", "-5", "-5"] * 13,
}
LITERALS = ["0", "0.0D", "-0.0D", "CAST('-0.0' AS DOUBLE)", "-0.0F", "0.0F"]
OPS = ["=", "<=", ">=", "<", ">", "<>", "<=>", "IN"]
SCHEMA = T.StructType([T.StructField("rid", T.IntegerType()), T.StructField("x", T.DoubleType()),
                       T.StructField("f", T.FloatType())])


def _rows() -> list[tuple]:
    rows, rid = [], 0
    for values in FILES.values():
        for v in values:
            rid += 1
            rows.append((rid, float(v), float(v)))
    return rows


def _create(session, name: str) -> None:
    """One INSERT per layout, written by one task: one file (one row group) each."""
    session.execute(f"CREATE TABLE {name} (rid INT, x DOUBLE, f FLOAT)")
    rid = 0
    for values in FILES.values():
        body = ", ".join(f"({rid + i + 1}, {v}D, {v}F)" for i, v in enumerate(values))
        rid += len(values)
        session.execute(f"INSERT INTO {name} SELECT /*+ COALESCE(1) */ * FROM VALUES {body} AS v(rid, x, f)")


def _predicates() -> list[str]:
    out = []
    for column in ("x", "f"):
        for lit in LITERALS:
            for op in OPS:
                out.append(f"{column} IN ({lit}, 7.0D)" if op == "IN" else f"{column} {op} {lit}")
    return out


@pytest.fixture(scope="module")
def oracle(spark):
    # not cached: the in-memory cache's batch pruning has a NaN flaw of its own (see below)
    view = "__signed_zero_oracle"
    spark.createDataFrame(_rows(), SCHEMA).createOrReplaceTempView(view)
    yield lambda where: sorted(r.rid for r in spark.sql(f"SELECT rid FROM {view} WHERE {where}").collect())
    spark.catalog.dropTempView(view)


def test_the_files_have_the_layouts_under_test(session, table_path):
    """Each layout is one file and one row group, its zeros dictionary-encoded: otherwise the
    statements below would not reach the filter at fault."""
    import glob

    import pyarrow.parquet as pq

    _create(session, "z")
    files = glob.glob(f"{table_path(session, 'z')}/*.parquet")
    assert len(files) == len(FILES)
    for path in files:
        meta = pq.ParquetFile(path).metadata
        assert meta.num_row_groups == 1
        assert "PLAIN_DICTIONARY" in str(meta.row_group(0).column(1).encodings) or \
            "RLE_DICTIONARY" in str(meta.row_group(0).column(1).encodings)


def test_select_matches_spark_on_rows_in_memory(session, oracle):
    _create(session, "z")
    wrong = []
    for where in _predicates():
        got = sorted(r.rid for r in session.sql(f"SELECT rid FROM z WHERE {where}").collect())
        want = oracle(where)
        if got != want:
            wrong.append(f"{where}: {len(got)} rows, Spark in memory {len(want)}")
    assert not wrong, f"{len(wrong)} of {len(_predicates())} SELECTs differ:\n" + "\n".join(wrong[:20])


@pytest.mark.parametrize("where", ["x = -0.0D", "x <= -0.0D", "f = 0.0F", "x >= 0.0D AND f <= -0.0F"])
def test_delete_and_update_touch_the_rows_spark_matches(session, oracle, where):
    want = oracle(where)
    assert want, "the case must match some rows"
    _create(session, "d")
    session.execute(f"DELETE FROM d WHERE {where}")
    left = sorted(r.rid for r in session.sql("SELECT rid FROM d").collect())
    assert left == sorted(set(range(1, len(_rows()) + 1)) - set(want))
    _create(session, "u")
    session.execute(f"UPDATE u SET rid = -rid WHERE {where}")
    assert sorted(-r.rid for r in session.sql("SELECT rid FROM u WHERE rid < 0").collect()) == want


# --------------------------------------------------------------------------- NaN in other writers' files

NAN = float("nan")
#: (rid, f, d): one delta-rs file whose float / double maxima (2.5) leave out its NaNs
FOREIGN_ROWS = [(i, NAN if i % 4 == 0 else float(i % 3) + 0.5, NAN if i % 4 == 0 else float(i % 3) + 0.5)
                for i in range(1, 41)]
NAN_PREDICATES = ["f > 5", "f >= 3", "d > 5", "d >= 2.6D", "f <> 1.5F", "d = CAST('NaN' AS DOUBLE)",
                  "f IN (CAST('NaN' AS FLOAT), 9)", "NOT (d <= 2.5D)", "d > 1 AND f > 2.5F"]


@pytest.fixture(scope="module")
def foreign(spark, tmp_path_factory):
    """A table delta-rs wrote (its own Parquet statistics), and the oracle over its rows in memory."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    path = str(tmp_path_factory.mktemp("foreign") / "t")
    table = pa.table({"rid": pa.array([r[0] for r in FOREIGN_ROWS], pa.int32()),
                      "f": pa.array([r[1] for r in FOREIGN_ROWS], pa.float32()),
                      "d": pa.array([r[2] for r in FOREIGN_ROWS], pa.float64())})
    write_deltalake(path, table)
    files = [os.path.join(path, n) for n in os.listdir(path) if n.endswith(".parquet")]
    assert len(files) == 1
    st = pq.ParquetFile(files[0]).metadata.row_group(0).column(2).statistics
    assert st.has_min_max and st.max == 2.5, "the case needs a maximum that leaves NaN out"
    schema = T.StructType([T.StructField("rid", T.IntegerType()), T.StructField("f", T.FloatType()),
                           T.StructField("d", T.DoubleType())])
    # not cached: Spark's in-memory cache prunes its batches by bounds that leave NaN out too
    # (a cached DataFrame of these rows answers 0 rows to d > 5, uncached 10)
    spark.createDataFrame(FOREIGN_ROWS, schema).createOrReplaceTempView("__foreign_oracle")
    yield path, lambda where: sorted(r.rid for r in spark.sql(f"SELECT rid FROM __foreign_oracle WHERE {where}")
                                     .collect())
    spark.catalog.dropTempView("__foreign_oracle")


def test_select_on_a_delta_rs_file_keeps_its_nan_rows(session, foreign):
    path, oracle = foreign
    wrong = []
    for where in NAN_PREDICATES:
        want = oracle(where)
        got = sorted(r.rid for r in session.sql(f"SELECT rid FROM delta.`{path}` WHERE {where}").collect())
        if got != want:
            wrong.append(f"{where}: {got} != {want}")
    assert not wrong, "\n".join(wrong)
    assert oracle("f > 5"), "NaN rows match f > 5 in Spark"


def test_delete_on_a_copy_of_a_delta_rs_file_removes_its_nan_rows(session, foreign, tmp_path):
    import shutil

    path, oracle = foreign
    copy = str(tmp_path / "copy")
    shutil.copytree(path, copy)
    session.execute(f"DELETE FROM delta.`{copy}` WHERE d > 5")
    left = sorted(r.rid for r in session.sql(f"SELECT rid FROM delta.`{copy}`").collect())
    assert left == sorted(set(r[0] for r in FOREIGN_ROWS) - set(oracle("d > 5")))
    assert len(left) == 30


def test_isolde_files_keep_the_statistics_filter(session, table_path):
    """Files isolde wrote and found NaN-free keep parquet-mr's row-group statistics filter; a
    file holding a NaN (parquet-mr makes its max NaN, a safe bound) turns it off for the scan."""
    from isolde.executor.rows import scan as scan_module
    from isolde.executor.log.delta_log import DeltaLog

    session.execute("CREATE TABLE clean (k INT, d DOUBLE)")
    session.execute("INSERT INTO clean VALUES (1, 1.5), (2, 2.5)")
    snap = DeltaLog.for_table(table_path(session, "clean")).snapshot()
    schema = T.StructType([T.StructField("k", T.IntegerType()), T.StructField("d", T.DoubleType())])
    assert scan_module.read_plan(schema, snap.all_files) == scan_module.ParquetRead(scan_module.READ_OPTIONS)
    assert "GreaterThan(d,2.0)" in pushed_filters(session.sql("SELECT k FROM clean WHERE d > 2"))
    session.execute("INSERT INTO clean VALUES (3, CAST('NaN' AS DOUBLE))")
    snap = DeltaLog.for_table(table_path(session, "clean")).snapshot()
    assert scan_module.read_plan(schema, snap.all_files).guarded == frozenset({"d"})
    assert sorted(r.k for r in session.sql("SELECT k FROM clean WHERE d > 2").collect()) == [2, 3]


def test_a_delta_rs_file_keeps_the_filters_of_its_other_columns(session, foreign):
    """Only the float columns are kept from the reader's filters (through ``nanvl``): a
    predicate on another column still reaches parquet-mr's row-group and page-index filters."""
    path, oracle = foreign
    for where in ["rid = 8 AND d > 5", "rid >= 30 AND f >= 3", "rid IN (4, 5, 6) AND NOT (d <= 2.5D)"]:
        df = session.sql(f"SELECT rid FROM delta.`{path}` WHERE {where}")
        pushed = pushed_filters(df)
        assert "rid" in pushed, f"{where}: nothing on rid pushed ({pushed})"
        assert "(d," not in pushed and "(f," not in pushed, f"{where}: a float predicate pushed ({pushed})"
        assert sorted(r.rid for r in df.collect()) == oracle(where), where


def test_guarded_columns_through_deletion_vectors_and_column_mapping(session, foreign, tmp_path):
    """The guard on the scans that need each row's file and position (deletion vectors, DML)
    and on the physical names of a column-mapped table."""
    import shutil

    path, oracle = foreign
    copy = str(tmp_path / "dv")
    shutil.copytree(path, copy)
    session.execute(f"ALTER TABLE delta.`{copy}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    session.execute(f"DELETE FROM delta.`{copy}` WHERE rid % 10 = 0")
    for where in NAN_PREDICATES:
        got = sorted(r.rid for r in session.sql(f"SELECT rid FROM delta.`{copy}` WHERE {where}").collect())
        assert got == [r for r in oracle(where) if r % 10], where
    session.execute(f"UPDATE delta.`{copy}` SET rid = -rid WHERE f > 5")
    assert sorted(-r.rid for r in session.sql(f"SELECT rid FROM delta.`{copy}` WHERE rid < 0").collect()) == \
        [r for r in oracle("f > 5") if r % 10]

    session.execute("CREATE TABLE mapped (rid INT, f FLOAT, d DOUBLE) TBLPROPERTIES "
                    "('delta.columnMapping.mode' = 'name', 'delta.enableDeletionVectors' = 'true')")
    session.execute(f"INSERT INTO mapped SELECT * FROM delta.`{path}`")
    session.execute("ALTER TABLE mapped RENAME COLUMN d TO dd")
    for where in NAN_PREDICATES:
        got = sorted(r.rid for r in session.sql(f"SELECT rid FROM mapped WHERE {where.replace('d ', 'dd ')}")
                     .collect())
        assert got == oracle(where), where
    session.execute("DELETE FROM mapped WHERE dd > 5")
    assert sorted(r.rid for r in session.sql("SELECT rid FROM mapped").collect()) == \
        sorted(set(r[0] for r in FOREIGN_ROWS) - set(oracle("d > 5")))
