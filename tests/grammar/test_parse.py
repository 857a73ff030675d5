"""Behaviour the golden dumps do not show: spans, statement text, slot trees, names."""

from __future__ import annotations

import pytest
import sqlglot
import sqlglot.expressions as exp
from hypothesis import given, settings
from hypothesis import strategies as st

from isolde import parse
from isolde.grammar import ast
from isolde.grammar.dialect import DIALECT
from isolde.grammar.slots import fast_tree


def test_spans_and_text_are_relative_to_the_whole_input():
    sql = "SELECT 1;\n-- note\nDELETE FROM t\n  WHERE id = 1 ;  UPDATE t SET a = 2"
    select, delete, update = parse(sql)
    assert delete.text == "DELETE FROM t\n  WHERE id = 1"
    assert sql[delete.span.start : delete.span.end] == delete.text
    assert (delete.span.line, delete.span.column, delete.span.end_line) == (3, 1, 4)
    assert (delete.where.span.line, delete.where.span.column) == (4, 9)
    assert sql[delete.where.span.start : delete.where.span.end] == "id = 1" == delete.where.sql
    assert (delete.table.span.line, delete.table.span.column) == (3, 13)
    assert update.span.line == 4 and update.assignments[0].value.span.column == 36
    assert (select.span.start, select.span.end, select.span.end_column) == (0, 8, 9)
    assert select.query.span == select.span


def test_slot_text_is_the_users_text():
    (update,) = parse("UPDATE t SET a = CoAlEsCe( b ,1 ) /* keep */ + 1 WHERE  x  =  'y'")
    assert update.assignments[0].value.sql == "CoAlEsCe( b ,1 ) /* keep */ + 1"
    assert update.where.sql == "x  =  'y'"
    assert isinstance(update.where.tree, exp.EQ)


@pytest.mark.parametrize(
    "text", ["a", "s.a", "db.t.c", "cat.db.t.c", "`a b`.c", "_x1", "10", "1.5", "'x'", "''", "abc_def.`g`"]
)
def test_fast_path_trees_equal_sqlglots(text):
    fast = fast_tree(text)
    assert fast is not None
    assert fast == sqlglot.parse_one(text, read="databricks", into=exp.Condition)


@pytest.mark.parametrize(
    "text",
    ["a = 1", "t.id = s.id AND t.dt >= '2024-01-01'", "x<>y and y!=2 AnD z<=3 AND w>1.5 AND v<'q'", "`a b` = c.d",
     "n + 1", "a.b - c", "2 * x", "TRUE", "null", "x = false"],
)
def test_fast_path_conditions_equal_sqlglots(text):
    fast = fast_tree(text)
    assert fast is not None
    assert fast == sqlglot.parse_one(text, read="databricks", into=exp.Condition)


_NAMES = st.sampled_from(
    ["a", "t.id", "s.v", "`x y`", "db.t.c", "current_date", "null", "TRUE", "false", "1", "2.5", "'s'", "''", "a + 1", "b*c", "x -y"]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_NAMES, st.sampled_from(["=", "<>", "!=", "<", "<=", ">", ">="]), _NAMES), min_size=1, max_size=4),
       st.sampled_from([" AND ", " and ", "  AND\n", " OR "]), st.sampled_from(["", " "]))
def test_fast_path_is_sqlglot_or_nothing(comparisons, joiner, pad):
    text = joiner.join(f"{a}{pad}{op}{pad}{b}" for a, op, b in comparisons)
    fast = fast_tree(text)
    if fast is not None:
        assert fast == sqlglot.parse_one(text, read=DIALECT, into=exp.Condition)


@pytest.mark.parametrize("text", ["current_date", "1e3", "10L", "-1", "'a\\'b'", "a.b.c.d.e", "x AND y", "a / 2", "a + 1 + 2"])
def test_fast_path_declines_what_it_cannot_know(text):
    assert fast_tree(text) is None
    assert parse(f"UPDATE t SET a = {text}")[0].assignments[0].value.tree == sqlglot.parse_one(
        text, read=DIALECT, into=exp.Condition
    )


def test_query_tables_with_time_travel_and_paths():
    (select,) = parse(
        "WITH c AS (SELECT * FROM base) SELECT * FROM c JOIN delta.`/p/q` VERSION AS OF 7 x ON 1=1 "
        "JOIN db.t TIMESTAMP AS OF '2024-01-01' y ON 1=1"
    )
    tables = {t.name: t for t in select.query.tables}
    assert set(tables) == {"base", "delta.`/p/q`", "db.t"}
    assert tables["delta.`/p/q`"].path == "/p/q" and tables["delta.`/p/q`"].version == 7
    assert tables["db.t"].timestamp.sql == "'2024-01-01'"
    assert select.query.sql.startswith("WITH c AS")


