"""Completion suggestions for partial statements: a table of cases (pure, no Spark)."""

import pytest

from isolde.repl.completion import Catalog, load_catalog, suggest

CATALOG = Catalog(
    tables={
        "orders": ["id", "customer", "amount", "order_date"],
        "customers": ["id", "name", "email"],
        "sales.events": ["ts", "kind"],
    },
    databases=["default", "sales"],
)


def texts(before, after=""):
    return [s.text for s in suggest(before, CATALOG, after)]


# (text before cursor, must contain, must not contain)
CASES = [
    ("", ["SELECT", "MERGE INTO", "OPTIMIZE", "REORG TABLE", "DESCRIBE HISTORY"], ["orders"]),
    ("opt", ["optimize"], ["SELECT"]),
    ("SEL", ["SELECT"], ["SET"]),
    ("SELECT * FROM ", ["orders", "customers", "sales.events"], ["SELECT"]),
    ("SELECT * FROM ord", ["orders"], ["customers"]),
    ("SELECT * FROM orders o JOIN ", ["customers"], []),
    ("SELECT * FROM orders WHERE ", ["id", "customer", "amount", "order_date"], ["email"]),
    ("SELECT * FROM orders WHERE am", ["amount"], ["id"]),
    ("SELECT * FROM orders WHERE amount > 3 ", ["AND", "OR", "ORDER BY"], ["amount"]),
    ("SELECT * FROM orders o JOIN customers c ON o.", ["id", "customer", "amount"], ["email"]),
    ("SELECT * FROM orders o JOIN customers c ON c.", ["email", "name"], ["amount"]),
    ("SELECT * FROM orders ", ["WHERE", "VERSION AS OF", "LIMIT"], []),
    ("SELECT * FROM sales.", ["events"], ["orders"]),
    ("select * from orders where ", ["amount"], []),
    ("select * fr", ["from"], []),
    ("INSERT INTO ", ["orders", "customers"], []),
    ("UPDATE ", ["orders"], []),
    ("UPDATE orders ", ["SET"], []),
    ("UPDATE orders SET ", ["amount", "customer"], ["email"]),
    ("UPDATE orders SET amount = 1 ", ["WHERE"], []),
    ("UPDATE orders SET amount = 1 WHERE ", ["id"], []),
    ("DELETE FROM ", ["orders"], []),
    ("DELETE FROM orders ", ["WHERE"], []),
    ("MERGE INTO ", ["orders"], []),
    ("MERGE INTO orders t ", ["USING"], []),
    ("MERGE INTO orders t USING ", ["customers"], []),
    ("MERGE INTO orders t USING customers s ", ["ON"], []),
    ("MERGE INTO orders t USING customers s ON ", ["id", "amount", "email"], []),
    ("MERGE INTO orders t USING customers s ON t.", ["amount"], ["email"]),
    ("MERGE INTO orders t USING customers s ON t.id = s.id ", ["WHEN MATCHED", "WHEN NOT MATCHED BY SOURCE"], []),
    ("MERGE INTO orders t USING customers s ON t.id = s.id WHEN ", ["MATCHED", "NOT MATCHED"], []),
    ("MERGE INTO orders t USING customers s ON t.id = s.id WHEN MATCHED ", ["THEN", "AND"], []),
    ("MERGE INTO orders t USING customers s ON t.id = s.id WHEN MATCHED THEN ", ["UPDATE SET *", "DELETE"], []),
    ("MERGE INTO orders t USING customers s ON t.id = s.id WHEN MATCHED THEN UPDATE SET ", ["amount"], []),
    ("OPTIMIZE ", ["orders"], []),
    ("OPTIMIZE orders ", ["ZORDER BY", "WHERE"], []),
    ("OPTIMIZE orders ZORDER BY (", ["customer", "order_date"], ["email"]),
    ("OPTIMIZE orders ZORDER BY (customer, ", ["order_date"], []),
    ("REORG TABLE ", ["orders"], []),
    ("REORG TABLE orders ", ["APPLY (PURGE)"], []),
    ("VACUUM ", ["orders"], []),
    ("DESCRIBE HISTORY ", ["orders"], []),
    ("DESCRIBE ", ["orders", "HISTORY", "DETAIL"], []),
    ("ALTER TABLE ", ["orders"], []),
    ("ALTER TABLE orders ", ["SET TBLPROPERTIES (", "ADD COLUMNS ("], []),
    ("ALTER TABLE orders SET TBLPROPERTIES (", ["'delta.isolationLevel'", "'delta.enableDeletionVectors'",
                                                "'delta.checkpointInterval'", "'delta.appendOnly'",
                                                "'delta.targetFileSize'", "'delta.logRetentionDuration'",
                                                "'delta.deletedFileRetentionDuration'"], ["orders"]),
    ("ALTER TABLE orders SET TBLPROPERTIES ('delta.appendOnly' = 'true', ", ["'delta.isolationLevel'"], []),
    ("ALTER TABLE orders SET TBLPROPERTIES ('delta.isolationLevel' = ", ["'Serializable'", "'WriteSerializable'"],
     ["'true'"]),
    ("ALTER TABLE orders SET TBLPROPERTIES ('delta.enableDeletionVectors' = ", ["'true'", "'false'"], []),
    ("ALTER TABLE orders SET TBLPROPERTIES ('delta.app", ["delta.appendOnly'"], ["delta.isolationLevel'"]),
    ("ALTER TABLE orders SET TBLPROPERTIES ('delta.isolationLevel' = 'Wr", ["WriteSerializable'"],
     ["Serializable'"]),
    ("CREATE TABLE t (a INT) USING DELTA TBLPROPERTIES (", ["'delta.enableDeletionVectors'"], []),
    ("CREATE TABLE ", [], ["orders"]),  # a new name: no table suggestions
    ("CREATE TABLE t (a INT, b STRING) PARTITIONED BY (", ["a", "b"], []),
    ("SHOW TBLPROPERTIES ", ["orders"], []),
    ("USE ", ["default", "sales"], []),
    ("SELECT 'abc", [], ["orders", "SELECT"]),  # inside a string
    ("SELECT 1 -- FROM ", [], ["orders"]),  # inside a comment
    ("SELECT 1; SELECT * FROM ", ["orders"], []),  # only the current statement counts
    ("SET ", ["spark.databricks.delta.properties.defaults.enableDeletionVectors"], []),
    ("\\", ["\\dt", "\\d", "\\history", "\\format", "\\q"], []),
    ("\\d ", ["orders", "customers"], []),
    ("\\history or", ["orders"], []),
    ("\\format ", ["table", "csv", "json", "vertical", "markdown"], []),
]


