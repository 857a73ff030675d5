"""Golden strings for every output format, commit lines and error rendering."""

import datetime
import decimal

import pytest

from isolde import errors
from isolde.executor.session.results import CommitResult, QueryResult
from isolde.repl.formatting import format_commit, format_error, format_result, format_rows, metrics_summary

COLS = ["id", "name", "amount", "ts"]
ROWS = [
    (1, "alice", decimal.Decimal("10.50"), datetime.datetime(2024, 1, 2, 3, 4, 5)),
    (22, None, decimal.Decimal("3.1"), None),
    (3, "a|b", None, None),
]

GOLDEN = {
    "table": """\
+----+-------+--------+---------------------+
| id | name  | amount | ts                  |
+----+-------+--------+---------------------+
|  1 | alice |  10.50 | 2024-01-02 03:04:05 |
| 22 | NULL  |    3.1 | NULL                |
|  3 | a|b   |   NULL | NULL                |
+----+-------+--------+---------------------+""",
    "csv": """\
id,name,amount,ts
1,alice,10.50,2024-01-02 03:04:05
22,,3.1,
3,a|b,,""",
    "json": """\
[{"id": 1, "name": "alice", "amount": 10.50, "ts": "2024-01-02 03:04:05"},
 {"id": 22, "name": null, "amount": 3.1, "ts": null},
 {"id": 3, "name": "a|b", "amount": null, "ts": null}]""",
    "vertical": """\
-[ RECORD 1 ]--
id     | 1
name   | alice
amount | 10.50
ts     | 2024-01-02 03:04:05
-[ RECORD 2 ]--
id     | 22
name   | NULL
amount | 3.1
ts     | NULL
-[ RECORD 3 ]--
id     | 3
name   | a|b
amount | NULL
ts     | NULL""",
    "markdown": """\
| id  | name  | amount | ts                  |
|----:|:------|-------:|:--------------------|
|   1 | alice |  10.50 | 2024-01-02 03:04:05 |
|  22 | NULL  |    3.1 | NULL                |
|   3 | a\\|b  |   NULL | NULL                |""",
}


@pytest.mark.parametrize("fmt", sorted(GOLDEN))
def test_golden(fmt):
    assert format_rows(COLS, ROWS, fmt) == GOLDEN[fmt]


def test_empty_results():
    assert format_rows(["a"], [], "table") == "+---+\n| a |\n+---+"
    assert format_rows(["a"], [], "csv") == "a"
    assert format_rows(["a"], [], "json") == "[]"
    assert format_rows(["a"], [], "vertical") == "(no rows)"


def test_nested_values_and_wide_characters():
    out = format_rows(["k", "v"], [("日本", [1, {"x": None}]), ("b", True)], "table")
    assert out.splitlines()[3] == "| 日本 | [1, {\"x\": null}] |"
    assert out.splitlines()[4] == "| b    | true             |"


def test_csv_quotes():
    assert format_rows(["a"], [("x,y",), ('say "hi"',)], "csv") == 'a\n"x,y"\n"say ""hi"""'


def test_unknown_format():
    with pytest.raises(ValueError):
        format_rows(["a"], [], "xml")


@pytest.mark.parametrize("op,metrics,expected", [
    ("MERGE", {"numTargetRowsUpdated": 3, "numTargetRowsInserted": 1, "numTargetRowsDeleted": 0},
     "3 updated, 1 inserted"),
    ("MERGE", {"numTargetRowsUpdated": "0", "numTargetRowsInserted": "0", "numTargetRowsDeleted": "0"},
     "0 rows affected"),
    ("DELETE", {"numDeletedRows": 4}, "4 deleted"),
    ("UPDATE", {"numUpdatedRows": 1}, "1 updated"),
    ("WRITE", {"numOutputRows": "3"}, "3 rows written"),
    ("WRITE", {"numOutputRows": 1}, "1 row written"),
    ("CREATE TABLE AS SELECT", {"numOutputRows": 10}, "10 rows written"),
    ("OPTIMIZE", {"numRemovedFiles": 8, "numAddedFiles": 1}, "8 files removed, 1 file added"),
    ("CREATE TABLE", {}, ""),
    ("SET TBLPROPERTIES", {}, ""),
])
def test_metrics_summary(op, metrics, expected):
    assert metrics_summary(op, metrics) == expected


