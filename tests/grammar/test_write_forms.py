"""Forms Spark accepts that isolde's grammar refused (issue 53, items 3 and 4): Delta's
non-reserved words as column names inside a slot that the keyword could also end, any word
after a dot in a qualified name, and a WITH clause before INSERT / UPDATE / DELETE / MERGE."""

from __future__ import annotations

import pytest
import sqlglot.expressions as exp

from isolde import parse
from isolde.errors import ParseError
from isolde.grammar import ast


@pytest.mark.parametrize("sql, where", [
    ("OPTIMIZE tbl WHERE zorder = 1 AND optimize = 2 AND full = 3", "zorder = 1 AND optimize = 2 AND full = 3"),
    ("OPTIMIZE tbl WHERE zorder = 1 ZORDER BY (a)", "zorder = 1"),
    ("OPTIMIZE tbl WHERE (zorder) > 1", "(zorder) > 1"),
    ("REORG TABLE tbl WHERE reorg = 1 AND apply = 2 AND purge = 3 APPLY (PURGE)",
     "reorg = 1 AND apply = 2 AND purge = 3"),
    ("REORG TABLE tbl WHERE apply IN (1, 2) APPLY (PURGE)", "apply IN (1, 2)"),
    ("UPDATE t SET v = 1 WHERE id = 2", "id = 2"),
    ("DELETE FROM t WHERE zorder = 1", "zorder = 1"),
])
def test_a_keyword_that_could_end_a_slot_is_a_name_when_the_grammar_cannot_continue_with_it(sql, where):
    (stmt,) = parse(sql)
    assert stmt.where.sql == where


def test_the_keyword_still_ends_the_slot_where_the_grammar_continues():
    (opt,) = parse("OPTIMIZE t WHERE d = 1 ZORDER BY (a, b)")
    assert opt.where.sql == "d = 1" and opt.zorder_by == ("a", "b")
    (merge,) = parse("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE")
    assert merge.on.sql == "t.id = s.id"


@pytest.mark.parametrize("sql, parts", [
    ("CREATE TABLE IF NOT EXISTS db.table (id INT)", ("db", "table")),
    ("CREATE TABLE db.select (id INT)", ("db", "select")),
    ("INSERT INTO db.from VALUES (1)", ("db", "from")),
    ("DELETE FROM db.where WHERE id = 1", ("db", "where")),
    ("OPTIMIZE db.order", ("db", "order")),
])
def test_any_word_after_a_dot_is_a_name(sql, parts):
    (stmt,) = parse(sql)
    assert getattr(stmt, "table").parts == parts


def test_a_reserved_word_alone_is_still_refused():
    with pytest.raises(ParseError):
        parse("CREATE TABLE select (id INT)")


def _tables(tree) -> set:
    return {t.name for t in tree.find_all(exp.Table)}


def test_with_before_insert_inlines_the_named_queries():
    (ins,) = parse("WITH w AS (SELECT 1 AS id), x (a) AS (SELECT id + 1 FROM w) INSERT INTO t SELECT * FROM x")
    assert isinstance(ins, ast.Insert) and ins.table.parts == ("t",)
    assert _tables(ins.source.tree) == set() and ins.source.tables == ()
    assert ins.text.startswith("WITH w AS")


def test_with_before_update_delete_merge():
    (upd,) = parse("WITH w AS (SELECT 1 AS id) UPDATE t SET v = (SELECT max(id) FROM w) WHERE id IN (SELECT id FROM w)")
    assert isinstance(upd, ast.Update) and not _tables(upd.where.tree) and not _tables(upd.assignments[0].value.tree)
    (dele,) = parse("WITH t AS (SELECT 2 AS id) DELETE FROM t WHERE id IN (SELECT id FROM t)")
    assert dele.table.parts == ("t",) and not _tables(dele.where.tree)  # the target is never the CTE
    (merge,) = parse("WITH w AS (SELECT 1 AS id) MERGE INTO t USING w ON t.id = w.id WHEN MATCHED THEN DELETE")
    assert isinstance(merge.source, ast.Query) and merge.source_alias == "w" and not _tables(merge.source.tree)
    (merge,) = parse("WITH w AS (SELECT 1 AS id) MERGE INTO t USING w AS s ON t.id = s.id WHEN MATCHED THEN DELETE")
    assert merge.source_alias == "s"


def test_a_query_starting_with_with_is_still_a_query():
    (sel,) = parse("WITH w AS (SELECT 1 AS update) SELECT * FROM w")
    assert isinstance(sel, ast.Select)


def test_a_slot_that_defines_the_same_name_shadows_the_outer_one():
    (dele,) = parse("WITH w AS (SELECT 1 AS id) DELETE FROM t WHERE id IN (WITH w AS (SELECT 2 AS id) SELECT id FROM w)")
    assert "w" in _tables(dele.where.tree)  # the inner WITH's w, left to Spark
    assert "2 AS id" in dele.where.sql and "1 AS id" not in dele.where.sql


def test_a_name_given_twice_is_refused():
    with pytest.raises(ParseError, match="same query twice"):
        parse("WITH w AS (SELECT 1), w AS (SELECT 2) DELETE FROM t")
