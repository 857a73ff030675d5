"""Session lifecycle, cancel, catalog and schema helpers, data skipping unit checks."""

from __future__ import annotations

import threading
import time

import pytest

from isolde import split_statements

import isolde
from isolde import errors as E
from isolde.grammar import ast

pytestmark = pytest.mark.spark


def test_embedded_jvm_heap_is_sized_to_the_machine(spark):
    """The session the tests share was started by get_spark: its heap is driver_memory()'s
    (Spark's default is 1 GiB), or SPARK_DRIVER_MEMORY's when the environment sets one."""
    import os

    from isolde.executor.runtime.spark import driver_memory

    chosen = os.environ.get("SPARK_DRIVER_MEMORY")
    expected = chosen or driver_memory()
    if not chosen:
        assert spark.sparkContext.getConf().get("spark.driver.memory") == expected
    expected_mb = int(expected[:-1]) * {"g": 1024, "m": 1}[expected[-1].lower()]
    max_mb = spark._jvm.java.lang.Runtime.getRuntime().maxMemory() >> 20
    assert max_mb >= 0.85 * expected_mb


def test_background_start_and_ready(spark, tmp_path):
    s = isolde.connect(warehouse=str(tmp_path / "w"))
    s.start()  # returns at once; the process's SparkSession is already up here
    assert s.wait_ready(timeout=60) and s.ready
    assert s.execute("SELECT 1 + 1").rows == [(2,)]


def test_cancel_running_statement(session):
    errors = []

    def run():
        try:
            session.execute("SELECT count(*) FROM range(0, 20000000000, 1, 2) WHERE sha2(CAST(id AS STRING), 256) = 'x'").rows
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    tracker = session.spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not tracker.getActiveJobsIds():
        time.sleep(0.2)
    session.cancel()
    t.join(timeout=60)
    assert not t.is_alive()
    assert errors and isinstance(errors[0], E.ExecutionError), errors
    assert "cancel" in str(errors[0]).lower()
    assert session.execute("SELECT 1").rows == [(1,)]


def test_unsupported_statement_is_an_analysis_error(session):
    class Frobnicate(ast.Statement):
        pass

    with pytest.raises(E.AnalysisError, match="not supported yet"):
        session.execute(Frobnicate())


def test_catalog_resolution(session, tmp_path):
    cat = session.catalog
    with pytest.raises(E.DatabaseNotFoundError):
        cat.resolve(ast.TableRef(parts=("nodb", "t")), "default")
    with pytest.raises(E.AnalysisError):
        cat.resolve(ast.TableRef(parts=("a", "b", "c", "d")), "default")
    h = cat.resolve(ast.TableRef(parts=("Mixed",)), "default", must_exist=False)
    assert h.path.endswith("/default/mixed") and h.managed
    h = cat.resolve(ast.TableRef(path=str(tmp_path / "x")), "default", must_exist=False)
    assert h.by_path and h.name.startswith("delta.`")
    session.execute("CREATE TABLE customers (a INT)")
    with pytest.raises(E.TableNotFoundError, match="Did you mean `customers`"):
        cat.resolve(ast.TableRef(parts=("customer",)), "default")


def test_schema_helpers():
    from pyspark.sql import types as T

    from isolde.executor.catalog import schema as S

    assert S.parse_data_type("DECIMAL(10, 2)") == T.DecimalType(10, 2)
    assert S.parse_data_type("array<struct<a: int, `b c`: map<string, bigint>>>") == T.ArrayType(
        T.StructType([T.StructField("a", T.IntegerType()),
                      T.StructField("b c", T.MapType(T.StringType(), T.LongType()))]))
    assert S.parse_data_type("varchar(3)") == T.StringType()
    with pytest.raises(E.AnalysisError):
        S.parse_data_type("DECIMAL(50, 2)")
    with pytest.raises(E.AnalysisError):
        S.parse_data_type("strnig")
    struct = T.StructType([T.StructField("a", T.TimestampNTZType())])
    assert S.struct_from_delta(S.struct_to_delta(struct)) == struct
    assert S.protocol_for(struct, {}) == (3, 7, ["timestampNtz"], ["timestampNtz"])
    assert S.protocol_for(T.StructType([]), {"delta.constraints.x": "a > 0"}) == (1, 3, None, None)


