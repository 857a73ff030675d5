"""UPDATE t [AS a] SET col = expr, s.field = expr, ... [WHERE cond]: rows where the condition is
TRUE get the new values (cast to the column type; NULL conditions leave rows alone); the
physical step (rewrite or deletion vector) is executor/rows/dml.py's."""

from __future__ import annotations

from ..rows.dml import run_update_delete
from . import executes
from isolde.grammar import ast


@executes(ast.Update)
def run(ctx, stmt: ast.Update):
    return run_update_delete(ctx, stmt, is_update=True)
