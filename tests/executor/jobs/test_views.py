"""Views: temporary and persistent, seen through by every statement that reads them, bound to
the current snapshot when read, and a read of their tables for conflict scopes."""

from __future__ import annotations

import pytest

from isolde import errors as E

pytestmark = pytest.mark.spark


@pytest.fixture
def orders(session):
    session.execute("CREATE TABLE orders (id INT, cust STRING, amount DOUBLE)")
    session.execute("INSERT INTO orders VALUES (1, 'a', 10.0), (2, 'b', 20.0), (3, 'a', 5.0)")
    return session


def _rows(result):
    return sorted(tuple(r) for r in result.collect())


def test_persistent_view_reads_current_snapshot_and_survives_a_new_session(orders, tmp_path, spark):
    import isolde

    orders.execute("CREATE VIEW big AS SELECT id, amount FROM orders WHERE amount >= 10")
    assert _rows(orders.execute("SELECT * FROM big")) == [(1, 10.0), (2, 20.0)]
    orders.execute("INSERT INTO orders VALUES (4, 'c', 99.0)")
    assert _rows(orders.execute("SELECT * FROM big")) == [(1, 10.0), (2, 20.0), (4, 99.0)]  # not pinned
    other = isolde.connect(warehouse=str(tmp_path / "warehouse"), spark=spark)
    try:
        assert _rows(other.execute("SELECT id FROM big WHERE amount > 15")) == [(2,), (4,)]
        assert [tuple(r) for r in other.execute("SHOW VIEWS").collect()] == [("default", "big", False)]
    finally:
        other.close()


def test_temp_view_lives_in_the_session_only(orders, tmp_path, spark):
    import isolde

    orders.execute("CREATE TEMP VIEW a_orders AS SELECT * FROM orders WHERE cust = 'a'")
    assert _rows(orders.execute("SELECT id FROM a_orders")) == [(1,), (3,)]
    assert ("", "a_orders", True) in [tuple(r) for r in orders.execute("SHOW VIEWS").collect()]
    other = isolde.connect(warehouse=str(tmp_path / "warehouse"), spark=spark)
    try:
        with pytest.raises(E.TableNotFoundError):
            other.execute("SELECT * FROM a_orders")
    finally:
        other.close()


def test_view_column_list_comments_and_arity(orders):
    orders.execute("CREATE OR REPLACE VIEW v (k COMMENT 'key', total) AS SELECT cust, sum(amount) FROM orders GROUP BY cust")
    result = orders.execute("SELECT * FROM v ORDER BY k")
    assert result.columns == ["k", "total"]
    assert [tuple(r) for r in result.collect()] == [("a", 15.0), ("b", 20.0)]
    with pytest.raises(E.AnalysisError) as info:
        orders.execute("CREATE OR REPLACE VIEW v (only_one) AS SELECT cust, amount FROM orders")
    assert info.value.error_class == "CREATE_VIEW_COLUMN_ARITY_MISMATCH"


def test_view_over_view_and_replace_and_drop(orders):
    orders.execute("CREATE VIEW v1 AS SELECT * FROM orders WHERE amount > 6")
    orders.execute("CREATE VIEW v2 AS SELECT id FROM v1 WHERE cust = 'a'")
    assert _rows(orders.execute("SELECT * FROM v2")) == [(1,)]
    with pytest.raises(E.AnalysisError) as info:
        orders.execute("CREATE VIEW v1 AS SELECT 1 AS x")
    assert info.value.error_class == "TABLE_OR_VIEW_ALREADY_EXISTS"
    assert "nothing done" in orders.execute("CREATE VIEW IF NOT EXISTS v1 AS SELECT 1 AS x").message
    orders.execute("CREATE OR REPLACE VIEW v1 AS SELECT * FROM orders")
    assert _rows(orders.execute("SELECT * FROM v2")) == [(1,), (3,)]  # v2 sees v1's new query
    orders.execute("DROP VIEW v2")
    orders.execute("DROP VIEW IF EXISTS v2")
    with pytest.raises(E.AnalysisError) as info:
        orders.execute("DROP VIEW v2")
    assert info.value.error_class == "TABLE_OR_VIEW_NOT_FOUND"


