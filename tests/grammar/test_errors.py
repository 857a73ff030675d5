"""Syntax errors: position in the whole input, offending token, expected words, excerpt;
and Spark's rejection rules, each pointing at the offending clause."""

from __future__ import annotations

import pytest

from isolde import parse
from isolde.errors import ParseError


def error(sql: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse(sql)
    return info.value


@pytest.mark.parametrize(
    "sql, line, column, token, message",
    [
        # MERGE
        ("MERGE INTO t USING s ON t.id = s.id", 1, 36, None, "at least one WHEN clause"),
        (
            "MERGE INTO t USING s ON a = b\nWHEN MATCHED THEN DELETE\nWHEN MATCHED THEN UPDATE SET *",
            2, 1, "WHEN", "only the last WHEN clause of each kind may omit its condition",
        ),
        (
            "MERGE INTO t USING s ON a = b\nWHEN NOT MATCHED THEN INSERT *\nWHEN NOT MATCHED BY TARGET AND x THEN INSERT *",
            2, 1, "WHEN", "only the last WHEN clause",
        ),
        (
            "MERGE INTO t USING s ON a = b\nWHEN NOT MATCHED BY SOURCE THEN DELETE\n"
            "WHEN NOT MATCHED BY SOURCE AND t.x THEN DELETE",
            2, 1, "WHEN", "only the last WHEN clause",
        ),
        ("MERGE INTO t USING s ON a = b WHEN NOT MATCHED BY SOURCE THEN UPDATE SET *", 1, 63, "UPDATE", "cannot use UPDATE SET *"),
        ("MERGE INTO t USING s ON a = b WHEN NOT MATCHED BY SOURCE THEN INSERT *", 1, 63, "INSERT", "expected 'DELETE' or 'UPDATE'"),
        ("MERGE INTO t USING s ON a = b WHEN MATCHED THEN INSERT *", 1, 49, "INSERT", "expected 'DELETE' or 'UPDATE'"),
        # CREATE TABLE
        ("CREATE TABLE t (a INT)\nPARTITIONED BY (a)\nCLUSTER BY (a)", 3, 1, "CLUSTER BY", "PARTITIONED BY and CLUSTER BY"),
        ("CREATE TABLE t (a INT) CLUSTER BY (a) PARTITIONED BY (a)", 1, 39, "PARTITIONED BY", "cannot be used together"),
        ("CREATE TABLE t (a INT) LOCATION '/a' COMMENT 'c' LOCATION '/b'", 1, 50, "LOCATION", "LOCATION is given twice"),
        ("CREATE TABLE t USING DELTA USING DELTA", 1, 28, "USING", "USING is given twice"),
        ("CREATE TABLE t TBLPROPERTIES ('a'='b') TBLPROPERTIES ('c'='d')", 1, 40, "TBLPROPERTIES", "given twice"),
        ("CREATE TABLE t (a INT COMMENT 'x' COMMENT 'y')", 1, 35, "COMMENT", "COMMENT is given twice"),
        ("CREATE TABLE t (a INT NOT NULL NOT NULL)", 1, 32, "NOT NULL", "NOT NULL is given twice"),
        ("CREATE TABLE c SHALLOW CLONE s LOCATION '/a' LOCATION '/b'", 1, 46, "LOCATION", "given twice"),
        ("CREATE OR REPLACE TABLE IF NOT EXISTS t (a INT)", 1, 25, "IF", "OR REPLACE and IF NOT EXISTS"),
        ("CREATE OR REPLACE TABLE IF NOT EXISTS c CLONE s", 1, 25, "IF", "OR REPLACE and IF NOT EXISTS"),
        # VACUUM: any order, no repeats
        ("VACUUM t DRY RUN RETAIN 1 HOURS DRY RUN", 1, 33, "DRY RUN", "DRY RUN is given twice"),
        ("VACUUM t RETAIN 1 HOURS RETAIN 2 HOURS", 1, 25, "RETAIN", "RETAIN is given twice"),
        ("VACUUM t LITE FULL", 1, 15, "FULL", "given twice"),
    ],
)
def test_rejection_rules(sql, line, column, token, message):
    e = error(sql)
    assert (e.line, e.column, e.token) == (line, column, token)
    assert message in e.description
    assert e.excerpt.splitlines()[0] == f"{line} | {sql.splitlines()[line - 1]}"


@pytest.mark.parametrize(
    "sql, line, column, token, expected",
    [
        ("UPDATE t WHERE a = 1", 1, 10, "WHERE", ["a name", "'AS'", "'SET'"]),
        ("UPDATE t SET", 1, 13, None, ["a column name"]),
        ("DROP TABLE", 1, 11, None, ["a table name", "'IF'"]),
        ("DELETE FROM WHERE x = 1", 1, 13, "WHERE", ["a table name"]),
        ("OPTIMIZE t ZORDER (a)", 1, 19, "(", ["'BY'"]),
        ("VACUUM t RETAIN 10", 1, 19, None, ["'HOURS'"]),
        ("ALTER TABLE t SET TBLPROPERTIES ('a' =)", 1, 39, ")", ["a name", "'-'", "a number", "a string"]),
        ("CREATE TABLE t (a DECIMAL(10,", 1, 30, None, ["a number"]),
        ("DELETE FROM t WHERE", 1, 20, None, ["an expression"]),
        ("SELECT 1;\nFOO BAR", 2, 1, "FOO", None),
        ("INSERT INTO t", 1, 14, None, None),
        ("REORG TABLE t APPLY (ZAP)", 1, 22, "ZAP", ["'PURGE'", "'UPGRADE'"]),
        ("DESCRIBE HISTORY t LIMIT", 1, 25, None, ["a number"]),
        ("DELETE FROM t #", 1, 15, "#", ["a name", "'.'", "'AS'", "'WHERE'"]),
    ],
)
def test_syntax_errors(sql, line, column, token, expected):
    e = error(sql)
    assert (e.line, e.column, e.token) == (line, column, token)
    if expected is not None:
        assert list(e.expected) == expected
    assert e.excerpt.splitlines()[1].index("^") == len(f"{line} | ") + column - 1


def test_statement_start_expects_a_statement():
    e = error("FOO")
    assert "'SELECT'" not in e.expected  # queries are one slot ...
    assert "a query" in e.expected  # ... named as such
    assert {"'MERGE'", "'OPTIMIZE'", "'VACUUM'"} <= set(e.expected)


@pytest.mark.parametrize(
    "sql, line, column, token",
    [
        ("DELETE FROM t WHERE a = = 1", 1, 25, "="),
        ("SELECT 1;\n\nUPDATE t SET a = 1\nWHERE b IN (1,", 4, 12, "("),
        ("MERGE INTO t USING s ON t.id = s.id\nWHEN MATCHED AND (a THEN DELETE", 2, 18, "("),
        ("UPDATE t SET a = 1 WHERE b = 'x", 1, 30, "'"),
        ("SELECT 'abc", 1, 8, "'"),
        ("INSERT INTO t VALUES (1,", 1, 24, ","),
    ],
)
def test_sqlglot_errors_are_positioned_in_the_whole_input(sql, line, column, token):
    e = error(sql)
    assert (e.line, e.column) == (line, column)
    if token is not None:
        assert e.token == token
    assert e.excerpt


def test_errors_never_show_sqlglot_internals():
    e = error("SELECT * FROM")
    assert "<Token" not in str(e)


def test_errors_name_the_line_where_the_statement_starts():
    e = error("SELECT 1;\n\nDELETE FROM t\nWHERE a = = 1")
    assert (e.statement_line, e.line) == (3, 4)


@pytest.mark.parametrize("sql, limit, headline, error_class, sqlstate", [
    ("SELECT " + "1 + " * 40 + "1", 100, "Statement too long", "STATEMENT_TOO_LONG", "54000"),
    ("DELETE FROM t WHERE " + "NOT " * 50_000 + "a", None, "Statement too complex", "STATEMENT_TOO_COMPLEX", "54001"),
    ("SELEC 1", None, "Syntax error", "PARSE_SYNTAX_ERROR", "42601"),
])
def test_a_statement_over_a_limit_is_not_called_a_syntax_error(sql, limit, headline, error_class, sqlstate):
    with pytest.raises(ParseError) as info:
        parse(sql, max_statement_bytes=limit)
    e = info.value
    assert (e.headline, e.error_class, e.sqlstate) == (headline, error_class, sqlstate)
    assert str(e).startswith(f"{headline} at line 1, column ")
