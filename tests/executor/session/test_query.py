"""Queries bound to snapshots, time travel, data skipping, the Session facade and error paths."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from pyspark.sql import DataFrame

from isolde import errors as E
from isolde.executor.session.results import CommitResult, QueryResult
from tests.helpers.oracle import read_delta_rows, sorted_rows

pytestmark = pytest.mark.spark


@pytest.fixture
def shop(session):
    session.execute("""
        CREATE TABLE customers (id INT, name STRING, country STRING);
        CREATE TABLE orders (id INT, customer_id INT, amount DOUBLE, day DATE) PARTITIONED BY (day);
        INSERT INTO customers VALUES (1, 'ann', 'fr'), (2, 'bob', 'de'), (3, 'cid', 'fr');
        INSERT INTO orders VALUES (10, 1, 5.0, DATE'2024-01-01'), (11, 1, 7.5, DATE'2024-01-02'),
                                  (12, 2, 1.0, DATE'2024-01-02'), (13, 3, 2.0, DATE'2024-01-03')
    """)
    return session


def test_joins_ctes_windows_aggregates(shop):
    rows = shop.execute("""
        WITH totals AS (
            SELECT c.name, c.country, SUM(o.amount) AS total
            FROM orders o JOIN customers AS c ON o.customer_id = c.id
            GROUP BY c.name, c.country)
        SELECT name, total, RANK() OVER (PARTITION BY country ORDER BY total DESC) AS rk
        FROM totals ORDER BY name""").rows
    assert rows == [("ann", 12.5, 1), ("bob", 1.0, 1), ("cid", 2.0, 2)]
    assert shop.execute("SELECT count(*) FROM orders WHERE customer_id IN (SELECT id FROM customers "
                        "WHERE country = 'fr')").rows == [(3,)]
    assert shop.execute("SELECT customers.name FROM customers WHERE customers.id = 2").rows == [("bob",)]
    for name in ("customers", "orders"):
        path = shop.catalog.resolve(__import__("isolde").grammar.ast.TableRef(parts=(name,))).path
        assert sorted_rows(shop.execute(f"SELECT * FROM {name}").rows) == read_delta_rows(path)


def test_sql_returns_dataframe_and_metrics(shop):
    df = shop.sql("SELECT * FROM orders WHERE day = DATE'2024-01-02'")
    assert isinstance(df, DataFrame) and df.count() == 2
    # one file per partition: a VALUES list is written on the driver (executor/rows/driver_write.py)
    assert shop.last_metrics["files_total"] == 3 and shop.last_metrics["files_read"] == 1
    r = shop.execute("SELECT * FROM orders WHERE day >= '2024-01-03'")
    assert r.metrics["tables"][0]["files_read"] == 1
    assert r.metrics["tables"][0]["files_total"] > 1
    r = shop.execute("SELECT * FROM customers WHERE id > 100")
    assert r.metrics["files_read"] == 0 and r.rows == []
    with pytest.raises(E.AnalysisError, match="execute"):
        shop.sql("INSERT INTO customers VALUES (9, 'z', 'x')")


def test_dataframe_keeps_its_snapshot_across_a_concurrent_write(shop):
    df = shop.sql("SELECT count(*) AS n, sum(amount) AS s FROM orders")
    shop.execute("INSERT INTO orders VALUES (14, 2, 100.0, DATE'2024-01-04')")
    shop.execute("INSERT OVERWRITE orders VALUES (15, 2, 1.0, DATE'2024-01-05')")
    assert [tuple(r) for r in df.collect()] == [(4, 15.5)]
    assert shop.execute("SELECT count(*) FROM orders").rows == [(1,)]


def test_time_travel_version_and_timestamp(shop, table_path):
    v1 = shop.execute("INSERT INTO customers VALUES (4, 'dan', 'it')").version
    time.sleep(0.05)
    shop.execute("INSERT OVERWRITE customers VALUES (5, 'eve', 'es')")
    assert len(shop.execute("SELECT * FROM customers VERSION AS OF 1").rows) == 3
    assert len(shop.execute(f"SELECT * FROM customers VERSION AS OF {v1}").rows) == 4
    history = shop.catalog.resolve(__import__("isolde").grammar.ast.TableRef(parts=("customers",))).log.history()
    ts_v1 = next(h["timestamp"] for h in history if h["version"] == v1)
    when = dt.datetime.fromtimestamp(ts_v1 / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    assert len(shop.execute(f"SELECT * FROM customers TIMESTAMP AS OF '{when}'").rows) == 4
    # one query, two versions of the same table
    rows = shop.execute("SELECT a.name FROM customers VERSION AS OF 1 a "
                        "LEFT ANTI JOIN customers b ON a.id = b.id ORDER BY a.name").rows
    assert rows == [("ann",), ("bob",), ("cid",)]
    with pytest.raises(E.VersionNotFoundError):
        shop.execute("SELECT * FROM customers VERSION AS OF 99")
    with pytest.raises(E.IsoldeError):
        shop.execute("SELECT * FROM customers TIMESTAMP AS OF '1999-01-01'")


def test_unknown_names_did_you_mean(shop):
    with pytest.raises(E.TableNotFoundError, match="Did you mean `customers`"):
        shop.execute("SELECT * FROM customer")
    with pytest.raises(E.ColumnNotFoundError, match="Did you mean `name`") as info:
        shop.execute("SELECT nmae FROM customers")
    assert "__isolde" not in str(info.value)
    with pytest.raises(E.IsoldeError) as info:
        shop.execute("SELECT id + FROM customers")
    assert "Py4J" not in str(info.value)
    with pytest.raises(E.DatabaseNotFoundError):
        shop.execute("SELECT * FROM nodb.customers")


def test_type_and_runtime_errors_are_translated(shop):
    with pytest.raises(E.AnalysisError):
        shop.execute("SELECT name - array(1) FROM customers")
    with pytest.raises(E.ExecutionError) as info:
        shop.execute("SELECT CAST(name AS INT) FROM customers").rows
    assert "JVM" not in str(info.value)


def test_execute_many_run_script_and_lines(session, tmp_path):
    script = tmp_path / "etl.sql"
    script.write_text("CREATE TABLE s (a INT);\nINSERT INTO s VALUES (1);\n\n-- broken next\n"
                      "INSERT INTO s VALUES (2);\nSELECT nope FROM s;\nINSERT INTO s VALUES (3);\n")
    with pytest.raises(E.ColumnNotFoundError) as info:
        session.run_script(str(script))
    assert info.value.statement_line == 6 and str(info.value).startswith("line 6: ")
    assert sorted_rows(session.execute("SELECT * FROM s").rows) == [(1,), (2,)]
    results = session.run_script("INSERT INTO s VALUES (4);\nSELECT count(*) FROM s")
    assert isinstance(results[0], CommitResult) and results[1].rows == [(3,)]
    r = session.execute("INSERT INTO s VALUES (5); SELECT max(a) FROM s")
    assert isinstance(r, QueryResult) and r.rows == [(5,)]
    with pytest.raises(E.ParseError) as info:
        session.run_script("SELECT 1;\n\nSELEC 2;")
    assert info.value.statement_line == 3


def test_run_script_with_syntax_errors_runs_nothing(session):
    """A typo in the third statement leaves the first two uncommitted (issue 55): the script is
    parsed whole first; the first syntax error is raised and names the others."""
    session.execute("CREATE TABLE s (a INT)")
    with pytest.raises(E.ParseError) as info:
        session.run_script("INSERT INTO s VALUES (1);\nINSERT INTO s VALUES (2);\nUPDATE s SET WHERE a = 1;\n"
                           "DELETE FRM s;\nINSERT INTO s VALUES (3);")
    assert info.value.statement_line == 3 and info.value.line == 3
    assert str(info.value).startswith("line 3: Syntax error")
    assert "(nothing was run; 1 more: line 4: Syntax error" in str(info.value)
    assert session.execute("SELECT count(*) FROM s").rows == [(0,)]
    assert session.execute("DESCRIBE HISTORY s").count() == 1  # only the CREATE


def test_explain_and_unsupported(shop):
    text = shop.explain("SELECT * FROM orders WHERE day = DATE'2024-01-01'")
    assert "orders @ version 1" in text and "1 of 3 files" in text
    text = shop.explain("INSERT INTO customers VALUES (9, 'z', 'x')")
    assert "blind append" in text
    text = shop.explain("INSERT INTO customers SELECT * FROM customers")
    assert "reading the target" in text
    r = shop.execute("EXPLAIN SELECT * FROM customers")
    assert "Spark plan" in r.rows[0][0]


def test_path_tables_and_deltalake_written_tables(session, tmp_path):
    import pandas as pd
    from deltalake import write_deltalake

    path = str(tmp_path / "rs table")
    write_deltalake(path, pd.DataFrame({"id": [1, 2, 3], "part": ["x", "y", "x"]}), partition_by=["part"])
    write_deltalake(path, pd.DataFrame({"id": [4], "part": ["y"]}), mode="append", partition_by=["part"])
    q = f"SELECT * FROM delta.`{path}`"
    assert sorted_rows(session.execute(q).rows) == [(1, "x"), (2, "y"), (3, "x"), (4, "y")]
    r = session.execute(f"INSERT INTO delta.`{path}` VALUES (5, 'z')")
    assert r.version == 2
    assert sorted_rows(session.execute(q).rows) == read_delta_rows(path)
    assert len(session.execute(f"SELECT * FROM delta.`{path}` VERSION AS OF 0").rows) == 3
    r = session.execute(f"SELECT * FROM delta.`{path}` WHERE part = 'y'")
    assert r.metrics["files_read"] == 2 and r.metrics["files_total"] == 4
    # delta-rs appends on top of isolde's commit
    write_deltalake(path, pd.DataFrame({"id": [6], "part": ["x"]}), mode="append", partition_by=["part"])
    assert sorted_rows(session.execute(q).rows) == read_delta_rows(path)
    with pytest.raises(E.TableNotFoundError):
        session.execute(f"SELECT * FROM delta.`{tmp_path / 'missing'}`")


def test_path_tables_named_by_file_uris(session, tmp_path):
    from urllib.parse import quote

    path = str(tmp_path / "uri table")
    session.execute(f"CREATE TABLE delta.`{path}` (id INT) USING DELTA")
    session.execute(f"INSERT INTO delta.`{path}` VALUES (1), (2)")
    encoded = quote(path)  # the space as %20, as Spark and Hadoop print locations
    for spelled in (f"file:{encoded}", f"file://{encoded}", f"file://localhost{encoded}"):
        assert sorted_rows(session.execute(f"SELECT id FROM delta.`{spelled}`").rows) == [(1,), (2,)]
    session.execute(f"UPDATE delta.`file://{encoded}` SET id = id + 10 WHERE id = 2")
    assert read_delta_rows(path) == [(1,), (12,)]
    with pytest.raises(E.AnalysisError, match="gs:// file system is not supported"):  # (s3:// is: s3a tables)
        session.execute("SELECT * FROM delta.`gs://bucket/t`")
    with pytest.raises(E.AnalysisError, match="only local paths"):
        session.execute(f"SELECT * FROM delta.`file://otherhost{encoded}`")


def test_deletion_vectors_are_applied(session, table_path):
    """A DV written through the log (as the DML jobs do) hides rows from isolde and delta-rs."""
    from isolde.executor.log.deletion_vectors import write_deletion_vector
    from isolde.grammar import ast

    session.execute("CREATE TABLE d (id INT, p STRING) PARTITIONED BY (p)")
    session.execute("INSERT INTO d SELECT CAST(id AS INT), IF(id % 2 = 0, 'a', 'b b') FROM range(20)")
    handle = session.catalog.resolve(ast.TableRef(parts=("d",)))
    txn = handle.log.start_transaction()
    target = next(a for a in txn.snapshot.all_files if a.partition_values["p"] == "b b")
    from isolde.executor.rows.scan import scan

    with_ids = scan(session.spark, txn.snapshot, handle.path, [target], with_row_ids=True).collect()
    assert {r["_isolde_file"] for r in with_ids} == {target.path}
    doomed = [r["_isolde_row"] for r in with_ids if r["id"] in (1, 3)]
    deleted_ids = {r["id"] for r in with_ids if r["_isolde_row"] in doomed}
    txn.read_whole_table()
    dv = write_deletion_vector(handle.path, doomed, inline=False)
    from dataclasses import replace

    txn.commit([target.remove(), replace(target, deletion_vector=dv)], operation="DELETE")
    ours = sorted_rows(session.execute("SELECT * FROM d").rows)
    assert len(ours) == 20 - len(deleted_ids) and not any(r[0] in deleted_ids for r in ours)
    assert ours == read_delta_rows(handle.path)
