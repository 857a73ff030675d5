"""BEGIN / COMMIT / ROLLBACK and BEGIN ATOMIC ... END: parsing, splitting and is_complete."""

from __future__ import annotations

import pytest

from isolde.errors import ParseError
from isolde.grammar import ast
from isolde.grammar.parser import parse
from isolde.grammar.splitter import is_complete, split_statements
from isolde.planner.plan import classify


@pytest.mark.parametrize("text, node", [
    ("BEGIN", ast.BeginTransaction), ("begin transaction", ast.BeginTransaction), ("BEGIN WORK", ast.BeginTransaction),
    ("COMMIT", ast.CommitTransaction), ("commit transaction", ast.CommitTransaction),
    ("ROLLBACK", ast.RollbackTransaction), ("ROLLBACK WORK", ast.RollbackTransaction),
])
def test_transaction_control(text, node):
    (stmt,) = parse(text)
    assert type(stmt) is node and classify(stmt) == "transaction"


def test_atomic_block_holds_ordinary_statements():
    (block,) = parse("BEGIN ATOMIC\n  UPDATE t SET x = 1 WHERE y = 'END';\n  INSERT INTO t VALUES (1);\nEND")
    assert isinstance(block, ast.AtomicBlock) and classify(block) == "transaction"
    update, insert = block.statements
    assert isinstance(update, ast.Update) and update.where.sql == "y = 'END'"
    assert isinstance(insert, ast.Insert)
    assert update.span.line == 2 and insert.span.line == 3  # spans point into the whole script


def test_an_empty_atomic_block():
    assert parse("BEGIN ATOMIC END") == [ast.AtomicBlock(statements=())]


@pytest.mark.parametrize("script, expected", [
    ("SELECT 1; BEGIN ATOMIC DELETE FROM t; INSERT INTO t VALUES (1); END; SELECT 2",
     ["SELECT 1", "BEGIN ATOMIC DELETE FROM t; INSERT INTO t VALUES (1); END", "SELECT 2"]),
    ("begin atomic end; select 1", ["begin atomic end", "select 1"]),
    ("BEGIN ATOMIC UPDATE t SET a = CASE WHEN b THEN 1 END; END", ["BEGIN ATOMIC UPDATE t SET a = CASE WHEN b THEN 1 END; END"]),
    ("BEGIN; UPDATE t SET a = 1; COMMIT", ["BEGIN", "UPDATE t SET a = 1", "COMMIT"]),
])
def test_split_keeps_an_atomic_block_whole(script, expected):
    assert [p.text for p in split_statements(script)] == expected


@pytest.mark.parametrize("buffer, complete", [
    ("BEGIN ATOMIC UPDATE t SET a = 1;", False),
    ("BEGIN ATOMIC UPDATE t SET a = 1;\nDELETE FROM t;", False),
    ("BEGIN ATOMIC UPDATE t SET a = 1; END;", True),
    ("BEGIN ATOMIC END;", True),
    ("BEGIN;", True),
])
def test_enter_waits_for_the_end_of_an_atomic_block(buffer, complete):
    assert is_complete(buffer) is complete


@pytest.mark.parametrize("text, words", [
    ("BEGIN ATOMIC UPDATE t SET a = 1", "has no END"),
    ("BEGIN ATOMIC COMMIT; END", "cannot appear inside BEGIN ATOMIC"),
    ("BEGIN ATOMIC BEGIN; END", "cannot appear inside BEGIN ATOMIC"),
    ("BEGIN ATOMIC UPDATE t SET a = ; END", "expected an expression"),
])
def test_atomic_block_errors_point_at_the_statement(text, words):
    with pytest.raises(ParseError) as info:
        parse(text)
    assert words in str(info.value) and "^" in str(info.value)
