"""The REPL's Enter rule and statement helpers (pure, no Spark)."""

import pytest

from isolde.repl import sqlscan, statements


SUBMIT = [
    ("", True),
    ("   ", True),
    ("SELECT 1;", True),
    ("SELECT 1", False),
    ("SELECT 1;  ", True),
    ("SELECT 1; -- done", True),
    ("SELECT\n  1\n;", True),
    ("SELECT ';'", False),
    ("SELECT ';", False),  # unterminated string: the ';' is inside it
    ("SELECT 'it''s;'", False),  # doubled quote inside a string
    ("SELECT 'it''s;';", True),
    ('SELECT "a;b"', False),
    ("SELECT `we;ird` FROM t", False),
    ("SELECT 1 -- not the end;", False),
    ("SELECT 1 /* ; */", False),
    ("SELECT 1 /* ; */;", True),
    ("SELECT 1 /* unterminated ;", False),
    ("SELECT 1 /* nested /* ; */ still ; */", False),
    ("SELECT 'a\\';' ", False),  # backslash-escaped quote keeps the string open
    ("INSERT INTO t VALUES (1);\nSELECT * FROM t;", True),  # a paste of several statements
    ("INSERT INTO t VALUES (1);\nSELECT * FROM t", False),
    ("\\dt", True),
    ("\\d orders", True),
    ("  \\q", True),
    ("quit", True),
    ("exit", True),
    ("select", False),
]


@pytest.mark.parametrize("text,expected", SUBMIT)
def test_should_submit(text, expected):
    assert statements.should_submit(text) is expected


@pytest.mark.parametrize("text,expected", SUBMIT)
def test_fallback_scanner_agrees(text, expected):
    """The REPL's own scanner (used until/unless the grammar's splitter is importable)."""
    if statements.is_meta(text) or not text.strip():
        return
    assert sqlscan.ends_with_semicolon(text) is expected


def test_split_statements_lines():
    text = "-- header\nCREATE TABLE t (a INT);\n\nINSERT INTO t VALUES (';');\nSELECT\n 1;"
    parts = statements.split_statements(text)
    assert [p.text.strip().split()[0] for p in parts] == ["CREATE", "INSERT", "SELECT"]
    assert [p.line for p in parts][1:] == [4, 5]


def test_fallback_split():
    parts = sqlscan.split("SELECT 1;\n/* c; */ SELECT ';';\n\n  SELECT 3")
    assert [p.text for p in parts] == ["SELECT 1", "/* c; */ SELECT ';'", "SELECT 3"]
    assert [p.line for p in parts] == [1, 2, 4]


@pytest.mark.parametrize("sql,expected", [
    ("DELETE FROM t", "DELETE"),
    ("delete from t", "DELETE"),
    ("DELETE FROM t WHERE id = 1", None),
    ("UPDATE t SET a = 1", "UPDATE"),
    ("UPDATE t SET a = (SELECT max(x) FROM s WHERE s.k = 1)", "UPDATE"),  # WHERE only in a subquery
    ("UPDATE t SET a = 1 WHERE b", None),
    ("UPDATE t SET a = 'WHERE'", "UPDATE"),
    ("DELETE FROM t -- WHERE id = 1", "DELETE"),
    ("SELECT * FROM t", None),
    ("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE", None),
])
def test_destructive_without_where(sql, expected):
    assert statements.destructive_without_where(sql) == expected