def test_nested_assignment_targets_and_merge_shapes():
    (merge,) = parse(
        "MERGE INTO t USING (SELECT * FROM s) src ON t.k = src.k "
        "WHEN MATCHED THEN UPDATE SET t.a.b.c = src.v WHEN NOT MATCHED THEN INSERT (k, v) VALUES (src.k, src.v)"
    )
    assert isinstance(merge.source, ast.Query) and merge.source.tables[0].parts == ("s",)
    assert merge.clauses[0].action.assignments[0].column == ("t", "a", "b", "c")
    assert merge.clauses[1].action.values[1].sql == "src.v"


@pytest.mark.parametrize(
    "sql, kind",
    [
        ("OPTIMIZE optimize", ast.Optimize),
        ("VACUUM vacuum", ast.Vacuum),
        ("SELECT * FROM zorder", ast.Select),
        ("UPDATE history SET full = 1", ast.Update),
        ("DESCRIBE history", ast.DescribeTable),
        ("DESCRIBE HISTORY history", ast.DescribeHistory),
        ("DELETE FROM lite WHERE dry = 1", ast.Delete),
        ("CREATE TABLE t (ts TIMESTAMP, version INT, location STRING)", ast.CreateTable),
        ("ALTER TABLE reorg ADD COLUMN apply INT", ast.AddColumns),
        ("DELETE FROM `where` WHERE `select` = 1", ast.Delete),
    ],
)
def test_delta_keywords_stay_names(sql, kind):
    (stmt,) = parse(sql)
    assert type(stmt) is kind


def test_keywords_are_case_insensitive():
    assert parse("merge into T using S on T.k = S.k when matched then delete")[0].target.parts == ("T",)
    assert parse("vAcUuM t rEtAiN 2 HoUrS")[0].retain_hours == 2.0


def test_literals_and_quoting():
    (create,) = parse(
        "CREATE TABLE `my``t` (c STRING) COMMENT 'it\\'s' LOCATION r'C:\\data' "
        "TBLPROPERTIES (\"dq\" = 'a\\nb', 'x' = X)"
    )
    assert create.table.parts == ("my`t",)
    assert create.comment == "it's"
    assert create.location == "C:\\data"
    assert [(p.key, p.value) for p in create.properties] == [("dq", "a\nb"), ("x", "X")]


def test_set_value_is_the_rest_of_the_statement():
    (s,) = parse("SET spark.sql.x = a b  'c' -- comment\n")
    assert (s.key, s.value) == ("spark.sql.x", "a b  'c'")
    assert parse("SET k =")[0] == ast.SetConfig(key="k")


def test_explain_wraps_any_statement():
    (e,) = parse("EXPLAIN EXTENDED UPDATE t SET a = 1")
    assert e.mode == "EXTENDED" and isinstance(e.statement, ast.Update)
    assert e.statement.text == "UPDATE t SET a = 1"


def test_every_rule_has_a_callback():
    """A rule without one would leak a lark Tree into the AST."""
    from isolde.grammar.parser import _parser
    from isolde.grammar.transformer import HANDLERS

    names = {
        rule.alias or rule.origin.name
        for rule in _parser().rules
        if not rule.origin.name.startswith("_") and not (rule.options.expand1 and len(rule.expansion) == 1)
    }
    assert names <= set(HANDLERS)


@pytest.mark.parametrize("literal, spark_type", [
    ("-99999999999999999999.999999999999999999BD", None),
    ("1.50BD", "DECIMAL(3, 2)"),     # Spark keeps trailing zeros in the type
    ("0.001BD", "DECIMAL(3, 3)"),
    ("1E3BD", "DECIMAL(4, 0)"),
    ("12BD", "DECIMAL(2, 0)"),
])
def test_bd_literals_render_as_written(literal, spark_type):
    """A BD literal goes to Spark as written: Spark's CAST of the digits as a string to
    DECIMAL(38, 18) overflows when negated, and 1.50BD is DECIMAL(3, 2), not (2, 1)."""
    tree = sqlglot.parse_one(f"SELECT {literal}, TRY_CAST('1.5' AS DECIMAL(2, 1))", read=DIALECT)
    assert tree.sql(dialect=DIALECT) == f"SELECT {literal}, TRY_CAST('1.5' AS DECIMAL(2, 1))"
    assert tree.copy().sql(dialect=DIALECT) == tree.sql(dialect=DIALECT)
    node = tree.expressions[0]
    if spark_type:
        assert node.to.sql(dialect=DIALECT) == spark_type