def test_commit_line():
    r = CommitResult(12, "MERGE", {"numTargetRowsUpdated": 3, "numTargetRowsInserted": 1})
    assert format_commit(r, 0.8412) == "version 12 · MERGE · 3 updated, 1 inserted · 0.84 s"
    assert format_commit(CommitResult(0, "CREATE TABLE", {})) == "version 0 · CREATE TABLE"


def test_commit_line_of_a_transaction_over_several_tables():
    from isolde.executor.session.transactions import MultiTableCommitResult

    r = MultiTableCommitResult(None, "MULTI-STATEMENT TRANSACTION", {"numUpdatedRows": 2}, table="acc, audit",
                               versions={"acc": 7, "audit": 3})
    assert format_commit(r).startswith("acc version 7, audit version 3 · MULTI-STATEMENT TRANSACTION")


def test_format_result_query_and_message():
    body, status = format_result(QueryResult(["a"], [(1,), (2,)]), "table", 0.25)
    assert body == "+---+\n| a |\n+---+\n| 1 |\n| 2 |\n+---+"
    assert status == "(2 rows) · 0.25 s"
    body, status = format_result(QueryResult(["a"], [(1,)]), "csv", None)
    assert (body, status) == ("a\n1", "")
    assert format_result(QueryResult(message="Database created"), "table", None) == ("", "Database created")
    assert format_result(CommitResult(3, "DELETE", {"numDeletedRows": 2}), "csv", None) == \
        ("", "version 3 · DELETE · 2 deleted")


def test_parse_error_shows_the_caret():
    sql = "SELECT * FORM t"
    exc = errors.ParseError("unexpected 'FORM'", line=1, column=10, token="FORM", expected=("FROM", "WHERE"),
                            excerpt=errors.caret_excerpt(sql, 1, 10, 4))
    assert format_error(exc) == (
        "Syntax error at line 1, column 10: unexpected 'FORM'\n"
        "1 | SELECT * FORM t\n"
        "             ^^^^\n"
        "expected one of: FROM, WHERE")
    coloured = format_error(exc, color=True)
    assert "\x1b[" in coloured and "SELECT * FORM t" in coloured


def test_script_location_prefix():
    exc = errors.TableNotFoundError("ordrs", ["orders"])
    assert format_error(exc, where="etl.sql, line 7: ") == (
        "etl.sql, line 7: ERROR [TABLE_OR_VIEW_NOT_FOUND]: Table or view `ordrs` cannot be found. "
        "Did you mean `orders`?")


def test_conflict_names_the_winner_and_what_to_do():
    exc = errors.ConcurrentDeleteReadException(table="t", winning_version=12, winning_operation="MERGE")
    text = format_error(exc)
    lines = text.splitlines()
    assert lines[0] == "ConcurrentDeleteReadException [DELTA_CONCURRENT_DELETE_READ]"
    assert "Winning commit: MERGE at version 12." in lines
    assert lines[-1].startswith("What to do: re-run the statement")


def test_a_bug_is_reported_not_raised():
    text = format_error(ZeroDivisionError("division by zero"))
    assert text.startswith("INTERNAL ERROR (a bug in isolde): ZeroDivisionError: division by zero")
    try:
        1 / 0
    except ZeroDivisionError as exc:
        assert "Traceback" in format_error(exc, debug=True)


def test_explain_text_is_shown_as_text():
    plan = "== Conflict scope ==\nread predicate: id = 1\n== Physical Plan ==\n*(1) Scan"
    assert format_result(QueryResult(["plan"], [(plan,)]), "table", None) == (plan, "")
    body, _ = format_result(QueryResult(["plan"], [(plan,)]), "csv", None)
    assert body.startswith('plan\n"== Conflict scope ==')


def test_a_limit_error_keeps_its_headline_in_a_script():
    """A statement over the size limit, at line 3 of a script: script coordinates, and said as
    too long (not as a syntax error) by the REPL's formatter."""
    from isolde import parse
    from isolde.repl.runner import script_parse_error

    script = "SELECT 1;\n\nSELECT " + "1 + " * 40 + "1;"
    statement = script.split(";")[1].strip()
    with pytest.raises(errors.ParseError) as info:
        parse(statement, max_statement_bytes=100)
    moved = script_parse_error(info.value, statement, 3, 1, script)
    assert (moved.error_class, moved.sqlstate, moved.line) == ("STATEMENT_TOO_LONG", "54000", 3)
    assert format_error(moved, where="etl.sql: ").startswith("etl.sql: Statement too long at line 3, column 1: ")