@pytest.mark.parametrize("before,present,absent", CASES)
def test_suggest(before, present, absent):
    got = texts(before)
    for item in present:
        assert item in got, (before, got)
    for item in absent:
        assert item not in got, (before, got)


def test_columns_from_text_after_cursor():
    """SELECT | FROM orders: the table comes after the cursor."""
    got = texts("SELECT ", " FROM orders WHERE id = 1")
    assert "amount" in got and "email" not in got


def test_start_position_replaces_the_partial_word():
    [s] = [s for s in suggest("SELECT * FROM ord", CATALOG) if s.text == "orders"]
    assert s.start == -3 and s.kind == "table"
    [p] = suggest("ALTER TABLE orders SET TBLPROPERTIES ('delta.appe", CATALOG)
    assert p.start == -len("delta.appe") and p.text == "delta.appendOnly'"


def test_current_database_prefix_is_dropped():
    cat = Catalog(tables={"default.orders": ["id"], "sales.events": ["ts"]}, databases=["default", "sales"])
    got = [s.text for s in suggest("SELECT * FROM ", cat)]
    assert "orders" in got and "sales.events" in got
    assert [s.text for s in suggest("SELECT * FROM orders WHERE ", cat)][0] == "id"


def test_empty_catalog_never_fails():
    for before, _, _ in CASES:
        suggest(before, Catalog())


def test_load_catalog_from_session():
    from tests.helpers.repl_fakes import FakeSession

    s = FakeSession()
    s.execute("CREATE TABLE t (a INT, b STRING)")
    cat = load_catalog(s)
    assert cat.tables == {"t": ["a", "b"]} and cat.current_database == "default"