def test_prune_files_stats_and_partitions(session):
    session.execute("CREATE TABLE s (id BIGINT, name STRING, p STRING) PARTITIONED BY (p)")
    session.execute("SET spark.sql.files.maxRecordsPerFile = 10")
    session.execute("INSERT INTO s SELECT id, concat('n', id), IF(id < 50, 'lo', 'hi') FROM range(0, 100, 1, 1)")
    session.execute("RESET spark.sql.files.maxRecordsPerFile")
    from isolde.executor.rows.scan import prune_files

    snap = session.catalog.resolve(ast.TableRef(parts=("s",))).log.snapshot()
    assert len(snap.all_files) == 10
    assert len(prune_files(snap, "id = 55")) == 1
    assert len(prune_files(snap, "id BETWEEN 15 AND 34")) == 3
    assert len(prune_files(snap, "p = 'lo'")) == 5
    assert len(prune_files(snap, "p = 'lo' AND id > 45")) == 1
    assert len(prune_files(snap, "id > 200 OR p = 'hi'")) == 5
    assert len(prune_files(snap, "id IN (1, 99)")) == 2
    assert len(prune_files(snap, "name IS NULL")) == 0
    assert len(prune_files(snap, "NOT (id >= 10)")) == 1
    assert len(prune_files(snap, "upper(name) = 'X'")) == 10  # not analysable: keep everything
    assert len(prune_files(snap, "s.id < 10", alias="s")) == 1
    r = session.execute("SELECT x.id FROM s x JOIN s y ON x.id = y.id WHERE x.id < 10 AND y.p = 'hi'")
    assert r.rows == [] and [t["files_read"] for t in r.metrics["tables"]] == [1, 5]
    r = session.execute("SELECT x.id FROM s x LEFT JOIN s y ON x.id = y.id + 1000 WHERE y.id IS NULL AND x.id < 3")
    assert sorted(r.rows) == [(0,), (1,), (2,)]
    assert [t["files_read"] for t in r.metrics["tables"]] == [1, 10]


def test_file_key_encoder_matches_hadoop(spark):
    from isolde.executor.rows.scan import _KeyEncoder, _python_key

    enc = _KeyEncoder(spark)
    assert enc.python, "the Python URI quoting disagrees with Hadoop's Path.toUri()"
    for p in ["/w/t/p=a%2Fb c/part-0.parquet", "/w/日本/x y/ä.parquet", "/w/t/k=%3A%25/f.parquet"]:
        assert _python_key(p) == enc._jvm_key(p)


def test_catalog_statements_do_not_wait_for_spark(tmp_path, monkeypatch):
    s = isolde.connect(warehouse=str(tmp_path / "w"))  # Spark not started by this session
    monkeypatch.setattr(type(s), "wait_ready", lambda self, timeout=None: (_ for _ in ()).throw(
        AssertionError("Spark was needed")))
    s.execute("CREATE DATABASE d")
    s.execute("USE d")
    r = s.execute("CREATE TABLE t (a INT, b STRING) PARTITIONED BY (b)")
    assert r.version == 0
    assert s.execute("SHOW TABLES").rows == [("d", "t", False)]
    s.execute("SET x.y = 1")
    s.execute("DROP TABLE t")
    assert s.tables() == []


def test_quickstart_script_runs(session):
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "quickstart.sql")
    results = session.run_script(path)
    assert len(results) == len(split_statements(open(path).read()))
    assert [r[1] for r in results[-1].rows] == ["customers", "orders"]
    # the tour's UPDATE, DELETE and MERGE leave exactly these orders
    orders = session.execute("SELECT customer, amount, day FROM shop.orders ORDER BY day").rows
    assert [(c, str(a), str(d)) for c, a, d in orders] == [
        ("ann", "13.25", "2024-01-02"), ("cid", "99.00", "2024-01-03"), ("eve", "8.00", "2024-01-04")]
