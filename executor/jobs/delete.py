"""DELETE FROM t [AS a] [WHERE cond]: copy-on-write or deletion vectors (executor/rows/dml.py decides
per file); conflict scope from the planner (planner/scope.py), recorded through the transaction."""

from __future__ import annotations

from ..rows.dml import run_update_delete
from . import executes
from isolde.grammar import ast


@executes(ast.Delete)
def run(ctx, stmt: ast.Delete):
    return run_update_delete(ctx, stmt, is_update=False)