def test_names_shared_with_tables_and_wrong_commands(orders):
    orders.execute("CREATE VIEW v AS SELECT * FROM orders")
    with pytest.raises(E.AnalysisError) as info:
        orders.execute("CREATE TABLE v (a INT)")
    assert info.value.error_class == "TABLE_OR_VIEW_ALREADY_EXISTS"
    with pytest.raises(E.AnalysisError) as info:
        orders.execute("CREATE VIEW orders AS SELECT 1 AS a")
    assert info.value.error_class == "TABLE_OR_VIEW_ALREADY_EXISTS"
    with pytest.raises(E.AnalysisError) as info:
        orders.execute("DROP TABLE v")
    assert info.value.error_class == "WRONG_COMMAND_FOR_OBJECT_TYPE" and "DROP VIEW" in str(info.value)
    with pytest.raises(E.AnalysisError) as info:
        orders.execute("DROP VIEW orders")
    assert info.value.error_class == "WRONG_COMMAND_FOR_OBJECT_TYPE"
    for write in ("INSERT INTO v VALUES (9, 'z', 1.0)", "DELETE FROM v WHERE id = 1", "UPDATE v SET amount = 0"):
        with pytest.raises(E.AnalysisError) as info:
            orders.execute(write)
        assert info.value.error_class.startswith("EXPECT_TABLE_NOT_VIEW"), write
    with pytest.raises(E.AnalysisError) as info:
        orders.execute("SELECT * FROM v VERSION AS OF 0")
    assert info.value.error_class == "DELTA_UNSUPPORTED_TIME_TRAVEL_VIEWS"
    assert _rows(orders.execute("SELECT count(*) FROM orders")) == [(3,)]  # nothing was written


def test_persistent_view_keeps_its_database_and_refuses_temp_views(orders):
    orders.execute("CREATE DATABASE other")
    orders.execute("CREATE VIEW default.cheap AS SELECT id FROM orders WHERE amount < 10")
    orders.execute("USE other")
    assert _rows(orders.execute("SELECT * FROM default.cheap")) == [(3,)]  # `orders` is default.orders
    orders.execute("CREATE TEMP VIEW t1 AS SELECT 1 AS a")
    with pytest.raises(E.AnalysisError) as info:
        orders.execute("CREATE VIEW p AS SELECT * FROM t1")
    assert info.value.error_class == "INVALID_TEMP_OBJ_REFERENCE"


