"""SET / RESET: session settings layered over the Spark conf (see context.ConfStore)."""

from __future__ import annotations

from . import executes
from ..session.results import QueryResult
from isolde.grammar import ast


def _unquote(text):
    if text is None:
        return None
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        return text[1:-1]
    return text


@executes(ast.SetConfig)
def run_set(ctx, stmt: ast.SetConfig) -> QueryResult:
    key = _unquote(stmt.key)
    if key is None:
        return QueryResult(columns=["key", "value"], rows=ctx.conf.items())
    if stmt.value is None:
        value = ctx.conf.get(key)
        return QueryResult(columns=["key", "value"], rows=[(key, "<undefined>" if value is None else value)])
    value = _unquote(stmt.value)
    ctx.conf.set(key, value)
    return QueryResult(columns=["key", "value"], rows=[(key, value)])


@executes(ast.ResetConfig)
def run_reset(ctx, stmt: ast.ResetConfig) -> QueryResult:
    ctx.conf.reset(_unquote(stmt.key))
    return QueryResult(message="Settings reset" if stmt.key is None else f"{stmt.key} reset")


run_set.needs_spark = False
run_reset.needs_spark = False
