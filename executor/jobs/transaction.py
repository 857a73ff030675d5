"""BEGIN [TRANSACTION] / COMMIT / ROLLBACK and BEGIN ATOMIC ... END (executor/session/transactions.py)."""

from __future__ import annotations

from . import executes
from ..session import transactions
from ..session.results import QueryResult
from isolde.grammar import ast


@executes(ast.BeginTransaction)
def run_begin(ctx, stmt: ast.BeginTransaction) -> QueryResult:
    transactions.begin(ctx.session)
    return QueryResult(message="Transaction started: statements commit together at COMMIT")


@executes(ast.CommitTransaction)
def run_commit(ctx, stmt: ast.CommitTransaction):
    return transactions.commit(ctx.session)


@executes(ast.RollbackTransaction)
def run_rollback(ctx, stmt: ast.RollbackTransaction) -> QueryResult:
    return transactions.rollback(ctx.session)


@executes(ast.AtomicBlock)
def run_atomic(ctx, stmt: ast.AtomicBlock):
    """Every statement of the block, then one commit; any failure rolls the whole block back."""
    session = ctx.session
    transactions.begin(session, atomic=True)
    try:
        for inner in stmt.statements:
            session._run(inner)
    except BaseException:
        if session.active_transaction is not None:
            transactions.rollback(session)
        raise
    return transactions.commit(session)


for _runner in (run_begin, run_commit, run_rollback):
    _runner.needs_spark = False
run_atomic.needs_spark = lambda stmt, session=None: bool(stmt.statements)