def test_views_in_dml_sources_and_subqueries(orders):
    orders.execute("CREATE TABLE totals (cust STRING, amount DOUBLE)")
    orders.execute("CREATE VIEW per_cust AS SELECT cust, sum(amount) AS amount FROM orders GROUP BY cust")
    orders.execute("MERGE INTO totals t USING per_cust s ON t.cust = s.cust "
                   "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    assert _rows(orders.execute("SELECT * FROM totals")) == [("a", 15.0), ("b", 20.0)]
    orders.execute("INSERT INTO totals SELECT * FROM per_cust WHERE cust = 'a'")
    orders.execute("DELETE FROM totals WHERE cust IN (SELECT cust FROM per_cust WHERE amount > 16)")
    assert _rows(orders.execute("SELECT * FROM totals")) == [("a", 15.0), ("a", 15.0)]
    orders.execute("CREATE TABLE copy AS SELECT * FROM per_cust")
    assert _rows(orders.execute("SELECT * FROM copy")) == [("a", 15.0), ("b", 20.0)]


def test_a_view_over_the_target_is_a_read_of_the_target(orders):
    """MERGE INTO orders USING (view over orders): a concurrent DELETE of rows the view read
    must fail the MERGE (the view was a read of the target), in both commit orders."""
    orders.execute("CREATE VIEW doubled AS SELECT id, cust, amount * 2 AS amount FROM orders")
    merge = orders.prepare("MERGE INTO orders t USING doubled s ON t.id = s.id AND s.cust = 'b' "
                           "WHEN MATCHED THEN UPDATE SET amount = s.amount")
    orders.execute("DELETE FROM orders WHERE id = 3")  # not a row the MERGE updates, but one it read
    with pytest.raises(E.ConcurrentModificationException):
        merge.commit()
    assert _rows(orders.execute("SELECT id, amount FROM orders")) == [(1, 10.0), (2, 20.0)]


def test_merge_source_with_column_aliases(orders):
    orders.execute("MERGE INTO orders t USING (VALUES (2, 'b', 25.0), (7, 'z', 1.0)) AS s(id, cust, amount) "
                   "ON t.id = s.id WHEN MATCHED THEN UPDATE SET amount = s.amount WHEN NOT MATCHED THEN INSERT *")
    assert _rows(orders.execute("SELECT id, amount FROM orders")) == [(1, 10.0), (2, 25.0), (3, 5.0), (7, 1.0)]
    orders.execute("CREATE TABLE src (a INT, b DOUBLE)")
    orders.execute("INSERT INTO src VALUES (1, 11.0)")
    orders.execute("MERGE INTO orders t USING src AS s(id, amount) ON t.id = s.id "
                   "WHEN MATCHED THEN UPDATE SET amount = s.amount")
    assert _rows(orders.execute("SELECT id, amount FROM orders WHERE id = 1")) == [(1, 11.0)]
    got = orders.execute("SELECT s.a + s.b FROM (SELECT id, amount FROM orders WHERE id = 1) AS s(a, b)")
    assert _rows(got) == [(12.0,)]


def test_insert_into_table_src(orders):
    orders.execute("CREATE TABLE orders2 (id INT, cust STRING, amount DOUBLE)")
    r = orders.execute("INSERT INTO orders2 TABLE orders")
    assert r.version == 1
    orders.execute("INSERT OVERWRITE orders2 TABLE orders")
    assert _rows(orders.execute("SELECT * FROM orders2")) == _rows(orders.execute("SELECT * FROM orders"))


def test_explain_sees_through_views(orders):
    orders.execute("CREATE VIEW v AS SELECT * FROM orders WHERE amount > 6")
    for text in (orders.explain("SELECT id FROM v"), "\n".join(r[0] for r in orders.execute("EXPLAIN SELECT id FROM v").collect())):
        assert "orders @ version 1:" in text and "pruned by: amount > 6" in text  # the view's filter skips files


def test_join_hints_name_aliases_not_tables(orders):
    got = orders.execute("SELECT /*+ BROADCAST(x) */ o.id FROM orders o JOIN (SELECT 'a' AS c) x ON o.cust = x.c")
    assert _rows(got) == [(1,), (3,)]
    got = orders.execute("SELECT /*+ BROADCAST(orders) */ count(*) FROM orders JOIN orders o2 ON orders.id = o2.id")
    assert _rows(got) == [(3,)]


def test_join_hints_in_dml_subqueries(orders):
    orders.execute("DELETE FROM orders WHERE id IN (SELECT /*+ BROADCAST(x) */ o.id FROM orders o "
                   "JOIN (SELECT 'a' AS c) x ON o.cust = x.c)")
    assert _rows(orders.execute("SELECT id FROM orders")) == [(2,)]


def test_describe_a_view(orders):
    orders.execute("CREATE VIEW v (k COMMENT 'the key', total) COMMENT 'per customer' AS "
                   "SELECT cust, sum(amount) FROM orders GROUP BY cust")
    assert [tuple(r) for r in orders.execute("DESCRIBE v").collect()] == [("k", "string", "the key"),
                                                                       ("total", "double", None)]
    detail = {r[0]: r[1] for r in orders.execute("DESCRIBE TABLE EXTENDED v").collect()}
    assert detail["Type"] == "VIEW" and detail["Comment"] == "per customer" and detail["Database"] == "default"
    assert detail["View Text"] == "SELECT cust, sum(amount) FROM orders GROUP BY cust"
    assert detail["View Query Output Columns"] == "[k, total]"


def test_column_aliases_in_dml_subqueries(orders):
    orders.execute("DELETE FROM orders WHERE id IN (SELECT k FROM (SELECT id, cust FROM orders) AS s(k, c) "
                   "WHERE s.c = 'b')")
    assert _rows(orders.execute("SELECT id FROM orders")) == [(1,), (3,)]
    orders.execute("UPDATE orders SET amount = (SELECT max(x) FROM (VALUES (1.0), (42.0)) AS v(x)) WHERE id = 3")
    assert _rows(orders.execute("SELECT id, amount FROM orders")) == [(1, 10.0), (3, 42.0)]
