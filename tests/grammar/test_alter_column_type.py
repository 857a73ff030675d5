"""ALTER TABLE ... ALTER | CHANGE COLUMN ... TYPE: the statement shapes Spark and Delta accept."""

from __future__ import annotations

import pytest

import isolde
from isolde.errors import ParseError
from isolde.grammar import ast
from isolde.planner.plan import classify


@pytest.mark.parametrize("sql, column, data_type, new_name", [
    ("ALTER TABLE t ALTER COLUMN c TYPE BIGINT", ("c",), "BIGINT", None),
    ("alter table t change column c type bigint", ("c",), "BIGINT", None),
    ("ALTER TABLE t CHANGE c TYPE DECIMAL(12, 4)", ("c",), "DECIMAL(12,4)", None),
    ("ALTER TABLE t ALTER c TYPE DOUBLE", ("c",), "DOUBLE", None),
    ("ALTER TABLE t CHANGE COLUMN c c BIGINT", ("c",), "BIGINT", "c"),
    ("ALTER TABLE t CHANGE `a b` `a b` INT", ("a b",), "INT", "a b"),
    ("ALTER TABLE t ALTER COLUMN s.x TYPE INT", ("s", "x"), "INT", None),
    ("ALTER TABLE t ALTER COLUMN arr.element TYPE DOUBLE", ("arr", "element"), "DOUBLE", None),
    ("ALTER TABLE t ALTER COLUMN m.value TYPE TIMESTAMP_NTZ", ("m", "value"), "TIMESTAMP_NTZ", None),
    ("ALTER TABLE t ALTER COLUMN type TYPE BIGINT", ("type",), "BIGINT", None),
])
def test_alter_column_type_shapes(sql, column, data_type, new_name):
    [stmt] = isolde.parse(sql)
    assert isinstance(stmt, ast.AlterColumnType)
    assert (stmt.table.parts, stmt.column, stmt.data_type, stmt.new_name) == (("t",), column, data_type, new_name)
    assert classify(stmt) == "write"


def test_sync_identity_still_parses():
    [stmt] = isolde.parse("ALTER TABLE t ALTER COLUMN sync SYNC IDENTITY")
    assert stmt == ast.SyncIdentity(table=stmt.table, column="sync")


@pytest.mark.parametrize("sql", ["ALTER TABLE t ALTER COLUMN c TYPE", "ALTER TABLE t ALTER COLUMN TYPE BIGINT",
                                 "ALTER TABLE t ALTER COLUMN c BIGINT"])
def test_incomplete_statements_are_syntax_errors(sql):
    with pytest.raises(ParseError):
        isolde.parse(sql)
